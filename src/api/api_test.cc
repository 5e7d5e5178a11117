// The embeddings, rerank and messages API modules: what each request shape parses to, what a
// server refuses, and the response bytes (read back as JSON, base64 decoded, SSE events split).
#include <gtest/gtest.h>

#include <cstring>
#include <nlohmann/json.hpp>

#include "api/chat_template.h"
#include "api/embeddings.h"
#include "api/messages.h"
#include "api/rerank.h"

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

// Splits an SSE stream into (event name, data as JSON), checking each event's framing.
std::vector<std::pair<std::string, json>> SplitEvents(const std::string& stream) {
  std::vector<std::pair<std::string, json>> events;
  size_t at = 0;
  while (at < stream.size()) {
    const size_t end = stream.find("\n\n", at);
    EXPECT_NE(end, std::string::npos);
    if (end == std::string::npos) break;
    const std::string event = stream.substr(at, end - at);
    at = end + 2;
    EXPECT_EQ(event.rfind("event: ", 0), 0u) << event;
    const size_t nl = event.find('\n');
    EXPECT_EQ(event.compare(nl, 7, "\ndata: "), 0) << event;
    const std::string name = event.substr(7, nl - 7);
    json data = json::parse(event.substr(nl + 7));
    EXPECT_EQ(data["type"], name);
    events.emplace_back(name, std::move(data));
  }
  return events;
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
  const auto events = SplitEvents(out);
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
  const auto events = SplitEvents(out);
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

}  // namespace
}  // namespace llmtap::api
