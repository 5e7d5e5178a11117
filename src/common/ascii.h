// ASCII case-insensitive comparison for protocol text that the standard library would compare
// by locale: HTTP header names and media types (capture/session.cc, proxy/usage_scanner.cc) and
// Prometheus' Inf and NaN (report/prometheus.cc). Bytes outside A-Z compare as they are.
#pragma once

#include <cstddef>
#include <string_view>

namespace llmtap {

constexpr char AsciiLower(char c) noexcept {
  return c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c;
}

constexpr bool AsciiEqualsIgnoreCase(std::string_view a, std::string_view b) noexcept {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (AsciiLower(a[i]) != AsciiLower(b[i])) return false;
  }
  return true;
}

}  // namespace llmtap
