// The embeddings and rerank API modules: what each request shape parses to, what a server
// refuses, and the response bytes (read back as JSON, base64 decoded).
#include <gtest/gtest.h>

#include <cstring>
#include <nlohmann/json.hpp>

#include "api/embeddings.h"
#include "api/endpoints.h"
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

}  // namespace
}  // namespace llmtap::api
