// ResponseOutcome: how the response to a recorded request ended, as the host saw it, and its
// line in the outcomes sidecar. Public, with capture.h: the host fills one per recorded request
// and hands it to Capture::ReportOutcome; the writer thread formats it. (Not to be confused
// with OfferDecision, what Offer did with the request, or the proxy's RelayResult.)
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "api/server_report.h"

namespace llmtap {

// One tool call of the recorded choice: its function's name and its arguments (a JSON text as
// the model wrote it, not parsed), each the concatenation of the fragments a stream sent.
struct ResponseToolCall {
  int64_t index = 0;  // the tool call's "index" (its position in a non-streamed message)
  std::string name;
  std::string arguments;
};

// The generated text of a response's choice 0 (capture_responses), decoded from its JSON
// strings to UTF-8. Filled by the proxy's UsageScanner as the response passes; moved, never
// copied, on its way to the writer.
struct ResponseText {
  std::string text;       // chat message.content / delta.content, or completions text
  std::string reasoning;  // reasoning_content or reasoning (vLLM, DeepSeek)
  std::vector<ResponseToolCall> tool_calls;  // in index order
  // The decoded bytes of text, reasoning and every name and arguments went past
  // max_response_bytes: what came first is kept, cut at a UTF-8 character boundary, and nothing
  // after the cut.
  bool truncated = false;

  // The decoded bytes held (text, reasoning, names, arguments).
  size_t bytes() const {
    size_t n = text.size() + reasoning.size();
    for (const ResponseToolCall& call : tool_calls) n += call.name.size() + call.arguments.size();
    return n;
  }
};

// How the response to a recorded request ended, as the host saw it. Plain data whose only heap
// members (those of `response`) are empty unless capture_responses is on, so that reporting it
// allocates nothing on the request path when it is off.
struct ResponseOutcome {
  int status = 0;              // HTTP status sent to the client; 0: none was sent
  int64_t ttft_us = -1;        // request head read -> first response body byte; -1: no body
  int64_t total_us = 0;        // request head read -> response end
  int64_t prompt_tokens = -1;  // from the response's usage; -1: not reported
  int64_t completion_tokens = -1;
  char finish_reason[32] = {};  // NUL-terminated; "" when none was reported
  // What the server reported of its own work (cached prompt tokens, its timings, speculative
  // decoding), and whether the token counts above came from its timings (no usage was sent).
  api::ServerReport server;
  bool tokens_from_timings = false;
  bool client_cancelled = false;
  const char* error = nullptr;  // static text naming an upstream failure, or nullptr
  // The response's id, for the APIs whose later requests name it (a Responses request's
  // previous_response_id; Messages ids too); "" when the API has none or it was not seen.
  std::string response_id;
  // capture_responses: whether the response body could be read (JSON or an event stream),
  // and then its generated text. Hosts move it in (std::move), so the text is never copied.
  bool has_response = false;
  ResponseText response;
  // A mirrored request's pair (`llmtap proxy --shadow`): the members of its line in the shadow
  // pairs sidecar after "line" and "timestamp" (JSON members without braces, built by the
  // proxy's shadow), or "" when the request was not mirrored. The writer adds
  // {"line":L,"timestamp":T,<members>} to the sidecar of the record's capture file.
  std::string shadow_pair;

  // Copies `reason`, cut to fit.
  void SetFinishReason(std::string_view reason);
};

// One line of the outcomes sidecar (no trailing newline), for the record on `line` (1-based)
// of its capture file whose timestamp is `timestamp_ms`:
//   {"line":12,"timestamp":5400,"status":200,"ttft_ms":35.214,"latency_ms":812.402,
//    "prompt_tokens":57,"completion_tokens":128,"finish_reason":"stop","usage_source":"usage",
//    "cached_tokens":48,"server":null,"spec":null,"cancelled":false,"error":null}
// Unknown values are null. usage_source: "usage" (the response's usage), "timings" (the
// server's timings: llama.cpp streams without include_usage) or null (no token counts);
// cached_tokens, server and spec: api::AppendServerReportMembers. A response with an id (Responses, Messages) adds
// "response_id":"resp_..." after "error". With `with_response` (capture_responses on), one more
// member ends the line:
// "response":{"text":"...","reasoning":"...","tool_calls":[{"name":"...","arguments":
// "..."}],"truncated":false}, or "response":null when the body was neither JSON nor an event
// stream (or there was none). Appends to `out`.
void AppendOutcomeLine(uint64_t line, int64_t timestamp_ms, const ResponseOutcome& outcome,
                       bool with_response, std::string* out);

// One line of the shadow pairs sidecar (no trailing newline): {"line":L,"timestamp":T,<members>}
// for the record on `line` (1-based) whose timestamp is `timestamp_ms`; line 0 writes
// "line":null,"timestamp":null (a mirrored request capture did not record). Appends to `out`.
void AppendShadowPairLine(uint64_t line, int64_t timestamp_ms, std::string_view members,
                          std::string* out);

// ResponseOutcome::shadow_pair holds one pair's members per candidate the request was mirrored
// to (`llmtap proxy --shadow` twice), '\n' between them (JSON members hold no raw newline): calls
// `f` with each; returns how many.
template <class F>
size_t ForEachShadowPair(std::string_view members, F&& f) {
  size_t n = 0;
  while (!members.empty()) {
    const size_t end = members.find('\n');
    f(members.substr(0, end));
    ++n;
    if (end == std::string_view::npos) break;
    members.remove_prefix(end + 1);
  }
  return n;
}

// Members of an outcome line, each after a comma: `,"prompt_tokens":N,"completion_tokens":N,
// "finish_reason":"stop"` and `,"error":"reset"` (null for unknown values), as the outcome line
// and the shadow pair's sides write them. Append to `out`.
void AppendUsageMembers(const ResponseOutcome& outcome, std::string* out);
void AppendErrorMember(const ResponseOutcome& outcome, std::string* out);

// Microseconds as milliseconds with three decimals ("35.214"), or null when negative (unknown):
// how the outcome and pair lines write durations. Appends to `out`.
void AppendMillisOrNull(int64_t us, std::string* out);

}  // namespace llmtap
