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
// Threads: Offer(), ReportOutcome(), ReportShadowPair(), RequestRotation() and counters() from any thread,
// concurrently. Start() and Stop() from
// one controlling thread. Destruction calls Stop().
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "capture/counters.h"
#include "capture/options.h"
#include "capture/outcome.h"
#include "capture/session.h"
#include "common/status.h"

namespace llmtap {

// What Offer did with a request (each decision is counted; see counters.h).
enum class OfferDecision {
  kDisabled,     // capture is off
  kNotMatched,   // path does not match endpoint_pattern
  kTooLarge,     // body > max_request_bytes
  kSampledOut,   // not chosen by sample_rate
  kInvalidBody,  // body is not a JSON object
  // A JSON object but for NaN/Infinity or a lone surrogate escape, which Python servers accept
  // and no JSON replayer loads (CompactError::kNonStandardJson)
  kNonStandardJson,
  kDroppedQueueFull,
  kUploadBacklog,  // upload_url: files waiting to upload hold max_local_bytes
  kQueued,         // will be written by the writer thread
};

std::string_view OfferDecisionName(OfferDecision outcome);

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

  OfferDecision Offer(std::string_view path, std::string_view body) noexcept;
  // The same; when the record is queued and outcomes are on, `*ticket` receives a non-zero
  // number to pass to ReportOutcome once the response has ended (otherwise 0). Every ticket
  // must be reported once: the writer keeps the record's place until then.
  OfferDecision Offer(std::string_view path, std::string_view body, uint64_t* ticket) noexcept;
  // The same, with the request's headers or session id (see OfferContext).
  OfferDecision Offer(std::string_view path, std::string_view body, const OfferContext& context,
                      uint64_t* ticket) noexcept;
  // Whether a body offered for `path` could be recorded: capture is on and running and the path
  // (its query cut off) matches endpoint_pattern. A host may skip holding the bodies of other
  // requests; it still offers them (with an empty body) so that they are counted.
  bool WouldRecord(std::string_view path) const;
  // For a host that stopped holding a body once it passed max_request_bytes (the in-process
  // middleware): decides and counts as Offer would for a body of `body_size` bytes, which must
  // be larger than max_request_bytes (a smaller size is taken as max_request_bytes + 1).
  OfferDecision OfferOversized(std::string_view path, uint64_t body_size) noexcept;
  // Whether Offer would read OfferContext::headers (capture on, mooncake_payload and
  // session_headers set): hosts may skip building a header lookup otherwise.
  bool wants_headers() const;
  // Hosts pass the outcome as an rvalue (std::move) so that a captured response text is moved,
  // not copied; with capture_responses off, copying one allocates nothing either.
  void ReportOutcome(uint64_t ticket, ResponseOutcome outcome) noexcept;
  // A mirrored request's pair (`llmtap proxy --shadow`) whose request was not recorded (no
  // ticket): written to the current capture file's shadow pairs sidecar with "line":null. A
  // recorded request's pair rides on its outcome instead (ResponseOutcome::shadow_pair).
  void ReportShadowPair(std::string members) noexcept;
  bool outcomes_enabled() const;
  // capture_responses is on: hosts collect each recorded response's text (ResponseText, at
  // most config().max_response_bytes decoded bytes) into its outcome.
  bool responses_enabled() const;

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
  std::optional<OfferDecision> Screen(std::string_view path, uint64_t body_size) noexcept;

  struct Impl;
  bool enabled_;
  std::unique_ptr<Impl> impl_;
};

}  // namespace llmtap
