#include "tokenizer/pretokenizer.h"

#include <algorithm>
#include <array>
#include <bit>
#include <cstring>

#include "tokenizer/unicode.h"

namespace llmtap::tokenizer {
namespace {

constexpr std::string_view kGpt2Regex =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
constexpr std::string_view kLlama3Regex =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr std::string_view kQwen2Regex =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

// The text decoded once: per character (n of them) its class and byte offset (offs[n] is the
// text's size; cls has kClassPadding entries past n, so that runs of classes can be scanned
// eight at a time). Reused per thread so that splitting allocates nothing; the arrays only grow
// (sized for the longest text yet, which also spares zeroing them per text).
constexpr size_t kClassPadding = 8;
struct Decoded {
  std::string_view text;
  std::vector<uint8_t> cls;
  std::vector<uint32_t> offs;
  size_t n = 0;
};

// Two more class bits, of two ASCII characters the patterns name (the code points themselves
// are read from the text only after an apostrophe).
constexpr uint8_t kClassApostrophe = 32;
constexpr uint8_t kClassAsciiSpace = 64;  // ' ' itself
constexpr std::array<uint8_t, 128> MakePieceClasses() {
  std::array<uint8_t, 128> t = kAsciiClasses;
  t['\''] |= kClassApostrophe;
  t[' '] |= kClassAsciiSpace;
  return t;
}
constexpr std::array<uint8_t, 128> kPieceClasses = MakePieceClasses();
static_assert(((kClassLetter | kClassNumber | kClassSpace | kClassLineBreak | kClassCjk) &
               (kClassApostrophe | kClassAsciiSpace)) == 0);

uint32_t CodePointAt(const Decoded& d, size_t k) {
  const auto b = static_cast<unsigned char>(d.text[d.offs[k]]);
  return b < 0x80 ? b : DecodeUtf8(d.text, d.offs[k]).cp;
}

uint64_t Load64(const void* p) {
  uint64_t w;
  std::memcpy(&w, p, 8);
  return w;
}
constexpr uint64_t kEachByte = 0x0101010101010101ull;
constexpr uint64_t kHighBits = 0x8080808080808080ull;
static_assert(std::endian::native == std::endian::little, "a loaded word's low byte comes first");

void Decode(std::string_view text, Decoded* d) {
  // At most one character per byte.
  if (d->offs.size() < text.size() + 1) {
    d->cls.resize(text.size() + kClassPadding);
    d->offs.resize(text.size() + 1);
  }
  d->text = text;
  const auto* p = reinterpret_cast<const unsigned char*>(text.data());
  uint8_t* cls = d->cls.data();
  uint32_t* offs = d->offs.data();
  size_t n = 0;
  for (size_t i = 0; i < text.size();) {
    if (i + 8 <= text.size() && (Load64(p + i) & kHighBits) == 0) {  // eight ASCII characters
      for (size_t k = 0; k < 8; ++k) {
        cls[n + k] = kPieceClasses[p[i + k]];
        offs[n + k] = static_cast<uint32_t>(i + k);
      }
      n += 8;
      i += 8;
      continue;
    }
    const unsigned char b = p[i];
    if (b < 0x80) {
      cls[n] = kPieceClasses[b];
      offs[n] = static_cast<uint32_t>(i);
      ++n;
      ++i;
      continue;
    }
    DecodedChar c = DecodeUtf8(text, i);
    cls[n] = ClassOf(c.cp);
    offs[n] = static_cast<uint32_t>(i);
    ++n;
    i += c.len;
  }
  offs[n] = static_cast<uint32_t>(text.size());
  d->n = n;
}

// The first k in [j, n) whose class has one of `bits` (kAny) or none of them (!kAny); n when
// there is none. Eight classes at a time: a byte's masked class (below 0x80) plus 0x7F sets
// its high bit exactly when it is nonzero, with no carry into the next byte.
template <bool kAny>
size_t FindClass(const Decoded& d, size_t j, size_t n, uint8_t bits) {
  const uint8_t* cls = d.cls.data();
  for (; j < n; j += 8) {
    uint64_t hit = ((Load64(cls + j) & (kEachByte * bits)) + kEachByte * 0x7F) & kHighBits;
    if (!kAny) hit ^= kHighBits;
    if (hit != 0) return std::min(n, j + static_cast<size_t>(std::countr_zero(hit)) / 8);
  }
  return n;
}

// Oniguruma's case-insensitive match of an ASCII letter: its two cases, plus U+017F (long s),
// whose case folding is 's'.
uint32_t FoldForContraction(uint32_t cp) {
  if (cp >= 'A' && cp <= 'Z') return cp + ('a' - 'A');
  if (cp == 0x17F) return 's';
  return cp;
}

// Length (in characters) of the contraction starting at i ('s 't 're 've 'm 'll 'd), or 0.
size_t Contraction(const Decoded& d, size_t i, bool ignore_case) {
  size_t n = d.n;
  if (!(d.cls[i] & kClassApostrophe) || i + 1 >= n) return 0;
  auto at = [&](size_t k) {
    return ignore_case ? FoldForContraction(CodePointAt(d, k)) : CodePointAt(d, k);
  };
  uint32_t c1 = at(i + 1);
  if (c1 == 's' || c1 == 't' || c1 == 'm' || c1 == 'd') return 2;
  if (i + 2 >= n) return 0;
  uint32_t c2 = at(i + 2);
  if ((c1 == 'r' && c2 == 'e') || (c1 == 'v' && c2 == 'e') || (c1 == 'l' && c2 == 'l')) return 3;
  return 0;
}

constexpr uint8_t kLetterOrNumber = kClassLetter | kClassNumber;
constexpr uint8_t kWordOrSpace = kClassLetter | kClassNumber | kClassSpace;

// The whitespace alternatives shared by every pattern, at a whitespace character i:
//   [\s*[\r\n]+]   (Llama-3/Qwen only) the run up to and including its last line break;
//   \s+(?!\S)      the run minus its last character when a non-space follows it;
//   \s+            the whole run (a run of one before a non-space).
size_t MatchSpace(const Decoded& d, size_t i, bool line_break_alternative) {
  size_t n = d.n;
  size_t j = i;
  size_t last_break = n;
  while (j < n && (d.cls[j] & kClassSpace)) {
    if (d.cls[j] & kClassLineBreak) last_break = j;
    ++j;
  }
  if (line_break_alternative && last_break != n) return last_break + 1;
  if (j == n) return j;
  return j - 1 > i ? j - 1 : j;
}

size_t MatchLlama3(const Decoded& d, size_t i, size_t max_digits) {
  size_t n = d.n;
  // (?i:'s|'t|'re|'ve|'m|'ll|'d)
  if (d.cls[i] & kClassApostrophe) {
    if (size_t c = Contraction(d, i, /*ignore_case=*/true)) return i + c;
  }
  uint8_t cls = d.cls[i];
  // [^\r\n\p{L}\p{N}]?\p{L}+
  if (!(cls & (kLetterOrNumber | kClassLineBreak)) && i + 1 < n && (d.cls[i + 1] & kClassLetter)) {
    return FindClass<false>(d, i + 2, n, kClassLetter);
  }
  if (cls & kClassLetter) return FindClass<false>(d, i + 1, n, kClassLetter);
  // \p{N}{1,3} (Llama-3) or \p{N} (Qwen)
  if (cls & kClassNumber) {
    size_t j = i + 1;
    while (j < n && j - i < max_digits && (d.cls[j] & kClassNumber)) ++j;
    return j;
  }
  //  ?[^\s\p{L}\p{N}]+[\r\n]*
  size_t j = i;
  if ((d.cls[i] & kClassAsciiSpace) && i + 1 < n && !(d.cls[i + 1] & kWordOrSpace)) j = i + 1;
  if (!(d.cls[j] & kWordOrSpace)) {
    j = FindClass<true>(d, j + 1, n, kWordOrSpace);
    while (j < n && (d.cls[j] & kClassLineBreak)) ++j;
    return j;
  }
  // \s*[\r\n]+|\s+(?!\S)|\s+ (i is whitespace: every other class matched above)
  return MatchSpace(d, i, /*line_break_alternative=*/true);
}

size_t MatchGpt2(const Decoded& d, size_t i) {
  size_t n = d.n;
  if (d.cls[i] & kClassApostrophe) {
    if (size_t c = Contraction(d, i, /*ignore_case=*/false)) return i + c;
  }
  //  ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+ : an optional space, then a run of one class
  size_t j = i;
  if ((d.cls[i] & kClassAsciiSpace) && i + 1 < n && !(d.cls[i + 1] & kClassSpace)) j = i + 1;
  uint8_t cls = d.cls[j];
  if (cls & kClassLetter) return FindClass<false>(d, j + 1, n, kClassLetter);
  if (cls & kClassNumber) return FindClass<false>(d, j + 1, n, kClassNumber);
  if (!(cls & kWordOrSpace)) return FindClass<true>(d, j + 1, n, kWordOrSpace);
  return MatchSpace(d, i, /*line_break_alternative=*/false);
}

}  // namespace

std::optional<SplitPattern> RecognizeSplitRegex(std::string_view regex) {
  if (regex == kGpt2Regex) return SplitPattern::kGpt2;
  if (regex == kLlama3Regex) return SplitPattern::kLlama3;
  if (regex == kQwen2Regex) return SplitPattern::kQwen2;
  return std::nullopt;
}

std::string_view SplitRegexSource(SplitPattern pattern) {
  switch (pattern) {
    case SplitPattern::kGpt2:
      return kGpt2Regex;
    case SplitPattern::kLlama3:
      return kLlama3Regex;
    case SplitPattern::kQwen2:
      return kQwen2Regex;
  }
  return {};
}

void PreTokenize(SplitPattern pattern, std::string_view text, std::vector<uint32_t>* ends) {
  thread_local Decoded d;
  Decode(text, &d);
  size_t n = d.n;
  for (size_t i = 0; i < n;) {
    size_t j;
    switch (pattern) {
      case SplitPattern::kGpt2:
        j = MatchGpt2(d, i);
        break;
      case SplitPattern::kLlama3:
        j = MatchLlama3(d, i, 3);
        break;
      case SplitPattern::kQwen2:
      default:
        j = MatchLlama3(d, i, 1);
        break;
    }
    ends->push_back(d.offs[j]);
    i = j;
  }
}

}  // namespace llmtap::tokenizer
