// FaultEnv: an Env for tests that wraps the real one and injects disk faults: a stalled
// writer, a slow disk, a full disk, short writes, EINTR, and a movable monotonic clock.
// All knobs are thread-safe; set them from the test thread while the writer runs.
#pragma once

#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <string>
#include <thread>

#include "common/env.h"
#include "common/log.h"

namespace llmtap::testing {

class FaultEnv final : public Env {
 public:
  FaultEnv() : base_(Env::Default()) {}

  // While stalled, every Write blocks until Unstall().
  void Stall() {
    std::lock_guard<std::mutex> lock(mu_);
    stalled_ = true;
  }
  void Unstall() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stalled_ = false;
    }
    cv_.notify_all();
  }
  // Number of writes currently blocked by Stall().
  int blocked_writes() const { return blocked_.load(); }
  // Bytes the "disk" still accepts before ENOSPC; negative means unlimited.
  void SetDiskSpace(int64_t bytes) { disk_space_.store(bytes); }
  // Errno returned once the disk is full (ENOSPC by default; EIO for a failing disk).
  void SetFullDiskErrno(int err) { full_errno_.store(err); }
  // Cap each write(2) at this many bytes (0: no cap).
  void SetMaxWriteBytes(size_t n) { max_write_.store(n); }
  // Every n-th write fails with EINTR before writing anything (0: never).
  void SetEintrEvery(int n) { eintr_every_.store(n); }
  void SetWriteDelay(std::chrono::microseconds d) { write_delay_us_.store(d.count()); }
  void AdvanceClock(std::chrono::nanoseconds d) { clock_offset_ns_.fetch_add(d.count()); }
  int writes() const { return writes_.load(); }

  int64_t NowMonotonicNanos() override {
    return base_->NowMonotonicNanos() + clock_offset_ns_.load();
  }
  int64_t NowWallNanos() override { return base_->NowWallNanos() + clock_offset_ns_.load(); }
  Status CreateDirs(const std::string& dir, mode_t mode) override {
    return base_->CreateDirs(dir, mode);
  }
  Status Stat(const std::string& path, FileInfo* info) override { return base_->Stat(path, info); }
  Status OpenAppend(const std::string& path, std::unique_ptr<AppendFile>* file) override {
    std::unique_ptr<AppendFile> real;
    Status s = base_->OpenAppend(path, &real);
    if (s.ok()) file->reset(new File(this, std::move(real)));
    return s;
  }
  Status ReadTail(const std::string& path, size_t max_bytes, std::string* tail) override {
    return base_->ReadTail(path, max_bytes, tail);
  }
  Status Truncate(const std::string& path, uint64_t size) override {
    return base_->Truncate(path, size);
  }
  Status RenameNoReplace(const std::string& from, const std::string& to) override {
    return base_->RenameNoReplace(from, to);
  }
  Status RemoveFile(const std::string& path) override { return base_->RemoveFile(path); }
  Status WriteFileAtomic(const std::string& path, std::string_view contents) override {
    return base_->WriteFileAtomic(path, contents);
  }
  Status CheckWritableDir(const std::string& dir) override { return base_->CheckWritableDir(dir); }
  std::string HostName() override { return "test-host"; }
  int ProcessId() override { return 4242; }

 private:
  class File final : public AppendFile {
   public:
    File(FaultEnv* env, std::unique_ptr<AppendFile> real) : env_(env), real_(std::move(real)) {}
    WriteResult Write(const char* data, size_t size) override {
      return env_->DoWrite(real_.get(), data, size);
    }
    // Gathers, then applies the same faults as Write.
    WriteResult Writev(const struct iovec* iov, int count) override {
      std::string gathered;
      for (int i = 0; i < count; ++i) {
        gathered.append(static_cast<const char*>(iov[i].iov_base), iov[i].iov_len);
      }
      return env_->DoWrite(real_.get(), gathered.data(), gathered.size());
    }
    Status Truncate(uint64_t size) override { return real_->Truncate(size); }
    Status Sync() override { return real_->Sync(); }
    Status Size(uint64_t* size) override { return real_->Size(size); }
    Status Stat(FileInfo* info) override { return real_->Stat(info); }

   private:
    FaultEnv* env_;
    std::unique_ptr<AppendFile> real_;
  };

  WriteResult DoWrite(AppendFile* real, const char* data, size_t size) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      if (stalled_) {
        ++blocked_;
        cv_.wait(lock, [&] { return !stalled_; });
        --blocked_;
      }
    }
    const int n = ++writes_;
    if (int64_t us = write_delay_us_.load(); us > 0) {
      std::this_thread::sleep_for(std::chrono::microseconds(us));
    }
    if (int every = eintr_every_.load(); every > 0 && n % every == 0) return {-1, EINTR};
    if (size_t cap = max_write_.load(); cap > 0 && size > cap) size = cap;
    int64_t space = disk_space_.load();
    if (space == 0) return {-1, full_errno_.load()};
    if (space > 0 && static_cast<int64_t>(size) > space) size = static_cast<size_t>(space);
    WriteResult r = real->Write(data, size);
    if (r.written > 0 && space > 0) disk_space_.fetch_sub(r.written);
    return r;
  }

  Env* base_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stalled_ = false;
  std::atomic<int> blocked_{0};
  std::atomic<int> writes_{0};
  std::atomic<int64_t> disk_space_{-1};
  std::atomic<int> full_errno_{ENOSPC};
  std::atomic<size_t> max_write_{0};
  std::atomic<int> eintr_every_{0};
  std::atomic<int64_t> write_delay_us_{0};
  std::atomic<int64_t> clock_offset_ns_{0};
};

// A Logger that keeps every line, for assertions.
class CapturingLogger final : public Logger {
 public:
  void Log(LogLevel level, std::string_view message) override {
    std::lock_guard<std::mutex> lock(mu_);
    lines_.push_back(std::string(LogLevelName(level)) + ": " + std::string(message));
  }
  std::vector<std::string> lines() const {
    std::lock_guard<std::mutex> lock(mu_);
    return lines_;
  }
  void Clear() {
    std::lock_guard<std::mutex> lock(mu_);
    lines_.clear();
  }
  int Count(std::string_view needle) const {
    std::lock_guard<std::mutex> lock(mu_);
    int n = 0;
    for (const auto& l : lines_) n += l.find(needle) != std::string::npos;
    return n;
  }

 private:
  mutable std::mutex mu_;
  std::vector<std::string> lines_;
};

}  // namespace llmtap::testing
