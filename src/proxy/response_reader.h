// ResponseReader: what the proxy and the ASGI middleware learn from a recorded request's
// response as it passes (token counts, finish reason, the response's id and, with
// capture_responses, its generated text), for whichever API the request was for.
//
// Chat, completions, embeddings and any other path, usage only: the UsageScanner's byte-level
// scan (no copy, fixed memory). Responses, Messages and rerank, and every API when the text is
// kept (capture_responses): each event of a stream (or the whole JSON body) is parsed and read by
// its API's module (api/response_document.h; chat: choice 0's text); an event, or a body, larger
// than kMaxDocumentBytes is not read (what it said stays unknown), nor is one that is not a JSON
// object (a body cut short: its usage and text stay unknown; a stream keeps what the events
// before it said).
//
// Threads: one reader per response, fed in order by one thread at a time.
#pragma once

#include <cstddef>
#include <memory>
#include <string_view>

#include "api/endpoints.h"
#include "capture/outcome.h"
#include "proxy/usage_scanner.h"

namespace llmtap::proxy {

class ResponseReader {
 public:
  static constexpr size_t kMaxDocumentBytes = size_t{16} << 20;

  ResponseReader();  // reads nothing
  // A response of `endpoint` with these headers (UsageScanner::ModeFor's rules); with
  // max_text_bytes > 0, it also keeps the generated text, at most that many decoded bytes.
  ResponseReader(api::Endpoint endpoint, std::string_view content_type,
                 std::string_view content_encoding, size_t max_text_bytes);
  ResponseReader(ResponseReader&&) noexcept;
  ResponseReader& operator=(ResponseReader&&) noexcept;
  ~ResponseReader();

  // The next bytes of the (de-chunked) body.
  void Feed(std::string_view bytes) noexcept;
  // After the last Feed: sets o's prompt_tokens, completion_tokens, finish reason, response_id
  // and (when it keeps text) has_response and response. Call once.
  void Finish(ResponseOutcome* o) noexcept;

 private:
  class Documents;
  UsageScanner scanner_{UsageScanner::Mode::kNone};
  std::unique_ptr<Documents> documents_;  // the APIs read document by document
  bool no_text_ = false;  // text asked for from the scanner's API that has none (embeddings)
};

}  // namespace llmtap::proxy
