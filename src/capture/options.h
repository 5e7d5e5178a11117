// The capture core's options: what an embedder sets when it constructs a Capture (public, with
// capture.h). CaptureConfig (config.h) is the part users write as NIM_CAPTURE_ARGS or flags;
// the rest are seams and tuning an embedder or a test may change. Every default is the one
// the proxy runs with.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>

#include "capture/config.h"
#include "common/env.h"
#include "common/log.h"

namespace llmtap {

// The steps of one finished file's trip to the store, in order (the compressions only with
// compress: zstd, the outcomes steps only with a sidecar).
enum class UploadStep {
  kDataCompressed,
  kOutcomesCompressed,
  kDataPut,
  kOutcomesPut,
  kManifestPut,
  kLocalManifestRemoved,
  kLocalOutcomesRemoved,
  kLocalDataRemoved,
};

// How finished capture files go to the object store (with CaptureConfig::upload_url).
struct UploaderOptions {
  // Multipart uploads for files above one part; S3 wants parts of at least 5 MiB.
  size_t part_bytes = size_t{16} << 20;
  // Parts in flight at once, each on its own connection: with 4, a 256 MB file goes up as fast
  // as one `curl -T` PUT of it to the same store (2: 0.88x; BENCHMARKS-history.md).
  int part_streams = 4;
  // Back-off between attempts of a failed store request: doubles from initial up to max, each
  // wait drawn at random from [wait/2, wait] (jitter, so replicas do not retry in step).
  std::chrono::milliseconds initial_backoff{500};
  std::chrono::milliseconds max_backoff{30000};
  // At Stop, how long to keep uploading what is left; files not sent by then stay on disk
  // and go up at the next start.
  std::chrono::milliseconds stop_timeout{20000};
  int zstd_level = 3;
  // Long-distance matching window (see store::SinkOptions): 16 MiB, where multi-turn captures
  // compress 3-4x better than with level 3's own window (BENCHMARKS.md).
  int zstd_window_log = 24;
  // Tests: called on the upload thread after each step; returning true makes the uploader
  // behave from there as if the process had been killed (it does nothing more: no later step,
  // no other file, nothing at Stop), so a test can restart at every cut point.
  std::function<bool(UploadStep)> crash_after;
};

struct CaptureOptions {
  CaptureConfig config;
  bool enabled = true;
  // Seams; nullptr means Env::Default() / Logger::Stderr(). Not owned; must outlive Capture.
  Env* env = nullptr;
  Logger* logger = nullptr;
  // How often the manifest is rewritten while running (it is also written at Stop()).
  std::chrono::milliseconds manifest_interval{5000};
  // One line per reason per interval for per-request warnings.
  std::chrono::milliseconds warning_interval{10000};
  // Writer back-off after a failed write or open: starts at initial, doubles up to max.
  std::chrono::milliseconds initial_backoff{100};
  std::chrono::milliseconds max_backoff{5000};
  // Largest single write(2) the writer issues for a group of records.
  size_t max_group_bytes = 1 << 20;
  // Once woken by a record, the writer waits this long for more before writing (or until
  // max_group_bytes are queued), and while records keep coming it wakes once per delay on its
  // own, so that a steady request stream costs one wake-up and one write(2) per delay, not per
  // request, and the request path makes no wake-up call. A record reaches the file at most
  // this late (the queue is lost on SIGKILL either way).
  std::chrono::microseconds group_commit_delay{10000};
  // After the last record, the writer keeps ticking at group_commit_delay this long before it
  // sleeps until a record wakes it: traffic with gaps shorter than this (a request a second
  // or more) never pays a wake-up call on the request path. 0: sleep after one empty tick.
  std::chrono::milliseconds idle_tick_period{1000};
  // 0: seed the sampler from std::random_device. Otherwise deterministic per thread.
  uint64_t sample_seed = 0;
  // Upload to the store (with config.upload_url): part size, back-off, stop deadline.
  UploaderOptions upload;
};

}  // namespace llmtap
