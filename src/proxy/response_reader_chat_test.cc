// The ResponseReader keeping a chat or completions response's text (capture_responses): streamed
// and not, tool calls in fragments, reasoning, escapes, choice 0 only, the byte cap, every split
// of the bytes, malformed documents, and the usage the same as the UsageScanner's.
#include <string>
#include <string_view>
#include <vector>

#include "proxy/response_reader.h"
#include "proxy/usage_scanner_test_util.h"

namespace llmtap {

bool operator==(const ResponseToolCall& a, const ResponseToolCall& b) {
  return a.index == b.index && a.name == b.name && a.arguments == b.arguments;
}

bool operator==(const ResponseText& a, const ResponseText& b) {
  return a.text == b.text && a.reasoning == b.reasoning && a.tool_calls == b.tool_calls &&
         a.truncated == b.truncated;
}

void PrintTo(const ResponseText& r, std::ostream* os) {
  *os << "{text=\"" << r.text << "\" reasoning=\"" << r.reasoning << "\" tool_calls=[";
  for (const ResponseToolCall& c : r.tool_calls) {
    *os << "{" << c.index << " \"" << c.name << "\" \"" << c.arguments << "\"}";
  }
  *os << "] truncated=" << r.truncated << "}";
}

namespace proxy {
namespace {

using namespace usage_scanner_test_util;

constexpr size_t kMiB = 1 << 20;

ResponseText Text(std::string text, std::string reasoning = "",
                  std::vector<ResponseToolCall> calls = {}, bool truncated = false) {
  return ResponseText{std::move(text), std::move(reasoning), std::move(calls), truncated};
}

std::string_view ContentType(Mode mode) {
  return mode == Mode::kSse ? "text/event-stream" : "application/json";
}

// What a reader keeping at most max_bytes of text makes of `body` fed in `pieces`.
ResponseOutcome Read(Mode mode, const std::vector<std::string_view>& pieces, size_t max_bytes) {
  ResponseReader reader(api::Endpoint::kChat, ContentType(mode), "", max_bytes);
  for (std::string_view piece : pieces) reader.Feed(piece);
  ResponseOutcome o;
  reader.Finish(&o);
  EXPECT_TRUE(o.has_response);
  return o;
}

// The usage a reader found, as the UsageScanner's tests write it.
Result UsageOf(const ResponseOutcome& o) {
  auto count = [](int64_t v) { return v >= 0 ? std::optional<int64_t>(v) : std::nullopt; };
  return {count(o.prompt_tokens), count(o.completion_tokens), o.finish_reason};
}

ResponseText ScanText(Mode mode, std::string_view body, size_t max_bytes = kMiB) {
  return Read(mode, {body}, max_bytes).response;
}

// Whole, byte by byte, and in two parts at every offset: all give the same text (and, for a
// well-formed body, the usage the UsageScanner finds without text).
ResponseText ScanTextEverySplit(Mode mode, std::string_view body, size_t max_bytes = kMiB) {
  const ResponseOutcome whole_outcome = Read(mode, {body}, max_bytes);
  const ResponseText& whole = whole_outcome.response;
  {
    std::vector<std::string_view> bytes;
    for (size_t i = 0; i < body.size(); ++i) bytes.push_back(body.substr(i, 1));
    EXPECT_EQ(Read(mode, bytes, max_bytes).response, whole) << "byte by byte";
  }
  for (size_t cut = 0; cut <= body.size(); ++cut) {
    const ResponseText split =
        Read(mode, {body.substr(0, cut), body.substr(cut)}, max_bytes).response;
    if (!(split == whole)) {
      ADD_FAILURE() << "split at " << cut << ": " << ::testing::PrintToString(split) << " vs whole "
                    << ::testing::PrintToString(whole);
      break;
    }
  }
  return whole;
}

std::string Chunk(std::string_view choice) {
  return SseEvent(std::string(kVllmChatHead) + R"("choices":[)" + std::string(choice) + "]}");
}

std::string DeltaChunk(std::string_view delta, int index = 0) {
  return Chunk(R"({"index":)" + std::to_string(index) + R"(,"delta":)" + std::string(delta) +
               R"(,"logprobs":null,"finish_reason":null})");
}

TEST(ResponseReaderChatTest, ChatNonStreamed) {
  EXPECT_EQ(ScanTextEverySplit(Mode::kJson, kVllmChatResponse),
            Text(R"(Hello! "usage": {"prompt_tokens": 5} How can I help?)"));
  EXPECT_EQ(ScanTextEverySplit(Mode::kJson, kOpenAiChatResponse),
            Text("The image shows a wooden boardwalk path."));
}

TEST(ResponseReaderChatTest, ChatStreamed) {
  EXPECT_EQ(ScanTextEverySplit(Mode::kSse, OpenAiChatStream()), Text("Hi there!"));
  EXPECT_EQ(ScanTextEverySplit(Mode::kSse, VllmContinuousUsageStream()), Text("Once upon a time,"));
}

TEST(ResponseReaderChatTest, CompletionsBothWays) {
  constexpr std::string_view kJson =
      R"({"id":"cmpl-1","object":"text_completion","created":1,"model":"m","choices":[)"
      R"({"index":0,"text":" jumps over\nthe lazy dog","logprobs":null,"finish_reason":"length",)"
      R"("stop_reason":null,"prompt_logprobs":null}],"usage":{"prompt_tokens":5,)"
      R"("total_tokens":12,"completion_tokens":7}})";
  EXPECT_EQ(ScanTextEverySplit(Mode::kJson, kJson), Text(" jumps over\nthe lazy dog"));

  std::string stream;
  for (const char* piece : {" jumps", " over", "\\n", "the", " lazy", " dog"}) {
    stream += SseEvent(std::string(R"({"id":"cmpl-1","object":"text_completion","choices":[)") +
                       R"({"index":0,"text":")" + piece +
                       R"(","logprobs":null,"finish_reason":null}],"usage":null})");
  }
  stream += VllmUsageEnd(R"({"id":"cmpl-1",)", R"({"prompt_tokens":5,"completion_tokens":6})");
  EXPECT_EQ(ScanTextEverySplit(Mode::kSse, stream), Text(" jumps over\nthe lazy dog"));
}

TEST(ResponseReaderChatTest, ToolCallsNonStreamedInOrder) {
  constexpr std::string_view kJson =
      R"({"choices":[{"index":0,"message":{"role":"assistant","content":null,"tool_calls":[)"
      R"({"id":"call_a","type":"function","function":{"name":"get_weather",)"
      R"("arguments":"{\"city\": \"Paris\"}"}},)"
      R"({"id":"call_b","type":"function","function":{"arguments":"{}","name":"get_time"}}]},)"
      R"("finish_reason":"tool_calls"}]})";
  EXPECT_EQ(ScanTextEverySplit(Mode::kJson, kJson),
            Text("", "", {{0, "get_weather", R"({"city": "Paris"})"}, {1, "get_time", "{}"}}));
}

TEST(ResponseReaderChatTest, ToolCallsStreamedInFragmentsInterleaved) {
  std::string stream = DeltaChunk(R"({"role":"assistant","content":null})");
  stream += DeltaChunk(R"({"tool_calls":[{"index":0,"id":"call_a","type":"function",)"
                       R"("function":{"name":"get_weather","arguments":""}}]})");
  stream += DeltaChunk(R"({"tool_calls":[{"index":1,"id":"call_b","type":"function",)"
                       R"("function":{"name":"get_","arguments":"{\"tz\""}}]})");
  stream += DeltaChunk(R"({"tool_calls":[{"index":0,"function":{"arguments":"{\"city\""}}]})");
  stream += DeltaChunk(R"({"tool_calls":[{"index":1,"function":{"name":"time"}}]})");
  // Both calls in one delta; the second names its index after its function.
  stream += DeltaChunk(R"({"tool_calls":[{"index":0,"function":{"arguments":": \"Paris\"}"}},)"
                       R"({"function":{"arguments":": \"UTC\"}"},"index":1}]})");
  stream += Chunk(R"({"index":0,"delta":{},"finish_reason":"tool_calls"})");
  stream += "data: [DONE]\n\n";
  EXPECT_EQ(
      ScanTextEverySplit(Mode::kSse, stream),
      Text("", "",
           {{0, "get_weather", R"({"city": "Paris"})"}, {1, "get_time", R"({"tz": "UTC"})"}}));
}

TEST(ResponseReaderChatTest, Reasoning) {
  std::string stream;
  for (const char* piece : {"Let me", " think."}) {
    stream += DeltaChunk(std::string(R"({"reasoning_content":")") + piece + R"(","content":null})");
  }
  // Newer vLLM: "reasoning", and both keys carrying the same text in one delta (counted once).
  stream += DeltaChunk(R"({"reasoning":" Done.","reasoning_content":" Done."})");
  stream += DeltaChunk(R"({"reasoning_content":null,"reasoning":" Really."})");
  stream += DeltaChunk(R"({"content":"Yes."})");
  EXPECT_EQ(ScanTextEverySplit(Mode::kSse, stream), Text("Yes.", "Let me think. Done. Really."));

  constexpr std::string_view kJson =
      R"({"choices":[{"index":0,"message":{"role":"assistant","reasoning_content":"Because.",)"
      R"("content":"42"},"finish_reason":"stop"}]})";
  EXPECT_EQ(ScanTextEverySplit(Mode::kJson, kJson), Text("42", "Because."));
}

TEST(ResponseReaderChatTest, EscapesAndSurrogates) {
  // Short escapes, \u escapes in both cases, a pair, raw UTF-8.
  constexpr std::string_view kJson = R"({"choices":[{"index":0,"message":{"content":)"
                                     R"("a\"b\\c\/d\b\f\n\r\t|\u00e9\u00E9|\ud83d\ude00|caf)"
                                     "\xc3\xa9 \xf0\x9f\x98\x80"
                                     R"(|end"}}]})";
  EXPECT_EQ(ScanTextEverySplit(Mode::kJson, kJson),
            Text("a\"b\\c/d\b\f\n\r\t|\xc3\xa9\xc3\xa9|\xf0\x9f\x98\x80|caf\xc3\xa9 "
                 "\xf0\x9f\x98\x80|end"));
  // A lone surrogate (no server's detokenizer writes one): the document is not read, as the
  // capture does not record a request holding one (non_standard_json).
  EXPECT_EQ(ScanText(Mode::kJson, R"({"choices":[{"index":0,"message":{"content":"a\ud83dx"}}]})"),
            Text(""));
  // Keys are unescaped before they are compared.
  EXPECT_EQ(ScanText(Mode::kJson, R"({"choices":[{"ind\u0065x":0,"m\u0065ssage":)"
                                  R"({"cont\u0065nt":"ok"}}]})"),
            Text("ok"));
}

TEST(ResponseReaderChatTest, OnlyChoiceZero) {
  constexpr std::string_view kJson =
      R"({"choices":[{"index":0,"message":{"content":"first","tool_calls":[)"
      R"({"function":{"name":"f","arguments":"1"}}]},"finish_reason":"stop"},)"
      R"({"index":1,"message":{"content":"second","reasoning_content":"r","tool_calls":[)"
      R"({"function":{"name":"g","arguments":"2"}}]},"finish_reason":"stop"}]})";
  EXPECT_EQ(ScanTextEverySplit(Mode::kJson, kJson), Text("first", "", {{0, "f", "1"}}));

  // n=2 streamed: the choices' deltas interleave, one choice per chunk.
  std::string stream;
  for (const char* piece : {"A", "B", "C"}) {
    stream += DeltaChunk(std::string(R"({"content":")") + piece + "0\"}", 0);
    stream += DeltaChunk(std::string(R"({"content":")") + piece + "1\"}", 1);
  }
  EXPECT_EQ(ScanTextEverySplit(Mode::kSse, stream), Text("A0B0C0"));
}

TEST(ResponseReaderChatTest, IndexAfterContent) {
  // Streamed: each chunk's choice names its index last; choice 1 comes first in one chunk.
  std::string stream;
  stream += Chunk(R"({"delta":{"content":"x1","tool_calls":[{"index":0,"function":)"
                  R"({"name":"no"}}]},"index":1})");
  stream += Chunk(R"({"delta":{"content":"a","reasoning_content":"r"},"index":0})");
  stream += Chunk(R"({"delta":{"content":"y1"},"index":1},{"delta":{"content":"b"},"index":0})");
  stream += Chunk(R"({"delta":{"tool_calls":[{"index":0,"function":{"name":"yes"}}]},"index":0})");
  EXPECT_EQ(ScanTextEverySplit(Mode::kSse, stream), Text("ab", "r", {{0, "yes", ""}}));

  // Not streamed: position 0 holds choice 1, position 1 holds choice 0.
  constexpr std::string_view kJson = R"({"choices":[{"message":{"content":"one"},"index":1},)"
                                     R"({"message":{"content":"zero"},"index":0}]})";
  EXPECT_EQ(ScanTextEverySplit(Mode::kJson, kJson), Text("zero"));

  // No index at all: the position decides.
  EXPECT_EQ(ScanTextEverySplit(Mode::kJson, R"({"choices":[{"text":"p0"},{"text":"p1"}]})"),
            Text("p0"));
}

TEST(ResponseReaderChatTest, TruncationAtCharacterBoundary) {
  // "aé😀b": 1 + 2 + 4 + 1 bytes, written raw and as escapes.
  for (const std::string_view content : {std::string_view("a\xc3\xa9\xf0\x9f\x98\x80"
                                                          "b"),
                                         std::string_view(R"(a\u00e9\ud83d\ude00b)")}) {
    const std::string json =
        R"({"choices":[{"index":0,"message":{"content":")" + std::string(content) + R"("}}]})";
    SCOPED_TRACE(json);
    EXPECT_EQ(ScanTextEverySplit(Mode::kJson, json, 8), Text("a\xc3\xa9\xf0\x9f\x98\x80"
                                                             "b"));
    EXPECT_EQ(ScanTextEverySplit(Mode::kJson, json, 7),
              Text("a\xc3\xa9\xf0\x9f\x98\x80", "", {}, true));
    for (size_t max : {3u, 4u, 5u, 6u}) {
      EXPECT_EQ(ScanTextEverySplit(Mode::kJson, json, max), Text("a\xc3\xa9", "", {}, true)) << max;
    }
    EXPECT_EQ(ScanTextEverySplit(Mode::kJson, json, 2), Text("a", "", {}, true));
  }
  // The cap spans every string; once one is cut nothing later is kept, even what would fit.
  std::string stream = DeltaChunk(R"({"reasoning_content":"abcd"})") +
                       DeltaChunk(R"({"content":"efgh"})") + DeltaChunk(R"({"content":"i"})");
  EXPECT_EQ(ScanTextEverySplit(Mode::kSse, stream, 6), Text("ef", "abcd", {}, true));
  EXPECT_EQ(ScanTextEverySplit(Mode::kSse, stream, 9), Text("efghi", "abcd"));
  // A held choice that is dropped gives its bytes back.
  stream = Chunk(R"({"delta":{"content":"0123456789"},"index":1})") +
           DeltaChunk(R"({"content":"kept"})");
  EXPECT_EQ(ScanTextEverySplit(Mode::kSse, stream, 4), Text("kept"));
}

TEST(ResponseReaderChatTest, AMalformedDocumentSaysNothingAndTheOthersCount) {
  // Events that are not JSON objects give no text; the events around them do.
  std::string stream = DeltaChunk(R"({"content":"ok"})") +
                       Chunk(R"({"index":0,"delta":{"content":"lost"}} garbage)") +
                       SseEvent(R"({"choices":[{"index":0,"delta":{"content":"bad\x"}}]})") +
                       DeltaChunk(R"({"content":" fine"})") + "data: {\"choices\":[{\"index\":0,";
  EXPECT_EQ(ScanTextEverySplit(Mode::kSse, stream), Text("ok fine"));
  // A body cut short, or not OpenAI-shaped: no text, and no usage either.
  const std::string usage = R"("usage":{"prompt_tokens":7,"completion_tokens":3},)";
  const ResponseOutcome cut =
      Read(Mode::kJson, {"{" + usage + R"("choices":[{"text":"cut sh)"}, kMiB);
  EXPECT_EQ(cut.response, Text(""));
  EXPECT_EQ(UsageOf(cut), Result{});
  EXPECT_EQ(ScanTextEverySplit(Mode::kJson, R"([{"choices":[{"text":"no"}]}])"), Text(""));
  EXPECT_EQ(ScanTextEverySplit(Mode::kJson, R"({"error":{"message":"bad request"}})"), Text(""));
  EXPECT_EQ(ScanTextEverySplit(Mode::kJson, R"({"choices":{"text":"no"}})"), Text(""));
}

// Well-formed answers: the usage and finish reason are the UsageScanner's (which reads them when
// no text is kept).
TEST(ResponseReaderChatTest, TheUsageIsTheScannersWhenTextIsKept) {
  const std::string bodies[] = {std::string(kVllmChatResponse), std::string(kOpenAiChatResponse)};
  for (const std::string& body : bodies) {
    EXPECT_EQ(UsageOf(Read(Mode::kJson, {body}, kMiB)), Scan(Mode::kJson, body)) << body;
  }
  for (const std::string& stream : {OpenAiChatStream(), VllmContinuousUsageStream()}) {
    EXPECT_EQ(UsageOf(Read(Mode::kSse, {stream}, kMiB)), Scan(Mode::kSse, stream)) << stream;
  }
}

TEST(ResponseReaderChatTest, OnlyWhenAskedAndReadable) {
  ResponseReader off(api::Endpoint::kChat, "text/event-stream", "", 0);
  off.Feed(OpenAiChatStream());
  ResponseOutcome o;
  off.Finish(&o);
  EXPECT_FALSE(o.has_response);
  EXPECT_EQ(UsageOf(o), Expect(9, 3, "stop"));
  ResponseReader compressed(api::Endpoint::kChat, "application/json", "gzip", kMiB);
  compressed.Feed("\x1f\x8b");
  ResponseOutcome c;
  compressed.Finish(&c);
  EXPECT_FALSE(c.has_response);
  // Embeddings have no text: read by the scanner, with an empty text when one was asked for.
  ResponseReader embeddings(api::Endpoint::kEmbeddings, "application/json", "", kMiB);
  embeddings.Feed(R"({"data":[{"embedding":[0.5]}],"usage":{"prompt_tokens":4}})");
  ResponseOutcome e;
  embeddings.Finish(&e);
  EXPECT_TRUE(e.has_response);
  EXPECT_EQ(e.response, Text(""));
  EXPECT_EQ(e.prompt_tokens, 4);
}

TEST(ResponseReaderChatTest, NotKeepingTextAllocatesNothing) {
  if (!llmtap::testing::AllocationCountingEnabled()) GTEST_SKIP() << "allocations not counted";
  const std::string stream = OpenAiChatStream();
  ResponseReader reader(api::Endpoint::kChat, "text/event-stream", "", 0);
  const int64_t before = llmtap::testing::ThreadAllocations();
  reader.Feed(stream);
  ResponseOutcome o;
  reader.Finish(&o);
  const int64_t after = llmtap::testing::ThreadAllocations();
  EXPECT_EQ(after - before, 0);
  EXPECT_EQ(UsageOf(o), Expect(9, 3, "stop"));
}

}  // namespace
}  // namespace proxy
}  // namespace llmtap
