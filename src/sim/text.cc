#include "sim/text.h"

#include <array>
#include <cstring>

namespace llmtap::sim {

uint64_t HashBytes(std::string_view bytes, uint64_t seed) {
  // Eight bytes at a time (tokens are short: usually one word), each word folded in with a
  // multiply and a rotate, then one full mix.
  uint64_t h = 0xcbf29ce484222325ULL ^ seed ^ (bytes.size() * 0x9e3779b97f4a7c15ULL);
  const char* p = bytes.data();
  size_t n = bytes.size();
  while (n >= 8) {
    uint64_t w;
    std::memcpy(&w, p, 8);
    h = (h ^ w) * 0x100000001b3ULL;
    h = (h << 29) | (h >> 35);
    p += 8;
    n -= 8;
  }
  if (n > 0) {
    // A byte loop: a variable-length memcpy would be a library call per token.
    uint64_t w = 0;
    for (size_t i = 0; i < n; ++i)
      w |= static_cast<uint64_t>(static_cast<unsigned char>(p[i])) << (8 * i);
    h = (h ^ w) * 0x100000001b3ULL;
  }
  return Mix64(h);
}

namespace {

enum class Cls : uint8_t { kLetter, kDigit, kSpace, kOther };

constexpr std::array<Cls, 256> MakeClasses() {
  std::array<Cls, 256> t{};
  for (int c = 0; c < 256; ++c) {
    if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c >= 0x80) {
      t[c] = Cls::kLetter;
    } else if (c >= '0' && c <= '9') {
      t[c] = Cls::kDigit;
    } else if (c == ' ' || c == '\n' || c == '\t' || c == '\r' || c == '\f' || c == '\v') {
      t[c] = Cls::kSpace;
    } else {
      t[c] = Cls::kOther;
    }
  }
  return t;
}
constexpr std::array<Cls, 256> kClass = MakeClasses();

inline Cls ClassOf(char c) { return kClass[static_cast<unsigned char>(c)]; }
inline bool IsUtf8Continuation(char c) { return (static_cast<unsigned char>(c) & 0xC0) == 0x80; }

constexpr size_t kMaxLetterPiece = 6;
constexpr size_t kDigitGroup = 3;

// Calls emit(begin, end) for every approximate token of `text`, in order.
template <typename Emit>
void ForEachToken(std::string_view text, Emit&& emit) {
  const size_t n = text.size();
  size_t i = 0;
  while (i < n) {
    const Cls cls = ClassOf(text[i]);
    if (cls == Cls::kSpace) {
      size_t j = i;
      while (j < n && ClassOf(text[j]) == Cls::kSpace) ++j;
      // The last space of the run joins the word or number after it.
      if (j < n && text[j - 1] == ' ' &&
          (ClassOf(text[j]) == Cls::kLetter || ClassOf(text[j]) == Cls::kDigit)) {
        if (j - 1 > i) emit(i, j - 1);
        i = j - 1;
        // Fall through to the word with the space included.
        const Cls word = ClassOf(text[j]);
        size_t k = j;
        size_t limit = word == Cls::kLetter ? kMaxLetterPiece : kDigitGroup;
        while (k < n && ClassOf(text[k]) == word && k - j < limit) ++k;
        while (k < n && k > j && IsUtf8Continuation(text[k])) ++k;
        emit(i, k);
        i = k;
      } else {
        emit(i, j);
        i = j;
      }
      continue;
    }
    if (cls == Cls::kLetter || cls == Cls::kDigit) {
      const size_t limit = cls == Cls::kLetter ? kMaxLetterPiece : kDigitGroup;
      size_t k = i;
      while (k < n && ClassOf(text[k]) == cls && k - i < limit) ++k;
      while (k < n && IsUtf8Continuation(text[k])) ++k;
      emit(i, k);
      i = k;
      continue;
    }
    // `<|name|>`: one token.
    if (text[i] == '<' && i + 1 < n && text[i + 1] == '|') {
      size_t k = i + 2;
      while (k < n && k - i < 40 &&
             ((text[k] >= 'a' && text[k] <= 'z') || (text[k] >= 'A' && text[k] <= 'Z') ||
              text[k] == '_' || (text[k] >= '0' && text[k] <= '9'))) {
        ++k;
      }
      if (k + 1 < n && text[k] == '|' && text[k + 1] == '>') {
        emit(i, k + 2);
        i = k + 2;
        continue;
      }
    }
    emit(i, i + 1);
    ++i;
  }
}

}  // namespace

void ApproxTokenize(std::string_view text, std::vector<uint64_t>* hashes,
                    std::vector<uint32_t>* offsets) {
  ForEachToken(text, [&](size_t b, size_t e) {
    if (hashes != nullptr) hashes->push_back(HashBytes(text.substr(b, e - b)));
    if (offsets != nullptr) offsets->push_back(static_cast<uint32_t>(b));
  });
}

size_t CountApproxTokens(std::string_view text) {
  size_t count = 0;
  ForEachToken(text, [&](size_t, size_t) { ++count; });
  return count;
}

bool TokensStayApart(std::string_view a, std::string_view b) {
  thread_local std::string joined;
  joined.assign(a);
  joined.append(b);
  size_t count = 0;
  bool seam = a.empty() || b.empty();
  ForEachToken(joined, [&](size_t begin, size_t) {
    ++count;
    seam = seam || begin == a.size();
  });
  return seam && count == CountApproxTokens(a) + CountApproxTokens(b);
}

namespace {

struct Vocab {
  std::array<std::array<char, 8>, kVocabSize> words{};
  std::array<uint8_t, kVocabSize> lengths{};
  Vocab() {
    static constexpr char kConsonants[] = "bdfgklmnprstvz";
    static constexpr char kVowels[] = "aeiou";
    constexpr size_t kC = sizeof(kConsonants) - 1, kV = sizeof(kVowels) - 1;
    constexpr size_t kSyllables = kC * kV;  // 70
    auto syllable = [&](size_t s, char* out) {
      out[0] = kConsonants[s % kC];
      out[1] = kVowels[s / kC];
    };
    for (size_t i = 0; i < kVocabSize; ++i) {
      char* w = words[i].data();
      syllable(i % kSyllables, w);
      syllable((i / kSyllables) % kSyllables, w + 2);
      size_t len = 4;
      if (i % 4 == 0) {
        syllable((i * 7 + 3) % kSyllables, w + 4);
        len = 6;
      }
      lengths[i] = static_cast<uint8_t>(len);
    }
  }
};

const Vocab& GetVocab() {
  static const Vocab vocab;
  return vocab;
}

}  // namespace

std::string_view VocabWord(size_t i) {
  const Vocab& v = GetVocab();
  i %= kVocabSize;
  return {v.words[i].data(), v.lengths[i]};
}

void AppendUint(std::string* out, uint64_t v) {
  char buf[24];
  char* p = buf + sizeof(buf);
  do {
    *--p = static_cast<char>('0' + v % 10);
    v /= 10;
  } while (v != 0);
  out->append(p, static_cast<size_t>(buf + sizeof(buf) - p));
}

}  // namespace llmtap::sim
