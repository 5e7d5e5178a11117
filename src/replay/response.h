// Reading a replayed request's response as its bytes arrive: the inspection of each OpenAI chunk
// (does it carry generated text? usage?) and the ResponseMeter that turns timed body bytes into
// the request's metrics (TTFT, time to second token, chunk gaps, token counts). Server-Sent
// Events framing is the shared net::SseEventReader. No I/O: the HTTP client feeds it, and tests
// feed it bytes with made-up times.
//
// Threads: one ChunkReader / ResponseMeter per request or per thread; not shared.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include <simdjson.h>

#include "net/sse.h"
#include "replay/metrics.h"
#include "tokenizer/tokenizer.h"

namespace llmtap::replay {

using Clock = std::chrono::steady_clock;

// What one chunk (or a whole non-streamed body) says.
struct ChunkInfo {
  bool done = false;     // "[DONE]"
  bool invalid = false;  // not a JSON object
  bool error = false;    // an "error" object instead of a completion
  bool content = false;  // carries generated text (or tool calls)
  std::optional<uint64_t> prompt_tokens, completion_tokens;  // from "usage"
};

class ChunkReader {
 public:
  // One SSE event's data, or a whole JSON body. Generated text is appended to *text when
  // `text` is non-null (chat: message/delta content and reasoning; completions: text), and the
  // answer alone (chat: content; completions: text) to *answer when that is non-null.
  ChunkInfo Read(std::string_view json, std::string* text, std::string* answer = nullptr);

 private:
  simdjson::dom::parser parser_;
};

// One request's response, measured. Begin() at send; OnHead() once the status line and headers
// are in; OnBody() for every piece of body as it arrives, with the time it arrived; Finish() at
// the end fills the result's metrics and says whether the body was a valid completion.
class ResponseMeter {
 public:
  void Begin(Clock::time_point sent);
  // Keeps the answer apart from the reasoning (call after Begin), for Answer().
  void KeepAnswer() { keep_answer_ = true; }
  // The answer as AIPerf threads it into a session's history: the content (completions: the
  // text), else the reasoning when there is no content. Needs KeepAnswer.
  const std::string& Answer() const { return answer_.empty() ? text_ : answer_; }
  void OnHead(int status, bool event_stream);
  void OnBody(std::string_view bytes, Clock::time_point now, ChunkReader* reader);
  // Fills r->status, ttft/ttst/itl/gaps/chunks, tokens (counted with `tok` when the response
  // reports no usage: the request `body` and the generated text), and r->error for a bad status
  // or a malformed body. `complete`: the HTTP message ended normally. `done` = end time.
  void Finish(bool complete, Clock::time_point done, std::string_view body,
              const tokenizer::Tokenizer* tok, ChunkReader* reader, RequestResult* r);

  bool got_head() const { return status_ != 0; }
  int status() const { return status_; }

 private:
  void OnEvent(std::string_view data, Clock::time_point now, ChunkReader* reader);

  Clock::time_point sent_{};
  int status_ = 0;
  bool sse_ = false;
  bool invalid_ = false;
  bool saw_done_ = false;
  net::SseEventReader sse_parser_;
  std::string body_;  // non-SSE body (kept whole), or an error body's start
  std::string text_;  // generated text, for counting when there is no usage
  bool keep_answer_ = false;
  std::string answer_;  // KeepAnswer: the content alone
  std::optional<Clock::time_point> first_, second_, last_;
  uint32_t chunks_ = 0;
  std::optional<uint64_t> prompt_tokens_, completion_tokens_;
  std::vector<float> gaps_;
  float max_gap_ = 0;
};

}  // namespace llmtap::replay
