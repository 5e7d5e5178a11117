// Internals of JsonCompactor, shared by its files: json_compact.cc (public entry and dispatch),
// json_compact_reference.cc, json_compact_avx512.cc and json_compact_simdjson.cc (one kernel
// each; the simdjson path's class is in json_compact_simdjson.h).
//
// Also the test and benchmark hooks into the individual paths. Not for production use:
// JsonCompactor::Compact picks the path. Thread-safety as JsonCompactor (thread-local state).
#pragma once

#include <cstddef>
#include <cstdint>
#include <exception>
#include <string>
#include <string_view>

namespace llmtap::json_compact_internal {

// Whether this CPU runs the AVX-512 kernel (AVX-512 BW/VL/VBMI/VBMI2). Compact's dispatch asks
// this too.
bool HasAvx512Kernel();
// Run one fast path alone: true when it accepts `body` (and appends its compact form).
bool TryCompactAvx512ForTest(std::string_view body, std::string* out);
bool TryCompactSimdjsonForTest(std::string_view body, std::string* out);

// The AVX-512 kernel (json_compact_avx512.cc); only when HasAvx512Kernel(). Appends the compact
// form and returns true, or leaves *out as it was and returns false.
bool TryCompactAvx512(std::string_view body, std::string* out);

// ---------------------------------------------------------------------------------------------
// Helpers shared by the kernels.
//
// The functions are static, not inline: each file gets its own internal copy, as when the
// kernels were one file. The inline keyword raises GCC's inlining limits for a function, and
// that alone (on HexValue) changed what -O3 inlines into the reference's loops: ParseString went
// out of line and the reference ran ~20% slower (bench/json_compact_bench.cc, BM_Reference).
// [[maybe_unused]]: not every file that includes this header calls every helper.

// Deepest accepted nesting of objects/arrays: {} is depth 1.
inline constexpr size_t kMaxDepth = 1024;

// The fast paths store whole 64-byte vectors, so the output needs this much slack.
inline constexpr size_t kOutputSlack = 64;

// Grows *out by `extra` bytes. std::string can only report allocation failure by throwing,
// and Compact() must never throw, so failure is reported as false (the body is then not
// recorded).
[[maybe_unused]] static bool GrowBy(std::string* out, size_t extra) {
  try {
    out->resize(out->size() + extra);
    return true;
  } catch (const std::exception&) {
    return false;
  }
}

[[maybe_unused]] static bool IsJsonWhitespace(unsigned char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

[[maybe_unused]] static bool IsDigit(unsigned char c) { return c >= '0' && c <= '9'; }

// Value of a hex digit, or -1.
[[maybe_unused]] static int HexValue(unsigned char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// Code unit of the 4 hex digits at p[i..i+4), or -1 if they are missing or not hex.
[[maybe_unused]] static int32_t Hex4(const unsigned char* p, size_t n, size_t i) {
  if (n < 4 || i > n - 4) return -1;
  int32_t v = 0;
  for (size_t k = 0; k < 4; ++k) {
    const int d = HexValue(p[i + k]);
    if (d < 0) return -1;
    v = v * 16 + d;
  }
  return v;
}

[[maybe_unused]] static bool IsHighSurrogate(int32_t u) { return u >= 0xD800 && u <= 0xDBFF; }
[[maybe_unused]] static bool IsLowSurrogate(int32_t u) { return u >= 0xDC00 && u <= 0xDFFF; }

}  // namespace llmtap::json_compact_internal
