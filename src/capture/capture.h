// Capture: the payload-capture core that an HTTP server or proxy embeds.
//
// The host calls Offer(path, body) once per request, from any thread, after the body has
// been read whole. Offer decides (enabled -> endpoint_pattern -> size -> sample -> JSON
// object -> compact) and queues the record for a background writer thread. It never
// blocks on disk, never throws, and allocates nothing when capture is off or the path
// does not match. Every outcome is counted (see counters.h).
//
// Threads: Offer() and counters() from any thread, concurrently. Start() and Stop() from
// one controlling thread. Destruction calls Stop().
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "capture/config.h"
#include "capture/counters.h"
#include "capture/env.h"
#include "capture/log.h"

namespace llmtap {

enum class OfferOutcome {
  kDisabled,     // capture is off
  kNotMatched,   // path does not match endpoint_pattern
  kTooLarge,     // body > max_request_bytes
  kSampledOut,   // not chosen by sample_rate
  kInvalidBody,  // body is not a JSON object
  kDroppedQueueFull,
  kQueued,  // will be written by the writer thread
};

std::string_view OfferOutcomeName(OfferOutcome outcome);

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
  // Once woken by a record, the writer waits this long for more before writing, so that a
  // steady request stream costs one wake-up and one write(2) per delay, not per request.
  std::chrono::microseconds group_commit_delay{1000};
  // 0: seed the sampler from std::random_device. Otherwise deterministic per thread.
  uint64_t sample_seed = 0;
};

class Capture {
 public:
  // Validates options (compiles the pattern) but touches no file until Start().
  explicit Capture(CaptureOptions options);
  ~Capture();
  Capture(const Capture&) = delete;
  Capture& operator=(const Capture&) = delete;

  // Prepares the destination (directories, rename-aside of an old capture, open, probe)
  // and starts the writer thread. A destination that cannot be written is a warning, not
  // an error: the writer keeps retrying and counting. Returns that first probe's status.
  // Does nothing when disabled.
  Status Start();

  OfferOutcome Offer(std::string_view path, std::string_view body) noexcept;

  // Drains every queued record, flushes and fsyncs, writes the final manifest and joins
  // the writer. Idempotent.
  void Stop();

  bool enabled() const { return enabled_; }
  const CaptureConfig& config() const;
  CaptureCountersSnapshot counters() const;
  std::string manifest_path() const;

 private:
  struct Impl;
  bool enabled_;
  std::unique_ptr<Impl> impl_;
};

}  // namespace llmtap
