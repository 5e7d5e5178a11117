// Uploader: ships finished capture files to an S3-compatible object store (upload_url), on
// its own thread. Internal to the capture core (Capture owns one when upload_url is set).
//
// A finished file (rotated, or the last one at stop) and its outcomes sidecar are compressed
// if asked (zstd), then uploaded under <prefix>/<replica>/ with the same names, and the
// manifest goes last: it lists every object's key, size and SHA-256 and the file's record
// count, so a reader knows a file is complete in the store exactly when its manifest is
// there. Large files go up as multipart uploads. Every store request that fails is retried
// with exponential back-off and jitter, without end while running; the local files are
// deleted only once the store has confirmed every object (and only without keep_local).
//
// At start, finished files an earlier run left behind (crash, SIGKILL, store outage) are
// found beside the capture path and uploaded too; a file whose manifest is already in the
// store is not sent again.
//
// Threads: FileFinished(), bytes_over_budget() and last_error() from any thread; Start() and
// Stop() from the owning thread.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "capture/config.h"
#include "capture/counters.h"
#include "capture/options.h"
#include "common/env.h"
#include "common/log.h"
#include "store/s3_client.h"
#include "store/s3_url.h"

namespace llmtap {
namespace store {
class Sha256;
}

class Uploader {
 public:
  // `counters` must outlive the uploader.
  Uploader(const CaptureConfig& config, const UploaderOptions& options, Env* env, Logger* logger,
           CaptureCounters* counters);
  ~Uploader();

  // Resolves the replica name, reads the AWS_* environment, queues files an earlier run left
  // beside the capture path, and starts the thread, whose first act is to check the bucket
  // (a failure is one warning naming what to fix; files then wait and are retried).
  void Start();

  // A capture file is finished (renamed; its outcomes sidecar complete or absent) and holds
  // `records` lines (-1: unknown, they are counted). Queued for upload.
  void FileFinished(const std::string& data_path, const std::string& outcomes_path,
                    int64_t records = -1);

  // Uploads what is queued until done or stop_timeout, then joins the thread.
  void Stop();

  // Whether the files waiting to upload, the open capture file and the records queued for it
  // (all bound for the disk) hold max_local_bytes.
  bool OverBudget() const {
    return counters_->upload_bytes_waiting.load(std::memory_order_relaxed) +
               counters_->open_file_bytes.load(std::memory_order_relaxed) +
               counters_->queue_bytes.load(std::memory_order_relaxed) >=
           static_cast<uint64_t>(config_.max_local_bytes);
  }

  const std::string& replica() const { return replica_; }
  // The last upload error (no secrets), empty once an upload succeeds after it.
  std::string last_error() const;

 private:
  struct Pending {
    std::string data_path;
    std::string outcomes_path;  // empty when none
    uint64_t bytes = 0;         // on disk when queued
    bool leftover = false;      // from an earlier run: may be in the store already
    int64_t records = -1;       // lines in the data file; -1: count them
  };
  struct Uploaded {
    std::string key;
    uint64_t bytes = 0;
    std::string sha256;
    std::string role;  // "data" or "outcomes"
  };

  void Run();
  // Queues leftovers of earlier runs found beside the capture path.
  void ScanLeftovers();
  void Enqueue(Pending p);
  // Compresses, uploads and cleans up one finished file; false when stopped before it was done.
  bool Process(const Pending& p);
  // Compresses `path` into `path.zst` (fsync'ed, then the original removed). Counts lines.
  bool Compress(const std::string& path, std::string* out_path, uint64_t* lines);
  // Uploads one local file to `key`; counts its lines when `lines` is given.
  bool UploadFile(const std::string& path, const std::string& key, Uploaded* out, uint64_t* lines);
  // Runs `op` until it succeeds, backing off between attempts; false when stopping cuts it short.
  // Sends a file larger than one part as a multipart upload; hashes (and counts lines) as well.
  bool UploadParts(int fd, uint64_t size, const std::string& key, store::Sha256* sha,
                   uint64_t* lines);
  template <typename Op>
  bool WithRetry(const char* what, store::S3Client* client, Op&& op);
  void SetError(const std::string& error);
  void Sleep(int64_t ms);  // wakes early when the stop deadline passes
  std::string ManifestFor(const std::string& data_path, const std::vector<Uploaded>& objects,
                          uint64_t records);
  bool Stopping() const;
  // Whether options_.crash_after ends the run at `step` (a test's simulated crash); once it
  // has, every later step "crashes" too and nothing more is done.
  bool Crashed(UploadStep step);

  const CaptureConfig config_;
  const UploaderOptions options_;
  Env* const env_;
  Logger* const logger_;
  CaptureCounters* const counters_;
  const std::string replica_;
  store::S3Url base_;  // bucket, and the key prefix "<prefix>/<replica>/"
  std::unique_ptr<store::S3Client> client_;
  // Connections of the part threads beyond the first (which uses client_).
  std::vector<std::unique_ptr<store::S3Client>> part_clients_;
  std::string config_error_;  // AWS_* environment problem; uploads wait while set

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Pending> queue_;
  std::set<std::string> known_;  // data paths queued or in progress (no double upload)
  bool stop_requested_ = false;
  int64_t stop_deadline_ns_ = 0;
  std::atomic<bool> cancel_{false};  // past the stop deadline: store calls fail at once
  std::string last_error_;
  std::thread thread_;
  uint64_t rng_state_ = 0;
  // Unfinished multipart uploads found at start under our prefix, by key: aborted before the
  // same key is uploaded again.
  std::map<std::string, std::vector<std::string>> stale_uploads_;
  RateLimitedWarning upload_warning_;
  bool crashed_ = false;  // upload thread only
};

}  // namespace llmtap
