// Capture: the payload-capture core that an HTTP server or proxy embeds.
//
// The host calls Offer(path, body) once per request, from any thread, after the body has
// been read whole. Offer decides (enabled -> endpoint_pattern -> size -> sample -> JSON
// object -> compact) and queues the record for a background writer thread. It never
// blocks on disk, never throws, and allocates nothing when capture is off or the path
// does not match. Every outcome is counted (see counters.h).
//
// With outcomes on, the host also reports how each recorded request's response ended
// (ReportOutcome), and the writer adds one line per recorded request to the outcomes
// sidecar, naming the record's line in the capture file.
//
// Session ids (session_headers, session_fields; mooncake_payload only; see session.h): the
// host passes the request's headers, or an id it already knows, in an OfferContext. Header
// values and the host's id are copied into the record during Offer; body fields are read by the
// writer thread, off the request path. With neither setting and no id given, none of this
// costs anything.
//
// Threads: Offer(), ReportOutcome(), RequestRotation() and counters() from any thread,
// concurrently. Start() and Stop() from
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
#include "capture/session.h"
#include "capture/uploader.h"

namespace llmtap {

enum class OfferOutcome {
  kDisabled,     // capture is off
  kNotMatched,   // path does not match endpoint_pattern
  kTooLarge,     // body > max_request_bytes
  kSampledOut,   // not chosen by sample_rate
  kInvalidBody,  // body is not a JSON object
  kDroppedQueueFull,
  kUploadBacklog,  // upload_url: files waiting to upload hold max_local_bytes
  kQueued,         // will be written by the writer thread
};

std::string_view OfferOutcomeName(OfferOutcome outcome);

// How the response to a recorded request ended, as the host saw it. Plain data with no
// heap members, so that reporting it allocates nothing on the request path.
struct ResponseOutcome {
  int status = 0;              // HTTP status sent to the client; 0: none was sent
  int64_t ttft_us = -1;        // request head read -> first response body byte; -1: no body
  int64_t total_us = 0;        // request head read -> response end
  int64_t prompt_tokens = -1;  // from the response's usage; -1: not reported
  int64_t completion_tokens = -1;
  char finish_reason[32] = {};  // NUL-terminated; "" when none was reported
  bool client_cancelled = false;
  const char* error = nullptr;  // static text naming an upstream failure, or nullptr

  // Copies `reason`, cut to fit.
  void SetFinishReason(std::string_view reason);
};

// One line of the outcomes sidecar (no trailing newline), for the record on `line` (1-based)
// of its capture file whose timestamp is `timestamp_ms`:
//   {"line":12,"timestamp":5400,"status":200,"ttft_ms":35.214,"latency_ms":812.402,
//    "prompt_tokens":57,"completion_tokens":128,"finish_reason":"stop","cancelled":false,
//    "error":null}
// Unknown values are null. Appends to `out`.
void AppendOutcomeLine(uint64_t line, int64_t timestamp_ms, const ResponseOutcome& outcome,
                       std::string* out);

// What the host knows about a request beyond its path and body; all optional. Read only
// during the Offer call.
struct OfferContext {
  // The request's header fields, looked up for session_headers. nullptr: none known.
  const RequestHeaders* headers = nullptr;
  // A session id the host already knows (raw text, no JSON escapes). When non-empty it is the
  // row's session id, ahead of session_headers and session_fields, whether or not those are
  // set (cut to kMaxSessionIdBytes; ignored if not valid UTF-8, and in raw_payload).
  std::string_view session_id;
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
  // The same; when the record is queued and outcomes are on, `*ticket` receives a non-zero
  // number to pass to ReportOutcome once the response has ended (otherwise 0). Every ticket
  // must be reported once: the writer keeps the record's place until then.
  OfferOutcome Offer(std::string_view path, std::string_view body, uint64_t* ticket) noexcept;
  // The same, with the request's headers or session id (see OfferContext).
  OfferOutcome Offer(std::string_view path, std::string_view body, const OfferContext& context,
                     uint64_t* ticket) noexcept;
  // Whether Offer would read OfferContext::headers (capture on, mooncake_payload and
  // session_headers set): hosts may skip building a header lookup otherwise.
  bool wants_headers() const;
  void ReportOutcome(uint64_t ticket, const ResponseOutcome& outcome) noexcept;
  bool outcomes_enabled() const;

  // Asks the writer to finish the current capture file now, as rotation does (for SIGHUP).
  // Nothing happens while the file holds no record.
  void RequestRotation() noexcept;

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
