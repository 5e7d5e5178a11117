// JsonCompactor's kernels exhaustively: UTF-8 sequences, generated and mutated bodies, truncations.
#include "capture/json_compact.h"
#include "capture/json_compact_internal.h"
#include "common/testing/alloc_counter.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <new>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>
#include "capture/json_compact_test_util.h"

namespace llmtap {

// Testing hooks defined in json_compact.cc: one fast path alone, without the reference
// fallback. Each appends and returns true when it accepts the body, else leaves *out alone.

namespace {

using json_compact_internal::HasAvx512Kernel;
using json_compact_internal::TryCompactAvx512ForTest;
using namespace json_compact_test_util;

std::string Bytes(std::initializer_list<int> bytes) {
  std::string s;
  for (int b : bytes) s += static_cast<char>(b);
  return s;
}

// ---------------------------------------------------------------------------------------------
// UTF-8: every 1..3-byte sequence and a broad set of 4-byte ones, against an independent
// decoder, at shifting offsets so they straddle block boundaries.

// Valid iff each character decodes by its bit pattern to a code point that needs exactly that
// many bytes, is at most U+10FFFF and is not a UTF-16 surrogate.
bool IndependentlyValidUtf8(std::string_view s) {
  for (size_t i = 0; i < s.size();) {
    const unsigned char b = static_cast<unsigned char>(s[i]);
    size_t extra;
    uint32_t cp;
    if (b < 0x80) {
      ++i;
      continue;
    } else if ((b & 0xE0) == 0xC0) {
      extra = 1;
      cp = b & 0x1F;
    } else if ((b & 0xF0) == 0xE0) {
      extra = 2;
      cp = b & 0x0F;
    } else if ((b & 0xF8) == 0xF0) {
      extra = 3;
      cp = b & 0x07;
    } else {
      return false;
    }
    for (size_t k = 1; k <= extra; ++k) {
      if (i + k >= s.size()) return false;
      const unsigned char c = static_cast<unsigned char>(s[i + k]);
      if ((c & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (c & 0x3F);
    }
    constexpr uint32_t kMin[] = {0, 0x80, 0x800, 0x10000};
    if (cp < kMin[extra] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return false;
    i += extra + 1;
  }
  return true;
}

// The bytes are safe inside a JSON string apart from UTF-8 (no quote, backslash or control).
bool JsonSafeBytes(std::string_view s) {
  for (char ch : s) {
    const unsigned char c = static_cast<unsigned char>(ch);
    if (c < 0x20 || c == '"' || c == '\\') return false;
  }
  return true;
}

void CheckUtf8Sequence(std::string_view seq, size_t offset, JsonCompactor& compactor,
                       int64_t* checked) {
  const std::string body = "{\"s\":\"" + std::string(offset, 'x') + std::string(seq) + "\"}";
  const Outcome ref = Reference(body);
  if (JsonSafeBytes(seq)) {
    ASSERT_EQ(ref.error == CompactError::kOk, IndependentlyValidUtf8(seq)) << Printable(seq);
  }
  if (HasAvx512Kernel()) {
    std::string fast;
    ASSERT_EQ(TryCompactAvx512ForTest(body, &fast), ref.error == CompactError::kOk)
        << Printable(seq) << " at offset " << offset;
  }
  std::string out;
  ASSERT_EQ(compactor.Compact(body, &out), ref.error) << Printable(seq);
  ++*checked;
}

// Every 2-byte sequence; every 3-byte sequence whose lead byte starts a 3-byte character
// (E0..EF), and after any other lead byte (C0..DF, F0..FF) a third byte from each class the
// decoder tells apart (control, ASCII, quote, backslash, DEL, the continuation ranges that
// bound overlongs and surrogates, each kind of lead byte, the bytes never valid).
TEST(Utf8Test, ExhaustiveUpToThreeBytesAndBroadFourBytes) {
  JsonCompactor compactor;
  int64_t checked = 0;
  size_t offset = 0;
  auto next_offset = [&offset] { return offset = (offset + 7) % 131; };
  constexpr int kThirdByteClasses[] = {0x00, 0x1F, 0x20, 0x22, 0x41, 0x5C, 0x7F, 0x80,
                                       0x8F, 0x90, 0x9F, 0xA0, 0xBF, 0xC0, 0xC1, 0xC2,
                                       0xDF, 0xE0, 0xED, 0xEF, 0xF0, 0xF4, 0xF5, 0xFF};
  for (int a = 0x20; a < 0x100; ++a) {
    for (int b = 0; b < 0x100; ++b) {
      CheckUtf8Sequence(Bytes({a, b}), next_offset(), compactor, &checked);
      if (a < 0xC0) continue;  // 3-byte sequences starting with a lead byte
      if (a >= 0xE0 && a <= 0xEF) {
        for (int c = 0; c < 0x100; ++c) {
          CheckUtf8Sequence(Bytes({a, b, c}), next_offset(), compactor, &checked);
        }
      } else {
        for (int c : kThirdByteClasses) {
          CheckUtf8Sequence(Bytes({a, b, c}), next_offset(), compactor, &checked);
        }
      }
    }
  }
  for (int a = 0xF0; a < 0x100; ++a) {
    for (int b = 0x70; b < 0xD0; ++b) {
      for (int c : {0x41, 0x80, 0x9F, 0xA0, 0xBF, 0xC0}) {
        for (int d : {0x41, 0x80, 0x8F, 0x90, 0xBF, 0xC0, 0xF0}) {
          CheckUtf8Sequence(Bytes({a, b, c, d}), next_offset(), compactor, &checked);
        }
      }
    }
  }
  EXPECT_GT(checked, 1400000);
}

// ---------------------------------------------------------------------------------------------
// Differential test: fast paths against the reference on generated and mutated bodies.

class BodyGenerator {
 public:
  explicit BodyGenerator(uint64_t seed) : rng_(seed) {}

  size_t Below(size_t n) { return std::uniform_int_distribution<size_t>(0, n - 1)(rng_); }
  bool OneIn(size_t n) { return Below(n) == 0; }

  // A valid request-like object.
  std::string Body() {
    // Appends one piece at a time: GCC 12 warns (-Wrestrict) on "literal" + std::string&&.
    std::string s = Ws();
    s += '{';
    s += Ws();
    const size_t members = 1 + Below(8);
    for (size_t i = 0; i < members; ++i) {
      if (i > 0) s += Comma();
      s += Member(1);
    }
    s += '}';
    s += Ws();
    return s;
  }

  std::string Mutate(std::string s) {
    const size_t mutations = 1 + Below(3);
    for (size_t m = 0; m < mutations && !s.empty(); ++m) {
      const size_t at = Below(s.size());
      switch (Below(6)) {
        case 0:
          s.resize(at);  // truncate
          break;
        case 1:
          s[at] = SpecialByte();
          break;
        case 2:
          s.insert(at, 1, SpecialByte());
          break;
        case 3:
          s.erase(at, 1);
          break;
        case 4:
          s.insert(at, std::string(1 + Below(3), " \t\r\n"[Below(4)]));
          break;
        default:
          s.insert(at, s.substr(Below(s.size()), Below(8)));
          break;
      }
    }
    return s;
  }

 private:
  std::string Comma() {
    std::string s = ",";
    s += Ws();
    return s;
  }

  // "key" : value, with whitespace around.
  std::string Member(int depth) {
    std::string s = Key();
    s += Ws();
    s += ':';
    s += Ws();
    s += Value(depth);
    s += Ws();
    return s;
  }

  std::string Ws() {
    if (!OneIn(3)) return "";
    std::string s;
    for (size_t n = Below(4); n > 0; --n) s += " \t\r\n"[Below(4)];
    if (OneIn(20)) s += std::string(Below(100), ' ');
    return s;
  }

  char SpecialByte() {
    using std::string_literals::operator""s;
    static const std::string kBytes =
        "\"\\{}[],: \n\t0-1eE.+utfnlx/dD8cAg\x00\x1f\x7f\x80\xbf\xc3\xe4\xed\xf0\xf4\xff"s;
    return kBytes[Below(kBytes.size())];
  }

  std::string Key() {
    static const char* const kKeys[] = {"model", "messages",   "role", "content", "",
                                        "tools", "max_tokens", "a b",  "\\u00e9", "k\\\"q"};
    return std::string("\"") + kKeys[Below(std::size(kKeys))] + "\"";
  }

  std::string String() {
    static const char* const kPieces[] = {"hello",
                                          " ",
                                          "\\n",
                                          "\\\"",
                                          "\\\\",
                                          "\\/",
                                          "\\t",
                                          "\\u00e9",
                                          "\\uD83D\\uDE00",
                                          "\\ud83d\\ude00",
                                          "\\u0000",
                                          "\xc3\xa9",
                                          "\xe4\xb8\xad\xe6\x96\x87",
                                          "\xf0\x9f\x98\x80",
                                          "\\\\\\\"",
                                          "\\\\\\\\",
                                          "{",
                                          "}",
                                          "[",
                                          "]",
                                          ",",
                                          ":",
                                          "\x7f",
                                          "'",
                                          "//",
                                          "\\ud55c",
                                          "\\uDBFF\\uDFFF",
                                          "\\uabcd",
                                          "\\uFFFF",
                                          "\\u4f60\\u597d\\u4e16\\u754c"};
    std::string s = "\"";
    const size_t pieces = Below(12);
    for (size_t i = 0; i < pieces; ++i) {
      if (OneIn(6)) {
        s += std::string(Below(150), "ab xyz"[Below(6)]);
      } else {
        s += kPieces[Below(std::size(kPieces))];
      }
    }
    return s + "\"";
  }

  std::string Number() {
    static const char* const kNumbers[] = {"0",
                                           "-0",
                                           "1",
                                           "42",
                                           "-17",
                                           "3.14159",
                                           "1e10",
                                           "1E+2",
                                           "-2.5e-3",
                                           "0.0",
                                           "100",
                                           "1e400",
                                           "-1e400",
                                           "1e-400",
                                           "123456789012345678901234567890",
                                           "18446744073709551615",
                                           "18446744073709551616",
                                           "-9223372036854775808",
                                           "0.1e1"};
    return kNumbers[Below(std::size(kNumbers))];
  }

  std::string Value(int depth) {
    const size_t kind = Below(depth > 6 ? 4 : 7);
    switch (kind) {
      case 0:
      case 1:
        return String();
      case 2:
        return Number();
      case 3: {
        static const char* const kLiterals[] = {"true", "false", "null"};
        return kLiterals[Below(3)];
      }
      case 4:
      case 5: {
        std::string s = "[";
        s += Ws();
        const size_t n = Below(5);
        for (size_t i = 0; i < n; ++i) {
          if (i > 0) s += Comma();
          s += Value(depth + 1);
          s += Ws();
        }
        return s + "]";
      }
      default: {
        std::string s = "{";
        s += Ws();
        const size_t n = Below(5);
        for (size_t i = 0; i < n; ++i) {
          if (i > 0) s += Comma();
          s += Member(depth + 1);
        }
        return s + "}";
      }
    }
  }

  std::mt19937_64 rng_;
};

TEST(DifferentialTest, FastPathsMatchReferenceOnGeneratedBodies) {
  BodyGenerator gen(20240601);
  JsonCompactor compactor;
  std::map<CompactError, int> outcomes;
  for (int i = 0; i < 6000; ++i) {
    std::string body = gen.Body();
    if (i % 2 == 1) body = gen.Mutate(body);
    if (gen.OneIn(4)) body = std::string(gen.Below(64), ' ') + body;  // shift block alignment
    ++outcomes[CheckAllPathsAgree(body, compactor).error];
    if (::testing::Test::HasFailure()) break;
  }
  // The generator must exercise both sides.
  EXPECT_GT(outcomes[CompactError::kOk], 3000);
  EXPECT_GT(outcomes[CompactError::kInvalidJson], 1500);
}

TEST(DifferentialTest, FastPathsMatchReferenceOnMutatedCorpus) {
  BodyGenerator gen(7);
  JsonCompactor compactor;
  std::vector<std::string> bodies;
  for (const auto& [name, outcome] : ReadManifest()) {
    if (outcome == "ok") bodies.push_back(ReadFile(CorpusDir() / name));
  }
  ASSERT_FALSE(bodies.empty());
  int ok = 0;
  for (int i = 0; i < 4000; ++i) {
    const std::string body = gen.Mutate(bodies[gen.Below(bodies.size())]);
    ok += CheckAllPathsAgree(body, compactor).error == CompactError::kOk;
    if (::testing::Test::HasFailure()) break;
  }
  EXPECT_GT(ok, 100);
}

TEST(DifferentialTest, EveryTruncationOfTheCorpus) {
  JsonCompactor compactor;
  for (const auto& [name, outcome] : ReadManifest()) {
    if (outcome != "ok") continue;
    const std::string body = ReadFile(CorpusDir() / name);
    SCOPED_TRACE(name);
    for (size_t len = 0; len < body.size() && len < 3000; ++len) {
      const Outcome ref = CheckAllPathsAgree(std::string_view(body).substr(0, len), compactor);
      // A prefix of an object is never complete, except after trailing whitespace is cut.
      if (ref.error == CompactError::kOk) {
        EXPECT_EQ(StripInsignificantWhitespace(body.substr(0, len)),
                  StripInsignificantWhitespace(body));
      }
      if (::testing::Test::HasFailure()) return;
    }
  }
}

}  // namespace
}  // namespace llmtap
