#include "capture/outcome.h"

#include <algorithm>
#include <charconv>

#include <simdjson.h>

#include "capture/config_internal.h"
#include "common/json_escape.h"
#include "common/json_number.h"

namespace llmtap {

void ResponseOutcome::SetFinishReason(std::string_view reason) {
  // Finish reasons are short ASCII words; anything else is shown as '?', so the sidecar
  // stays valid UTF-8 JSON whatever the upstream sent.
  const size_t n = std::min(reason.size(), sizeof(finish_reason) - 1);
  for (size_t i = 0; i < n; ++i) {
    const char c = reason[i];
    finish_reason[i] = (c >= 0x20 && c < 0x7f) ? c : '?';
  }
  finish_reason[n] = '\0';
}

namespace {

void AppendInt(int64_t v, std::string* out) { AppendJsonInt(v, out); }
void AppendCount(int64_t v, std::string* out) { AppendJsonCountOrNull(v, out); }

// A response string as a JSON string. The text is the upstream's bytes as its JSON decoded to;
// an upstream that sent ill-formed UTF-8 would make the line unreadable to every JSON reader,
// so then (rarely) those bytes become U+FFFD.
void AppendResponseString(std::string* out, std::string_view s) {
  if (simdjson::validate_utf8(s.data(), s.size())) {
    AppendJsonString(out, s);
  } else {
    out->append(config_internal::Quote(s));
  }
}

void AppendResponse(const ResponseOutcome& o, std::string* out) {
  out->append(",\"response\":");
  if (!o.has_response) {
    out->append("null");
    return;
  }
  const ResponseText& r = o.response;
  out->append("{\"text\":");
  AppendResponseString(out, r.text);
  out->append(",\"reasoning\":");
  AppendResponseString(out, r.reasoning);
  out->append(",\"tool_calls\":[");
  for (size_t i = 0; i < r.tool_calls.size(); ++i) {
    if (i > 0) out->push_back(',');
    out->append("{\"name\":");
    AppendResponseString(out, r.tool_calls[i].name);
    out->append(",\"arguments\":");
    AppendResponseString(out, r.tool_calls[i].arguments);
    out->push_back('}');
  }
  out->append(r.truncated ? "],\"truncated\":true}" : "],\"truncated\":false}");
}

}  // namespace

void AppendMillisOrNull(int64_t us, std::string* out) { AppendJsonMillisOrNull(us, out); }

void AppendShadowPairLine(uint64_t line, int64_t timestamp_ms, std::string_view members,
                          std::string* out) {
  if (line == 0) {
    out->append("{\"line\":null,\"timestamp\":null");
  } else {
    out->append("{\"line\":");
    AppendInt(static_cast<int64_t>(line), out);
    out->append(",\"timestamp\":");
    AppendInt(timestamp_ms, out);
  }
  if (!members.empty()) out->push_back(',');
  out->append(members);
  out->push_back('}');
}

void AppendUsageMembers(const ResponseOutcome& o, std::string* out) {
  out->append(",\"prompt_tokens\":");
  AppendCount(o.prompt_tokens, out);
  out->append(",\"completion_tokens\":");
  AppendCount(o.completion_tokens, out);
  out->append(",\"finish_reason\":");
  if (o.finish_reason[0] == '\0') {
    out->append("null");
  } else {
    out->push_back('"');
    AppendJsonEscaped(out, o.finish_reason);
    out->push_back('"');
  }
}

void AppendErrorMember(const ResponseOutcome& o, std::string* out) {
  out->append(",\"error\":");
  if (o.error == nullptr) {
    out->append("null");
  } else {
    out->push_back('"');
    AppendJsonEscaped(out, o.error);
    out->push_back('"');
  }
}

void AppendOutcomeLine(uint64_t line, int64_t timestamp_ms, const ResponseOutcome& o,
                       bool with_response, std::string* out) {
  out->append("{\"line\":");
  AppendInt(static_cast<int64_t>(line), out);
  out->append(",\"timestamp\":");
  AppendInt(timestamp_ms, out);
  out->append(",\"status\":");
  AppendInt(o.status, out);
  out->append(",\"ttft_ms\":");
  AppendMillisOrNull(o.ttft_us, out);
  out->append(",\"latency_ms\":");
  AppendMillisOrNull(o.total_us, out);
  AppendUsageMembers(o, out);
  out->append(",\"usage_source\":");
  out->append(o.tokens_from_timings                                    ? "\"timings\""
              : o.prompt_tokens >= 0 || o.completion_tokens >= 0 ? "\"usage\""
                                                                   : "null");
  api::AppendServerReportMembers(o.server, out);
  out->append(o.client_cancelled ? ",\"cancelled\":true" : ",\"cancelled\":false");
  AppendErrorMember(o, out);
  if (!o.response_id.empty()) {
    out->append(",\"response_id\":\"");
    AppendJsonEscaped(out, o.response_id);
    out->push_back('"');
  }
  if (with_response) AppendResponse(o, out);
  out->push_back('}');
}

}  // namespace llmtap
