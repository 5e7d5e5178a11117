// Reading a replayed request's response as its bytes arrive: the ResponseMeter turns timed body
// bytes into the request's metrics (TTFT, time to second token, chunk gaps, token counts) and
// keeps the id the target gave the response. What each document (a whole body, or one event of a
// stream) says is the request's API's to tell (api::DocumentReader: chat, completions, Responses,
// Messages, embeddings, rerank); Server-Sent Events framing is the shared net::SseEventReader.
// No I/O: the HTTP client feeds it, and tests feed it bytes with made-up times.
//
// Threads: one ResponseMeter per request; an api::DocumentReader per thread; not shared.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "api/response_document.h"
#include "capture/outcome.h"
#include "net/sse.h"
#include "replay/metrics.h"
#include "tokenizer/tokenizer.h"

namespace llmtap::replay {

using Clock = std::chrono::steady_clock;

// One request's response, measured. Begin() at send; OnHead() once the status line and headers
// are in; OnBody() for every piece of body as it arrives, with the time it arrived; Finish() at
// the end fills the result's metrics and says whether the body was a valid answer. A stream's
// token timing counts the events that carry generated output (text, reasoning, a tool call's
// arguments); it ends at chat's "[DONE]", Responses' response.completed, Messages'
// message_stop (or the end of the body).
class ResponseMeter {
 public:
  void Begin(Clock::time_point sent, api::Endpoint endpoint = api::Endpoint::kChat);
  // Keeps the answer apart from the reasoning (call after Begin), for Answer().
  void KeepAnswer() { keep_answer_ = true; }
  // The answer as AIPerf threads it into a session's history: the content (completions: the
  // text), else the reasoning when there is no content. Needs KeepAnswer.
  const std::string& Answer() const { return answer_.empty() ? text_ : answer_; }
  // Keeps the output as the pair line of `--paired-url` compares it (call after Begin): the
  // answer's text, reasoning and tool calls in a ResponseText, at most `max_bytes` of them (cut
  // at a character boundary, marked truncated), and the finish reason.
  void KeepOutput(size_t max_bytes) {
    keep_output_ = true;
    output_budget_ = max_bytes;
  }
  // After Finish: the response's status, tokens, finish reason, id and kept output (moved out)
  // as a pair line's side has them. `error` names a failure ("timeout", "connect", ...), or null.
  void TakeOutcome(const char* error, ResponseOutcome* o);
  void OnHead(int status, bool event_stream);
  void OnBody(std::string_view bytes, Clock::time_point now, api::DocumentReader* reader);
  // Fills r->status, ttft/ttst/itl/gaps/chunks, tokens (counted with `tok` when the response
  // reports no usage: the request `body` and the generated text), and r->error for a bad status
  // or a malformed body. `complete`: the HTTP message ended normally. `done` = end time.
  void Finish(bool complete, Clock::time_point done, std::string_view body,
              const tokenizer::Tokenizer* tok, api::DocumentReader* reader, RequestResult* r);

  bool got_head() const { return status_ != 0; }
  int status() const { return status_; }
  // The id the response named (Responses "resp_...", Messages "msg_..."); "" for none.
  const std::string& response_id() const { return response_id_; }
  // The kept output (KeepOutput), before TakeOutcome moves it.
  const ResponseText& output() const { return output_; }
  // An error status's body (its first 4 KiB); "" after a 2xx.
  std::string_view error_body() const {
    return status_ >= 200 && status_ < 300 ? std::string_view() : std::string_view(body_);
  }

 private:
  // Generated output: everything into text_ (counted when there is no usage), the answer's
  // text into answer_ as well (KeepAnswer).
  struct Sink final : api::OutputSink {
    ResponseMeter* m;
    explicit Sink(ResponseMeter* meter) : m(meter) {}
    void Text(std::string_view piece) override {
      m->text_.append(piece);
      if (m->keep_answer_) m->answer_.append(piece);
      if (m->keep_output_) m->Keep(&m->output_.text, piece);
    }
    void Reasoning(std::string_view piece) override {
      m->text_.append(piece);
      if (m->keep_output_) m->Keep(&m->output_.reasoning, piece);
    }
    void ToolCall(int64_t index, std::string_view name, std::string_view arguments) override;
  };
  // Appends what fits of `piece` in the kept output's budget (KeepOutput).
  void Keep(std::string* to, std::string_view piece);
  // Reads one document into the meter; its facts for the caller.
  api::DocumentFacts Read(std::string_view json, api::DocumentReader* reader);
  void OnEvent(std::string_view data, Clock::time_point now, api::DocumentReader* reader);

  Clock::time_point sent_{};
  api::Endpoint endpoint_ = api::Endpoint::kChat;
  int status_ = 0;
  bool sse_ = false;
  bool invalid_ = false;
  bool saw_done_ = false;
  net::SseEventReader sse_parser_;
  std::string body_;  // non-SSE body (kept whole), or an error body's start
  std::string text_;  // generated text, for counting when there is no usage
  bool keep_answer_ = false;
  std::string answer_;  // KeepAnswer: the content alone
  bool keep_output_ = false;
  size_t output_budget_ = 0;
  ResponseText output_;  // KeepOutput
  std::string finish_reason_;
  std::optional<Clock::time_point> first_, second_, last_;
  uint32_t chunks_ = 0;
  std::optional<uint64_t> prompt_tokens_, completion_tokens_;
  api::ServerReport server_;  // what the server reported of its work, document over document
  std::string response_id_;
  std::vector<float> gaps_;
  float max_gap_ = 0;
};

}  // namespace llmtap::replay
