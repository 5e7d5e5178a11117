#include "tokenizer/builtin.h"

#include <algorithm>
#include <cmath>

#include "tokenizer/chat.h"
#include "tokenizer/pretokenizer.h"
#include "tokenizer/unicode.h"

namespace llmtap::tokenizer {
namespace {

// Length model constants (tokens per unit), fitted on the exactness corpus against the
// Llama-3 and Qwen3 tokenizers; see the error figures in builtin.h.
constexpr double kAsciiWordFreeLetters = 7;  // an ASCII word up to this long is one token
constexpr double kAsciiLettersPerToken = 4;  // beyond that
constexpr double kCjkTokensPerChar = 1.0;
constexpr double kOtherLetterBytesPerToken = 3.0;  // accented Latin, Cyrillic, Arabic, ...
constexpr double kDigitsPerToken = 3;
constexpr double kAsciiPunctPerToken = 2;
constexpr double kSymbolBytesPerToken = 2.5;  // emoji and other non-ASCII symbols
constexpr double kSpacesPerToken = 8;

uint32_t HashId(std::string_view s, uint32_t salt) {
  uint64_t h = 1469598103934665603ull ^ salt;
  for (char c : s) {
    h ^= static_cast<unsigned char>(c);
    h *= 1099511628211ull;
  }
  return static_cast<uint32_t>((h ^ (h >> 31)) & 0x7FFFFFFF);
}

// Estimated tokens of one pre-tokenized piece.
size_t EstimateTokens(std::string_view piece) {
  double ascii_letters = 0, cjk = 0, other_letter_bytes = 0, digits = 0, punct = 0,
         symbol_bytes = 0, spaces = 0;
  for (size_t i = 0; i < piece.size();) {
    DecodedChar c = DecodeUtf8(piece, i);
    uint8_t cls = ClassOf(c.cp);
    if (cls & kClassSpace) {
      spaces += 1;
    } else if (cls & kClassLetter) {
      if (c.cp < 128) {
        ascii_letters += 1;
      } else if (cls & kClassCjk) {
        cjk += 1;
      } else {
        other_letter_bytes += c.len;
      }
    } else if (cls & kClassNumber) {
      digits += 1;
    } else if (c.cp < 128) {
      punct += 1;
    } else {
      symbol_bytes += c.len;
    }
    i += c.len;
  }
  double t = 0;
  if (ascii_letters > 0) {
    t += 1 + std::max(0.0, ascii_letters - kAsciiWordFreeLetters) / kAsciiLettersPerToken;
    spaces = 0;                 // a leading space belongs to the word's token
    if (punct == 1) punct = 0;  // so does one leading punctuation character
  }
  t += cjk * kCjkTokensPerChar + other_letter_bytes / kOtherLetterBytesPerToken;
  t += std::ceil(digits / kDigitsPerToken);
  t += std::ceil(punct / kAsciiPunctPerToken) + symbol_bytes / kSymbolBytesPerToken;
  if (spaces > 0) t += std::ceil(spaces / kSpacesPerToken);
  return std::max<size_t>(1, static_cast<size_t>(std::lround(t)));
}

class BuiltinTokenizer final : public Tokenizer {
 public:
  void Encode(std::string_view text, std::vector<uint32_t>* ids) const override {
    size_t pos = 0;
    while (pos < text.size()) {
      // `<|name|>` markers (the special tokens chat templates insert) are one token.
      size_t open = text.find("<|", pos);
      size_t close = open == std::string_view::npos ? open : text.find("|>", open + 2);
      bool marker = close != std::string_view::npos && close - open <= 64 &&
                    std::all_of(text.begin() + open + 2, text.begin() + close, [](char c) {
                      return std::isalnum(static_cast<unsigned char>(c)) || c == '_';
                    });
      size_t seg_end = marker ? open : text.size();
      EncodeSegment(text.substr(pos, seg_end - pos), ids);
      if (!marker) break;
      ids->push_back(HashId(text.substr(open, close + 2 - open), 0));
      pos = close + 2;
    }
  }

  std::string Decode(std::span<const uint32_t>) const override { return {}; }

  bool EncodeRequest(std::string_view body_json, std::vector<uint32_t>* ids,
                     std::string* error) const override {
    static const ChatStyle kStyle = [] {
      ChatStyle style;
      style.family = ChatFamily::kChatMl;
      style.thinking = true;
      return style;
    }();
    return EncodeRequestBody(*this, kStyle, PromptSpecials(), body_json, ids, error);
  }

  std::string Describe() const override {
    return "builtin: approximate token counts (Llama-3 pre-tokenizer + length model), hashed ids";
  }

 private:
  static void EncodeSegment(std::string_view text, std::vector<uint32_t>* ids) {
    if (text.empty()) return;
    thread_local std::vector<uint32_t> ends;
    ends.clear();
    PreTokenize(SplitPattern::kLlama3, text, &ends);
    uint32_t begin = 0;
    for (uint32_t end : ends) {
      std::string_view piece = text.substr(begin, end - begin);
      begin = end;
      size_t k = std::min(EstimateTokens(piece), piece.size());
      // k slices of about equal length, each hashed with its index: equal pieces give equal ids.
      for (size_t s = 0; s < k; ++s) {
        size_t a = piece.size() * s / k, b = piece.size() * (s + 1) / k;
        ids->push_back(HashId(piece.substr(a, b - a), static_cast<uint32_t>(s + 1)));
      }
    }
  }
};

}  // namespace

std::unique_ptr<Tokenizer> MakeBuiltinTokenizer() { return std::make_unique<BuiltinTokenizer>(); }

}  // namespace llmtap::tokenizer
