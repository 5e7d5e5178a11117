// Chat completions (/v1/chat/completions) and completions (/v1/completions): reading an answer.
#include "api/document_internal.h"

namespace llmtap::api {
namespace {

using document::Count;
using document::String;

// A chat message or delta: content, reasoning (vLLM's reasoning_content, or reasoning: it sends
// both with the same text, so only the first that is a string counts), tool calls.
bool ReadMessage(const simdjson::dom::object& m, OutputSink* sink) {
  bool output = false;
  if (const std::string_view s = String(m, "content"); !s.empty()) {
    if (sink) sink->Text(s);
    output = true;
  }
  std::string_view reasoning;
  if (m.at_key("reasoning_content").get(reasoning) != simdjson::SUCCESS) {
    reasoning = String(m, "reasoning");
  }
  if (!reasoning.empty()) {
    if (sink) sink->Reasoning(reasoning);
    output = true;
  }
  simdjson::dom::array calls;
  if (document::Array(m, "tool_calls", &calls)) {
    int64_t position = 0;
    for (simdjson::dom::element c : calls) {
      simdjson::dom::object call, function;
      if (c.get(call) != simdjson::SUCCESS) continue;
      output = true;
      const int64_t index = document::Index(call, "index", position++);
      if (sink && document::Object(call, "function", &function)) {
        sink->ToolCall(index, String(function, "name"), String(function, "arguments"));
      }
    }
  }
  return output;
}

}  // namespace

void ReadChatDocument(const simdjson::dom::object& o, DocumentFacts* facts, OutputSink* sink) {
  if (document::HasError(o)) facts->error = true;
  simdjson::dom::object usage;
  if (document::Object(o, "usage", &usage)) {
    if (auto v = Count(usage, "prompt_tokens")) facts->input_tokens = v;
    if (auto v = Count(usage, "completion_tokens")) facts->output_tokens = v;
    document::ReadCachedTokens(usage, "prompt_tokens_details", &facts->server);
  }
  simdjson::dom::array choices;
  if (!document::Array(o, "choices", &choices)) return;
  int64_t position = 0;
  for (simdjson::dom::element c : choices) {
    simdjson::dom::object choice, m;
    if (c.get(choice) != simdjson::SUCCESS) continue;
    // Every choice is generated output; the sink gets choice 0's (n > 1: one answer, not the
    // pieces of several interleaved).
    OutputSink* const to = document::Index(choice, "index", position++) == 0 ? sink : nullptr;
    if (document::Object(choice, "delta", &m) && ReadMessage(m, to)) facts->output = true;
    if (document::Object(choice, "message", &m) && ReadMessage(m, to)) facts->output = true;
    if (const std::string_view text = String(choice, "text"); !text.empty()) {
      if (to) to->Text(text);
      facts->output = true;
    }
    document::SetFinish(String(choice, "finish_reason"), facts);
  }
}

}  // namespace llmtap::api
