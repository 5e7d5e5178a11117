#include "tokenizer/unicode.h"

#include <unicode/bytestream.h>
#include <unicode/normalizer2.h>
#include <unicode/stringpiece.h>
#include <unicode/uchar.h>

#include <array>
#include <atomic>
#include <bit>
#include <cstring>

namespace llmtap::tokenizer {
namespace {

// Han, Hiragana, Katakana and Hangul letters by block (cheaper than a script lookup per
// character; only the builtin tokenizer's length model uses it).
bool IsCjkScript(uint32_t cp) {
  return (cp >= 0x1100 && cp <= 0x11FF) || (cp >= 0x3040 && cp <= 0x30FF) ||
         (cp >= 0x3130 && cp <= 0x318F) || (cp >= 0x31F0 && cp <= 0x31FF) ||
         (cp >= 0x3400 && cp <= 0x4DBF) || (cp >= 0x4E00 && cp <= 0x9FFF) ||
         (cp >= 0xAC00 && cp <= 0xD7AF) || (cp >= 0xF900 && cp <= 0xFAFF) ||
         (cp >= 0x20000 && cp <= 0x3134F);
}

// Whether `cp` (below kNfcTableEnd) is NFC_Quick_Check=Yes with canonical combining class 0:
// a text of only such characters is in NFC (the quick check answers Yes for it). Read from ICU
// one page of 256 code points at a time, when a character of the page is first asked about;
// threads that race on a page compute the same bits.
constexpr uint32_t kNfcTableEnd = 0x30000;  // the BMP, and planes 1 (emoji) and 2 (CJK)
bool IsNfcYesStarter(uint32_t cp) {
  static std::atomic<uint64_t> bits[kNfcTableEnd / 64];
  static std::atomic<bool> ready[kNfcTableEnd / 256];
  const uint32_t page = cp >> 8;
  if (!ready[page].load(std::memory_order_acquire)) {
    for (uint32_t w = page * 4; w < page * 4 + 4; ++w) {
      uint64_t word = 0;
      for (uint32_t k = 0; k < 64; ++k) {
        const auto c = static_cast<UChar32>(w * 64 + k);
        if (u_getIntPropertyValue(c, UCHAR_NFC_QUICK_CHECK) == UNORM_YES &&
            u_getCombiningClass(c) == 0) {
          word |= uint64_t{1} << k;
        }
      }
      bits[w].store(word, std::memory_order_relaxed);
    }
    ready[page].store(true, std::memory_order_release);
  }
  return (bits[cp >> 6].load(std::memory_order_relaxed) >> (cp & 63)) & 1;
}

}  // namespace

DecodedChar DecodeUtf8(std::string_view s, size_t pos) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data()) + pos;
  size_t avail = s.size() - pos;
  unsigned char b0 = p[0];
  if (b0 < 0x80) return {b0, 1};
  // Lead byte -> length and the valid range of the second byte (Unicode Table 3-7).
  uint32_t len;
  unsigned char lo = 0x80, hi = 0xBF;
  uint32_t cp;
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    len = 2;
    cp = b0 & 0x1F;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    len = 3;
    cp = b0 & 0x0F;
    if (b0 == 0xE0) lo = 0xA0;
    if (b0 == 0xED) hi = 0x9F;  // no surrogates
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    len = 4;
    cp = b0 & 0x07;
    if (b0 == 0xF0) lo = 0x90;
    if (b0 == 0xF4) hi = 0x8F;
  } else {
    return {kInvalidCodePoint, 1};
  }
  for (uint32_t i = 1; i < len; ++i) {
    if (i >= avail) return {kInvalidCodePoint, i};
    unsigned char b = p[i];
    if (b < lo || b > hi) return {kInvalidCodePoint, i};  // maximal subpart ends before b
    lo = 0x80;
    hi = 0xBF;
    cp = (cp << 6) | (b & 0x3F);
  }
  return {cp, len};
}

uint8_t ClassOfNonAscii(uint32_t cp) {
  if (cp == kInvalidCodePoint) return 0;
  if (cp == 0x85) return kClassSpace;
  uint8_t cls = 0;
  switch (u_charType(static_cast<UChar32>(cp))) {
    case U_UPPERCASE_LETTER:
    case U_LOWERCASE_LETTER:
    case U_TITLECASE_LETTER:
    case U_MODIFIER_LETTER:
    case U_OTHER_LETTER:
      cls = kClassLetter;
      break;
    case U_DECIMAL_DIGIT_NUMBER:
    case U_LETTER_NUMBER:
    case U_OTHER_NUMBER:
      cls = kClassNumber;
      break;
    case U_SPACE_SEPARATOR:
    case U_LINE_SEPARATOR:
    case U_PARAGRAPH_SEPARATOR:
      return kClassSpace;
    default:
      break;
  }
  if (cls == kClassLetter && IsCjkScript(cp)) cls |= kClassCjk;
  return cls;
}

bool IsValidUtf8(std::string_view s) {
  for (size_t i = 0; i < s.size();) {
    if (static_cast<unsigned char>(s[i]) < 0x80) {
      ++i;
      continue;
    }
    DecodedChar c = DecodeUtf8(s, i);
    if (c.cp == kInvalidCodePoint) return false;
    i += c.len;
  }
  return true;
}

static_assert(std::endian::native == std::endian::little, "a loaded word's low byte comes first");

bool TriviallyNfc(std::string_view s) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  for (size_t i = 0; i < s.size();) {
    // A byte below 0xCC is ASCII, a continuation byte, or the lead byte of a code point below
    // U+0300; any other starts a character (or an invalid sequence, which AppendNfc keeps).
    // Eight bytes at a time: a byte is >= 0xCC when its high bit is set and its low seven bits
    // plus 0x34 carry into the high bit (no carry crosses a byte).
    if (i + 8 <= s.size()) {
      uint64_t w;
      std::memcpy(&w, p + i, 8);
      constexpr uint64_t kLow7 = 0x7F7F7F7F7F7F7F7Full, kHigh = 0x8080808080808080ull;
      const uint64_t ge_cc = ((w & kLow7) + 0x3434343434343434ull) & w & kHigh;
      if (ge_cc == 0) {
        i += 8;
        continue;
      }
      i += static_cast<size_t>(std::countr_zero(ge_cc)) / 8;  // the first such byte
    } else if (p[i] < 0xCC) {
      ++i;
      continue;
    }
    const DecodedChar c = DecodeUtf8(s, i);
    if (c.cp != kInvalidCodePoint && (c.cp >= kNfcTableEnd || !IsNfcYesStarter(c.cp))) return false;
    i += c.len;
  }
  return true;
}

void AppendNfc(std::string_view s, std::string* out) {
  UErrorCode status = U_ZERO_ERROR;
  const icu::Normalizer2* nfc = icu::Normalizer2::getNFCInstance(status);
  if (U_FAILURE(status)) {  // ICU data missing: cannot happen with a linked libicudata
    out->append(s);
    return;
  }
  icu::StringByteSink<std::string> sink(out);
  auto append_valid = [&](std::string_view run) {
    if (run.empty()) return;
    UErrorCode st = U_ZERO_ERROR;
    icu::StringPiece piece(run.data(), static_cast<int32_t>(run.size()));
    if (nfc->isNormalizedUTF8(piece, st) && U_SUCCESS(st)) {
      out->append(run);
      return;
    }
    st = U_ZERO_ERROR;
    size_t before = out->size();
    nfc->normalizeUTF8(0, piece, sink, nullptr, st);
    if (U_FAILURE(st)) {
      out->resize(before);
      out->append(run);
    }
  };
  size_t run_start = 0;
  for (size_t i = 0; i < s.size();) {
    if (static_cast<unsigned char>(s[i]) < 0x80) {
      ++i;
      continue;
    }
    DecodedChar c = DecodeUtf8(s, i);
    if (c.cp == kInvalidCodePoint) {
      append_valid(s.substr(run_start, i - run_start));
      out->append(s.substr(i, c.len));
      run_start = i + c.len;
    }
    i += c.len;
  }
  append_valid(s.substr(run_start));
}

}  // namespace llmtap::tokenizer
