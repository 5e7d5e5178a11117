// The embeddings, rerank, Responses API and Messages API modules: what each request shape
// parses to, what a server refuses, and the response bytes (read back as JSON, base64 decoded,
// SSE events split).
#include <gtest/gtest.h>

#include <cstring>
#include <nlohmann/json.hpp>

#include "api/chat_template.h"
#include "api/embeddings.h"
#include "api/endpoints.h"
#include "api/messages.h"
#include "api/prompt.h"
#include "api/rerank.h"
#include "api/responses.h"

namespace llmtap::api {
namespace {

using nlohmann::json;

std::vector<float> DecodeBase64Floats(const std::string& s) {
  auto value = [](char c) -> uint32_t {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    return c == '+' ? 62 : 63;
  };
  std::string bytes;
  for (size_t i = 0; i + 4 <= s.size(); i += 4) {
    uint32_t v = (value(s[i]) << 18) | (value(s[i + 1]) << 12);
    bytes.push_back(static_cast<char>(v >> 16));
    if (s[i + 2] != '=') {
      v |= value(s[i + 2]) << 6;
      bytes.push_back(static_cast<char>((v >> 8) & 0xff));
    }
    if (s[i + 3] != '=') {
      v |= value(s[i + 3]);
      bytes.push_back(static_cast<char>(v & 0xff));
    }
  }
  std::vector<float> out(bytes.size() / 4);
  std::memcpy(out.data(), bytes.data(), out.size() * 4);  // little-endian, as on x86
  return out;
}

TEST(Embeddings, EveryInputShape) {
  EmbeddingsRequest r;
  RequestProblem p;
  ASSERT_TRUE(ParseEmbeddingsRequest(R"({"model":"m","input":"one"})", &r, &p)) << p.message;
  EXPECT_EQ(r.model, "m");
  EXPECT_EQ(r.inputs, std::vector<std::string>{"one"});
  EXPECT_FALSE(r.base64);
  ASSERT_TRUE(ParseEmbeddingsRequest(
      R"({"input":["a","b"],"dimensions":8,"encoding_format":"base64"})", &r, &p));
  EXPECT_EQ(r.inputs.size(), 2u);
  EXPECT_EQ(r.dimensions, 8u);
  EXPECT_TRUE(r.base64);
  ASSERT_TRUE(ParseEmbeddingsRequest(R"({"input":[1,2,3]})", &r, &p));
  ASSERT_EQ(r.inputs.size(), 1u);
  EXPECT_EQ(r.input_tokens[0], 3u);
  ASSERT_TRUE(ParseEmbeddingsRequest(R"({"input":[[1,2],[3]]})", &r, &p));
  EXPECT_EQ(r.input_tokens, (std::vector<uint32_t>{2, 1}));
}

TEST(Embeddings, WhatAServerRefuses) {
  EmbeddingsRequest r;
  RequestProblem p;
  for (const char* body : {"{", "[]", R"({"model":"m"})", R"({"input":null})", R"({"input":[]})",
                           R"({"input":[1,"a"]})", R"({"input":[[]]})", R"({"input":5})",
                           R"({"input":"x","dimensions":0})", R"({"input":"x","dimensions":1.5})",
                           R"({"input":"x","encoding_format":"int8"})"}) {
    EXPECT_FALSE(ParseEmbeddingsRequest(body, &r, &p)) << body;
    EXPECT_FALSE(p.message.empty()) << body;
  }
}

TEST(Embeddings, ResponseAsFloatsAndAsBase64) {
  EmbeddingsRequest r;
  RequestProblem p;
  ASSERT_TRUE(ParseEmbeddingsRequest(R"({"input":["a","b"]})", &r, &p));
  const std::vector<std::vector<float>> vectors = {{0.5f, -0.25f, 1e-7f}, {1.0f, 0.0f, 0.0f}};
  std::string out;
  AppendEmbeddingsResponse(r, "m\"x", vectors, 7, &out);
  json j = json::parse(out);
  EXPECT_EQ(j["object"], "list");
  EXPECT_EQ(j["model"], "m\"x");
  EXPECT_EQ(j["usage"]["prompt_tokens"], 7);
  EXPECT_EQ(j["usage"]["total_tokens"], 7);
  ASSERT_EQ(j["data"].size(), 2u);
  EXPECT_EQ(j["data"][1]["index"], 1);
  EXPECT_EQ(j["data"][0]["embedding"].get<std::vector<float>>(), vectors[0]);

  r.base64 = true;
  out.clear();
  AppendEmbeddingsResponse(r, "m", vectors, 7, &out);
  j = json::parse(out);
  EXPECT_EQ(DecodeBase64Floats(j["data"][0]["embedding"].get<std::string>()), vectors[0]);
  EXPECT_EQ(DecodeBase64Floats(j["data"][1]["embedding"].get<std::string>()), vectors[1]);
}

TEST(Rerank, RequestsAndRefusals) {
  EXPECT_TRUE(IsRerankPath("/v1/rerank"));
  EXPECT_TRUE(IsRerankPath("/v2/rerank"));
  EXPECT_TRUE(IsRerankPath("/rerank"));
  EXPECT_FALSE(IsRerankPath("/v1/ranking"));
  RerankRequest r;
  RequestProblem p;
  ASSERT_TRUE(ParseRerankRequest(
      R"({"model":"m","query":"q","documents":["a",{"text":"b"}],"top_n":1,"return_documents":false})",
      &r, &p))
      << p.message;
  EXPECT_EQ(r.documents, (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(r.top_n, 1u);
  EXPECT_FALSE(r.return_documents);
  for (const char* body :
       {"{", R"({"documents":["a"]})", R"({"query":"q"})", R"({"query":"q","documents":[1]})",
        R"({"query":"q","documents":["a"],"top_n":-1})"}) {
    EXPECT_FALSE(ParseRerankRequest(body, &r, &p)) << body;
  }
}

TEST(Rerank, ResultsByScoreThenIndexAtMostTopN) {
  RerankRequest r;
  RequestProblem p;
  ASSERT_TRUE(ParseRerankRequest(R"({"query":"q","documents":["a","b","c"],"top_n":2})", &r, &p));
  std::string out;
  AppendRerankResponse(r, "rerank-1", "m", {0.2, 0.9, 0.9}, 12, &out);
  json j = json::parse(out);
  EXPECT_EQ(j["id"], "rerank-1");
  EXPECT_EQ(j["usage"]["total_tokens"], 12);
  ASSERT_EQ(j["results"].size(), 2u);
  EXPECT_EQ(j["results"][0]["index"], 1);
  EXPECT_EQ(j["results"][1]["index"], 2);
  EXPECT_EQ(j["results"][0]["document"]["text"], "b");
  EXPECT_DOUBLE_EQ(j["results"][0]["relevance_score"].get<double>(), 0.9);
  r.top_n = 0;  // every document
  out.clear();
  AppendRerankResponse(r, "x", "m", {0.2, 0.9, 0.9}, 12, &out);
  EXPECT_EQ(json::parse(out)["results"].size(), 3u);
}

TEST(Endpoints, PathsNamesAndAiperfTypes) {
  EXPECT_EQ(EndpointForPath("/v1/chat/completions"), Endpoint::kChat);
  EXPECT_EQ(EndpointForPath("/v1/completions"), Endpoint::kCompletions);
  EXPECT_EQ(EndpointForPath("/v1/responses"), Endpoint::kResponses);
  EXPECT_EQ(EndpointForPath("/v1/messages"), Endpoint::kMessages);
  EXPECT_EQ(EndpointForPath("/v1/embeddings"), Endpoint::kEmbeddings);
  for (const char* p : {"/v1/rerank", "/v2/rerank", "/rerank"}) {
    EXPECT_EQ(EndpointForPath(p), Endpoint::kRerank) << p;
  }
  EXPECT_EQ(EndpointForPath("/generate"), std::nullopt);
  EXPECT_EQ(EndpointForPath("/v1/chat/completions/"), std::nullopt);
  for (Endpoint e : {Endpoint::kChat, Endpoint::kCompletions, Endpoint::kResponses,
                     Endpoint::kMessages, Endpoint::kEmbeddings, Endpoint::kRerank}) {
    EXPECT_EQ(EndpointForType(AiperfEndpointType(e)), e);
    EXPECT_EQ(EndpointForType(EndpointName(e)), e);
    EXPECT_EQ(EndpointForPath(EndpointPath(e)), e);
  }
  EXPECT_EQ(AiperfEndpointType(Endpoint::kRerank), "cohere_rankings");
  EXPECT_EQ(EndpointName(Endpoint::kRerank), "rankings");
  EXPECT_EQ(AiperfEndpointType(Endpoint::kOther), "");
  EXPECT_EQ(EndpointForType("nim_rankings"), std::nullopt);
  EXPECT_TRUE(IsGeneration(Endpoint::kMessages));
  EXPECT_FALSE(IsGeneration(Endpoint::kEmbeddings));
}

TEST(Responses, AStringInputIsOneUserTurn) {
  ResponsesRequest r;
  RequestProblem p;
  ASSERT_TRUE(ParseResponsesRequest(R"({"model":"m","input":"hi"})", 100, &r, &p)) << p.message;
  EXPECT_EQ(r.model, "m");
  EXPECT_EQ(r.input_text, "<|im_start|>user\nhi<|im_end|>\n");
  EXPECT_TRUE(r.store);  // the default
  EXPECT_FALSE(r.stream);
  EXPECT_FALSE(r.max_output_tokens);
  EXPECT_TRUE(r.forced_tool.empty());
  EXPECT_EQ(r.tools_json, "[]");
  EXPECT_EQ(r.tool_choice_json, "\"auto\"");
  std::string prompt;
  RenderResponsesPrompt(r, "", &prompt);
  EXPECT_EQ(prompt, "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n");
}

TEST(Responses, InputItemsRenderAsTheirChatMessages) {
  ResponsesRequest r;
  RequestProblem p;
  ASSERT_TRUE(ParseResponsesRequest(R"({"input":[
      {"role":"user","content":"a"},
      {"type":"message","role":"assistant","content":[{"type":"output_text","text":"b"}]},
      {"type":"message","role":"user","content":[{"type":"input_text","text":"c"},
                                                 {"type":"input_image","image_url":"x"}]},
      {"type":"reasoning","id":"rs_1","summary":[]},
      {"type":"function_call","call_id":"call_1","name":"f","arguments":"{\"x\":1}"},
      {"type":"function_call_output","call_id":"call_1","output":"42"}],
    "instructions":"be brief","max_output_tokens":7,"stream":true,"store":false,
    "previous_response_id":"resp_1","temperature":0.5,"metadata":{"k":"v"}})",
                                    100, &r, &p))
      << p.message;
  EXPECT_EQ(r.input_text,
            "<|im_start|>user\na<|im_end|>\n"
            "<|im_start|>assistant\nb<|im_end|>\n"
            "<|im_start|>user\nc<|input_image|><|im_end|>\n"
            "<|im_start|>assistant\n"
            R"([{"id":"call_1","type":"function","function":{"name":"f","arguments":"{\"x\":1}"}}])"
            "<|im_end|>\n"
            "<|im_start|>tool\n42<|im_end|>\n");
  EXPECT_EQ(r.instructions, "be brief");
  EXPECT_EQ(r.max_output_tokens, 7u);
  EXPECT_TRUE(r.stream);
  EXPECT_FALSE(r.store);
  EXPECT_EQ(r.previous_response_id, "resp_1");
  EXPECT_EQ(r.temperature, 0.5);
  EXPECT_EQ(r.metadata_json, R"({"k":"v"})");
  // Instructions first, then the stored history, then the input, then the generation prompt.
  std::string prompt;
  RenderResponsesPrompt(r, "<H>", &prompt);
  EXPECT_EQ(prompt, "<|im_start|>system\nbe brief<|im_end|>\n<H>" + r.input_text +
                        "<|im_start|>assistant\n");
  // An answer's function call renders as an input function_call item does.
  std::string turn;
  ResponseAnswer a;
  a.call_id = "call_1";
  a.function_name = "f";
  a.content = R"({"x":1})";
  AppendAnswerTurn(a, &turn);
  EXPECT_NE(r.input_text.find(turn), std::string::npos);
  a.function_name = "";
  a.content = "b";
  turn.clear();
  AppendAnswerTurn(a, &turn);
  EXPECT_EQ(turn, "<|im_start|>assistant\nb<|im_end|>\n");
}

TEST(Responses, ForcedTools) {
  ResponsesRequest r;
  RequestProblem p;
  const std::string tools =
      R"("tools":[{"type":"web_search"},{"type":"function","name":"get_weather","parameters":{}},
                  {"type":"function","name":"get_time"}])";
  ASSERT_TRUE(ParseResponsesRequest(R"({"input":"x",)" + tools + R"(,"tool_choice":"required"})",
                                    100, &r, &p))
      << p.message;
  EXPECT_EQ(r.forced_tool, "get_weather");
  EXPECT_EQ(r.tool_choice_json, "\"required\"");
  EXPECT_EQ(json::parse(r.tools_json).size(), 3u);
  ASSERT_TRUE(ParseResponsesRequest(
      R"({"input":"x",)" + tools + R"(,"tool_choice":{"type":"function","name":"get_time"}})", 100,
      &r, &p));
  EXPECT_EQ(r.forced_tool, "get_time");
  for (const char* choice : {R"("auto")", R"("none")"}) {
    ASSERT_TRUE(ParseResponsesRequest(
        R"({"input":"x",)" + tools + R"(,"tool_choice":)" + choice + "}", 100, &r, &p));
    EXPECT_TRUE(r.forced_tool.empty()) << choice;
  }
}

TEST(Responses, WhatAServerRefuses) {
  ResponsesRequest r;
  RequestProblem p;
  for (const char* body : {
           "{",
           "[]",
           R"({"model":"m"})",
           R"({"input":null})",
           R"({"input":5})",
           R"({"input":"x","model":3})",
           R"({"input":[1]})",
           R"({"input":[{"role":"user"}]})",
           R"({"input":[{"content":"x"}]})",
           R"({"input":[{"role":"user","content":5}]})",
           R"({"input":[{"role":"user","content":[{"text":"x"}]}]})",
           R"({"input":[{"type":"function_call","name":"f","arguments":"{}"}]})",
           R"({"input":[{"type":"function_call_output","call_id":"c"}]})",
           R"({"input":[{"type":"item_reference","id":"msg_1"}]})",
           R"({"input":"x","instructions":5})",
           R"({"input":"x","max_output_tokens":0})",
           R"({"input":"x","max_output_tokens":1.5})",
           R"({"input":"x","max_output_tokens":101})",
           R"({"input":"x","stream":"yes"})",
           R"({"input":"x","store":1})",
           R"({"input":"x","previous_response_id":7})",
           R"({"input":"x","tools":{}})",
           R"({"input":"x","tool_choice":"required"})",
           R"({"input":"x","tools":[{"type":"web_search"}],"tool_choice":"required"})",
           R"({"input":"x","tool_choice":{"type":"function"}})",
       }) {
    EXPECT_FALSE(ParseResponsesRequest(body, 100, &r, &p)) << body;
    EXPECT_FALSE(p.message.empty()) << body;
  }
  ASSERT_FALSE(ParseResponsesRequest(R"({"input":"x","max_output_tokens":101})", 100, &r, &p));
  EXPECT_EQ(p.param, "max_output_tokens");
}

ResponseAnswer TextAnswer() {
  ResponseAnswer a;
  a.id = "resp_1";
  a.item_id = "msg_1";
  a.created_at = 1700000000;
  a.model = "m";
  a.content = "Hello \"world\"";
  a.input_tokens = 10;
  a.output_tokens = 3;
  a.cached_tokens = 8;
  return a;
}

TEST(Responses, TheResponseObject) {
  ResponsesRequest r;
  RequestProblem p;
  ASSERT_TRUE(ParseResponsesRequest(
      R"({"input":"x","instructions":"i","previous_response_id":"resp_0","max_output_tokens":3})",
      100, &r, &p));
  ResponseAnswer a = TextAnswer();
  std::string out;
  AppendResponseObject(r, a, &out);
  json j = json::parse(out);
  EXPECT_EQ(j["id"], "resp_1");
  EXPECT_EQ(j["object"], "response");
  EXPECT_EQ(j["created_at"], 1700000000);
  EXPECT_EQ(j["status"], "completed");
  EXPECT_TRUE(j["incomplete_details"].is_null());
  EXPECT_EQ(j["model"], "m");
  EXPECT_EQ(j["instructions"], "i");
  EXPECT_EQ(j["previous_response_id"], "resp_0");
  EXPECT_EQ(j["max_output_tokens"], 3);
  EXPECT_EQ(j["store"], true);
  EXPECT_EQ(j["tool_choice"], "auto");
  EXPECT_EQ(j["tools"], json::array());
  ASSERT_EQ(j["output"].size(), 1u);
  const json& item = j["output"][0];
  EXPECT_EQ(item["type"], "message");
  EXPECT_EQ(item["id"], "msg_1");
  EXPECT_EQ(item["role"], "assistant");
  EXPECT_EQ(item["status"], "completed");
  ASSERT_EQ(item["content"].size(), 1u);
  EXPECT_EQ(item["content"][0]["type"], "output_text");
  EXPECT_EQ(item["content"][0]["text"], "Hello \"world\"");
  EXPECT_EQ(item["content"][0]["annotations"], json::array());
  EXPECT_EQ(j["usage"]["input_tokens"], 10);
  EXPECT_EQ(j["usage"]["output_tokens"], 3);
  EXPECT_EQ(j["usage"]["total_tokens"], 13);
  EXPECT_EQ(j["usage"]["input_tokens_details"]["cached_tokens"], 8);
  EXPECT_EQ(j["usage"]["output_tokens_details"]["reasoning_tokens"], 0);

  a.incomplete = true;
  out.clear();
  AppendResponseObject(r, a, &out);
  j = json::parse(out);
  EXPECT_EQ(j["status"], "incomplete");
  EXPECT_EQ(j["incomplete_details"]["reason"], "max_output_tokens");

  a = TextAnswer();
  a.item_id = "fc_1";
  a.call_id = "call_1";
  a.function_name = "get_weather";
  a.content = R"({"input":"x"})";
  out.clear();
  AppendResponseObject(r, a, &out);
  j = json::parse(out);
  ASSERT_EQ(j["output"].size(), 1u);
  EXPECT_EQ(j["output"][0]["type"], "function_call");
  EXPECT_EQ(j["output"][0]["id"], "fc_1");
  EXPECT_EQ(j["output"][0]["call_id"], "call_1");
  EXPECT_EQ(j["output"][0]["name"], "get_weather");
  EXPECT_EQ(j["output"][0]["arguments"], R"({"input":"x"})");
}

// Splits SSE text into (event name, data) pairs, checking the framing and that each event's
// data names its type.
std::vector<std::pair<std::string, json>> ParseEvents(const std::string& sse) {
  std::vector<std::pair<std::string, json>> events;
  size_t pos = 0;
  while (pos < sse.size()) {
    const size_t end = sse.find("\n\n", pos);
    EXPECT_NE(end, std::string::npos);
    if (end == std::string::npos) break;
    const std::string block = sse.substr(pos, end - pos);
    pos = end + 2;
    EXPECT_EQ(block.rfind("event: ", 0), 0u) << block;
    const size_t nl = block.find('\n');
    EXPECT_EQ(block.compare(nl, 7, "\ndata: "), 0) << block;
    const std::string name = block.substr(7, nl - 7);
    json data = json::parse(block.substr(nl + 7));
    EXPECT_EQ(data["type"], name);
    events.emplace_back(name, std::move(data));
  }
  return events;
}

TEST(Responses, TheStreamOfAMessage) {
  ResponsesRequest r;
  RequestProblem p;
  ASSERT_TRUE(ParseResponsesRequest(R"({"input":"x","stream":true})", 100, &r, &p));
  ResponseAnswer a = TextAnswer();
  uint64_t seq = 0;
  std::string sse;
  AppendStreamStart(r, a, &seq, &sse);
  AppendStreamDelta(a, "Hello ", &seq, &sse);
  AppendStreamDelta(a, "\"world\"", &seq, &sse);
  AppendStreamEnd(r, a, &seq, &sse);
  const auto events = ParseEvents(sse);
  const std::vector<std::string> expected = {
      "response.created",           "response.in_progress",
      "response.output_item.added", "response.content_part.added",
      "response.output_text.delta", "response.output_text.delta",
      "response.output_text.done",  "response.content_part.done",
      "response.output_item.done",  "response.completed"};
  ASSERT_EQ(events.size(), expected.size());
  std::string text;
  for (size_t i = 0; i < events.size(); ++i) {
    const auto& [name, data] = events[i];
    EXPECT_EQ(name, expected[i]);
    EXPECT_EQ(data["type"], name);
    EXPECT_EQ(data["sequence_number"], i);
    if (name == "response.output_text.delta") {
      EXPECT_EQ(data["item_id"], "msg_1");
      EXPECT_EQ(data["output_index"], 0);
      EXPECT_EQ(data["content_index"], 0);
      text += data["delta"].get<std::string>();
    }
  }
  EXPECT_EQ(events[0].second["response"]["status"], "in_progress");
  EXPECT_EQ(events[0].second["response"]["output"], json::array());
  EXPECT_TRUE(events[0].second["response"]["usage"].is_null());
  EXPECT_EQ(events[2].second["item"]["status"], "in_progress");
  EXPECT_EQ(events[2].second["item"]["content"], json::array());
  EXPECT_EQ(events[3].second["part"]["text"], "");
  EXPECT_EQ(text, a.content);
  EXPECT_EQ(events[6].second["text"], a.content);
  EXPECT_EQ(events[7].second["part"]["text"], a.content);
  EXPECT_EQ(events[8].second["item"]["content"][0]["text"], a.content);
  EXPECT_EQ(events[9].second["response"]["status"], "completed");
  EXPECT_EQ(events[9].second["response"]["usage"]["total_tokens"], 13);
}

TEST(Responses, TheStreamOfAFunctionCall) {
  ResponsesRequest r;
  RequestProblem p;
  ASSERT_TRUE(ParseResponsesRequest(R"({"input":"x","stream":true})", 100, &r, &p));
  ResponseAnswer a = TextAnswer();
  a.item_id = "fc_1";
  a.call_id = "call_1";
  a.function_name = "f";
  a.content = R"({"input":"y"})";
  uint64_t seq = 0;
  std::string sse;
  AppendStreamStart(r, a, &seq, &sse);
  AppendStreamDelta(a, R"({"input":")", &seq, &sse);
  AppendStreamDelta(a, R"(y"})", &seq, &sse);
  AppendStreamEnd(r, a, &seq, &sse);
  const auto events = ParseEvents(sse);
  const std::vector<std::string> expected = {"response.created",
                                             "response.in_progress",
                                             "response.output_item.added",
                                             "response.function_call_arguments.delta",
                                             "response.function_call_arguments.delta",
                                             "response.function_call_arguments.done",
                                             "response.output_item.done",
                                             "response.completed"};
  ASSERT_EQ(events.size(), expected.size());
  std::string arguments;
  for (size_t i = 0; i < events.size(); ++i) {
    EXPECT_EQ(events[i].first, expected[i]);
    EXPECT_EQ(events[i].second["sequence_number"], i);
    if (i == 3 || i == 4) arguments += events[i].second["delta"].get<std::string>();
  }
  EXPECT_EQ(arguments, a.content);
  EXPECT_EQ(events[2].second["item"]["type"], "function_call");
  EXPECT_EQ(events[2].second["item"]["arguments"], "");
  EXPECT_EQ(events[5].second["arguments"], a.content);
  EXPECT_EQ(events[5].second["name"], "f");
  EXPECT_EQ(events[6].second["item"]["call_id"], "call_1");
  EXPECT_EQ(events[7].second["response"]["output"][0]["arguments"], a.content);
}

TEST(Messages, SystemMessagesAndBlocksRenderedWithTheChatTemplate) {
  MessagesRequest r;
  RequestProblem p;
  ASSERT_TRUE(ParseMessagesRequest(
      R"({"model":"claude","max_tokens":64,"stream":true,"system":"Be terse.",
          "stop_sequences":["x"],"temperature":0.5,"messages":[
        {"role":"user","content":"Hi"},
        {"role":"assistant","content":[{"type":"text","text":"Hello"},
          {"type":"tool_use","id":"toolu_1","name":"f","input":{"a":1}}]},
        {"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_1","content":"42"},
          {"type":"tool_result","tool_use_id":"toolu_1","content":[{"type":"text","text":"t"},
            {"type":"image","source":{}}]},
          {"type":"image","source":{"type":"base64","media_type":"image/png","data":"AA"}},
          {"type":"text","text":"Thanks"}]}]})",
      1000, &r, &p))
      << p.message;
  EXPECT_EQ(r.model, "claude");
  EXPECT_EQ(r.max_tokens, 64u);
  EXPECT_TRUE(r.stream);
  EXPECT_TRUE(r.forced_tool.empty());
  EXPECT_EQ(r.prompt_text,
            "<|im_start|>system\nBe terse.<|im_end|>\n"
            "<|im_start|>user\nHi<|im_end|>\n"
            "<|im_start|>assistant\nHello"
            R"({"type":"tool_use","id":"toolu_1","name":"f","input":{"a":1}})"
            "<|im_end|>\n"
            "<|im_start|>user\n42t<|image|><|image|>Thanks<|im_end|>\n"
            "<|im_start|>assistant\n");
  // The same conversation through the chat template's pieces: the prompt a chat request gets.
  std::string chat;
  AppendTurnStart("system", &chat);
  chat.append("A");
  chat.append("B");
  AppendTurnEnd(&chat);
  AppendTurnStart("user", &chat);
  chat.append("q");
  AppendTurnEnd(&chat);
  AppendGenerationPrompt(&chat);
  ASSERT_TRUE(ParseMessagesRequest(
      R"({"model":"m","max_tokens":1,"system":[{"type":"text","text":"A"},{"type":"text","text":"B"}],
          "messages":[{"role":"user","content":[{"type":"text","text":"q"}]}]})",
      1000, &r, &p))
      << p.message;
  EXPECT_EQ(r.prompt_text, chat);
  EXPECT_FALSE(r.stream);
}

TEST(Messages, ToolChoiceForcesATool) {
  MessagesRequest r;
  RequestProblem p;
  const std::string head =
      R"({"model":"m","max_tokens":5,"messages":[{"role":"user","content":"x"}],)"
      R"("tools":[{"name":"get_weather","description":"d","input_schema":{"type":"object"}},)"
      R"({"name":"other","input_schema":{"type":"object"}}],"tool_choice":)";
  ASSERT_TRUE(ParseMessagesRequest(head + R"({"type":"any"}})", 1000, &r, &p)) << p.message;
  EXPECT_EQ(r.forced_tool, "get_weather");
  ASSERT_TRUE(ParseMessagesRequest(head + R"({"type":"tool","name":"other"}})", 1000, &r, &p));
  EXPECT_EQ(r.forced_tool, "other");
  ASSERT_TRUE(ParseMessagesRequest(head + R"({"type":"auto"}})", 1000, &r, &p));
  EXPECT_TRUE(r.forced_tool.empty());
  ASSERT_TRUE(ParseMessagesRequest(head + R"({"type":"none"}})", 1000, &r, &p));
  EXPECT_TRUE(r.forced_tool.empty());
  EXPECT_FALSE(ParseMessagesRequest(head + R"({"type":"tool","name":"nope"}})", 1000, &r, &p));
  EXPECT_EQ(p.param, "tool_choice.name");
  EXPECT_FALSE(ParseMessagesRequest(head + R"({"type":"required"}})", 1000, &r, &p));
  EXPECT_FALSE(ParseMessagesRequest(head + R"("any"})", 1000, &r, &p));
  EXPECT_FALSE(ParseMessagesRequest(
      R"({"model":"m","max_tokens":5,"messages":[{"role":"user","content":"x"}],"tool_choice":{"type":"any"}})",
      1000, &r, &p));
}

TEST(Messages, WhatAnthropicRefuses) {
  MessagesRequest r;
  RequestProblem p;
  const struct {
    const char* body;
    const char* param;
  } cases[] = {
      {"{", ""},
      {"[]", ""},
      {R"({"max_tokens":5,"messages":[{"role":"user","content":"x"}]})", "model"},
      {R"({"model":"m","messages":[{"role":"user","content":"x"}]})", "max_tokens"},
      {R"({"model":"m","max_tokens":null,"messages":[{"role":"user","content":"x"}]})",
       "max_tokens"},
      {R"({"model":"m","max_tokens":0,"messages":[{"role":"user","content":"x"}]})", "max_tokens"},
      {R"({"model":"m","max_tokens":2.5,"messages":[{"role":"user","content":"x"}]})",
       "max_tokens"},
      {R"({"model":"m","max_tokens":1001,"messages":[{"role":"user","content":"x"}]})",
       "max_tokens"},
      {R"({"model":"m","max_tokens":5})", "messages"},
      {R"({"model":"m","max_tokens":5,"messages":[]})", "messages"},
      {R"({"model":"m","max_tokens":5,"messages":{}})", "messages"},
      {R"({"model":"m","max_tokens":5,"messages":[{"role":"system","content":"x"}]})",
       "messages.0.role"},
      {R"({"model":"m","max_tokens":5,"messages":[{"role":"user"}]})", "messages.0.content"},
      {R"({"model":"m","max_tokens":5,"messages":[{"role":"user","content":5}]})",
       "messages.0.content"},
      {R"({"model":"m","max_tokens":5,"messages":[{"role":"user","content":[{"text":"x"}]}]})",
       "messages.0.content.0"},
      {R"({"model":"m","max_tokens":5,"messages":[{"role":"user","content":[{"type":"text"}]}]})",
       "messages.0.content.0.text"},
      {R"({"model":"m","max_tokens":5,"messages":[{"role":"assistant","content":[{"type":"tool_use","name":"f"}]}]})",
       "messages.0.content.0.input"},
      {R"({"model":"m","max_tokens":5,"messages":[{"role":"user","content":[{"type":"tool_result","content":"x"}]}]})",
       "messages.0.content.0.tool_use_id"},
      {R"({"model":"m","max_tokens":5,"messages":[{"role":"user","content":[{"type":"tool_result","tool_use_id":"t","content":7}]}]})",
       "messages.0.content.0.content"},
      {R"({"model":"m","max_tokens":5,"system":7,"messages":[{"role":"user","content":"x"}]})",
       "system"},
      {R"({"model":"m","max_tokens":5,"system":[{"type":"image"}],"messages":[{"role":"user","content":"x"}]})",
       "system.0.type"},
      {R"({"model":"m","max_tokens":5,"stream":"yes","messages":[{"role":"user","content":"x"}]})",
       "stream"},
      {R"({"model":"m","max_tokens":5,"tools":[{"description":"d"}],"messages":[{"role":"user","content":"x"}]})",
       "tools.0.name"},
  };
  for (const auto& c : cases) {
    EXPECT_FALSE(ParseMessagesRequest(c.body, 1000, &r, &p)) << c.body;
    EXPECT_FALSE(p.message.empty()) << c.body;
    EXPECT_EQ(p.param, c.param) << c.body;
  }
}

TEST(Messages, TextAnswerWholeAndStreamed) {
  const MessageHead head{.id = "msg_1", .model = "m\"x", .tool_name = "", .tool_id = ""};
  const MessagesUsage usage{.input_tokens = 10,
                            .output_tokens = 3,
                            .cache_read_input_tokens = 16,
                            .cache_creation_input_tokens = 0};
  const std::string text = "a \"b\"\nc";
  std::string out;
  AppendMessageResponse(head, text, StopReason::kMaxTokens, usage, &out);
  const json j = json::parse(out);
  EXPECT_EQ(j, json::parse(R"({"id":"msg_1","type":"message","role":"assistant","model":"m\"x",
      "content":[{"type":"text","text":"a \"b\"\nc"}],"stop_reason":"max_tokens",
      "stop_sequence":null,"usage":{"input_tokens":10,"cache_creation_input_tokens":0,
      "cache_read_input_tokens":16,"output_tokens":3}})"));

  out.clear();
  AppendMessageStreamStart(head, usage, &out);
  AppendMessageStreamDelta(head, text, 0, 2, &out);
  AppendMessageStreamDelta(head, text, 2, 5, &out);
  AppendMessageStreamDelta(head, text, 5, text.size(), &out);
  AppendMessageStreamEnd(StopReason::kEndTurn, usage, &out);
  const auto events = ParseEvents(out);
  std::vector<std::string> names;
  for (const auto& [name, data] : events) names.push_back(name);
  EXPECT_EQ(names, (std::vector<std::string>{"message_start", "content_block_start", "ping",
                                             "content_block_delta", "content_block_delta",
                                             "content_block_delta", "content_block_stop",
                                             "message_delta", "message_stop"}));
  const json& start = events[0].second["message"];
  EXPECT_EQ(start["id"], "msg_1");
  EXPECT_EQ(start["content"], json::array());
  EXPECT_TRUE(start["stop_reason"].is_null());
  EXPECT_EQ(start["usage"]["input_tokens"], 10);
  EXPECT_EQ(start["usage"]["cache_read_input_tokens"], 16);
  EXPECT_EQ(start["usage"]["output_tokens"], 0);
  EXPECT_EQ(events[1].second["content_block"], json::parse(R"({"type":"text","text":""})"));
  std::string joined;
  for (int i = 3; i < 6; ++i) {
    EXPECT_EQ(events[i].second["index"], 0);
    EXPECT_EQ(events[i].second["delta"]["type"], "text_delta");
    joined += events[i].second["delta"]["text"].get<std::string>();
  }
  EXPECT_EQ(joined, text);
  EXPECT_EQ(events[6].second["index"], 0);
  EXPECT_EQ(events[7].second["delta"]["stop_reason"], "end_turn");
  EXPECT_TRUE(events[7].second["delta"]["stop_sequence"].is_null());
  EXPECT_EQ(events[7].second["usage"]["output_tokens"], 3);
}

TEST(Messages, ToolUseAnswerWholeAndStreamed) {
  const MessageHead head{.id = "msg_2", .model = "m", .tool_name = "f", .tool_id = "toolu_9"};
  const MessagesUsage usage{.input_tokens = 4, .output_tokens = 2};
  const std::string text = "say \"hi\"\\";
  std::string out;
  AppendMessageResponse(head, text, StopReason::kToolUse, usage, &out);
  json j = json::parse(out);
  EXPECT_EQ(j["stop_reason"], "tool_use");
  ASSERT_EQ(j["content"].size(), 1u);
  EXPECT_EQ(
      j["content"][0],
      json({{"type", "tool_use"}, {"id", "toolu_9"}, {"name", "f"}, {"input", {{"input", text}}}}));

  out.clear();
  AppendMessageStreamStart(head, usage, &out);
  for (size_t b = 0; b < text.size(); b += 3) {
    AppendMessageStreamDelta(head, text, b, std::min(text.size(), b + 3), &out);
  }
  AppendMessageStreamEnd(StopReason::kToolUse, usage, &out);
  const auto events = ParseEvents(out);
  EXPECT_EQ(events[1].second["content_block"],
            json::parse(R"({"type":"tool_use","id":"toolu_9","name":"f","input":{}})"));
  std::string partial;
  for (const auto& [name, data] : events) {
    if (name != "content_block_delta") continue;
    EXPECT_EQ(data["delta"]["type"], "input_json_delta");
    partial += data["delta"]["partial_json"].get<std::string>();
  }
  EXPECT_EQ(json::parse(partial), json({{"input", text}}));
  EXPECT_EQ(events.at(events.size() - 2).second["delta"]["stop_reason"], "tool_use");
}

TEST(Messages, ErrorsInAnthropicsShape) {
  std::string out;
  AppendMessagesError(404, "The model `x` does not exist.", &out);
  EXPECT_EQ(json::parse(out), json::parse(R"({"type":"error","error":{"type":"not_found_error",
      "message":"The model `x` does not exist."}})"));
  EXPECT_EQ(MessagesErrorType(400), "invalid_request_error");
  EXPECT_EQ(MessagesErrorType(405), "invalid_request_error");
  EXPECT_EQ(MessagesErrorType(413), "request_too_large");
  EXPECT_EQ(MessagesErrorType(429), "rate_limit_error");
  EXPECT_EQ(MessagesErrorType(500), "api_error");
  EXPECT_EQ(MessagesErrorType(529), "overloaded_error");
}

// ---- Requests as the chat requests a server renders (api/prompt.h) ----

TEST(ChatBodyFor, ResponsesInstructionsItemsAndToolCalls) {
  std::string chat;
  ASSERT_TRUE(ChatBodyFor(
      Endpoint::kResponses,
      R"({"model":"m","instructions":"Be brief.","input":[)"
      R"({"role":"developer","content":"Use tools."},)"
      R"({"type":"message","role":"user","content":[{"type":"input_text","text":"a"},{"type":"input_image","image_url":"x"},{"type":"input_text","text":"b"}]},)"
      R"({"type":"reasoning","summary":[]},)"
      R"({"type":"function_call","call_id":"c1","name":"f","arguments":"{\"x\":1}"},)"
      R"({"type":"function_call","call_id":"c2","name":"g","arguments":"{}"},)"
      R"({"type":"function_call_output","call_id":"c1","output":"one"},)"
      R"({"type":"function_call_output","call_id":"c2","output":[{"type":"input_text","text":"two"}]}]})",
      &chat));
  EXPECT_EQ(json::parse(chat), json::parse(R"({"messages":[
    {"role":"system","content":"Be brief."},
    {"role":"system","content":"Use tools."},
    {"role":"user","content":"ab"},
    {"role":"assistant","content":null,"tool_calls":[
      {"id":"c1","type":"function","function":{"name":"f","arguments":"{\"x\":1}"}},
      {"id":"c2","type":"function","function":{"name":"g","arguments":"{}"}}]},
    {"role":"tool","tool_call_id":"c1","content":"one"},
    {"role":"tool","tool_call_id":"c2","content":"two"}]})"));
  ASSERT_TRUE(ChatBodyFor(Endpoint::kResponses, R"({"input":"hi \"x\""})", &chat));
  EXPECT_EQ(chat, R"({"messages":[{"role":"user","content":"hi \"x\""}]})");
  EXPECT_FALSE(ChatBodyFor(Endpoint::kResponses, R"({"model":"m"})", &chat));
  EXPECT_FALSE(ChatBodyFor(Endpoint::kChat, R"({"messages":[]})", &chat));
  EXPECT_FALSE(ChatBodyFor(Endpoint::kEmbeddings, R"({"input":"x"})", &chat));
}

TEST(ChatBodyFor, MessagesSystemBlocksToolUseAndResults) {
  std::string chat;
  ASSERT_TRUE(ChatBodyFor(
      Endpoint::kMessages,
      R"({"model":"m","max_tokens":5,"system":[{"type":"text","text":"S1 "},{"type":"text","text":"S2"}],"messages":[)"
      R"({"role":"user","content":"q"},)"
      R"({"role":"assistant","content":[{"type":"thinking","thinking":"hm"},{"type":"text","text":"let me"},)"
      R"({"type":"tool_use","id":"t1","name":"f","input":{"b": [1, 2],"a":"x"}}]},)"
      R"({"role":"user","content":[{"type":"tool_result","tool_use_id":"t1","content":[{"type":"text","text":"r"}]},)"
      R"({"type":"text","text":"and?"}]}]})",
      &chat));
  EXPECT_EQ(json::parse(chat), json::parse(R"({"messages":[
    {"role":"system","content":"S1 S2"},
    {"role":"user","content":"q"},
    {"role":"assistant","content":"let me","tool_calls":[
      {"id":"t1","type":"function","function":{"name":"f","arguments":"{\"b\":[1,2],\"a\":\"x\"}"}}]},
    {"role":"tool","tool_call_id":"t1","content":"r"},
    {"role":"user","content":"and?"}]})"));
}

TEST(StoppedByItself, EachApisOwnEnds) {
  for (const char* r :
       {"stop", "tool_calls", "end_turn", "tool_use", "stop_sequence", "completed"}) {
    EXPECT_TRUE(StoppedByItself(r)) << r;
  }
  for (const char* r : {"length", "max_tokens", "max_output_tokens", "", "content_filter"}) {
    EXPECT_FALSE(StoppedByItself(r)) << r;
  }
}

}  // namespace
}  // namespace llmtap::api
