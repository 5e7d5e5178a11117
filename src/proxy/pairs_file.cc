#include "proxy/pairs_file.h"

#include <cerrno>
#include <cstring>
#include <utility>

#include "capture/capture_file.h"
#include "common/thread_name.h"
#include "shadow/pair.h"

namespace llmtap::proxy {

Status PairsFile::Open() {
  Env* env = Env::Default();
  Status s = env->OpenAppend(path_, &file_);  // refuses a symlink before anything is read
  uint64_t cut = 0;
  if (s.ok()) s = RepairTornTail(env, path_, &cut);
  if (s.ok() && cut > 0) {
    logger_->Log(LogLevel::kWarning, "llmtap proxy: cut a torn last line (" + std::to_string(cut) +
                                         " bytes) from the shadow pairs file " + path_);
  }
  if (s.ok()) s = file_->Size(&size_);
  if (s.ok() && size_ > 0) {
    std::string tail;
    s = env->ReadTail(path_, kTailBytes, &tail);
    // Whole lines only: a tail shorter than the file starts within a line.
    std::string_view lines = tail;
    if (tail.size() < size_) {
      const size_t first = lines.find('\n');
      lines = first == std::string_view::npos ? std::string_view() : lines.substr(first + 1);
    }
    if (s.ok()) highest_request_ = shadow::HighestRequest(lines);
  }
  if (!s.ok()) {
    file_.reset();
    return s;
  }
  thread_ = std::thread(&PairsFile::Run, this);
  return s;
}

void PairsFile::Append(std::string line) {
  bool wake = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stop_ || !file_ || queue_.size() + line.size() + 1 > kMaxQueueBytes) {
      lost_.fetch_add(1, std::memory_order_relaxed);
      return;
    }
    queue_.append(line).push_back('\n');
    ++queued_lines_;
    wake = idle_;
    idle_ = false;
  }
  if (wake) cv_.notify_one();
}

void PairsFile::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_one();
  if (thread_.joinable()) thread_.join();
  if (file_) file_->Sync();
}

void PairsFile::Run() {
  NameThisThread("llmtap-pairs");
  std::string batch;
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    if (!stop_) {
      if (queue_.empty()) {
        idle_ = true;
        cv_.wait(lock, [this] { return stop_ || !queue_.empty(); });
        idle_ = false;
      }
      // A group: the lines of the next kGroupDelay go out together (Stop cuts it short).
      cv_.wait_for(lock, kGroupDelay, [this] { return stop_; });
    }
    if (queue_.empty()) {
      if (stop_) return;
      continue;
    }
    batch.swap(queue_);
    const uint64_t lines = queued_lines_;
    queued_lines_ = 0;
    lock.unlock();
    size_t done = 0;
    int err = 0;
    while (done < batch.size()) {
      const WriteResult r = file_->Write(batch.data() + done, batch.size() - done);
      if (r.written < 0 && r.err == EINTR) continue;
      if (r.written <= 0) {
        err = r.written < 0 && r.err != 0 ? r.err : EIO;
        break;
      }
      done += static_cast<size_t>(r.written);
    }
    if (err == 0) {
      size_ += batch.size();
      written_.fetch_add(lines, std::memory_order_relaxed);
    } else {
      // Whole lines only: what this group wrote is cut back off.
      if (done > 0) file_->Truncate(size_);
      lost_.fetch_add(lines, std::memory_order_relaxed);
      logger_->Log(LogLevel::kWarning, "llmtap proxy: writing shadow pairs to " + path_ +
                                           " failed: " + std::strerror(err));
    }
    batch.clear();
    lock.lock();
  }
}

}  // namespace llmtap::proxy
