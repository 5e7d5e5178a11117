#include "sim/text.h"

#include <set>
#include <string>

#include <gtest/gtest.h>

namespace llmtap::sim {
namespace {

std::vector<std::string> Pieces(std::string_view text) {
  std::vector<uint32_t> offsets;
  ApproxTokenize(text, nullptr, &offsets);
  std::vector<std::string> out;
  for (size_t i = 0; i < offsets.size(); ++i) {
    const size_t end = i + 1 < offsets.size() ? offsets[i + 1] : text.size();
    out.emplace_back(text.substr(offsets[i], end - offsets[i]));
  }
  return out;
}

TEST(ApproxTokenize, WordsTakeTheirLeadingSpace) {
  EXPECT_EQ(Pieces("Hello world, again!"),
            (std::vector<std::string>{"Hello", " world", ",", " again", "!"}));
}

TEST(ApproxTokenize, LongWordsNumbersWhitespaceAndMarkers) {
  EXPECT_EQ(Pieces("internationalization 1234567"),
            (std::vector<std::string>{"intern", "ationa", "lizati", "on", " 123", "456", "7"}));
  EXPECT_EQ(Pieces("a\n\n    b"), (std::vector<std::string>{"a", "\n\n   ", " b"}));
  EXPECT_EQ(Pieces("<|im_start|>user"), (std::vector<std::string>{"<|im_start|>", "user"}));
  EXPECT_EQ(Pieces("<|not a marker"), (std::vector<std::string>{"<", "|", "not", " a", " marker"}));
}

TEST(ApproxTokenize, NeverSplitsUtf8) {
  const std::string text = "ééééééé 日本語のテキスト";
  for (const std::string& piece : Pieces(text)) {
    ASSERT_FALSE(piece.empty());
    EXPECT_NE(static_cast<unsigned char>(piece[0]) & 0xC0, 0x80) << piece;
  }
}

TEST(ApproxTokenize, EqualPiecesHashEqual) {
  std::vector<uint64_t> hashes;
  ApproxTokenize("the cat and the cat", &hashes, nullptr);
  ASSERT_EQ(hashes.size(), 5u);
  EXPECT_EQ(hashes[1], hashes[4]);  // " cat"
  EXPECT_NE(hashes[0], hashes[3]);  // "the" vs " the"
  EXPECT_EQ(CountApproxTokens("the cat and the cat"), 5u);
}

TEST(ApproxTokenize, EnglishProseIsAboutFourToSixBytesPerToken) {
  const std::string prose =
      "The quick brown fox jumps over the lazy dog. Speculative decoding lets a small draft "
      "propose several tokens that the large model then verifies in a single forward pass.";
  const double bytes_per_token =
      static_cast<double>(prose.size()) / static_cast<double>(CountApproxTokens(prose));
  EXPECT_GT(bytes_per_token, 4.0);
  EXPECT_LT(bytes_per_token, 6.5);
}

TEST(Vocab, WordsAreDistinctSingleTokens) {
  std::set<std::string> seen;
  for (size_t i = 0; i < kVocabSize; ++i) {
    const std::string w(VocabWord(i));
    EXPECT_TRUE(seen.insert(w).second) << w;
    EXPECT_EQ(CountApproxTokens(" " + w), 1u) << w;
  }
}

TEST(Json, Escapes) {
  std::string out;
  AppendJsonEscaped(&out, std::string("a\"b\\c\nd\te\x01 é", 13));
  EXPECT_EQ(out, "a\\\"b\\\\c\\nd\\te\\u0001 é");
  out.clear();
  AppendUint(&out, 0);
  AppendUint(&out, 18446744073709551615ull);
  EXPECT_EQ(out, "018446744073709551615");
}

}  // namespace
}  // namespace llmtap::sim
