// CaptureWriter: the bounded, byte-accounted record queue and the one background thread
// that drains it to the capture file. Internal to the capture core (Capture owns one).
//
// Enqueue() may be called from any thread; it holds a mutex only to push a record and
// assign its timestamp, and never waits on disk. Start() and Stop() from the owning thread.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "capture/capture.h"

namespace llmtap {

class CaptureWriter {
 public:
  // `counters` must outlive the writer.
  CaptureWriter(const CaptureOptions& options, Env* env, Logger* logger, CaptureCounters* counters);
  ~CaptureWriter();

  // Prepares the destination (see OpenNewCapture) and starts the thread. A failure is
  // logged as a warning and returned; the thread runs anyway and keeps retrying.
  Status Start();

  // Takes a compact JSON object (one line, no trailing newline). Assigns its timestamp.
  // Returns false (and counts dropped_queue_full) when it does not fit in max_queue_bytes
  // or the writer has stopped. When `spare` is given and a written record's buffer is
  // available, it is moved into `*spare` (empty, with capacity) for the caller's next record.
  bool Enqueue(std::string&& body, std::string* spare = nullptr);

  // Writes everything queued, fsyncs, writes the final manifest, joins the thread.
  void Stop();

 private:
  struct Record {
    int64_t timestamp_ms;
    std::string body;
  };

  void Run();
  // Writes records [pos, end of batch_) in groups; returns early after a failed attempt.
  void WriteSome(bool stopping);
  bool EnsureFile();
  void FailAttempt(const std::string& what, int err);
  void WriteManifest(bool stopped);
  size_t LineBytes(const Record& r) const;
  // Adds the iovecs of one record's line; its framing goes to framing_ at `*framing_used`.
  void AddLine(const Record& r, size_t* framing_used);

  const CaptureOptions options_;
  Env* const env_;
  Logger* const logger_;
  CaptureCounters* const counters_;
  RateLimitedWarning queue_full_warning_;
  RateLimitedWarning write_warning_;
  RateLimitedWarning manifest_warning_;

  // Guarded by mu_.
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<Record> queue_;
  // Buffers of written records, handed back by Enqueue. Bounded in count and size so that
  // idle spares (here and in returning_) hold at most 2 * kMaxSpares * kMaxSpareCapacity
  // bytes (4 MiB); larger records are freed, their cost dwarfs one malloc.
  static constexpr size_t kMaxSpares = 128;
  static constexpr size_t kMaxSpareCapacity = 16 * 1024;
  std::vector<std::string> spares_;
  std::vector<std::string> returning_;  // writer thread only: spares not yet handed over
  uint64_t queue_bytes_ = 0;            // queued + in the writer's hands, released once written
  bool writer_waiting_ = false;
  bool stop_requested_ = false;
  bool closed_ = false;
  std::optional<int64_t> t0_mono_ns_;
  std::optional<int64_t> t0_wall_ns_;

  // Writer thread only (and Start/Stop before/after it runs).
  std::thread thread_;
  std::vector<Record> batch_;
  size_t batch_pos_ = 0;
  std::unique_ptr<AppendFile> file_;
  bool opened_once_ = false;
  uint64_t file_size_ = 0;  // bytes of complete lines in file_
  // One group = one writev(2): the records' bodies are written in place, with their
  // framing ({"timestamp":N,"payload": ... }\n) from framing_, never copied.
  std::vector<struct iovec> iov_;
  std::vector<char> framing_;
  std::vector<size_t> line_ends_;
  int64_t backoff_until_ns_ = 0;
  int64_t backoff_ns_ = 0;
  int64_t next_manifest_ns_ = 0;
  int64_t started_wall_ns_ = 0;
  std::string last_error_;
  bool dirty_since_sync_ = false;
};

}  // namespace llmtap
