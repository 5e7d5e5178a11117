#include "replay/response.h"

#include <algorithm>
#include <vector>

namespace llmtap::replay {
namespace {

constexpr size_t kMaxErrorBody = 4096;

double Ms(Clock::duration d) { return std::chrono::duration<double, std::milli>(d).count(); }

// Appends a non-empty string field's value to *text; true when there was one.
bool TakeText(simdjson::dom::object o, std::string_view key, std::string* text) {
  std::string_view s;
  if (o.at_key(key).get(s) != simdjson::SUCCESS || s.empty()) return false;
  if (text) text->append(s);
  return true;
}

bool NonEmptyArray(simdjson::dom::object o, std::string_view key) {
  simdjson::dom::array a;
  return o.at_key(key).get(a) == simdjson::SUCCESS && a.size() > 0;
}

// A chat message or delta: content, reasoning (vLLM's reasoning_content / reasoning), tool calls.
bool MessageContent(simdjson::dom::object m, std::string* text, std::string* answer) {
  if (answer) TakeText(m, "content", answer);
  bool any = TakeText(m, "content", text);
  any = TakeText(m, "reasoning_content", text) || any;
  any = TakeText(m, "reasoning", text) || any;
  return NonEmptyArray(m, "tool_calls") || any;
}

}  // namespace

ChunkInfo ChunkReader::Read(std::string_view json, std::string* text, std::string* answer) {
  ChunkInfo info;
  while (!json.empty() && (json.front() == ' ' || json.front() == '\n' || json.front() == '\r'))
    json.remove_prefix(1);
  while (!json.empty() && (json.back() == ' ' || json.back() == '\n' || json.back() == '\r'))
    json.remove_suffix(1);
  if (json == "[DONE]") {
    info.done = true;
    return info;
  }
  simdjson::dom::object o;
  if (parser_.parse(json.data(), json.size()).get(o) != simdjson::SUCCESS) {
    info.invalid = true;
    return info;
  }
  simdjson::dom::element e;
  if (o.at_key("error").get(e) == simdjson::SUCCESS && !e.is_null()) info.error = true;
  simdjson::dom::object usage;
  if (o.at_key("usage").get(usage) == simdjson::SUCCESS) {
    uint64_t v = 0;
    if (usage.at_key("prompt_tokens").get(v) == simdjson::SUCCESS) info.prompt_tokens = v;
    if (usage.at_key("completion_tokens").get(v) == simdjson::SUCCESS) info.completion_tokens = v;
  }
  simdjson::dom::array choices;
  if (o.at_key("choices").get(choices) == simdjson::SUCCESS) {
    for (simdjson::dom::element c : choices) {
      simdjson::dom::object choice, m;
      if (c.get(choice) != simdjson::SUCCESS) continue;
      if (choice.at_key("delta").get(m) == simdjson::SUCCESS && MessageContent(m, text, answer)) {
        info.content = true;
      }
      if (choice.at_key("message").get(m) == simdjson::SUCCESS && MessageContent(m, text, answer)) {
        info.content = true;
      }
      if (answer) TakeText(choice, "text", answer);
      if (TakeText(choice, "text", text)) info.content = true;
    }
  }
  return info;
}

void ResponseMeter::Begin(Clock::time_point sent) {
  *this = ResponseMeter();
  sent_ = sent;
}

void ResponseMeter::OnHead(int status, bool event_stream) {
  status_ = status;
  sse_ = event_stream && status >= 200 && status < 300;
}

void ResponseMeter::OnBody(std::string_view bytes, Clock::time_point now, ChunkReader* reader) {
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

void ResponseMeter::OnEvent(std::string_view data, Clock::time_point now, ChunkReader* reader) {
  ChunkInfo info = reader->Read(data, &text_, keep_answer_ ? &answer_ : nullptr);
  if (info.done) {
    saw_done_ = true;
    return;
  }
  if (info.invalid || info.error) invalid_ = true;
  if (info.prompt_tokens) prompt_tokens_ = info.prompt_tokens;
  if (info.completion_tokens) completion_tokens_ = info.completion_tokens;
  if (!info.content) return;
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

void ResponseMeter::Finish(bool complete, Clock::time_point done, std::string_view body,
                           const tokenizer::Tokenizer* tok, ChunkReader* reader, RequestResult* r) {
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
  if (!sse_) {
    ChunkInfo info = reader->Read(body_, &text_, keep_answer_ ? &answer_ : nullptr);
    if (info.invalid || info.error) invalid_ = true;
    prompt_tokens_ = info.prompt_tokens;
    completion_tokens_ = info.completion_tokens;
  }
  if (invalid_) {
    r->error = ErrorKind::kProtocol;
    return;
  }
  r->chunks = chunks_;
  if (first_) r->ttft_ms = Ms(*first_ - sent_);
  if (second_) r->ttst_ms = Ms(*second_ - *first_);
  if (!gaps_.empty()) r->max_chunk_gap_ms = max_gap_;
  r->gaps_ms = std::move(gaps_);
  r->tokens_from_usage = completion_tokens_.has_value();
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
