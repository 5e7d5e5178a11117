// UsageScanner on vLLM- and OpenAI-shaped responses, streamed and not, and SSE framing.
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

std::string Replace(std::string s, std::string_view from, std::string_view to) {
  for (size_t at = s.find(from); at != std::string::npos; at = s.find(from, at + to.size())) {
    s.replace(at, from.size(), to);
  }
  return s;
}

// vLLM chat, stream_options.include_usage: usage only in a last chunk with "choices":[].
std::string VllmChatStream() {
  std::string s;
  auto chunk = [&](std::string_view delta, std::string_view finish) {
    s += SseEvent(std::string(kVllmChatHead) + R"("choices":[{"index":0,"delta":)" +
                  std::string(delta) + R"(,"logprobs":null,"finish_reason":)" +
                  std::string(finish) + "}]}");
  };
  chunk(R"({"role":"assistant","content":""})", "null");
  for (const char* token : {"The", " capital", " of", " France", " is", " Paris", "."}) {
    chunk(std::string(R"({"content":")") + token + "\"}", "null");
  }
  chunk(R"({"content":""})", R"("stop","stop_reason":null)");
  s += VllmUsageEnd(kVllmChatHead,
                    R"({"prompt_tokens":17,"total_tokens":25,"completion_tokens":8})");
  return s;
}

// vLLM /v1/completions streamed with include_usage.
std::string VllmCompletionStream() {
  constexpr std::string_view kHead =
      R"({"id":"cmpl-9a8b7c6d5e4f","object":"text_completion","created":1718000001,)"
      R"("model":"meta-llama/Llama-3.1-8B",)";
  std::string s;
  const char* tokens[] = {" Paris", ",", " the", " city"};
  for (int i = 0; i < 4; ++i) {
    s += SseEvent(std::string(kHead) + R"("choices":[{"index":0,"text":")" + tokens[i] +
                  R"(","logprobs":null,"finish_reason":)" + (i == 3 ? R"("length")" : "null") +
                  R"(,"stop_reason":null}],"usage":null})");
  }
  s += VllmUsageEnd(kHead, R"({"prompt_tokens":5,"total_tokens":9,"completion_tokens":4})");
  return s;
}

// A streamed tool call whose arguments mention usage; finish_reason "tool_calls".
std::string ToolCallStream() {
  std::string s;
  s += SseEvent(std::string(kVllmChatHead) +
                R"("choices":[{"index":0,"delta":{"role":"assistant","tool_calls":[{"id":"call_1",)"
                R"("type":"function","index":0,"function":{"name":"report_usage",)"
                R"("arguments":"{\"usage\": {\"prompt_tokens\": 999, "}}]},"logprobs":null,)"
                R"("finish_reason":null}]})");
  s += SseEvent(std::string(kVllmChatHead) +
                R"("choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":)"
                R"({"arguments":"\"completion_tokens\": 998}, \"finish_reason\": \"x\"}"}}]},)"
                R"("logprobs":null,"finish_reason":"tool_calls","stop_reason":null}]})");
  s += VllmUsageEnd(kVllmChatHead,
                    R"({"prompt_tokens":120,"total_tokens":150,"completion_tokens":30})");
  return s;
}

constexpr std::string_view kVllmCompletionResponse =
    R"({"id":"cmpl-3f1e","object":"text_completion","created":1718000002,)"
    R"("model":"meta-llama/Llama-3.1-8B","choices":[{"index":0,"text":" Paris, the capital)"
    R"( of France.","logprobs":null,"finish_reason":"length","stop_reason":null,)"
    R"("prompt_logprobs":null}],"usage":{"prompt_tokens":6,"total_tokens":14,)"
    R"("completion_tokens":8,"prompt_tokens_details":null}})";

// --- ModeFor ---

TEST(UsageScannerModeTest, FromContentType) {
  EXPECT_EQ(UsageScanner::ModeFor("text/event-stream"), Mode::kSse);
  EXPECT_EQ(UsageScanner::ModeFor("text/event-stream; charset=utf-8"), Mode::kSse);
  EXPECT_EQ(UsageScanner::ModeFor("Text/Event-Stream"), Mode::kSse);
  EXPECT_EQ(UsageScanner::ModeFor("  text/event-stream ;charset=utf-8"), Mode::kSse);
  EXPECT_EQ(UsageScanner::ModeFor("application/json"), Mode::kJson);
  EXPECT_EQ(UsageScanner::ModeFor("APPLICATION/JSON; charset=UTF-8"), Mode::kJson);
  EXPECT_EQ(UsageScanner::ModeFor("application/problem+json"), Mode::kJson);
  EXPECT_EQ(UsageScanner::ModeFor("application/vnd.api+JSON"), Mode::kJson);
  EXPECT_EQ(UsageScanner::ModeFor("application/+json"), Mode::kNone);
  EXPECT_EQ(UsageScanner::ModeFor("application/x-ndjson"), Mode::kNone);
  EXPECT_EQ(UsageScanner::ModeFor("application/jsonl"), Mode::kNone);
  EXPECT_EQ(UsageScanner::ModeFor("text/plain"), Mode::kNone);
  EXPECT_EQ(UsageScanner::ModeFor("text/html; charset=utf-8"), Mode::kNone);
  EXPECT_EQ(UsageScanner::ModeFor(""), Mode::kNone);
}

TEST(UsageScannerModeTest, ACompressedBodyIsNotRead) {
  EXPECT_EQ(UsageScanner::ModeFor("application/json", "gzip"), Mode::kNone);
  EXPECT_EQ(UsageScanner::ModeFor("text/event-stream", " br "), Mode::kNone);
  EXPECT_EQ(UsageScanner::ModeFor("application/json", "gzip, identity"), Mode::kNone);
  EXPECT_EQ(UsageScanner::ModeFor("application/json", "Identity"), Mode::kJson);
  EXPECT_EQ(UsageScanner::ModeFor("text/event-stream", ""), Mode::kSse);
}

TEST(UsageScannerModeTest, NoneIgnoresEverything) {
  UsageScanner scanner(Mode::kNone);
  scanner.Feed(kVllmChatResponse);
  scanner.Feed(VllmChatStream());
  EXPECT_EQ(ToResult(scanner.usage()), Expect(std::nullopt, std::nullopt, ""));
  EXPECT_EQ(scanner.mode(), Mode::kNone);
}

// --- Real-shaped responses, at every split ---

TEST(UsageScannerTest, VllmChatNonStreaming) {
  EXPECT_EQ(ScanEverySplit(Mode::kJson, kVllmChatResponse), Expect(12, 9, "stop"));
}

TEST(UsageScannerTest, OpenAiChatNonStreamingPretty) {
  EXPECT_EQ(ScanEverySplit(Mode::kJson, kOpenAiChatResponse), Expect(1117, 46, "stop"));
}

TEST(UsageScannerTest, VllmCompletionNonStreaming) {
  EXPECT_EQ(ScanEverySplit(Mode::kJson, kVllmCompletionResponse), Expect(6, 8, "length"));
}

TEST(UsageScannerTest, VllmChatStreamWithIncludeUsage) {
  EXPECT_EQ(ScanEverySplit(Mode::kSse, VllmChatStream()), Expect(17, 8, "stop"));
}

TEST(UsageScannerTest, VllmContinuousUsageTakesLastValues) {
  const std::string stream = VllmContinuousUsageStream();
  EXPECT_EQ(ScanEverySplit(Mode::kSse, stream), Expect(31, 5, "length"));
  // Cut off before the final usage chunk, the last per-chunk usage stands.
  const std::string cut = stream.substr(0, stream.find("\"choices\":[]"));
  EXPECT_EQ(Scan(Mode::kSse, cut), Expect(31, 5, "length"));
  const std::string first = stream.substr(0, stream.find("\n\n") + 2);
  EXPECT_EQ(Scan(Mode::kSse, first), Expect(31, 1, ""));
}

TEST(UsageScannerTest, OpenAiChatStreamWithUsageNullInEveryChunk) {
  EXPECT_EQ(ScanEverySplit(Mode::kSse, OpenAiChatStream()), Expect(9, 3, "stop"));
}

TEST(UsageScannerTest, VllmCompletionStream) {
  EXPECT_EQ(ScanEverySplit(Mode::kSse, VllmCompletionStream()), Expect(5, 4, "length"));
}

TEST(UsageScannerTest, ToolCallArgumentsAreNotUsage) {
  const std::string stream = ToolCallStream();
  EXPECT_EQ(ScanEverySplit(Mode::kSse, stream), Expect(120, 30, "tool_calls"));
  // Without the usage chunk, nothing from the arguments leaks in.
  EXPECT_EQ(Scan(Mode::kSse, stream.substr(0, stream.find("\"choices\":[]"))),
            Expect(std::nullopt, std::nullopt, "tool_calls"));
}

TEST(UsageScannerTest, StreamWithoutUsage) {
  std::string stream = VllmChatStream();
  stream.erase(stream.find("data: " + std::string(kVllmChatHead) + R"("choices":[])"));
  EXPECT_EQ(ScanEverySplit(Mode::kSse, stream), Expect(std::nullopt, std::nullopt, "stop"));
}

TEST(UsageScannerTest, RandomPiecesGiveTheSameResult) {
  std::mt19937 rng(7);
  for (const std::string& stream :
       {VllmChatStream(), OpenAiChatStream(), VllmContinuousUsageStream(), ToolCallStream()}) {
    const Result whole = Scan(Mode::kSse, stream);
    for (int round = 0; round < 200; ++round) {
      UsageScanner scanner(Mode::kSse);
      for (size_t i = 0; i < stream.size();) {
        const size_t n = std::uniform_int_distribution<size_t>(0, 40)(rng);
        scanner.Feed(std::string_view(stream).substr(i, n));
        i += n;
      }
      ASSERT_EQ(ToResult(scanner.usage()), whole);
    }
  }
}

// --- SSE framing ---

TEST(UsageScannerSseTest, CrLfAndCrLineEndings) {
  const std::string lf = VllmChatStream();
  EXPECT_EQ(ScanEverySplit(Mode::kSse, Replace(lf, "\n", "\r\n")), Expect(17, 8, "stop"));
  EXPECT_EQ(ScanEverySplit(Mode::kSse, Replace(lf, "\n", "\r")), Expect(17, 8, "stop"));
  // Mixed: each event ends "\r\n\r" (a CRLF line end, then a CR blank line).
  EXPECT_EQ(ScanEverySplit(Mode::kSse, Replace(lf, "\n\n", "\r\n\r")), Expect(17, 8, "stop"));
}

TEST(UsageScannerSseTest, CrThenLfAcrossFeedsIsOneLineEnd) {
  UsageScanner scanner(Mode::kSse);
  scanner.Feed("data: {\"usage\":{\"prompt_tokens\":1,\r");
  scanner.Feed("\ndata: \"completion_tokens\":2}}\r");
  scanner.Feed("\n\r");
  scanner.Feed("\n");
  EXPECT_EQ(ToResult(scanner.usage()), Expect(1, 2, ""));
}

TEST(UsageScannerSseTest, MultiLineDataIsJoined) {
  const std::string stream =
      "data: {\"choices\":[{\"index\":0,\"finish_reason\":\n"
      "data:\"stop\"}],\n"
      "data\n"
      "data:   \"usage\": {\"prompt_tokens\": 3,\n"
      "data: \"completion_tokens\": 4}}\n"
      "\n";
  EXPECT_EQ(ScanEverySplit(Mode::kSse, stream), Expect(3, 4, "stop"));
}

TEST(UsageScannerSseTest, JoinNewlineSplitsTokens) {
  // The lines are joined with "\n", so a number broken over two lines is two numbers (not JSON).
  EXPECT_EQ(Scan(Mode::kSse, "data: {\"usage\":{\"prompt_tokens\":1\ndata: 2}}\n\n"),
            Expect(std::nullopt, std::nullopt, ""));
}

TEST(UsageScannerSseTest, CommentsAndOtherFieldsAreIgnored) {
  const std::string stream =
      ": keep-alive\n"
      "\n"
      ":data: {\"usage\":{\"prompt_tokens\":100}}\n"
      "event: usage\n"
      "id: 7\n"
      "retry: 1000\n"
      "datax: {\"usage\":{\"prompt_tokens\":101}}\n"
      "Data: {\"usage\":{\"prompt_tokens\":102}}\n"
      "dat: {\"usage\":{\"prompt_tokens\":103}}\n"
      " data: {\"usage\":{\"prompt_tokens\":104}}\n"
      "data:{\"usage\":{\"prompt_tokens\":5,\"completion_tokens\":6}}\n"
      ": another comment\n"
      "\n";
  EXPECT_EQ(ScanEverySplit(Mode::kSse, stream), Expect(5, 6, ""));
}

TEST(UsageScannerSseTest, EventsWithoutDataDoNotResetAnEvent) {
  // A blank line with no data before it dispatches nothing; a comment inside an event keeps it.
  const std::string stream =
      "\n\n\n"
      "data: {\"usage\":\n"
      ": ping\n"
      "data: {\"prompt_tokens\":8}}\n"
      "\n";
  EXPECT_EQ(ScanEverySplit(Mode::kSse, stream), Expect(8, std::nullopt, ""));
}

TEST(UsageScannerSseTest, DoneAndNonObjectDataYieldNothing) {
  EXPECT_EQ(Scan(Mode::kSse, "data: [DONE]\n\ndata: 42\n\ndata: \"usage\"\n\ndata: null\n\n"),
            Expect(std::nullopt, std::nullopt, ""));
  // An array of chunks is not a chunk.
  EXPECT_EQ(Scan(Mode::kSse, "data: [{\"usage\":{\"prompt_tokens\":1}}]\n\n"),
            Expect(std::nullopt, std::nullopt, ""));
}

TEST(UsageScannerSseTest, LeadingBomIsDropped) {
  EXPECT_EQ(ScanEverySplit(Mode::kSse, "\xEF\xBB\xBF" + VllmChatStream()), Expect(17, 8, "stop"));
  EXPECT_EQ(ScanEverySplit(Mode::kJson, "\xEF\xBB\xBF" + std::string(kVllmChatResponse)),
            Expect(12, 9, "stop"));
  // A partial BOM spoils the first line only.
  EXPECT_EQ(Scan(Mode::kSse,
                 "\xEF\xBB"
                 "data: {\"usage\":{\"prompt_tokens\":1}}\n\n"
                 "data: {\"usage\":{\"prompt_tokens\":2}}\n\n"),
            Expect(2, std::nullopt, ""));
  EXPECT_EQ(Scan(Mode::kJson, "\xEF{\"usage\":{\"prompt_tokens\":1}}"),
            Expect(std::nullopt, std::nullopt, ""));
}

TEST(UsageScannerSseTest, EventCutOffByEndOfStreamKeepsCompleteMembers) {
  EXPECT_EQ(Scan(Mode::kSse, "data: {\"usage\":{\"prompt_tokens\":4,\"completion_tokens\":5"),
            Expect(4, std::nullopt, ""));
}

}  // namespace
}  // namespace llmtap::proxy
