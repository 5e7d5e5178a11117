// libFuzzer target for UsageScanner. Input: byte 0 picks the mode (bit 0: JSON or SSE; kNone
// is trivial) and whether the scanner collects text (bit 1; the cap is 1 + byte 0 / 4 * 8
// bytes), byte 1 the piece size (1-256), the rest is the body, fed in pieces of that size.
// Beyond memory errors and undefined behaviour it checks that the split does not change the
// result (the body is fed whole to a second scanner, which collects no text: collecting it must
// not change the usage either), that the results stay in range, and with text that it is the
// same whole, within the cap, its tool calls in index order.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "proxy/usage_scanner.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using llmtap::proxy::UsageScanner;
  if (size < 2) return 0;
  const UsageScanner::Mode mode =
      data[0] % 2 == 0 ? UsageScanner::Mode::kJson : UsageScanner::Mode::kSse;
  const size_t max_text = (data[0] & 2) != 0 ? 1 + size_t{data[0]} / 4 * 8 : 0;
  const size_t piece = size_t{data[1]} + 1;
  const std::string_view body(reinterpret_cast<const char*>(data) + 2, size - 2);

  UsageScanner pieces(mode, max_text);
  for (size_t i = 0; i < body.size(); i += piece) pieces.Feed(body.substr(i, piece));
  UsageScanner whole(mode);
  whole.Feed(body);
  if (max_text > 0) {
    UsageScanner text_whole(mode, max_text);
    text_whole.Feed(body);
    const llmtap::ResponseText t = pieces.TakeText();
    const llmtap::ResponseText w = text_whole.TakeText();
    if (t.text != w.text || t.reasoning != w.reasoning || t.truncated != w.truncated ||
        t.tool_calls.size() != w.tool_calls.size() || t.bytes() > max_text) {
      __builtin_trap();
    }
    for (size_t i = 0; i < t.tool_calls.size(); ++i) {
      if (t.tool_calls[i].index != w.tool_calls[i].index ||
          t.tool_calls[i].name != w.tool_calls[i].name ||
          t.tool_calls[i].arguments != w.tool_calls[i].arguments ||
          (i > 0 && t.tool_calls[i - 1].index >= t.tool_calls[i].index)) {
        __builtin_trap();
      }
    }
  }

  const auto& a = pieces.usage();
  const auto& b = whole.usage();
  if (a.prompt_tokens != b.prompt_tokens || a.completion_tokens != b.completion_tokens ||
      a.finish_reason != b.finish_reason) {
    __builtin_trap();
  }
  if ((a.prompt_tokens && *a.prompt_tokens < 0) ||
      (a.completion_tokens && *a.completion_tokens < 0) ||
      a.finish_reason.size() > UsageScanner::kMaxFinishReasonBytes) {
    __builtin_trap();
  }
  return 0;
}
