// libFuzzer target for the NIM_CAPTURE_ARGS parser (ParseCaptureConfig) and the flag overlay
// (ApplyCaptureOverrides). Input: the bytes up to the first NUL are NIM_CAPTURE_ARGS, the rest
// a flag overrides object. Beyond memory errors and undefined behaviour it checks the
// contract's invariants: an enabled result is always a usable configuration, a disabled one
// is the default, and no diagnostic is ever empty or unbounded.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string_view>

#include <re2/re2.h>

#include "capture/config.h"

namespace {

void Check(bool ok) {
  if (!ok) __builtin_trap();
}

void CheckUsable(const llmtap::ParsedCaptureConfig& parsed) {
  for (const auto& d : parsed.diagnostics) {
    // (The key may be "": an unknown empty key is named as such.)
    Check(!d.message.empty() && d.message.size() < 4096);
  }
  if (!parsed.enabled) return;
  const llmtap::CaptureConfig& c = parsed.config;
  Check(!c.path.empty() && c.path.find('\0') == std::string::npos);
  Check(c.max_request_bytes > 0 && c.max_queue_bytes >= c.max_request_bytes);
  Check(c.sample_rate >= 0.0 && c.sample_rate <= 1.0 && !std::signbit(c.sample_rate));
  Check(c.rotate_bytes >= 0 && c.rotate_ms >= 0);
  Check(RE2(c.endpoint_pattern, RE2::Quiet).ok());
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  const size_t nul = input.find('\0');
  const std::string_view args = input.substr(0, nul);
  llmtap::ParsedCaptureConfig parsed = llmtap::ParseCaptureConfig("1", args);
  if (!parsed.enabled) {
    Check(parsed.config.path == llmtap::CaptureConfig().path);
  }
  CheckUsable(parsed);
  if (nul != std::string_view::npos) {
    llmtap::ApplyCaptureOverrides(input.substr(nul + 1), &parsed);
    CheckUsable(parsed);
  }
  return 0;
}
