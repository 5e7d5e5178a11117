// libFuzzer target for reading responses as they pass: the UsageScanner (usage only) and the
// ResponseReader keeping text (document by document, through each API's module). Input: byte 0
// picks the mode (bit 0: JSON or SSE; kNone is trivial), whether text is kept (bit 1) and, then,
// the API (bits 2-3: chat, Responses, Messages, chat) and the cap (1 + byte 0 / 16 * 8 bytes);
// byte 1 the piece size (1-256); the rest is the body, fed in pieces of that size.
// Beyond memory errors and undefined behaviour it checks that the split does not change the
// result (the body is also fed whole), that the usage stays in range, and that the text is
// within the cap, its tool calls in index order, and that what the server reported of its own
// work (cached tokens, timings, speculative decoding) reads the same in pieces as whole.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "api/server_report.h"
#include "proxy/response_reader.h"
#include "proxy/usage_scanner.h"

namespace {

using llmtap::ResponseOutcome;
using llmtap::proxy::ResponseReader;
using llmtap::proxy::UsageScanner;

void Check(bool ok) {
  if (!ok) __builtin_trap();
}

ResponseOutcome Read(llmtap::api::Endpoint endpoint, UsageScanner::Mode mode, size_t max_text,
                     std::string_view body, size_t piece) {
  ResponseReader reader(endpoint,
                        mode == UsageScanner::Mode::kSse ? "text/event-stream" : "application/json",
                        "", max_text);
  for (size_t i = 0; i < body.size(); i += piece) reader.Feed(body.substr(i, piece));
  ResponseOutcome o;
  reader.Finish(&o);
  return o;
}

void CheckText(const llmtap::ResponseText& t, const llmtap::ResponseText& w, size_t max_text) {
  Check(t.text == w.text && t.reasoning == w.reasoning && t.truncated == w.truncated &&
        t.tool_calls.size() == w.tool_calls.size() && t.bytes() <= max_text);
  for (size_t i = 0; i < t.tool_calls.size(); ++i) {
    Check(t.tool_calls[i].index == w.tool_calls[i].index &&
          t.tool_calls[i].name == w.tool_calls[i].name &&
          t.tool_calls[i].arguments == w.tool_calls[i].arguments &&
          (i == 0 || t.tool_calls[i - 1].index < t.tool_calls[i].index));
  }
}

// The report as the outcome line writes it.
std::string Written(const llmtap::api::ServerReport& r) {
  std::string out;
  llmtap::api::AppendServerReportMembers(r, &out);
  return out;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2) return 0;
  const UsageScanner::Mode mode =
      data[0] % 2 == 0 ? UsageScanner::Mode::kJson : UsageScanner::Mode::kSse;
  const size_t piece = size_t{data[1]} + 1;
  const std::string_view body(reinterpret_cast<const char*>(data) + 2, size - 2);

  if ((data[0] & 2) != 0) {
    static constexpr llmtap::api::Endpoint kApis[] = {
        llmtap::api::Endpoint::kChat, llmtap::api::Endpoint::kResponses,
        llmtap::api::Endpoint::kMessages, llmtap::api::Endpoint::kChat};
    const llmtap::api::Endpoint api = kApis[(data[0] >> 2) & 3];
    const size_t max_text = 1 + size_t{data[0]} / 16 * 8;
    const ResponseOutcome t = Read(api, mode, max_text, body, piece);
    const ResponseOutcome w = Read(api, mode, max_text, body, body.size() + 1);
    Check(t.has_response && w.has_response);
    CheckText(t.response, w.response, max_text);
    Check(t.prompt_tokens == w.prompt_tokens && t.completion_tokens == w.completion_tokens &&
          std::string_view(t.finish_reason) == w.finish_reason && t.response_id == w.response_id);
    Check(Written(t.server) == Written(w.server));
    return 0;
  }

  UsageScanner pieces(mode);
  for (size_t i = 0; i < body.size(); i += piece) pieces.Feed(body.substr(i, piece));
  UsageScanner whole(mode);
  whole.Feed(body);
  const auto& a = pieces.usage();
  const auto& b = whole.usage();
  Check(a.prompt_tokens == b.prompt_tokens && a.completion_tokens == b.completion_tokens &&
        a.finish_reason == b.finish_reason && Written(a.server) == Written(b.server));
  Check(!(a.prompt_tokens && *a.prompt_tokens < 0) &&
        !(a.completion_tokens && *a.completion_tokens < 0) &&
        a.finish_reason.size() <= UsageScanner::kMaxFinishReasonBytes);
  return 0;
}
