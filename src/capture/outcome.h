// ResponseOutcome: how the response to a recorded request ended, as the host saw it, and its
// line in the outcomes sidecar. Public, with capture.h: the host fills one per recorded request
// and hands it to Capture::ReportOutcome; the writer thread formats it. (Not to be confused
// with OfferDecision, what Offer did with the request, or the proxy's RelayResult.)
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace llmtap {

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

}  // namespace llmtap
