// ResponseReader: each API's answers, as real servers send them (the api modules' own writers,
// which the sim serves, and hand-written vLLM / Anthropic shapes), read into an outcome; the
// same outcome for every split of the bytes; bounded memory for an oversized event.
#include "proxy/response_reader.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "api/messages.h"
#include "api/responses.h"

namespace llmtap::proxy {
namespace {

using api::Endpoint;

ResponseOutcome ReadAll(Endpoint endpoint, std::string_view content_type,
                        const std::vector<std::string_view>& pieces, size_t max_text = 1 << 20) {
  ResponseReader reader(endpoint, content_type, "", max_text);
  for (std::string_view p : pieces) reader.Feed(p);
  ResponseOutcome o;
  reader.Finish(&o);
  return o;
}

// The outcome of `bytes` fed whole, checked equal to the outcome of every split in two and of
// one byte at a time.
ResponseOutcome ReadEverySplit(Endpoint endpoint, std::string_view content_type,
                               std::string_view bytes, size_t max_text = 1 << 20) {
  const ResponseOutcome whole = ReadAll(endpoint, content_type, {bytes}, max_text);
  auto same = [&](const ResponseOutcome& o, const std::string& how) {
    EXPECT_EQ(o.prompt_tokens, whole.prompt_tokens) << how;
    EXPECT_EQ(o.completion_tokens, whole.completion_tokens) << how;
    EXPECT_STREQ(o.finish_reason, whole.finish_reason) << how;
    EXPECT_EQ(o.response_id, whole.response_id) << how;
    EXPECT_EQ(o.response.text, whole.response.text) << how;
    EXPECT_EQ(o.response.reasoning, whole.response.reasoning) << how;
    EXPECT_EQ(o.response.tool_calls.size(), whole.response.tool_calls.size()) << how;
  };
  for (size_t cut = 1; cut < bytes.size(); ++cut) {
    same(ReadAll(endpoint, content_type, {bytes.substr(0, cut), bytes.substr(cut)}, max_text),
         "cut at " + std::to_string(cut));
  }
  ResponseReader bytewise(endpoint, content_type, "", max_text);
  for (char c : bytes) bytewise.Feed(std::string_view(&c, 1));
  ResponseOutcome o;
  bytewise.Finish(&o);
  same(o, "byte by byte");
  return whole;
}

api::ResponseAnswer Answer(std::string_view function_name = {}) {
  api::ResponseAnswer a;
  a.id = "resp_abc";
  a.item_id = function_name.empty() ? "msg_1" : "fc_1";
  a.call_id = "call_1";
  a.model = "m";
  a.function_name = function_name;
  a.content = function_name.empty() ? "Hello \"w\u00f6rld\"" : R"({"city":"Paris"})";
  a.input_tokens = 12;
  a.output_tokens = 3;
  return a;
}

TEST(ResponseReaderTest, ResponsesStream) {
  api::ResponsesRequest r;
  api::RequestProblem p;
  ASSERT_TRUE(api::ParseResponsesRequest(R"({"input":"x","stream":true})", 100, &r, &p));
  const api::ResponseAnswer a = Answer();
  uint64_t seq = 0;
  std::string sse;
  api::AppendStreamStart(r, a, &seq, &sse);
  api::AppendStreamDelta(a, "Hello \"w", &seq, &sse);
  api::AppendStreamDelta(a, "\u00f6rld\"", &seq, &sse);
  api::AppendStreamEnd(r, a, &seq, &sse);
  const ResponseOutcome o = ReadEverySplit(Endpoint::kResponses, "text/event-stream", sse);
  EXPECT_EQ(o.prompt_tokens, 12);
  EXPECT_EQ(o.completion_tokens, 3);
  EXPECT_STREQ(o.finish_reason, "completed");
  EXPECT_EQ(o.response_id, "resp_abc");
  EXPECT_TRUE(o.has_response);
  EXPECT_EQ(o.response.text, "Hello \"w\u00f6rld\"");
  EXPECT_TRUE(o.response.tool_calls.empty());
}

TEST(ResponseReaderTest, ResponsesFunctionCallAndIncomplete) {
  api::ResponsesRequest r;
  api::RequestProblem p;
  ASSERT_TRUE(api::ParseResponsesRequest(
      R"({"input":"x","stream":true,"tools":[{"type":"function","name":"get_weather"}],"tool_choice":"required"})",
      100, &r, &p))
      << p.message;
  api::ResponseAnswer a = Answer("get_weather");
  a.incomplete = true;
  uint64_t seq = 0;
  std::string sse;
  api::AppendStreamStart(r, a, &seq, &sse);
  api::AppendStreamDelta(a, R"({"city":)", &seq, &sse);
  api::AppendStreamDelta(a, R"("Paris"})", &seq, &sse);
  api::AppendStreamEnd(r, a, &seq, &sse);
  const ResponseOutcome o = ReadEverySplit(Endpoint::kResponses, "text/event-stream", sse);
  EXPECT_STREQ(o.finish_reason, "max_output_tokens");
  ASSERT_EQ(o.response.tool_calls.size(), 1u);
  EXPECT_EQ(o.response.tool_calls[0].name, "get_weather");
  EXPECT_EQ(o.response.tool_calls[0].arguments, R"({"city":"Paris"})");
  EXPECT_EQ(o.response.text, "");

  // The same answer whole (application/json), with a byte order mark.
  std::string body = "\xEF\xBB\xBF";
  api::AppendResponseObject(r, a, &body);
  const ResponseOutcome whole = ReadEverySplit(Endpoint::kResponses, "application/json", body);
  EXPECT_STREQ(whole.finish_reason, "max_output_tokens");
  EXPECT_EQ(whole.prompt_tokens, 12);
  EXPECT_EQ(whole.completion_tokens, 3);
  EXPECT_EQ(whole.response_id, "resp_abc");
  ASSERT_EQ(whole.response.tool_calls.size(), 1u);
  EXPECT_EQ(whole.response.tool_calls[0].arguments, R"({"city":"Paris"})");
}

TEST(ResponseReaderTest, ResponsesReasoningAsVllmStreamsIt) {
  const std::string sse =
      "event: response.created\n"
      R"(data: {"type":"response.created","sequence_number":0,"response":{"id":"resp_r","status":"in_progress","usage":null}})"
      "\n\n"
      R"(data: {"type":"response.reasoning_text.delta","item_id":"rs_1","output_index":0,"content_index":0,"delta":"think","sequence_number":1})"
      "\n\n"
      R"(data: {"type":"response.output_text.delta","item_id":"msg_1","output_index":1,"content_index":0,"delta":"answer","sequence_number":2})"
      "\r\n\r\n"
      R"(data: {"type":"response.completed","sequence_number":3,"response":{"id":"resp_r","status":"completed","incomplete_details":null,"usage":{"input_tokens":5,"output_tokens":7,"total_tokens":12}}})"
      "\n\n";
  const ResponseOutcome o = ReadEverySplit(Endpoint::kResponses, "text/event-stream", sse);
  EXPECT_EQ(o.response.reasoning, "think");
  EXPECT_EQ(o.response.text, "answer");
  EXPECT_EQ(o.prompt_tokens, 5);
  EXPECT_EQ(o.completion_tokens, 7);
  EXPECT_STREQ(o.finish_reason, "completed");
  EXPECT_EQ(o.response_id, "resp_r");
}

TEST(ResponseReaderTest, MessagesStreamWithToolUse) {
  const api::MessageHead head{
      .id = "msg_9", .model = "m", .tool_name = "get_weather", .tool_id = "toolu_1"};
  const api::MessagesUsage start{.input_tokens = 4,
                                 .output_tokens = 0,
                                 .cache_read_input_tokens = 16,
                                 .cache_creation_input_tokens = 0};
  api::MessagesUsage end = start;
  end.output_tokens = 5;
  const std::string text = "sunny and warm";
  std::string sse;
  api::AppendMessageStreamStart(head, start, &sse);
  api::AppendMessageStreamDelta(head, text, 0, 5, &sse);
  api::AppendMessageStreamDelta(head, text, 5, text.size(), &sse);
  api::AppendMessageStreamEnd(api::StopReason::kToolUse, end, &sse);
  const ResponseOutcome o = ReadEverySplit(Endpoint::kMessages, "text/event-stream", sse);
  EXPECT_EQ(o.prompt_tokens, 20) << "input_tokens + cache_read_input_tokens";
  EXPECT_EQ(o.completion_tokens, 5);
  EXPECT_STREQ(o.finish_reason, "tool_use");
  EXPECT_EQ(o.response_id, "msg_9");
  ASSERT_EQ(o.response.tool_calls.size(), 1u);
  EXPECT_EQ(o.response.tool_calls[0].name, "get_weather");
  EXPECT_EQ(o.response.tool_calls[0].arguments, R"({"input":"sunny and warm"})");

  // The whole message: the tool_use input object is the arguments' JSON text.
  std::string body;
  api::AppendMessageResponse(head, text, api::StopReason::kToolUse, end, &body);
  const ResponseOutcome whole = ReadEverySplit(Endpoint::kMessages, "application/json", body);
  EXPECT_EQ(whole.prompt_tokens, 20);
  EXPECT_STREQ(whole.finish_reason, "tool_use");
  ASSERT_EQ(whole.response.tool_calls.size(), 1u);
  EXPECT_EQ(whole.response.tool_calls[0].arguments, o.response.tool_calls[0].arguments);
}

TEST(ResponseReaderTest, MessagesThinkingAndText) {
  const std::string sse =
      R"(data: {"type":"message_start","message":{"id":"msg_t","usage":{"input_tokens":9,"output_tokens":1}}})"
      "\n\n"
      R"(data: {"type":"content_block_start","index":0,"content_block":{"type":"thinking","thinking":""}})"
      "\n\n"
      R"(data: {"type":"content_block_delta","index":0,"delta":{"type":"thinking_delta","thinking":"hmm"}})"
      "\n\n"
      ": a comment\n"
      R"(data: {"type":"content_block_delta","index":1,"delta":{"type":"text_delta","text":"Hi"}})"
      "\n\n"
      R"(data: {"type":"message_delta","delta":{"stop_reason":"end_turn","stop_sequence":null},"usage":{"output_tokens":6}})"
      "\n\n"
      R"(data: {"type":"message_stop"})";  // the stream ends without the blank line
  const ResponseOutcome o = ReadEverySplit(Endpoint::kMessages, "text/event-stream", sse);
  EXPECT_EQ(o.response.reasoning, "hmm");
  EXPECT_EQ(o.response.text, "Hi");
  EXPECT_EQ(o.prompt_tokens, 9);
  EXPECT_EQ(o.completion_tokens, 6);
  EXPECT_STREQ(o.finish_reason, "end_turn");
}

TEST(ResponseReaderTest, RerankAndEmbeddingsUsage) {
  const std::string rerank =
      R"({"id":"rerank-1","model":"m","usage":{"total_tokens":42},"results":[{"index":0,"relevance_score":0.9}]})";
  EXPECT_EQ(ReadEverySplit(Endpoint::kRerank, "application/json", rerank).prompt_tokens, 42);
  const std::string embeddings =
      R"({"object":"list","data":[{"object":"embedding","index":0,"embedding":[0.1,0.2]}],"model":"m","usage":{"prompt_tokens":7,"total_tokens":7}})";
  const ResponseOutcome e = ReadEverySplit(Endpoint::kEmbeddings, "application/json", embeddings);
  EXPECT_EQ(e.prompt_tokens, 7);
  EXPECT_EQ(e.completion_tokens, -1);
}

TEST(ResponseReaderTest, TextCapCutsAtACharacterBoundary) {
  const std::string sse =
      R"(data: {"type":"response.output_text.delta","output_index":0,"delta":"ab\u00e9cd"})"
      "\n\n"
      R"(data: {"type":"response.output_text.delta","output_index":0,"delta":"more"})"
      "\n\n";
  const ResponseOutcome o = ReadEverySplit(Endpoint::kResponses, "text/event-stream", sse, 3);
  EXPECT_EQ(o.response.text, "ab");  // é is two bytes: it does not fit in 3
  EXPECT_TRUE(o.response.truncated);
}

TEST(ResponseReaderTest, MalformedOversizedAndForeignBodiesSayNothing) {
  // A malformed event is skipped; the next one counts.
  const std::string sse =
      "data: {\"type\":\"message_start\",\"message\":{\n\n"
      R"(data: {"type":"message_delta","delta":{"stop_reason":"max_tokens"},"usage":{"output_tokens":2}})"
      "\n\n";
  const ResponseOutcome o = ReadEverySplit(Endpoint::kMessages, "text/event-stream", sse);
  EXPECT_STREQ(o.finish_reason, "max_tokens");
  EXPECT_EQ(o.completion_tokens, 2);
  EXPECT_EQ(o.prompt_tokens, -1);

  // An event larger than the cap is not kept (memory stays bounded), nor read.
  ResponseReader big(Endpoint::kResponses, "text/event-stream", "", 0);
  const std::string chunk(1 << 20, 'x');
  big.Feed(R"(data: {"type":"response.completed","response":{"status":"completed","x":")");
  for (size_t n = 0; n <= ResponseReader::kMaxDocumentBytes; n += chunk.size()) big.Feed(chunk);
  big.Feed("\"}}\n\n");
  big.Feed(
      R"(data: {"type":"response.completed","response":{"id":"resp_2","usage":{"output_tokens":1}}})"
      "\n\n");
  ResponseOutcome b;
  big.Finish(&b);
  EXPECT_EQ(b.completion_tokens, 1);
  EXPECT_EQ(b.response_id, "resp_2");
  EXPECT_FALSE(b.has_response);

  // A body that is neither JSON nor an event stream, or compressed: nothing is read.
  ResponseReader gz(Endpoint::kMessages, "application/json", "gzip", 100);
  gz.Feed(R"({"type":"message","stop_reason":"end_turn"})");
  ResponseOutcome g;
  gz.Finish(&g);
  EXPECT_STREQ(g.finish_reason, "");
  EXPECT_FALSE(g.has_response);
}

TEST(ResponseReaderTest, ChatUsageAndText) {
  const std::string body =
      R"({"choices":[{"index":0,"message":{"content":"hi"},"finish_reason":"stop"}],"usage":{"prompt_tokens":3,"completion_tokens":1}})";
  const ResponseOutcome o = ReadEverySplit(Endpoint::kChat, "application/json", body);
  EXPECT_EQ(o.prompt_tokens, 3);
  EXPECT_STREQ(o.finish_reason, "stop");
  EXPECT_EQ(o.response.text, "hi");
  EXPECT_EQ(o.response_id, "");
}

}  // namespace
}  // namespace llmtap::proxy
