#include "replay/response.h"

#include <algorithm>
#include <vector>

#include "trace/record.h"

namespace llmtap::replay {
namespace {

constexpr size_t kMaxErrorBody = 4096;

double Ms(Clock::duration d) { return std::chrono::duration<double, std::milli>(d).count(); }

// The longest head of `s` of at most `n` bytes that ends at a UTF-8 character boundary.
std::string_view Utf8Head(std::string_view s, size_t n) {
  if (n >= s.size()) return s;
  while (n > 0 && (static_cast<unsigned char>(s[n]) & 0xC0) == 0x80) --n;
  return s.substr(0, n);
}

}  // namespace

void ResponseMeter::Keep(std::string* to, std::string_view piece) {
  if (output_.truncated) return;
  const std::string_view head = Utf8Head(piece, output_budget_);
  to->append(head);
  output_budget_ -= head.size();
  if (head.size() < piece.size()) output_.truncated = true;
}

void ResponseMeter::Sink::ToolCall(int64_t index, std::string_view name,
                                   std::string_view arguments) {
  if (!m->keep_output_) return;
  std::vector<ResponseToolCall>& calls = m->output_.tool_calls;
  auto it = std::lower_bound(calls.begin(), calls.end(), index,
                             [](const ResponseToolCall& c, int64_t i) { return c.index < i; });
  if (it == calls.end() || it->index != index) {
    it = calls.insert(it, ResponseToolCall{});
    it->index = index;
  }
  m->Keep(&it->name, name);
  m->Keep(&it->arguments, arguments);
}

api::DocumentFacts ResponseMeter::Read(std::string_view json, api::DocumentReader* reader) {
  api::DocumentFacts facts;
  Sink sink(this);
  if (!reader->Read(endpoint_, json, &facts, &sink)) {
    invalid_ = true;
    return facts;
  }
  if (facts.error) invalid_ = true;
  if (facts.input_tokens) prompt_tokens_ = static_cast<uint64_t>(*facts.input_tokens);
  if (facts.output_tokens) completion_tokens_ = static_cast<uint64_t>(*facts.output_tokens);
  api::MergeServerReport(facts.server, &server_);
  if (!facts.response_id.empty()) response_id_ = std::move(facts.response_id);
  if (!facts.finish_reason.empty()) finish_reason_ = facts.finish_reason;
  if (facts.done) saw_done_ = true;
  return facts;
}

void ResponseMeter::Begin(Clock::time_point sent, api::Endpoint endpoint) {
  *this = ResponseMeter();
  sent_ = sent;
  endpoint_ = endpoint;
}

void ResponseMeter::OnHead(int status, bool event_stream) {
  status_ = status;
  sse_ = event_stream && status >= 200 && status < 300;
}

void ResponseMeter::OnBody(std::string_view bytes, Clock::time_point now,
                           api::DocumentReader* reader) {
  if (!sse_) {
    const bool success = status_ >= 200 && status_ < 300;
    if (success) {
      body_.append(bytes);
    } else if (body_.size() < kMaxErrorBody) {
      body_.append(bytes.substr(0, kMaxErrorBody - body_.size()));
    }
    return;
  }
  sse_parser_.Feed(bytes, [&](std::string_view data) { OnEvent(data, now, reader); });
}

void ResponseMeter::OnEvent(std::string_view data, Clock::time_point now,
                            api::DocumentReader* reader) {
  // Nothing after the API's last event is the answer's (a "[DONE]" some servers add).
  if (saw_done_) return;
  const std::string_view trimmed = trace::TrimJsonWhitespace(data);
  // Chat's and completions' last event is not JSON; Responses (response.completed) and
  // Messages (message_stop) end with a JSON event (DocumentFacts::done).
  if (trimmed == "[DONE]" &&
      (endpoint_ == api::Endpoint::kChat || endpoint_ == api::Endpoint::kCompletions)) {
    saw_done_ = true;
    return;
  }
  // llama.cpp's llama-server opens a streamed completions answer to a prompt array with
  // "data: null" (0.7.0, b11669): valid JSON saying nothing, not a malformed answer. (The proxy
  // reads every event that is not a JSON object so: no text, no usage; the events around it
  // count.)
  if (trimmed == "null") return;
  if (!Read(trimmed, reader).output) return;
  ++chunks_;
  if (!first_) {
    first_ = now;
  } else {
    if (!second_) second_ = now;
    const float gap = static_cast<float>(Ms(now - *last_));
    gaps_.push_back(gap);
    max_gap_ = std::max(max_gap_, gap);
  }
  last_ = now;
}

void ResponseMeter::TakeOutcome(const char* error, ResponseOutcome* o) {
  o->status = status_;
  o->error = error;
  if (prompt_tokens_) o->prompt_tokens = static_cast<int64_t>(*prompt_tokens_);
  if (completion_tokens_) o->completion_tokens = static_cast<int64_t>(*completion_tokens_);
  o->server = server_;
  o->tokens_from_timings =
      api::FillFromTimings(&o->prompt_tokens, &o->completion_tokens, &o->server);
  o->SetFinishReason(finish_reason_);
  o->response_id = response_id_;
  // A 2xx body that was an answer (JSON, or an event stream) was read: its output compares.
  o->has_response = error == nullptr && status_ >= 200 && status_ < 300 && !invalid_;
  if (o->has_response) o->response = std::move(output_);
}

void ResponseMeter::Finish(bool complete, Clock::time_point done, std::string_view body,
                           const tokenizer::Tokenizer* tok, api::DocumentReader* reader,
                           RequestResult* r) {
  r->status = status_;
  if (!complete) {
    r->error = ErrorKind::kProtocol;
    return;
  }
  if (status_ >= 500) {
    r->error = ErrorKind::kHttp5xx;
    return;
  }
  if (status_ >= 400) {
    r->error = ErrorKind::kHttp4xx;
    return;
  }
  if (status_ < 200 || status_ >= 300) {
    r->error = ErrorKind::kProtocol;
    return;
  }
  if (!sse_) Read(body_, reader);
  if (invalid_) {
    r->error = ErrorKind::kProtocol;
    return;
  }
  r->chunks = chunks_;
  if (first_) r->ttft_ms = Ms(*first_ - sent_);
  if (second_) r->ttst_ms = Ms(*second_ - *first_);
  if (!gaps_.empty()) r->max_chunk_gap_ms = max_gap_;
  r->gaps_ms = std::move(gaps_);
  r->finish_reason = finish_reason_;
  r->tokens_from_usage = completion_tokens_.has_value();
  // A stream without usage (llama.cpp without include_usage) may have the counts in the
  // server's timings: the server's own count before ours.
  r->server = server_;
  int64_t prompt = prompt_tokens_ ? static_cast<int64_t>(*prompt_tokens_) : -1;
  int64_t completion = completion_tokens_ ? static_cast<int64_t>(*completion_tokens_) : -1;
  if (api::FillFromTimings(&prompt, &completion, &r->server)) {
    r->tokens_from_timings = true;
    if (prompt >= 0) prompt_tokens_ = static_cast<uint64_t>(prompt);
    if (completion >= 0) completion_tokens_ = static_cast<uint64_t>(completion);
  }
  std::vector<uint32_t> ids;
  if (completion_tokens_) {
    r->output_tokens = completion_tokens_;
  } else if (tok) {
    tok->Encode(text_, &ids);
    r->output_tokens = ids.size();
  }
  if (prompt_tokens_) {
    r->input_tokens = prompt_tokens_;
  } else if (tok) {
    ids.clear();
    std::string err;
    if (tok->EncodeRequest(body, &ids, &err)) r->input_tokens = ids.size();
  }
  if (r->ttft_ms && r->output_tokens && *r->output_tokens > 1) {
    r->itl_ms = (Ms(done - sent_) - *r->ttft_ms) / static_cast<double>(*r->output_tokens - 1);
  }
}

}  // namespace llmtap::replay
