// libFuzzer target for UsageScanner. Input: byte 0 picks the mode (JSON or SSE; kNone is
// trivial), byte 1 the piece size (1-256), the rest is the body, fed in pieces of that size.
// Beyond memory errors and undefined behaviour it checks that the split does not change the
// result (the body is fed whole to a second scanner) and that the results stay in range.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "proxy/usage_scanner.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using llmtap::proxy::UsageScanner;
  if (size < 2) return 0;
  const UsageScanner::Mode mode =
      data[0] % 2 == 0 ? UsageScanner::Mode::kJson : UsageScanner::Mode::kSse;
  const size_t piece = size_t{data[1]} + 1;
  const std::string_view body(reinterpret_cast<const char*>(data) + 2, size - 2);

  UsageScanner pieces(mode);
  for (size_t i = 0; i < body.size(); i += piece) pieces.Feed(body.substr(i, piece));
  UsageScanner whole(mode);
  whole.Feed(body);

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
