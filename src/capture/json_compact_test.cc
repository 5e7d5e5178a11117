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

namespace llmtap {

// Testing hooks defined in json_compact.cc: one fast path alone, without the reference
// fallback. Each appends and returns true when it accepts the body, else leaves *out alone.

namespace {

using json_compact_internal::HasAvx512Kernel;
using json_compact_internal::TryCompactAvx512ForTest;
using json_compact_internal::TryCompactSimdjsonForTest;

constexpr size_t kMiB = 1 << 20;

// Makes test names and failure messages readable: control and non-ASCII bytes as \xNN.
std::string Printable(std::string_view s, size_t max = 160) {
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
std::string StripInsignificantWhitespace(std::string_view s) {
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

bool HasControlByte(std::string_view s) {
  for (char c : s) {
    if (static_cast<unsigned char>(c) < 0x20) return true;
  }
  return false;
}

struct Outcome {
  CompactError error;
  std::string out;
};

Outcome Reference(std::string_view body) {
  Outcome o{CompactError::kOk, ""};
  o.error = CompactJsonReference(body, &o.out);
  return o;
}

// Checks every implementation against the reference on `body` and returns the reference's
// outcome. `compactor` is reused across calls on purpose (its buffers carry over).
Outcome CheckAllPathsAgree(std::string_view body, JsonCompactor& compactor) {
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
std::filesystem::path SourceDir() {
  const char* dir = std::getenv("LLMTAP_SOURCE_DIR");
  if (dir != nullptr && *dir != '\0') return dir;
  return std::filesystem::path(__FILE__).parent_path().parent_path().parent_path();
}

std::filesystem::path CorpusDir() { return SourceDir() / "tests" / "data" / "requests"; }

std::string ReadFile(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::map<std::string, std::string> ReadManifest() {
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

TEST(CompactErrorNameTest, NamesMatchTheCorpusManifest) {
  EXPECT_EQ(CompactErrorName(CompactError::kOk), "ok");
  EXPECT_EQ(CompactErrorName(CompactError::kEmpty), "empty");
  EXPECT_EQ(CompactErrorName(CompactError::kInvalidJson), "invalid_json");
  EXPECT_EQ(CompactErrorName(CompactError::kNotAnObject), "not_an_object");
  EXPECT_EQ(CompactErrorName(CompactError::kTooDeep), "too_deep");
}

// ---------------------------------------------------------------------------------------------
// Corpus of real request bodies.

TEST(CorpusTest, ManifestListsEveryFile) {
  const std::map<std::string, std::string> expected = ReadManifest();
  ASSERT_GE(expected.size(), 20u) << "corpus not found under " << CorpusDir();
  std::set<std::string> on_disk;
  for (const auto& entry : std::filesystem::directory_iterator(CorpusDir())) {
    const std::string name = entry.path().filename().string();
    if (name != "EXPECTED.tsv") on_disk.insert(name);
  }
  std::set<std::string> listed;
  for (const auto& [name, outcome] : expected) {
    listed.insert(name);
    EXPECT_TRUE(outcome == "ok" || outcome == "empty" || outcome == "invalid_json" ||
                outcome == "not_an_object" || outcome == "too_deep")
        << name << ": " << outcome;
  }
  EXPECT_EQ(on_disk, listed);
}

TEST(CorpusTest, EveryFileGivesItsExpectedOutcome) {
  JsonCompactor compactor;
  const std::map<std::string, std::string> manifest = ReadManifest();
  ASSERT_GE(manifest.size(), 20u);
  for (const auto& [name, outcome] : manifest) {
    SCOPED_TRACE(name);
    const std::string body = ReadFile(CorpusDir() / name);
    const Outcome ref = CheckAllPathsAgree(body, compactor);
    EXPECT_EQ(CompactErrorName(ref.error), outcome);
    std::string out;
    EXPECT_EQ(CompactErrorName(ThreadLocalJsonCompactor().Compact(body, &out)), outcome);
  }
}

TEST(CorpusTest, OkFilesKeepTheirValueAndKeyOrder) {
  int ok_files = 0;
  for (const auto& [name, outcome] : ReadManifest()) {
    if (outcome != "ok") continue;
    ++ok_files;
    SCOPED_TRACE(name);
    const std::string body = ReadFile(CorpusDir() / name);
    std::string out = "prefix\n";
    ASSERT_EQ(ThreadLocalJsonCompactor().Compact(body, &out), CompactError::kOk);
    ASSERT_EQ(out.substr(0, 7), "prefix\n");
    out.erase(0, 7);

    // One line: no newline, no other control byte.
    EXPECT_EQ(out.find('\n'), std::string::npos);
    EXPECT_FALSE(HasControlByte(out));
    // Only insignificant whitespace removed, found without the implementation.
    EXPECT_EQ(out, StripInsignificantWhitespace(body));
    EXPECT_LE(out.size(), body.size());

    // Same value, same key order. nlohmann rejects numbers that overflow a double (1e400);
    // then it must reject the output alike.
    const auto in_value = nlohmann::ordered_json::parse(body, nullptr, false);
    const auto out_value = nlohmann::ordered_json::parse(out, nullptr, false);
    EXPECT_EQ(in_value.is_discarded(), out_value.is_discarded());
    if (!in_value.is_discarded()) {
      EXPECT_TRUE(out_value.is_object());
      EXPECT_EQ(in_value, out_value);
      EXPECT_EQ(in_value.dump(), out_value.dump());  // key order included
    }
  }
  EXPECT_GE(ok_files, 10);
}

TEST(CorpusTest, PrettyPrintedCrlfBodyBecomesOneLine) {
  const std::string body = ReadFile(CorpusDir() / "chat_pretty_crlf.json");
  ASSERT_NE(body.find("\r\n\t"), std::string::npos);
  std::string out;
  ASSERT_EQ(ThreadLocalJsonCompactor().Compact(body, &out), CompactError::kOk);
  EXPECT_EQ(out.find_first_of("\r\n\t"), std::string::npos);
  // Spaces inside strings stay.
  EXPECT_NE(out.find("List three   primes.\\tUse spaces  inside strings:  they must stay."),
            std::string::npos);
  EXPECT_EQ(out.rfind(R"({"model":"meta/llama-3.1-70b-instruct","messages":[{"role":)", 0), 0u);
}

TEST(CorpusTest, EscapesStayAsWritten) {
  const std::string body = ReadFile(CorpusDir() / "chat_escapes.json");
  std::string out;
  ASSERT_EQ(ThreadLocalJsonCompactor().Compact(body, &out), CompactError::kOk);
  EXPECT_EQ(out, body);  // already compact: byte-identical
  for (std::string_view escape : {R"(\/)", R"(\u0000)", R"(\u00e9)", R"(\u00C9)", R"(\ud83d\ude00)",
                                  R"(\uD83D\uDE00)", R"(\\\")"}) {
    EXPECT_NE(out.find(escape), std::string::npos) << escape;
  }
}

// ---------------------------------------------------------------------------------------------
// Edge cases, one test each.

struct EdgeCase {
  std::string name;
  std::string body;
  CompactError error;
  std::string out = "";  // expected output when kOk
};

void PrintTo(const EdgeCase& c, std::ostream* os) { *os << c.name << ": " << Printable(c.body); }

std::string Bytes(std::initializer_list<int> bytes) {
  std::string s;
  for (int b : bytes) s += static_cast<char>(b);
  return s;
}

// {"s":"<raw>"}
std::string InString(std::string_view raw) { return R"({"s":")" + std::string(raw) + R"("})"; }

const std::vector<EdgeCase>& EdgeCases() {
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
      {"LoneHighSurrogate", InString(R"(\ud800)"), E::kInvalidJson},
      {"LoneLowSurrogate", InString(R"(\udc00)"), E::kInvalidJson},
      {"HighSurrogateThenNonSurrogate", InString(R"(\ud800\u0041)"), E::kInvalidJson},
      {"HighSurrogateThenHighSurrogate", InString(R"(\ud800\ud800)"), E::kInvalidJson},
      {"ReversedSurrogatePair", InString(R"(\ude00\ud83d)"), E::kInvalidJson},
      {"HighSurrogateThenEscapedBackslash", InString(R"(\ud83d\\ude00)"), E::kInvalidJson},
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
      {"NaN", R"({"a":NaN})", E::kInvalidJson},
      {"Infinity", R"({"a":Infinity})", E::kInvalidJson},
      {"NegativeInfinity", R"({"a":-Infinity})", E::kInvalidJson},
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

class EdgeCaseTest : public ::testing::TestWithParam<EdgeCase> {};

TEST_P(EdgeCaseTest, GivesExpectedOutcomeOnEveryPath) {
  const EdgeCase& c = GetParam();
  JsonCompactor compactor;
  const Outcome ref = CheckAllPathsAgree(c.body, compactor);
  EXPECT_EQ(CompactErrorName(ref.error), CompactErrorName(c.error));
  EXPECT_EQ(ref.out, c.out);
}

// Every case again with the interesting bytes moved across the 64-byte block boundaries of
// the fast path, by leading whitespace of every length up to two blocks.
TEST_P(EdgeCaseTest, SameOutcomeAtEveryAlignment) {
  const EdgeCase& c = GetParam();
  if (c.error == CompactError::kEmpty) return;
  JsonCompactor compactor;
  for (size_t pad = 1; pad <= 130; ++pad) {
    for (const std::string& body :
         {std::string(pad, ' ') + c.body, c.body + std::string(pad, '\n')}) {
      const Outcome ref = CheckAllPathsAgree(body, compactor);
      EXPECT_EQ(CompactErrorName(ref.error), CompactErrorName(c.error)) << "pad " << pad;
      EXPECT_EQ(ref.out, c.out) << "pad " << pad;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(JsonCompact, EdgeCaseTest, ::testing::ValuesIn(EdgeCases()),
                         [](const ::testing::TestParamInfo<EdgeCase>& info) {
                           return info.param.name;
                         });

// Found by fuzz/capture_line_fuzz: a scalar token that fills a whole 64-byte block made the
// AVX-512 kernel take ctz(0), which is undefined. Long tokens at every alignment, valid (long
// integers and fractions) and not (a run of letters, high bytes).
TEST(LongScalarTest, TokensSpanningWholeBlocksAtEveryAlignment) {
  JsonCompactor compactor;
  for (size_t len : {63u, 64u, 65u, 127u, 128u, 129u, 200u}) {
    const std::string tokens[] = {std::string(len, '7'), "1." + std::string(len, '5'),
                                  std::string(len, 'x'), "+0" + std::string(len, '\xca')};
    for (const std::string& token : tokens) {
      for (size_t pad = 0; pad < 66; ++pad) {
        const std::string body = R"({"k":)" + std::string(pad, ' ') + "[" + token + "]}";
        CheckAllPathsAgree(body, compactor);
      }
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Nesting limit: 1024 levels ({} is one).

std::string NestedArrays(size_t depth, std::string_view inner = "0") {
  // {"a": + (depth - 1) arrays.
  return R"({"a":)" + std::string(depth - 1, '[') + std::string(inner) +
         std::string(depth - 1, ']') + "}";
}

std::string NestedObjects(size_t depth) {
  std::string s;
  for (size_t i = 0; i < depth; ++i) s += R"({"k":)";
  s += "1";
  s += std::string(depth, '}');
  return s;
}

TEST(DepthTest, AcceptsExactly1024Levels) {
  JsonCompactor compactor;
  for (const std::string& body : {NestedArrays(1024), NestedObjects(1024)}) {
    EXPECT_EQ(CheckAllPathsAgree(body, compactor).error, CompactError::kOk);
  }
  for (const std::string& body : {NestedArrays(1025), NestedObjects(1025), NestedArrays(5000)}) {
    EXPECT_EQ(CheckAllPathsAgree(body, compactor).error, CompactError::kTooDeep);
  }
}

TEST(DepthTest, FirstErrorWins) {
  JsonCompactor compactor;
  // Too deep before anything else is wrong: too deep, even if truncated or not an object.
  EXPECT_EQ(CheckAllPathsAgree(std::string(1025, '['), compactor).error, CompactError::kTooDeep);
  EXPECT_EQ(CheckAllPathsAgree(R"({"a":)" + std::string(1024, '[') + "x", compactor).error,
            CompactError::kTooDeep);
  // A syntax error before the 1025th level: invalid.
  EXPECT_EQ(CheckAllPathsAgree(R"({"a":01,"b":)" + std::string(1024, '['), compactor).error,
            CompactError::kInvalidJson);
  // Not too deep, not an object.
  EXPECT_EQ(CheckAllPathsAgree(std::string(1024, '[') + std::string(1024, ']'), compactor).error,
            CompactError::kNotAnObject);
}

TEST(DepthTest, DeepInputDoesNotExhaustTheStack) {
  // 8 MiB of '[': a recursive parser would overflow a thread stack.
  JsonCompactor compactor;
  std::string out;
  EXPECT_EQ(compactor.Compact(std::string(8 * kMiB, '['), &out), CompactError::kTooDeep);
  EXPECT_EQ(compactor.Compact("{\"a\":" + std::string(8 * kMiB, '['), &out),
            CompactError::kTooDeep);
}

// ---------------------------------------------------------------------------------------------
// Sizes around the default max_request_bytes.

// A chat body of exactly `size` bytes, with whitespace and escapes spread over it.
std::string ChatBodyOfSize(size_t size) {
  const std::string head =
      "{\n  \"model\": \"meta/llama-3.1-8b-instruct\",\n  \"messages\": [\n    {\"role\": "
      "\"user\", \"content\": \"";
  const std::string tail = "\"}\n  ],\n  \"max_tokens\": 16\n}\n";
  const std::string words = "Lorem ipsum \\\"dolor\\\" sit amet,\\n caf\xc3\xa9 \\u00e9 ";
  std::string body = head;
  while (body.size() + words.size() + tail.size() <= size) body += words;
  body += std::string(size - tail.size() - body.size(), ' ');  // inside the string
  return body + tail;
}

TEST(SizeTest, AroundOneMebibyte) {
  JsonCompactor compactor;
  for (size_t size : {kMiB - 1, kMiB, kMiB + 1}) {
    const std::string body = ChatBodyOfSize(size);
    ASSERT_EQ(body.size(), size);
    const Outcome ref = CheckAllPathsAgree(body, compactor);
    EXPECT_EQ(ref.error, CompactError::kOk) << size;
  }
}

// ---------------------------------------------------------------------------------------------
// API behaviour.

TEST(JsonCompactorTest, AppendsToExistingContent) {
  JsonCompactor compactor;
  std::string out = R"({"timestamp":0,"payload":)";
  ASSERT_EQ(compactor.Compact(" { \"a\" : 1 } ", &out), CompactError::kOk);
  EXPECT_EQ(out, R"({"timestamp":0,"payload":{"a":1})");
  out += "}";
  ASSERT_EQ(compactor.Compact(R"({"b":[]})", &out), CompactError::kOk);
  EXPECT_EQ(out, R"({"timestamp":0,"payload":{"a":1}}{"b":[]})");
}

TEST(JsonCompactorTest, ErrorLeavesOutputUntouched) {
  JsonCompactor compactor;
  for (const std::string& bad : {std::string(""), std::string("[1]"), std::string("{\"a\":\"\n\"}"),
                                 std::string(1025, '['), ChatBodyOfSize(100000) + "x"}) {
    std::string out = "kept";
    EXPECT_NE(compactor.Compact(bad, &out), CompactError::kOk);
    EXPECT_EQ(out, "kept");
    std::string ref_out = "kept";
    EXPECT_NE(CompactJsonReference(bad, &ref_out), CompactError::kOk);
    EXPECT_EQ(ref_out, "kept");
  }
}

TEST(JsonCompactorTest, ThreadLocalCompactorIsPerThread) {
  JsonCompactor* mine = &ThreadLocalJsonCompactor();
  EXPECT_EQ(mine, &ThreadLocalJsonCompactor());
  JsonCompactor* other = nullptr;
  std::thread([&other] {
    other = &ThreadLocalJsonCompactor();
    std::string out;
    EXPECT_EQ(other->Compact("{}", &out), CompactError::kOk);
  }).join();
  EXPECT_NE(mine, other);
}

TEST(JsonCompactorTest, SteadyStateDoesNotAllocate) {
  if (!llmtap::testing::AllocationCountingEnabled()) {
    GTEST_SKIP() << "allocation counting is off under sanitizers";
  }
  const std::string body = ChatBodyOfSize(64 * 1024);
  std::string out;
  out.reserve(2 * body.size());
  JsonCompactor compactor;
  ASSERT_EQ(compactor.Compact(body, &out), CompactError::kOk);
  ASSERT_TRUE(TryCompactSimdjsonForTest(body, &out));
  const int64_t before = llmtap::testing::TotalAllocations();
  for (int i = 0; i < 20; ++i) {
    out.clear();
    EXPECT_EQ(compactor.Compact(body, &out), CompactError::kOk);
    out.clear();
    EXPECT_TRUE(TryCompactSimdjsonForTest(body, &out));
    out.clear();
    EXPECT_EQ(compactor.Compact(body.substr(0, 1000), &out), CompactError::kInvalidJson);
  }
  // The substr() above allocates once per iteration; nothing else may.
  EXPECT_EQ(llmtap::testing::TotalAllocations() - before, 20);
}

// ---------------------------------------------------------------------------------------------
// simdjson: which checks it does itself (found by experiment; the fast path relies on them on
// CPUs without the AVX-512 kernel), and where it differs from RFC 8259.

TEST(SimdjsonPathTest, RejectsWhatTheContractRejects) {
  for (const EdgeCase& c : EdgeCases()) {
    if (c.error == CompactError::kOk) continue;
    std::string out;
    EXPECT_FALSE(TryCompactSimdjsonForTest(c.body, &out)) << c.name;
  }
}

TEST(SimdjsonPathTest, RejectsValidNumbersItCannotRepresentSoCompactFallsBack) {
  JsonCompactor compactor;
  for (std::string_view body : {R"({"a":123456789012345678901234567890})", R"({"a":1e400})",
                                R"({"a":18446744073709551616})"}) {
    std::string out;
    EXPECT_FALSE(TryCompactSimdjsonForTest(body, &out)) << body;
    EXPECT_EQ(compactor.Compact(body, &out), CompactError::kOk) << body;
    EXPECT_EQ(out, body);
  }
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

TEST(Utf8Test, ExhaustiveUpToThreeBytesAndBroadFourBytes) {
  JsonCompactor compactor;
  int64_t checked = 0;
  size_t offset = 0;
  auto next_offset = [&offset] { return offset = (offset + 7) % 131; };
  for (int a = 0x20; a < 0x100; ++a) {
    for (int b = 0; b < 0x100; ++b) {
      CheckUtf8Sequence(Bytes({a, b}), next_offset(), compactor, &checked);
      if (a < 0xC0) continue;  // 3-byte sequences starting with a lead byte
      for (int c = 0; c < 0x100; ++c) {
        CheckUtf8Sequence(Bytes({a, b, c}), next_offset(), compactor, &checked);
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
  EXPECT_GT(checked, 4000000);
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
