// A shadow pair's pieces (shadow/pair.h): body timing, request traits, the output comparison (by
// character and by token) and the pair line's members.
#include "shadow/pair.h"

#include <string>
#include <string_view>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "tokenizer/tokenizer.h"

namespace llmtap::shadow {
namespace {

using std::chrono::milliseconds;

TEST(BodyTiming, TtftItlAndLatencyFromTheStart) {
  const BodyTiming::Clock::time_point t0{};
  BodyTiming t(t0);
  EXPECT_EQ(t.ttft_us(), -1);
  EXPECT_EQ(t.itl_p50_us(), -1);
  EXPECT_EQ(t.itl_max_us(), -1);
  t.OnBody(t0 + milliseconds(30));
  EXPECT_EQ(t.ttft_us(), 30000);
  EXPECT_EQ(t.itl_p50_us(), -1);    // one read: no gap yet
  t.OnBody(t0 + milliseconds(40));  // gap 10
  t.OnBody(t0 + milliseconds(45));  // gap 5
  t.OnBody(t0 + milliseconds(85));  // gap 40
  t.OnEnd(t0 + milliseconds(90));
  EXPECT_EQ(t.itl_p50_us(), 10000);
  EXPECT_EQ(t.itl_max_us(), 40000);
  EXPECT_EQ(t.latency_us(), 90000);
  t.OnBody(t0 + milliseconds(90));  // gap 5: an even count takes the middle two's mean
  EXPECT_EQ(t.itl_p50_us(), 7500);
}

TEST(CompareOutputs, EqualDifferingAndPrefix) {
  OutputComparison c = CompareOutputs("hello world", "hello world");
  EXPECT_TRUE(c.equal);
  EXPECT_EQ(c.first_diff_char, -1);
  EXPECT_DOUBLE_EQ(c.length_ratio, 1.0);

  c = CompareOutputs("hello world", "hello there");
  EXPECT_FALSE(c.equal);
  EXPECT_EQ(c.first_diff_char, 6);
  EXPECT_DOUBLE_EQ(c.length_ratio, 1.0);

  c = CompareOutputs("hello", "hello world");  // the candidate goes on
  EXPECT_EQ(c.first_diff_char, 5);
  EXPECT_DOUBLE_EQ(c.length_ratio, 11.0 / 5.0);

  c = CompareOutputs("", "");
  EXPECT_TRUE(c.equal);
  EXPECT_DOUBLE_EQ(c.length_ratio, 1.0);
  c = CompareOutputs("", "x");
  EXPECT_EQ(c.first_diff_char, 0);
  EXPECT_DOUBLE_EQ(c.length_ratio, -1.0);
}

TEST(CompareOutputs, CountsCharactersNotBytes) {
  // "é" (2 bytes) and "è" share their first byte: the difference is character 2, not byte 3.
  const OutputComparison c = CompareOutputs("a\xC3\xA9\xC3\xA9", "a\xC3\xA9\xC3\xA8z");
  EXPECT_FALSE(c.equal);
  EXPECT_EQ(c.first_diff_char, 2);
  EXPECT_DOUBLE_EQ(c.length_ratio, 4.0 / 3.0);
}

TEST(ComparableOutput, TextThenToolCalls) {
  ResponseText r;
  r.text = "ok";
  r.reasoning = "thinking";
  r.tool_calls.push_back({0, "get_weather", "{\"city\":\"Oslo\"}"});
  EXPECT_EQ(ComparableOutput(r), "okget_weather{\"city\":\"Oslo\"}");
}

ShadowSide Side(int status, const char* text, int64_t ttft_ms, int64_t completion_tokens) {
  const BodyTiming::Clock::time_point t0{};
  ShadowSide s{ResponseOutcome(), BodyTiming(t0)};
  s.outcome.status = status;
  s.outcome.has_response = true;
  s.outcome.response.text = text;
  s.outcome.completion_tokens = completion_tokens;
  s.outcome.SetFinishReason("stop");
  s.timing.OnBody(t0 + milliseconds(ttft_ms));
  s.timing.OnBody(t0 + milliseconds(ttft_ms + 2));
  s.timing.OnEnd(t0 + milliseconds(ttft_ms + 5));
  return s;
}

TEST(AppendPairMembers, BothSidesDeltasAndTheComparison) {
  const ShadowSide primary = Side(200, "abcdef", 10, 6);
  ShadowSide candidate = Side(200, "abcxyz!", 4, 7);
  std::string members;
  const RequestTraits traits = ReadRequestTraits(
      R"({"messages":[{"role":"user","content":"hi"}],"model":"llama-3","temperature":0.7})");
  AppendPairMembers({"/v1/chat/completions", 1700000000000, 41, 1, &traits, "http://b:8000"},
                    primary, candidate, nullptr, &members);
  std::string line;
  AppendShadowPairLine(3, 250, members, &line);
  const nlohmann::json j = nlohmann::json::parse(line);
  EXPECT_EQ(j["line"], 3);
  EXPECT_EQ(j["timestamp"], 250);
  EXPECT_EQ(j["path"], "/v1/chat/completions");
  EXPECT_EQ(j["request"], 41);
  EXPECT_EQ(j["shadow"], 1);
  EXPECT_EQ(j["candidate_url"], "http://b:8000");
  EXPECT_EQ(j["model"], "llama-3");
  EXPECT_EQ(j["temperature"], 0.7);
  EXPECT_EQ(j["at_ms"], 1700000000000);
  EXPECT_EQ(j["primary"]["status"], 200);
  EXPECT_EQ(j["primary"]["ttft_ms"], 10.0);
  EXPECT_EQ(j["primary"]["itl_p50_ms"], 2.0);
  EXPECT_EQ(j["primary"]["latency_ms"], 15.0);
  EXPECT_EQ(j["candidate"]["completion_tokens"], 7);
  EXPECT_EQ(j["candidate"]["finish_reason"], "stop");
  EXPECT_EQ(j["candidate"]["error"], nullptr);
  EXPECT_EQ(j["delta"]["ttft_ms"], -6.0);
  EXPECT_EQ(j["delta"]["itl_p50_ms"], 0.0);
  EXPECT_EQ(j["output"]["equal"], false);
  EXPECT_EQ(j["output"]["first_diff_char"], 3);
  EXPECT_EQ(j["output"]["first_diff_token"], nullptr);  // no tokenizer
  EXPECT_NEAR(j["output"]["length_ratio"].get<double>(), 7.0 / 6.0, 1e-4);
  EXPECT_EQ(j["output"]["truncated"], false);

  // A candidate that failed: no comparison; a request capture did not record: line null.
  candidate.outcome.error = "timeout";
  members.clear();
  AppendPairMembers({"/v1/completions", 1, 42, 0, nullptr, ""}, primary, candidate, nullptr,
                    &members);
  line.clear();
  AppendShadowPairLine(0, 0, members, &line);
  const nlohmann::json k = nlohmann::json::parse(line);
  EXPECT_EQ(k["line"], nullptr);
  EXPECT_EQ(k["timestamp"], nullptr);
  EXPECT_EQ(k["candidate"]["error"], "timeout");
  EXPECT_EQ(k["output"], nullptr);
  EXPECT_EQ(k["model"], nullptr);
  EXPECT_EQ(k["temperature"], nullptr);
  EXPECT_EQ(k["candidate_url"], nullptr);
}

TEST(ReadRequestTraits, ModelAndTemperatureAtTheTopOnly) {
  RequestTraits t = ReadRequestTraits(
      R"({"temperature":0,"messages":[{"model":"inner","temperature":1}],"model":"m"})");
  EXPECT_EQ(t.model, "m");
  EXPECT_EQ(t.temperature, 0.0);
  t = ReadRequestTraits(R"({"model":7,"temperature":"hot"})");  // the wrong types: unknown
  EXPECT_FALSE(t.model);
  EXPECT_FALSE(t.temperature);
  t = ReadRequestTraits("not json");
  EXPECT_FALSE(t.model);
  t = ReadRequestTraits(R"({"model":"a\u00e9"})");
  EXPECT_EQ(t.model, "a\xC3\xA9");
}

TEST(CompareOutputs, FirstDifferingTokenWithATokenizer) {
  std::string error;
  const auto tok = tokenizer::Tokenizer::Load("builtin", &error);
  ASSERT_NE(tok, nullptr) << error;
  // Ten words in common, then the outputs part: the difference is past the tenth token.
  const std::string common = "one two three four five six seven eight nine ten";
  std::vector<uint32_t> ids;
  tok->Encode(common, &ids);
  const OutputComparison c = CompareOutputs(common + " eleven", common + " twelve", tok.get());
  EXPECT_FALSE(c.equal);
  EXPECT_EQ(c.first_diff_token, static_cast<int64_t>(ids.size()));
  EXPECT_EQ(c.first_diff_char, static_cast<int64_t>(common.size()) + 1);
  EXPECT_EQ(CompareOutputs("same", "same", tok.get()).first_diff_token, -1);
}

// A restarted proxy numbers its pairs on after the highest "request" of its pairs file's tail:
// lines come in completion order, so the last one need not be the highest.
TEST(HighestRequest, TheHighestOfTheWholeLinesNotTheLast) {
  EXPECT_EQ(HighestRequest(""), 0u);
  EXPECT_EQ(HighestRequest("{\"line\":1,\"request\":7,\"shadow\":0}\n"
                           "{\"line\":null,\"request\":9,\"shadow\":1}\n"
                           "{\"request\":3}\n"
                           "not json\n"
                           "{\"request\":\"12\"}\n"  // not a number
                           "{\"line\":2}\n"),        // written before "request" existed
            9u);
  EXPECT_EQ(HighestRequest("{\"request\":4}\n{\"request\":50}"), 4u);  // an unfinished line
}

}  // namespace
}  // namespace llmtap::shadow
