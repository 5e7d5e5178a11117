// UsageScanner on hostile input: decoys, escapes, odd numbers, truncation, bad JSON, no allocation.
#include "proxy/usage_scanner.h"

#include <random>
#include <string>
#include <string_view>

#include <gtest/gtest.h>

#include "common/testing/alloc_counter.h"
#include "proxy/usage_scanner_test_util.h"

namespace llmtap::proxy {
namespace {

using Mode = UsageScanner::Mode;
using namespace usage_scanner_test_util;

// --- Only the right paths count ---

TEST(UsageScannerTest, DecoysInStringsAndNestedObjects) {
  const std::string body =
      R"({"choices":[{"message":{"content":"\"usage\": {\"prompt_tokens\": 1}",)"
      R"("usage":{"prompt_tokens":2},"finish_reason":"decoy1"},"finish_reason":"stop",)"
      R"("delta":{"finish_reason":"decoy2"},"logprobs":{"content":[{"finish_reason":"x"}]}}],)"
      R"("metadata":{"usage":{"prompt_tokens":3,"completion_tokens":3}},)"
      R"("data":[{"usage":{"prompt_tokens":4}}],"finish_reason":"decoy3",)"
      R"("prompt_tokens":5,"completion_tokens":5,"x":"usage",)"
      R"("usage":{"prompt_tokens":6,"details":{"prompt_tokens":7,"completion_tokens":7},)"
      R"("completion_tokens":8,"usage":{"prompt_tokens":9}},)"
      R"("tail":{"choices":[{"finish_reason":"decoy4"}]}})";
  EXPECT_EQ(ScanEverySplit(Mode::kJson, body), Expect(6, 8, "stop"));
}

TEST(UsageScannerTest, WrongShapesAreIgnored) {
  EXPECT_EQ(Scan(Mode::kJson, R"({"usage":"prompt_tokens","choices":"finish_reason"})"),
            Expect(std::nullopt, std::nullopt, ""));
  EXPECT_EQ(Scan(Mode::kJson, R"({"usage":[{"prompt_tokens":1}],"choices":{"finish_reason":"s"}})"),
            Expect(std::nullopt, std::nullopt, ""));
  EXPECT_EQ(Scan(Mode::kJson, R"({"choices":[[{"finish_reason":"s"}],"finish_reason",7,null]})"),
            Expect(std::nullopt, std::nullopt, ""));
  EXPECT_EQ(Scan(Mode::kJson, R"({"usage":{"prompt_tokens":"12","completion_tokens":true}})"),
            Expect(std::nullopt, std::nullopt, ""));
  EXPECT_EQ(Scan(Mode::kJson, R"({"choices":[{"finish_reason":3},{"finish_reason":{"a":1}}]})"),
            Expect(std::nullopt, std::nullopt, ""));
}

TEST(UsageScannerTest, FinishReasonNullThenStopAndLastNonNullWins) {
  const std::string stream = SseEvent(R"({"choices":[{"index":0,"finish_reason":null}]})") +
                             SseEvent(R"({"choices":[{"index":0,"finish_reason":"stop"}]})") +
                             SseEvent(R"({"choices":[{"index":0,"finish_reason":null}]})") +
                             SseEvent(R"({"choices":[{"index":0,"finish_reason":""}]})");
  EXPECT_EQ(ScanEverySplit(Mode::kSse, stream), Expect(std::nullopt, std::nullopt, "stop"));
  // n=2: the last non-null one in document order.
  EXPECT_EQ(Scan(Mode::kJson, R"({"choices":[{"finish_reason":"length"},)"
                              R"({"finish_reason":null},{"finish_reason":"stop"}, {}]})"),
            Expect(std::nullopt, std::nullopt, "stop"));
  EXPECT_EQ(Scan(Mode::kJson, R"({"choices":[{"finish_reason":"stop"},{"finish_reason":null}]})"),
            Expect(std::nullopt, std::nullopt, "stop"));
}

TEST(UsageScannerTest, UsageNullKeepsEarlierValues) {
  const std::string stream = SseEvent(R"({"usage":{"prompt_tokens":1,"completion_tokens":2}})") +
                             SseEvent(R"({"usage":null})") +
                             SseEvent(R"({"usage":{"prompt_tokens":null}})") +
                             SseEvent(R"({"usage":{}})");
  EXPECT_EQ(ScanEverySplit(Mode::kSse, stream), Expect(1, 2, ""));
}

TEST(UsageScannerTest, DuplicateKeysLastWins) {
  EXPECT_EQ(Scan(Mode::kJson, R"({"usage":{"prompt_tokens":1,"prompt_tokens":2},)"
                              R"("usage":{"completion_tokens":3}})"),
            Expect(2, 3, ""));
}

// --- Escapes ---

TEST(UsageScannerTest, EscapedKeysAreUnescaped) {
  const std::string body = R"({"ch\u006fices":[{"finish\u005freason":"to\u006fl_calls"}],)"
                           R"("us\u0061ge":{"\u0070rompt_tokens":10,"completion\u005Ftokens":11}})";
  EXPECT_EQ(ScanEverySplit(Mode::kJson, body), Expect(10, 11, "tool_calls"));
  // Keys that only look alike after a wrong unescaping do not match.
  EXPECT_EQ(
      Scan(Mode::kJson, R"({"usage\"":{"prompt_tokens":1},"usag\\e":{"prompt_tokens":2},)"
                        R"("\u0075sage\u0000":{"prompt_tokens":3},"usagé":{"prompt_tokens":4}})"),
      Expect(std::nullopt, std::nullopt, ""));
}

TEST(UsageScannerTest, FinishReasonValueEscapes) {
  EXPECT_EQ(ScanEverySplit(Mode::kJson,
                           R"({"choices":[{"finish_reason":"a\"b\\c\/d\n\u00e9\ud83d\ude00"}]})"),
            Expect(std::nullopt, std::nullopt, "a\"b\\c/d\n\xC3\xA9\xF0\x9F\x98\x80"));
  // Lone surrogates become U+FFFD.
  EXPECT_EQ(Scan(Mode::kJson, R"({"choices":[{"finish_reason":"\ud83dx\ude00\ud83d"}]})"),
            Expect(std::nullopt, std::nullopt, "\xEF\xBF\xBDx\xEF\xBF\xBD\xEF\xBF\xBD"));
  // A bad escape spoils the document.
  EXPECT_EQ(
      Scan(Mode::kJson, R"({"choices":[{"finish_reason":"a\qb"}],"usage":{"prompt_tokens":1}})"),
      Expect(std::nullopt, std::nullopt, ""));
  EXPECT_EQ(Scan(Mode::kJson, R"({"choices":[{"finish_reason":"\u12G4"}]})"),
            Expect(std::nullopt, std::nullopt, ""));
}

TEST(UsageScannerTest, EscapesInSkippedStrings) {
  const std::string body =
      R"({"id":"a\"b\\","choices":[{"delta":{"content":"}]}\\\"{[\"\\"},"finish_reason":"stop"}],)"
      R"("x":"\\","usage":{"prompt_tokens":1,"completion_tokens":2}})";
  EXPECT_EQ(ScanEverySplit(Mode::kJson, body), Expect(1, 2, "stop"));
}

TEST(UsageScannerTest, FinishReasonIsCappedAtACharacterBoundary) {
  const std::string long_reason(100, 'r');
  EXPECT_EQ(
      Scan(Mode::kJson, R"({"choices":[{"finish_reason":")" + long_reason + "\"}]}").finish_reason,
      std::string(64, 'r'));
  // 63 bytes then a 2-byte character: the character does not fit and is dropped whole.
  const std::string raw = std::string(63, 'a') + "\xC3\xA9" + "tail";
  EXPECT_EQ(ScanEverySplit(Mode::kJson, R"({"choices":[{"finish_reason":")" + raw + "\"}]}"),
            Expect(std::nullopt, std::nullopt, std::string(63, 'a')));
  const std::string escaped = std::string(62, 'a') + R"(\u20ac)";
  EXPECT_EQ(Scan(Mode::kJson, R"({"choices":[{"finish_reason":")" + escaped + "\"}]}"),
            Expect(std::nullopt, std::nullopt, std::string(62, 'a')));
  const std::string fits = std::string(61, 'a') + R"(\u20ac)";
  EXPECT_EQ(Scan(Mode::kJson, R"({"choices":[{"finish_reason":")" + fits + "\"}]}"),
            Expect(std::nullopt, std::nullopt, std::string(61, 'a') + "\xE2\x82\xAC"));
  // A long key is not a prefix match.
  EXPECT_EQ(Scan(Mode::kJson, R"({"usage)" + std::string(70, 'x') + R"(":{"prompt_tokens":1}})"),
            Expect(std::nullopt, std::nullopt, ""));
}

// --- Numbers ---

TEST(UsageScannerTest, NumbersThatAreNotTokenCounts) {
  auto prompt = [](std::string_view number) {
    return Scan(Mode::kJson, R"({"usage":{"prompt_tokens":1}, "usage":{"prompt_tokens":)" +
                                 std::string(number) + "}}")
        .prompt_tokens;
  };
  EXPECT_EQ(prompt("0"), 0);
  EXPECT_EQ(prompt("42"), 42);
  EXPECT_EQ(prompt("9223372036854775807"), INT64_MAX);
  // Ignored: the earlier value stays.
  EXPECT_EQ(prompt("9223372036854775808"), 1);
  EXPECT_EQ(prompt("18446744073709551616"), 1);
  EXPECT_EQ(prompt("99999999999999999999999999999999999999"), 1);
  EXPECT_EQ(prompt("-1"), 1);
  EXPECT_EQ(prompt("-0"), 1);
  EXPECT_EQ(prompt("1.0"), 1);
  EXPECT_EQ(prompt("2.5"), 1);
  EXPECT_EQ(prompt("1e3"), 1);
  EXPECT_EQ(prompt("1E+3"), 1);
  EXPECT_EQ(prompt("007"), 1);
  EXPECT_EQ(prompt("null"), 1);
  EXPECT_EQ(prompt("\"5\""), 1);
  // Malformed: the document stops there.
  EXPECT_EQ(prompt("12abc"), 1);
  EXPECT_EQ(prompt("--"), 1);
}

TEST(UsageScannerTest, NumberEndsAtWhitespaceOrCloser) {
  EXPECT_EQ(ScanEverySplit(
                Mode::kJson,
                "{ \"usage\" :\n{ \"prompt_tokens\"\t: 12 ,\r\n \"completion_tokens\": 3\n}\n}\n"),
            Expect(12, 3, ""));
}

// --- Malformed input ---

TEST(UsageScannerTest, MemberCountsOnlyOnceComplete) {
  EXPECT_EQ(Scan(Mode::kJson, R"({"usage":{"prompt_tokens":12)"),
            Expect(std::nullopt, std::nullopt, ""));
  EXPECT_EQ(Scan(Mode::kJson, R"({"usage":{"prompt_tokens":12 )"),
            Expect(std::nullopt, std::nullopt, ""));
  EXPECT_EQ(Scan(Mode::kJson, R"({"usage":{"prompt_tokens":12,)"), Expect(12, std::nullopt, ""));
  EXPECT_EQ(Scan(Mode::kJson, R"({"choices":[{"finish_reason":"stop")"),
            Expect(std::nullopt, std::nullopt, ""));
  EXPECT_EQ(Scan(Mode::kJson, R"({"choices":[{"finish_reason":"stop"})"),
            Expect(std::nullopt, std::nullopt, "stop"));
  // A fault after a value, before its member ends, loses it.
  EXPECT_EQ(Scan(Mode::kJson, R"({"usage":{"prompt_tokens":12 x,"completion_tokens":1}})"),
            Expect(std::nullopt, std::nullopt, ""));
}

TEST(UsageScannerTest, EveryTruncationIsSafeAndASubsetOfTheWhole) {
  for (const std::string& body :
       {std::string(kVllmChatResponse), std::string(kOpenAiChatResponse)}) {
    const Result whole = Scan(Mode::kJson, body);
    for (size_t n = 0; n <= body.size(); ++n) {
      const Result part = Scan(Mode::kJson, std::string_view(body).substr(0, n));
      if (part.prompt_tokens) {
        EXPECT_EQ(part.prompt_tokens, whole.prompt_tokens);
      }
      if (part.completion_tokens) {
        EXPECT_EQ(part.completion_tokens, whole.completion_tokens);
      }
      if (!part.finish_reason.empty()) {
        EXPECT_EQ(part.finish_reason, whole.finish_reason);
      }
    }
  }
}

TEST(UsageScannerTest, NotJson) {
  for (std::string_view body :
       {"Internal Server Error", "<html><body>502 Bad Gateway</body></html>", "}", "]", ",", ":",
        "\"usage\"", "usage:{prompt_tokens:1}", "{usage:{prompt_tokens:1}}",
        "{\"usage\" {\"prompt_tokens\":1}}", "{\"usage\":{\"prompt_tokens\":1]}",
        "{'usage':{'prompt_tokens':1}}", "{,\"usage\":{\"prompt_tokens\":1}}",
        "{\"a\":1,}{\"usage\":{\"prompt_tokens\":1}}"}) {
    EXPECT_EQ(ScanEverySplit(Mode::kJson, body), Expect(std::nullopt, std::nullopt, "")) << body;
    EXPECT_EQ(Scan(Mode::kSse, "data: " + std::string(body) + "\n\n"),
              Expect(std::nullopt, std::nullopt, ""))
        << body;
  }
}

TEST(UsageScannerTest, NothingAfterTheDocumentCounts) {
  EXPECT_EQ(Scan(Mode::kJson, R"({"usage":{"prompt_tokens":1}} {"usage":{"prompt_tokens":2}})"),
            Expect(1, std::nullopt, ""));
  EXPECT_EQ(Scan(Mode::kJson, "{\"usage\":{\"prompt_tokens\":1}}\n\n  \n"),
            Expect(1, std::nullopt, ""));
}

TEST(UsageScannerTest, MismatchedBracketsInsideSkippedValuesStopTheDocument) {
  // Unchecked, the ']' would close the "x" object and let "usage" count at the top level.
  EXPECT_EQ(Scan(Mode::kJson, R"({"x":{"y":[1}],"usage":{"prompt_tokens":4}})"),
            Expect(std::nullopt, std::nullopt, ""));
  EXPECT_EQ(Scan(Mode::kJson, R"({"x":{"y":1],"usage":{"prompt_tokens":4}})"),
            Expect(std::nullopt, std::nullopt, ""));
}

TEST(UsageScannerSseTest, MalformedEventDoesNotPoisonTheNext) {
  const std::string good = SseEvent(R"({"usage":{"prompt_tokens":2,"completion_tokens":3}})");
  for (std::string_view bad :
       {R"({"usage":{"prompt_tokens":1)", R"({"choices":[{"finish_reason":"st)",
        R"({"choices":[{"finish_reason":"st\)", R"({"choices":[{"finish_reason":"\u12)",
        R"(}}}]]]")", R"({"x":[[[[{"y":")", R"({"x":"\)", "garbage",
        "{\"usage\":{\"prompt_tokens\":-", "{\"usage\":{\"prompt_tokens\":1e", "{\"usage\":nul"}) {
    const std::string stream = SseEvent(bad) + good + "data: [DONE]\n\n";
    EXPECT_EQ(ScanEverySplit(Mode::kSse, stream), Expect(2, 3, "")) << bad;
  }
}

TEST(UsageScannerTest, DeepNesting) {
  const std::string deep = std::string(100000, '[') + std::string(100000, ']');
  EXPECT_EQ(Scan(Mode::kJson, R"({"x":)" + deep + R"(,"usage":{"prompt_tokens":4}})"),
            Expect(4, std::nullopt, ""));
  std::string objects;
  for (int i = 0; i < 100; ++i) objects += R"({"usage":)";  // past the 64 checked levels
  objects += R"({"prompt_tokens":99})" + std::string(100, '}');
  EXPECT_EQ(ScanEverySplit(Mode::kJson, R"({"choices":[{"delta":)" + objects +
                                            R"(,"finish_reason":"stop"}],"usage":)"
                                            R"({"prompt_tokens":5}})"),
            Expect(5, std::nullopt, "stop"));
  // Never closed, or closed too often: no crash, nothing found.
  EXPECT_EQ(Scan(Mode::kJson, std::string(1000000, '{')), Expect(std::nullopt, std::nullopt, ""));
  EXPECT_EQ(Scan(Mode::kJson, R"({"x":)" + std::string(1000000, '[')),
            Expect(std::nullopt, std::nullopt, ""));
  EXPECT_EQ(Scan(Mode::kJson, std::string(1000, '}') + std::string(1000, ']')),
            Expect(std::nullopt, std::nullopt, ""));
  // In SSE, a deep unclosed event ends at the blank line.
  EXPECT_EQ(Scan(Mode::kSse, "data: {\"x\":" + std::string(100000, '{') + "\n\n" +
                                 SseEvent(R"({"usage":{"prompt_tokens":6}})")),
            Expect(6, std::nullopt, ""));
}

TEST(UsageScannerTest, RandomBytesNeverCrash) {
  std::mt19937 rng(11);
  // Bytes drawn mostly from JSON and SSE punctuation, so the scanner reaches its deep states.
  constexpr std::string_view kAlphabet = "{}[]\":,\\u0123456789-+.eE \n\rdatusgeprompt_kns:ful";
  for (int round = 0; round < 300; ++round) {
    std::string bytes(std::uniform_int_distribution<size_t>(0, 2000)(rng), '\0');
    for (char& c : bytes) {
      c = rng() % 4 == 0 ? static_cast<char>(rng()) : kAlphabet[rng() % kAlphabet.size()];
    }
    for (Mode mode : {Mode::kJson, Mode::kSse}) {
      const Result whole = Scan(mode, bytes);
      EXPECT_EQ(ScanPieces(mode, bytes, 1 + rng() % 17), whole);
      EXPECT_LE(whole.finish_reason.size(), UsageScanner::kMaxFinishReasonBytes);
      EXPECT_GE(whole.prompt_tokens.value_or(0), 0);
      EXPECT_GE(whole.completion_tokens.value_or(0), 0);
    }
  }
}

TEST(UsageScannerTest, FeedDoesNotAllocate) {
  if (!llmtap::testing::AllocationCountingEnabled()) GTEST_SKIP() << "allocations are not counted here";
  const std::string stream =
      VllmContinuousUsageStream() + OpenAiChatStream() +
      SseEvent(R"({"choices":[{"finish_reason":")" + std::string(200, 'x') + "\"}]}");
  const std::string json(kOpenAiChatResponse);
  UsageScanner sse(Mode::kSse);
  UsageScanner whole(Mode::kJson);
  const int64_t before = llmtap::testing::ThreadAllocations();
  for (char c : stream) sse.Feed(std::string_view(&c, 1));
  whole.Feed(json);
  const int64_t after = llmtap::testing::ThreadAllocations();
  EXPECT_EQ(after - before, 0);
  EXPECT_EQ(ToResult(sse.usage()), Expect(9, 3, std::string(64, 'x')));
  EXPECT_EQ(ToResult(whole.usage()), Expect(1117, 46, "stop"));
}

}  // namespace
}  // namespace llmtap::proxy
