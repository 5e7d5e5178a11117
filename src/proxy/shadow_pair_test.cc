// The pure pieces of shadow traffic (shadow_pair.h): the candidate's header rules applied to a
// parsed request, body timing, the output comparison and the pair line's members.
#include "proxy/shadow_pair.h"

#include <string>
#include <string_view>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <boost/asio/buffer.hpp>
#include <boost/beast/core/flat_buffer.hpp>

#include "proxy/http_message.h"

namespace llmtap::proxy {
namespace {

using std::chrono::milliseconds;

// The head the candidate gets for `request` under `rules`.
std::string CandidateHead(std::string_view request, const ShadowHeaderRules& rules) {
  RequestReader reader;
  reader.Begin(4096, 4096);
  boost::beast::flat_buffer buffer;
  buffer.commit(boost::asio::buffer_copy(buffer.prepare(request.size()),
                                         boost::asio::buffer(request.data(), request.size())));
  EXPECT_EQ(reader.Feed(buffer), RequestReader::State::kDone);
  std::string head;
  reader.BuildUpstreamHead("candidate:9000", &head, &rules.skipped(), rules.extra_fields());
  return head;
}

constexpr std::string_view kRequest =
    "POST /v1/chat/completions HTTP/1.1\r\n"
    "Host: proxy:8001\r\n"
    "Authorization: Bearer sk-primary\r\n"
    "X-Secret: s\r\n"
    "x-keep: k\r\n"
    "Content-Type: application/json\r\n"
    "Connection: keep-alive, X-Hop\r\n"
    "X-Hop: h\r\n"
    "Content-Length: 2\r\n"
    "\r\n"
    "{}";

TEST(ShadowHeaderRules, ReplacesDropsAndKeepsTheRest) {
  ShadowHeaderRules rules;
  std::string error;
  ASSERT_TRUE(rules.AddSet("Authorization:  Bearer sk-candidate ", &error)) << error;
  ASSERT_TRUE(rules.AddSet("X-Added: yes", &error)) << error;
  ASSERT_TRUE(rules.AddDrop("x-SECRET", &error)) << error;
  EXPECT_EQ(CandidateHead(kRequest, rules),
            "POST /v1/chat/completions HTTP/1.1\r\n"
            "x-keep: k\r\n"
            "Content-Type: application/json\r\n"
            "Authorization: Bearer sk-candidate\r\n"
            "X-Added: yes\r\n"
            "Host: candidate:9000\r\n"
            "Content-Length: 2\r\n"
            "\r\n");
}

TEST(ShadowHeaderRules, NoRulesIsTheUpstreamHead) {
  const ShadowHeaderRules rules;
  const std::string head = CandidateHead(kRequest, rules);
  EXPECT_NE(head.find("Authorization: Bearer sk-primary\r\n"), std::string::npos);
  EXPECT_NE(head.find("X-Secret: s\r\n"), std::string::npos);
  EXPECT_EQ(head.find("X-Hop"), std::string::npos);  // named by Connection: hop-by-hop
  EXPECT_EQ(head.find("proxy:8001"), std::string::npos);
}

TEST(ShadowHeaderRules, RefusesBadSpecsWithoutEchoingTheValue) {
  ShadowHeaderRules rules;
  std::string error;
  EXPECT_FALSE(rules.AddSet("no colon here", &error));
  EXPECT_FALSE(rules.AddSet(": sk-secret", &error));
  EXPECT_EQ(error.find("sk-secret"), std::string::npos);
  EXPECT_FALSE(rules.AddSet("Bad Name: v", &error));
  EXPECT_FALSE(rules.AddSet("X-A: sk-secret\r\nX-Injected: 1", &error));
  EXPECT_EQ(error.find("sk-secret"), std::string::npos);
  EXPECT_FALSE(rules.AddSet("Host: elsewhere", &error));
  EXPECT_FALSE(rules.AddSet("Content-Length: 5", &error));
  EXPECT_FALSE(rules.AddDrop("two words", &error));
  EXPECT_FALSE(rules.AddDrop("", &error));
  EXPECT_TRUE(rules.skipped().empty());
  EXPECT_TRUE(rules.extra_fields().empty());
}

TEST(BodyTiming, TtftItlAndLatencyFromTheStart) {
  const BodyTiming::Clock::time_point t0{};
  BodyTiming t(t0);
  EXPECT_EQ(t.ttft_us(), -1);
  EXPECT_EQ(t.itl_p50_us(), -1);
  EXPECT_EQ(t.itl_max_us(), -1);
  t.OnBody(t0 + milliseconds(30));
  EXPECT_EQ(t.ttft_us(), 30000);
  EXPECT_EQ(t.itl_p50_us(), -1);  // one read: no gap yet
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
  AppendPairMembers("/v1/chat/completions", 1700000000000, primary, candidate, &members);
  std::string line;
  AppendShadowPairLine(3, 250, members, &line);
  const nlohmann::json j = nlohmann::json::parse(line);
  EXPECT_EQ(j["line"], 3);
  EXPECT_EQ(j["timestamp"], 250);
  EXPECT_EQ(j["path"], "/v1/chat/completions");
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
  EXPECT_NEAR(j["output"]["length_ratio"].get<double>(), 7.0 / 6.0, 1e-4);
  EXPECT_EQ(j["output"]["truncated"], false);

  // A candidate that failed: no comparison; a request capture did not record: line null.
  candidate.outcome.error = "timeout";
  members.clear();
  AppendPairMembers("/v1/completions", 1, primary, candidate, &members);
  line.clear();
  AppendShadowPairLine(0, 0, members, &line);
  const nlohmann::json k = nlohmann::json::parse(line);
  EXPECT_EQ(k["line"], nullptr);
  EXPECT_EQ(k["timestamp"], nullptr);
  EXPECT_EQ(k["candidate"]["error"], "timeout");
  EXPECT_EQ(k["output"], nullptr);
}

}  // namespace
}  // namespace llmtap::proxy
