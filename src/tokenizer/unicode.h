// Unicode helpers for the tokenizers: a strict UTF-8 decoder that also accepts invalid bytes,
// the character classes the pre-tokenizer regexes use (\p{L}, \p{N}, \s as Oniguruma defines
// them, which is what Hugging Face `tokenizers` runs), and NFC normalization. Pure functions
// over ICU's immutable tables; any thread may call them.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace llmtap::tokenizer {

// One decoded character. An invalid sequence becomes one character with cp == kInvalidCodePoint
// spanning its "maximal subpart" (the WHATWG/Unicode rule that Node's and Python's decoders use
// to place one U+FFFD), so invalid input splits into the same pieces as its U+FFFD-replaced
// text would.
inline constexpr uint32_t kInvalidCodePoint = 0xFFFFFFFF;
struct DecodedChar {
  uint32_t cp;
  uint32_t len;  // bytes, 1..4
};
DecodedChar DecodeUtf8(std::string_view s, size_t pos);

// Character classes. A character with none of these bits is "other" ([^\s\p{L}\p{N}]); an
// invalid sequence is "other", as U+FFFD (a symbol) is.
enum CharClass : uint8_t {
  kClassLetter = 1,     // \p{L}: Lu Ll Lt Lm Lo
  kClassNumber = 2,     // \p{N}: Nd Nl No
  kClassSpace = 4,      // Oniguruma's Unicode \s: U+0009..U+000D, U+0085, Zs, Zl, Zp
  kClassLineBreak = 8,  // \r or \n (also has kClassSpace)
  kClassCjk = 16,       // Han, Hiragana, Katakana, Hangul letters (builtin tokenizer only)
};
// The classes of the ASCII characters (the common case, inline: it never reaches ICU).
constexpr std::array<uint8_t, 128> MakeAsciiClasses() {
  std::array<uint8_t, 128> t{};
  for (int c = 0; c < 128; ++c) {
    if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) t[c] = kClassLetter;
    if (c >= '0' && c <= '9') t[c] = kClassNumber;
    if (c == ' ' || (c >= 0x09 && c <= 0x0D)) t[c] = kClassSpace;
    if (c == '\r' || c == '\n') t[c] = kClassSpace | kClassLineBreak;
  }
  return t;
}
inline constexpr std::array<uint8_t, 128> kAsciiClasses = MakeAsciiClasses();
uint8_t ClassOfNonAscii(uint32_t cp);  // cp >= 128
inline uint8_t ClassOf(uint32_t cp) { return cp < 128 ? kAsciiClasses[cp] : ClassOfNonAscii(cp); }

// True when `s` is valid UTF-8.
bool IsValidUtf8(std::string_view s);

// Appends NFC(s) to *out. Invalid sequences are copied unchanged; each valid run between them
// is normalized on its own (composition never crosses a non-character anyway).
void AppendNfc(std::string_view s, std::string* out);
// Cheap test that AppendNfc would copy `s` unchanged: every character is below U+0300 (no
// combining marks, precomposed Latin-1 only) or NFC_Quick_Check=Yes with combining class 0 (most
// letters, CJK, emoji), and a text of only such characters is in NFC. False means maybe.
bool TriviallyNfc(std::string_view s);

}  // namespace llmtap::tokenizer
