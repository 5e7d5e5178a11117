// JSON strings by hand. Escaping, for the writers of JSON text (the simulator's responses, the
// replay's request bodies, the tokenizer's tojson, ...); and the steps of unescaping, for the
// two hand-written decoders (the capture's session-id reader, capture/session.cc, and the
// proxy's streaming usage scanner, proxy/usage_scanner.cc; the JSON compactor keeps its own
// copies on purpose, see capture/json_compact_internal.h). Pure functions; any thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace llmtap {

// Appends `s` to `out` as the inside of a JSON string (no quotes): `"` and `\` are escaped, the
// short escapes (\n \r \t \b \f) are used where JSON has them, other control bytes become
// \u00XX, everything else is copied as is. `s` must be valid UTF-8.
void AppendJsonEscaped(std::string* out, std::string_view s);

// Appends `s` as a JSON string: escaped as above, in quotes.
inline void AppendJsonString(std::string* out, std::string_view s) {
  out->push_back('"');
  AppendJsonEscaped(out, s);
  out->push_back('"');
}

// The byte that JSON's short escape \<e> stands for (\" \\ \/ \b \f \n \r \t), or -1 for
// any other `e` (\u is the caller's: HexDigitValue and EncodeUtf8 below).
constexpr int JsonShortEscapeValue(char e) noexcept {
  switch (e) {
    case '"':
    case '\\':
    case '/':
      return e;
    case 'b':
      return '\b';
    case 'f':
      return '\f';
    case 'n':
      return '\n';
    case 'r':
      return '\r';
    case 't':
      return '\t';
    default:
      return -1;
  }
}

// The value of hex digit `c` (either case), or -1.
constexpr int HexDigitValue(char c) noexcept {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// Writes code point `cp` (at most U+10FFFF) as UTF-8 to out[0..n) and returns n (1 to 4).
inline size_t EncodeUtf8(uint32_t cp, char out[4]) noexcept {
  if (cp < 0x80) {
    out[0] = static_cast<char>(cp);
    return 1;
  }
  if (cp < 0x800) {
    out[0] = static_cast<char>(0xC0 | cp >> 6);
    out[1] = static_cast<char>(0x80 | (cp & 0x3F));
    return 2;
  }
  if (cp < 0x10000) {
    out[0] = static_cast<char>(0xE0 | cp >> 12);
    out[1] = static_cast<char>(0x80 | (cp >> 6 & 0x3F));
    out[2] = static_cast<char>(0x80 | (cp & 0x3F));
    return 3;
  }
  out[0] = static_cast<char>(0xF0 | cp >> 18);
  out[1] = static_cast<char>(0x80 | (cp >> 12 & 0x3F));
  out[2] = static_cast<char>(0x80 | (cp >> 6 & 0x3F));
  out[3] = static_cast<char>(0x80 | (cp & 0x3F));
  return 4;
}

}  // namespace llmtap
