// UsageScanner on responses shaped like vLLM's and OpenAI's (chat and completions, streamed and
// not), fed whole, in two parts at every offset and byte by byte; SSE framing variants; decoys;
// escapes; malformed input; and a check that Feed never allocates.
#include "proxy/usage_scanner.h"

#include <random>
#include <string>
#include <string_view>

#include <gtest/gtest.h>

#include "common/testing/alloc_counter.h"

namespace llmtap::proxy {
namespace {

using Mode = UsageScanner::Mode;

struct Result {
  std::optional<int64_t> prompt_tokens;
  std::optional<int64_t> completion_tokens;
  std::string finish_reason;
  bool operator==(const Result&) const = default;
};

std::ostream& operator<<(std::ostream& os, const Result& r) {
  auto opt = [](const std::optional<int64_t>& v) {
    return v ? std::to_string(*v) : std::string("none");
  };
  return os << "{prompt=" << opt(r.prompt_tokens) << " completion=" << opt(r.completion_tokens)
            << " finish=\"" << r.finish_reason << "\"}";
}

Result ToResult(const ResponseUsage& u) {
  return {u.prompt_tokens, u.completion_tokens, u.finish_reason};
}

Result Scan(Mode mode, std::string_view body) {
  UsageScanner scanner(mode);
  scanner.Feed(body);
  return ToResult(scanner.usage());
}

Result ScanPieces(Mode mode, std::string_view body, size_t piece) {
  UsageScanner scanner(mode);
  for (size_t i = 0; i < body.size(); i += piece) scanner.Feed(body.substr(i, piece));
  return ToResult(scanner.usage());
}

// Whole, byte by byte, and in two parts at every offset: all give the same result.
Result ScanEverySplit(Mode mode, std::string_view body) {
  const Result whole = Scan(mode, body);
  EXPECT_EQ(ScanPieces(mode, body, 1), whole) << "byte by byte";
  for (size_t cut = 0; cut <= body.size(); ++cut) {
    UsageScanner scanner(mode);
    scanner.Feed(body.substr(0, cut));
    scanner.Feed(body.substr(cut));
    const Result split = ToResult(scanner.usage());
    if (split != whole) {
      ADD_FAILURE() << "split at " << cut << ": " << split << " vs whole " << whole;
      break;
    }
  }
  return whole;
}

Result Expect(std::optional<int64_t> prompt, std::optional<int64_t> completion,
              std::string finish) {
  return {prompt, completion, std::move(finish)};
}

std::string Replace(std::string s, std::string_view from, std::string_view to) {
  for (size_t at = s.find(from); at != std::string::npos; at = s.find(from, at + to.size())) {
    s.replace(at, from.size(), to);
  }
  return s;
}

// --- Responses shaped like real servers' ---

constexpr std::string_view kVllmChatHead =
    R"({"id":"chatcmpl-5d1c0b4e2a9f4b7e8c3d","object":"chat.completion.chunk","created":1718000000,)"
    R"("model":"meta-llama/Llama-3.1-8B-Instruct",)";

std::string SseEvent(std::string_view json) { return "data: " + std::string(json) + "\n\n"; }

// How vLLM ends a stream with include_usage: a chunk of no choices with the usage, then [DONE].
std::string VllmUsageEnd(std::string_view head, std::string_view usage) {
  return SseEvent(std::string(head) + R"("choices":[],"usage":)" + std::string(usage) + "}") +
         "data: [DONE]\n\n";
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

// vLLM chat with continuous_usage_stats: usage in every chunk, growing.
std::string VllmContinuousUsageStream() {
  std::string s;
  const char* tokens[] = {"Once", " upon", " a", " time", ","};
  for (int i = 0; i < 5; ++i) {
    s += SseEvent(std::string(kVllmChatHead) + R"("choices":[{"index":0,"delta":{"content":")" +
                  tokens[i] + R"("},"logprobs":null,"finish_reason":)" +
                  (i == 4 ? R"("length","stop_reason":null)" : "null") +
                  R"(}],"usage":{"prompt_tokens":31,"total_tokens":)" + std::to_string(32 + i) +
                  R"(,"completion_tokens":)" + std::to_string(i + 1) + "}}");
  }
  s += VllmUsageEnd(kVllmChatHead,
                    R"({"prompt_tokens":31,"total_tokens":36,"completion_tokens":5})");
  return s;
}

// OpenAI chat with include_usage: "usage":null in every chunk, then a usage chunk with details.
std::string OpenAiChatStream() {
  constexpr std::string_view kHead =
      R"({"id":"chatcmpl-AbCdEf0123456789","object":"chat.completion.chunk","created":1731000000,)"
      R"("model":"gpt-4o-mini-2024-07-18","service_tier":"default",)"
      R"("system_fingerprint":"fp_0ba0d124f1",)";
  std::string s;
  s += SseEvent(std::string(kHead) +
                R"("choices":[{"index":0,"delta":{"role":"assistant","content":"","refusal":null},)"
                R"("logprobs":null,"finish_reason":null}],"usage":null,"obfuscation":"x1"})");
  for (const char* token : {"Hi", " there", "!"}) {
    s += SseEvent(std::string(kHead) + R"("choices":[{"index":0,"delta":{"content":")" + token +
                  R"("},"logprobs":null,"finish_reason":null}],"usage":null,"obfuscation":"q"})");
  }
  s += SseEvent(std::string(kHead) +
                R"("choices":[{"index":0,"delta":{},"logprobs":null,"finish_reason":"stop"}],)"
                R"("usage":null})");
  s +=
      SseEvent(std::string(kHead) +
               R"("choices":[],"usage":{"prompt_tokens":9,"completion_tokens":3,"total_tokens":12,)"
               R"("prompt_tokens_details":{"cached_tokens":0,"audio_tokens":0},)"
               R"("completion_tokens_details":{"reasoning_tokens":0,"audio_tokens":0,)"
               R"("accepted_prediction_tokens":0,"rejected_prediction_tokens":0}}})");
  s += "data: [DONE]\n\n";
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

constexpr std::string_view kVllmChatResponse =
    R"({"id":"chatcmpl-8f2c","object":"chat.completion","created":1718000000,)"
    R"("model":"meta-llama/Llama-3.1-8B-Instruct","choices":[{"index":0,"message":{"role":)"
    R"("assistant","reasoning_content":null,"content":"Hello! \"usage\": {\"prompt_tokens\": 5})"
    R"( How can I help?","tool_calls":[]},"logprobs":null,"finish_reason":"stop",)"
    R"("stop_reason":null}],"usage":{"prompt_tokens":12,"total_tokens":21,"completion_tokens":9,)"
    R"("prompt_tokens_details":null},"prompt_logprobs":null,"kv_transfer_params":null})";

// OpenAI returns pretty-printed JSON.
constexpr std::string_view kOpenAiChatResponse = R"({
  "id": "chatcmpl-B9MHDbslfkBeAs8l4bebGdFOJ6PeG",
  "object": "chat.completion",
  "created": 1741570283,
  "model": "gpt-4o-2024-08-06",
  "choices": [
    {
      "index": 0,
      "message": {
        "role": "assistant",
        "content": "The image shows a wooden boardwalk path.",
        "refusal": null,
        "annotations": []
      },
      "logprobs": null,
      "finish_reason": "stop"
    }
  ],
  "usage": {
    "prompt_tokens": 1117,
    "completion_tokens": 46,
    "total_tokens": 1163,
    "prompt_tokens_details": {
      "cached_tokens": 0,
      "audio_tokens": 0
    },
    "completion_tokens_details": {
      "reasoning_tokens": 0,
      "audio_tokens": 0,
      "accepted_prediction_tokens": 0,
      "rejected_prediction_tokens": 0
    }
  },
  "service_tier": "default",
  "system_fingerprint": "fp_fc9f1d7035"
}
)";

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
