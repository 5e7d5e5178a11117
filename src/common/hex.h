// Lower-case hexadecimal text: fixed-width numbers (ids, hashes), minimal-width numbers (HTTP
// chunk sizes) and byte strings (digests).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace llmtap {

inline constexpr char kHexDigits[] = "0123456789abcdef";

// Appends the low `digits` hex digits of `v` (at most 16), zero-padded: 0xabc, 4 -> "0abc".
inline void AppendHex(std::string* out, uint64_t v, int digits = 16) {
  digits = digits > 16 ? 16 : digits;
  const size_t at = out->size();
  out->resize(at + static_cast<size_t>(digits));
  char* buf = out->data() + at;
  for (int i = digits - 1; i >= 0; --i, v >>= 4) buf[i] = kHexDigits[v & 15];
}

// `v` as 16 hex digits.
inline std::string Hex64(uint64_t v) {
  std::string out;
  AppendHex(&out, v);
  return out;
}

// Appends `v` without leading zeros ("0" for zero).
inline void AppendHexMinimal(std::string* out, uint64_t v) {
  int digits = 1;
  while (digits < 16 && (v >> (4 * digits)) != 0) ++digits;
  AppendHex(out, v, digits);
}

// Appends two hex digits per byte.
inline void AppendHexBytes(std::string* out, const unsigned char* bytes, size_t n) {
  out->reserve(out->size() + 2 * n);
  for (size_t i = 0; i < n; ++i) {
    out->push_back(kHexDigits[bytes[i] >> 4]);
    out->push_back(kHexDigits[bytes[i] & 15]);
  }
}

}  // namespace llmtap
