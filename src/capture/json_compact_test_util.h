// Shared by the JsonCompactor tests: the reference outcome, every path checked against it, the
// corpus.
#pragma once

#include "capture/json_compact.h"
#include "capture/json_compact_internal.h"
#include "common/testing/alloc_counter.h"
#include "common/testing/temp_files.h"

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

namespace llmtap::json_compact_test_util {

using json_compact_internal::HasAvx512Kernel;
using json_compact_internal::TryCompactAvx512ForTest;
using json_compact_internal::TryCompactSimdjsonForTest;

inline constexpr size_t kMiB = 1 << 20;

// Makes test names and failure messages readable: control and non-ASCII bytes as \xNN.
inline std::string Printable(std::string_view s, size_t max = 160) {
  std::string out;
  for (size_t i = 0; i < s.size() && i < max; ++i) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    if (c < 0x20 || c >= 0x7f) {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "\\x%02x", c);
      out += buf;
    } else {
      out += static_cast<char>(c);
    }
  }
  if (s.size() > max) out += "...(" + std::to_string(s.size()) + " bytes)";
  return out;
}

// Independent of the implementation: drops ' ', \t, \r, \n outside strings, tracking strings
// by unescaped quotes. Only meaningful for valid JSON.
inline std::string StripInsignificantWhitespace(std::string_view s) {
  std::string out;
  bool in_string = false;
  bool escaped = false;
  for (char c : s) {
    if (in_string) {
      out += c;
      if (escaped) {
        escaped = false;
      } else if (c == '\\') {
        escaped = true;
      } else if (c == '"') {
        in_string = false;
      }
    } else if (c != ' ' && c != '\t' && c != '\r' && c != '\n') {
      out += c;
      in_string = c == '"';
    }
  }
  return out;
}

inline bool HasControlByte(std::string_view s) {
  for (char c : s) {
    if (static_cast<unsigned char>(c) < 0x20) return true;
  }
  return false;
}

struct Outcome {
  CompactError error;
  std::string out;
};

inline Outcome Reference(std::string_view body) {
  Outcome o{CompactError::kOk, ""};
  o.error = CompactJsonReference(body, &o.out);
  return o;
}

// Checks every implementation against the reference on `body` and returns the reference's
// outcome. `compactor` is reused across calls on purpose (its buffers carry over).
inline Outcome CheckAllPathsAgree(std::string_view body, JsonCompactor& compactor) {
  SCOPED_TRACE("body: " + Printable(body));
  const Outcome ref = Reference(body);
  if (ref.error == CompactError::kOk) {
    EXPECT_EQ(ref.out, StripInsignificantWhitespace(body));
    EXPECT_FALSE(HasControlByte(ref.out));
  } else {
    EXPECT_EQ(ref.out, "");
  }

  std::string out;
  EXPECT_EQ(compactor.Compact(body, &out), ref.error);
  EXPECT_EQ(out, ref.out);

  if (HasAvx512Kernel()) {
    std::string fast;
    const bool accepted = TryCompactAvx512ForTest(body, &fast);
    EXPECT_EQ(accepted, ref.error == CompactError::kOk);
    EXPECT_EQ(fast, ref.out);
  }

  // The simdjson path may reject valid bodies (numbers it cannot represent; Compact then
  // falls back to the reference), but must never accept an invalid one.
  std::string simd;
  if (TryCompactSimdjsonForTest(body, &simd)) {
    EXPECT_EQ(ref.error, CompactError::kOk);
    EXPECT_EQ(simd, ref.out);
  } else {
    EXPECT_EQ(simd, "");
  }
  return ref;
}

// The repository root. CTest is meant to set LLMTAP_SOURCE_DIR; without it (a direct run of
// the binary), fall back to this file's own path, <root>/src/capture/json_compact_test.cc.
inline std::filesystem::path SourceDir() {
  const char* dir = std::getenv("LLMTAP_SOURCE_DIR");
  if (dir != nullptr && *dir != '\0') return dir;
  return std::filesystem::path(__FILE__).parent_path().parent_path().parent_path();
}

inline std::filesystem::path CorpusDir() { return SourceDir() / "tests" / "data" / "requests"; }

using testing::ReadFile;

inline std::map<std::string, std::string> ReadManifest() {
  std::map<std::string, std::string> expected;
  std::ifstream in(CorpusDir() / "EXPECTED.tsv");
  EXPECT_TRUE(in.is_open()) << "corpus manifest not found under " << CorpusDir();
  std::string line;
  bool header = true;
  while (std::getline(in, line)) {
    if (header) {
      header = false;
      EXPECT_EQ(line, "file\texpected");
      continue;
    }
    const size_t tab = line.find('\t');
    EXPECT_NE(tab, std::string::npos) << line;
    if (tab == std::string::npos) continue;
    expected[line.substr(0, tab)] = line.substr(tab + 1);
  }
  return expected;
}

// ---------------------------------------------------------------------------------------------
// Edge cases, one test each.

struct EdgeCase {
  std::string name;
  std::string body;
  CompactError error;
  std::string out = "";  // expected output when kOk
};

inline void PrintTo(const EdgeCase& c, std::ostream* os) {
  *os << c.name << ": " << Printable(c.body);
}

// {"s":"<raw>"}
inline std::string InString(std::string_view raw) {
  return R"({"s":")" + std::string(raw) + R"("})";
}

inline const std::vector<EdgeCase>& EdgeCases() {
  using E = CompactError;
  static const std::vector<EdgeCase> cases = {
      // Valid objects.
      {"MinimalObject", "{}", E::kOk, "{}"},
      {"SurroundingWhitespace", " \t\r\n{ }\r\n", E::kOk, "{}"},
      {"WhitespaceBetweenAllTokens", "{ \"a\" :\t[ 1 ,\n2 ] , \"b\" : { } }", E::kOk,
       R"({"a":[1,2],"b":{}})"},
      {"SpacesInsideStringsKept", R"({"a b" : " x  y "})", E::kOk, R"({"a b":" x  y "})"},
      {"KeyOrderKept", R"({"z":1,"a":2,"m":3})", E::kOk, R"({"z":1,"a":2,"m":3})"},
      {"DuplicateKeysKept", R"({"a":1, "a":2})", E::kOk, R"({"a":1,"a":2})"},
      {"EscapesKeptAsWritten", InString(R"(\u00e9\u00C9\/\"\\\b\f\n\r\t\u0000\u001F)"), E::kOk,
       InString(R"(\u00e9\u00C9\/\"\\\b\f\n\r\t\u0000\u001F)")},
      {"SurrogatePairEscape", InString(R"(\ud83d\ude00\uD83D\uDE00)"), E::kOk,
       InString(R"(\ud83d\ude00\uD83D\uDE00)")},
      {"EscapedQuoteAndBackslashRuns", InString(R"(\\\"\\\\\" \\)"), E::kOk,
       InString(R"(\\\"\\\\\" \\)")},
      {"LargeInteger", R"({"seed": 123456789012345678901234567890})", E::kOk,
       R"({"seed":123456789012345678901234567890})"},
      {"Uint64Overflow", R"({"a":18446744073709551616,"b":-9223372036854775809})", E::kOk,
       R"({"a":18446744073709551616,"b":-9223372036854775809})"},
      {"OutOfRangeFloats", R"({"a":1e400,"b":-1E+400,"c":1e-400})", E::kOk,
       R"({"a":1e400,"b":-1E+400,"c":1e-400})"},
      {"NumberSpellingsKept", R"({"a":[-0,0.0,1E+2,1e-2,0e0,-0.5E-0,10.50]})", E::kOk,
       R"({"a":[-0,0.0,1E+2,1e-2,0e0,-0.5E-0,10.50]})"},
      {"Literals", R"({"t":true,"f":false,"n":null})", E::kOk, R"({"t":true,"f":false,"n":null})"},
      {"EmptyKeyAndEmptyContainers", R"({"":[{},[],""]})", E::kOk, R"({"":[{},[],""]})"},
      {"RawUtf8",
       InString("caf\xc3\xa9 \xe4\xb8\xad \xf0\x9f\x98\x80 \xef\xbf\xbf \xf4\x8f\xbf\xbf"), E::kOk,
       InString("caf\xc3\xa9 \xe4\xb8\xad \xf0\x9f\x98\x80 \xef\xbf\xbf \xf4\x8f\xbf\xbf")},
      {"RawDelIsNotAControlCharacter", InString("\x7f"), E::kOk, InString("\x7f")},
      {"ByteOrderMarkInsideStringIsText", InString("\xef\xbb\xbf"), E::kOk,
       InString("\xef\xbb\xbf")},

      // Nothing there.
      {"EmptyBody", "", E::kEmpty},
      {"WhitespaceOnly", " \r\n\t ", E::kEmpty},

      // Control characters must be escaped inside strings.
      {"RawNewlineInString", InString("a\nb"), E::kInvalidJson},
      {"RawCarriageReturnInString", InString("a\rb"), E::kInvalidJson},
      {"RawTabInString", InString("a\tb"), E::kInvalidJson},
      {"RawNulInString", InString(std::string("a\0b", 3)), E::kInvalidJson},
      {"RawUnitSeparatorInString", InString("\x1f"), E::kInvalidJson},
      {"RawNewlineInKey", "{\"a\nb\":1}", E::kInvalidJson},
      {"EscapedRawNewline", InString("\\\n"), E::kInvalidJson},

      // Escapes.
      {"InvalidEscapeLetter", InString(R"(\x41)"), E::kInvalidJson},
      {"InvalidEscapeUpperU", InString(R"(\U0041)"), E::kInvalidJson},
      {"InvalidEscapeSingleQuote", InString(R"(\')"), E::kInvalidJson},
      {"InvalidEscapeDigit", InString(R"(\0)"), E::kInvalidJson},
      {"ShortUnicodeEscape", InString(R"(\u12)"), E::kInvalidJson},
      {"NonHexUnicodeEscape", InString(R"(\u00zz)"), E::kInvalidJson},
      // Lone surrogate escapes: Python's json reads them, strict parsers (AIPerf's) refuse.
      {"LoneHighSurrogate", InString(R"(\ud800)"), E::kNonStandardJson},
      {"LoneHighSurrogateThenText", InString(R"(\ud800 lone)"), E::kNonStandardJson},
      {"LoneLowSurrogate", InString(R"(\udc00)"), E::kNonStandardJson},
      {"LoneSurrogateInKey", R"({"\udbff":1})", E::kNonStandardJson},
      {"HighSurrogateThenNonSurrogate", InString(R"(\ud800\u0041)"), E::kNonStandardJson},
      {"HighSurrogateThenHighSurrogate", InString(R"(\ud800\ud800)"), E::kNonStandardJson},
      {"ReversedSurrogatePair", InString(R"(\ude00\ud83d)"), E::kNonStandardJson},
      {"HighSurrogateThenEscapedBackslash", InString(R"(\ud83d\\ude00)"), E::kNonStandardJson},
      {"HighSurrogateAtEnd", "{\"s\":\"\\ud800", E::kInvalidJson},
      {"LoneSurrogateThenSyntaxError", R"({"s":"\ud800",})", E::kInvalidJson},
      {"BackslashAtEnd", "{\"s\":\"\\", E::kInvalidJson},
      {"BackslashOutsideString", R"({\"a":1})", E::kInvalidJson},

      // Numbers.
      {"LeadingZero", R"({"a":01})", E::kInvalidJson},
      {"NegativeLeadingZero", R"({"a":-01})", E::kInvalidJson},
      {"TrailingDot", R"({"a":1.})", E::kInvalidJson},
      {"LeadingDot", R"({"a":.5})", E::kInvalidJson},
      {"PlusSign", R"({"a":+1})", E::kInvalidJson},
      {"BareMinus", R"({"a":-})", E::kInvalidJson},
      {"EmptyExponent", R"({"a":1e})", E::kInvalidJson},
      {"ExponentSignOnly", R"({"a":1e+})", E::kInvalidJson},
      {"HexNumber", R"({"a":0x10})", E::kInvalidJson},
      // NaN and the infinities: Python's json reads them (as Python servers do); not JSON.
      {"NaN", R"({"a":NaN})", E::kNonStandardJson},
      {"Infinity", R"({"a":Infinity})", E::kNonStandardJson},
      {"NegativeInfinity", R"({"a":-Infinity})", E::kNonStandardJson},
      {"NaNInArray", R"({"a":[1, NaN ,2]})", E::kNonStandardJson},
      {"NaNThenSyntaxError", R"({"a":NaN,})", E::kInvalidJson},
      {"NaNLowercase", R"({"a":nan})", E::kInvalidJson},
      {"NegativeNaN", R"({"a":-NaN})", E::kInvalidJson},
      {"PositiveInfinity", R"({"a":+Infinity})", E::kInvalidJson},
      {"InfinityWithSuffix", R"({"a":Infinityx})", E::kInvalidJson},
      {"NegativeInfinityThenDigit", R"({"a":-Infinity1})", E::kInvalidJson},
      {"TruncatedInfinity", R"({"a":Infin})", E::kInvalidJson},
      {"NaNAsKey", R"({NaN:1})", E::kInvalidJson},
      {"NaNRootIsNotAnObject", "NaN", E::kNotAnObject},
      {"NumberFollowedByLetter", R"({"a":1x})", E::kInvalidJson},
      {"NumberWithSpace", R"({"a":1 2})", E::kInvalidJson},

      // Literals.
      {"MisspelledTrue", R"({"a":tru})", E::kInvalidJson},
      {"CapitalizedTrue", R"({"a":True})", E::kInvalidJson},
      {"LiteralWithSuffix", R"({"a":nullx})", E::kInvalidJson},
      {"LiteralFollowedByDigit", R"({"a":false1})", E::kInvalidJson},
      {"LiteralWithSpace", R"({"a":tr ue})", E::kInvalidJson},

      // Structure.
      {"TrailingCommaInObject", R"({"a":1,})", E::kInvalidJson},
      {"TrailingCommaInArray", R"({"a":[1,]})", E::kInvalidJson},
      {"LeadingComma", R"({,"a":1})", E::kInvalidJson},
      {"DoubleComma", R"({"a":1,,"b":2})", E::kInvalidJson},
      {"MissingComma", R"({"a":1 "b":2})", E::kInvalidJson},
      {"MissingColon", R"({"a" 1})", E::kInvalidJson},
      {"DoubleColon", R"({"a"::1})", E::kInvalidJson},
      {"MissingValue", R"({"a":})", E::kInvalidJson},
      {"NonStringKey", R"({1:2})", E::kInvalidJson},
      {"UnquotedKey", R"({a:1})", E::kInvalidJson},
      {"SingleQuotes", R"({'a':'b'})", E::kInvalidJson},
      {"MismatchedBrackets", R"({"a":[1}})", E::kInvalidJson},
      {"LineComment", "{\"a\":1 // c\n}", E::kInvalidJson},
      {"BlockComment", R"({/* c */"a":1})", E::kInvalidJson},
      {"Utf8ByteOrderMark", "\xef\xbb\xbf{}", E::kInvalidJson},
      {"TrailingGarbage", "{}x", E::kInvalidJson},
      {"TwoObjects", "{}{}", E::kInvalidJson},
      {"TwoObjectsOnTwoLines", "{}\n{}", E::kInvalidJson},
      {"ExtraClosingBrace", "{}}", E::kInvalidJson},
      {"NulAfterObject", std::string("{}\0", 3), E::kInvalidJson},
      {"VerticalTabIsNotWhitespace", "\v{}", E::kInvalidJson},
      {"FormFeedIsNotWhitespace", "{}\f", E::kInvalidJson},
      {"NoBreakSpaceIsNotWhitespace", "{\xc2\xa0}", E::kInvalidJson},
      {"ControlByteOutsideString", "{\x01}", E::kInvalidJson},
      {"NonAsciiOutsideString", "{\"a\":\xc3\xa9}", E::kInvalidJson},

      // Truncated.
      {"TruncatedAfterBrace", "{", E::kInvalidJson},
      {"TruncatedInKey", R"({"a)", E::kInvalidJson},
      {"TruncatedAfterKey", R"({"a")", E::kInvalidJson},
      {"TruncatedAfterColon", R"({"a":)", E::kInvalidJson},
      {"TruncatedInValue", R"({"a":"b)", E::kInvalidJson},
      {"TruncatedInNumber", R"({"a":1)", E::kInvalidJson},
      {"TruncatedInLiteral", R"({"a":tr)", E::kInvalidJson},
      {"TruncatedInArray", R"({"a":[1,2)", E::kInvalidJson},
      {"TruncatedInEscape", R"({"a":"\u00)", E::kInvalidJson},
      {"TruncatedInUtf8", "{\"a\":\"\xe4\xb8", E::kInvalidJson},

      // Invalid UTF-8 inside strings.
      {"Latin1Byte", InString("caf\xe9"), E::kInvalidJson},
      {"LoneContinuationByte", InString("\x80"), E::kInvalidJson},
      {"OverlongTwoByte", InString("\xc0\x80"), E::kInvalidJson},
      {"OverlongC1", InString("\xc1\xbf"), E::kInvalidJson},
      {"OverlongThreeByte", InString("\xe0\x80\x80"), E::kInvalidJson},
      {"OverlongFourByte", InString("\xf0\x80\x80\x80"), E::kInvalidJson},
      {"EncodedSurrogate", InString("\xed\xa0\x80"), E::kInvalidJson},
      {"AboveMaxCodePoint", InString("\xf4\x90\x80\x80"), E::kInvalidJson},
      {"F5Lead", InString("\xf5\x80\x80\x80"), E::kInvalidJson},
      {"FFByte", InString("\xff"), E::kInvalidJson},
      {"MissingContinuation", InString("\xe4\xb8x"), E::kInvalidJson},
      {"ExtraContinuation", InString("\xc3\xa9\xa9"), E::kInvalidJson},

      // Valid JSON, but not an object.
      {"ArrayRoot", "[]", E::kNotAnObject},
      {"ArrayOfObjectsRoot", R"([{"role":"user"}])", E::kNotAnObject},
      {"StringRoot", R"("hello")", E::kNotAnObject},
      {"NumberRoot", " 42 ", E::kNotAnObject},
      {"NegativeFloatRoot", "-1.5e3", E::kNotAnObject},
      {"TrueRoot", "true", E::kNotAnObject},
      {"NullRoot", "null", E::kNotAnObject},
      // Not valid JSON at all: invalid wins over not-an-object.
      {"InvalidArrayRoot", "[1,]", E::kInvalidJson},
      {"ArrayRootWithGarbage", "[] x", E::kInvalidJson},
  };
  return cases;
}

}  // namespace llmtap::json_compact_test_util
