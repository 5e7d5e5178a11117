// PairsFile: where shadow pair lines go when capture is off (--shadow-pairs PATH): appended to
// the file (0600, never through a symlink, never truncated) by a thread of its own, so that the
// event loops never wait on disk. Lines wait in a queue of at most kMaxQueueBytes; beyond that,
// or after a failed write (whose partial group is cut back off), a line is lost and counted. The
// thread writes in groups: woken by the first line after it went idle, it lets kGroupDelay of
// lines gather, then writes them at once (one write and at most one wake-up per group, not per
// line).
//
// Internal to src/proxy (the shadow's). Append from any thread; Open and Stop from the
// controlling thread.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "common/env.h"
#include "common/log.h"
#include "common/status.h"

namespace llmtap::proxy {

class PairsFile {
 public:
  static constexpr size_t kMaxQueueBytes = size_t{64} << 20;
  static constexpr std::chrono::milliseconds kGroupDelay{20};

  PairsFile(std::string path, Logger* logger) : path_(std::move(path)), logger_(logger) {}
  ~PairsFile() { Stop(); }

  // How much of the end of an existing file Open reads for its highest "request".
  static constexpr size_t kTailBytes = size_t{1} << 20;

  // Opens the file for appending (a torn last line, left by a killed run, is cut first, with a
  // warning) and starts the thread.
  Status Open();
  // Queues one line (no trailing newline).
  void Append(std::string line);
  // Writes what is queued and joins the thread. Idempotent.
  void Stop();

  const std::string& path() const { return path_; }
  uint64_t written() const { return written_.load(std::memory_order_relaxed); }
  uint64_t lost() const { return lost_.load(std::memory_order_relaxed); }
  // The highest "request" among the complete lines in the file's last kTailBytes when Open
  // found it (0: none). Pair lines are in completion order, so the last line alone may be a
  // long request that started early. A higher number than the tail's highest would have to be
  // followed by over a thousand lines (1 MiB) of requests numbered below it, all still running
  // when it ended: more mirrored requests at once than a proxy runs (the candidate sides are
  // held to --shadow-max-in-flight, 64 each by default). Reading the whole file instead would
  // make a start wait on a file that only grows.
  uint64_t highest_request() const { return highest_request_; }

 private:
  void Run();

  const std::string path_;
  Logger* const logger_;
  std::unique_ptr<AppendFile> file_;
  uint64_t size_ = 0;  // bytes of complete lines (the writer thread's, after Open)
  uint64_t highest_request_ = 0;
  std::thread thread_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::string queue_;  // whole lines, newline-terminated
  uint64_t queued_lines_ = 0;
  bool stop_ = false;
  bool idle_ = false;  // the thread waits for a first line: Append wakes it
  std::atomic<uint64_t> written_{0}, lost_{0};
};

}  // namespace llmtap::proxy
