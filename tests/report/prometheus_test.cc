// The Prometheus text parser: real vLLM and SGLang exposition samples, the format's corners, and
// input that must never crash it.
#include "report/prometheus.h"

#include <cmath>
#include <cstdint>
#include <string>

#include <gtest/gtest.h>

#include "test_util.h"

namespace llmtap::report {
namespace {

using testing::ReadData;

const PromSample* Find(const PromText& t, const std::string& name,
                       const std::string& label_key = "") {
  for (const PromSample& s : t.samples) {
    if (s.name == name && (label_key.empty() || LabelKey(s.labels) == label_key)) return &s;
  }
  return nullptr;
}

TEST(PrometheusTest, ParsesVllmExposition) {
  PromText t = ParsePrometheusText(ReadData("vllm_metrics_after.txt"));
  EXPECT_EQ(t.bad_lines, 0u);
  EXPECT_EQ(t.samples.size(), 49u);
  const PromSample* drafts = Find(t, "vllm:spec_decode_num_drafts_total");
  ASSERT_NE(drafts, nullptr);
  EXPECT_EQ(drafts->value, 1500);
  ASSERT_NE(drafts->Label("model_name"), nullptr);
  EXPECT_EQ(*drafts->Label("model_name"), "meta-llama/Llama-3.1-8B-Instruct");
  EXPECT_EQ(*drafts->Label("engine"), "0");
  // Labels are sorted by name, so the key is canonical.
  const PromSample* pos2 =
      Find(t, "vllm:spec_decode_num_accepted_tokens_per_pos_total",
           R"({engine="0",model_name="meta-llama/Llama-3.1-8B-Instruct",position="2"})");
  ASSERT_NE(pos2, nullptr);
  EXPECT_EQ(pos2->value, 600);
  const PromSample* inf =
      Find(t, "vllm:time_to_first_token_seconds_bucket",
           R"({engine="0",le="+Inf",model_name="meta-llama/Llama-3.1-8B-Instruct"})");
  ASSERT_NE(inf, nullptr);
  EXPECT_EQ(inf->value, 155);
  EXPECT_EQ(Find(t, "process_resident_memory_bytes")->value, 2147483648.0);

  EXPECT_EQ(SampleType(t, "vllm:spec_decode_num_drafts_total"), PromType::kCounter);
  EXPECT_EQ(SampleType(t, "vllm:num_requests_running"), PromType::kGauge);
  EXPECT_EQ(SampleType(t, "vllm:time_to_first_token_seconds_bucket"), PromType::kHistogram);
  EXPECT_TRUE(IsCumulativeSample(t, "vllm:spec_decode_num_drafts_total", false));
  EXPECT_TRUE(IsCumulativeSample(t, "vllm:time_to_first_token_seconds_count", false));
  EXPECT_TRUE(IsCumulativeSample(t, "vllm:time_to_first_token_seconds_sum", false));
  EXPECT_FALSE(IsCumulativeSample(t, "vllm:time_to_first_token_seconds_bucket", false));
  EXPECT_TRUE(IsCumulativeSample(t, "vllm:time_to_first_token_seconds_bucket", true));
  EXPECT_FALSE(IsCumulativeSample(t, "vllm:generation_tokens_created", false));
  EXPECT_FALSE(IsCumulativeSample(t, "vllm:num_requests_running", false));
}

TEST(PrometheusTest, ParsesSglangExposition) {
  PromText t = ParsePrometheusText(ReadData("sglang_metrics.txt"));
  EXPECT_EQ(t.bad_lines, 0u);
  EXPECT_EQ(t.samples.size(), 17u);
  EXPECT_DOUBLE_EQ(Find(t, "sglang:spec_accept_rate")->value, 0.27);
  EXPECT_DOUBLE_EQ(Find(t, "sglang:spec_accept_length")->value, 2.9);
  EXPECT_DOUBLE_EQ(Find(t, "sglang:prompt_tokens_total")->value, 8.128902e+06);
  EXPECT_EQ(SampleType(t, "sglang:spec_accept_rate"), PromType::kGauge);
  EXPECT_TRUE(IsCumulativeSample(t, "sglang:generation_tokens_total", false));
}

TEST(PrometheusTest, OpenMetricsFamiliesAndUntypedTotals) {
  // OpenMetrics names the counter family without _total and adds _created samples.
  PromText t = ParsePrometheusText(
      "# TYPE foo counter\n"
      "# HELP foo Some help with \"quotes\" and \\ backslash\n"
      "foo_total 17\n"
      "foo_created 1.7e9\n"
      "bar_total 3\n"
      "baz 4\n"
      "# EOF\n");
  EXPECT_EQ(t.bad_lines, 0u);
  ASSERT_EQ(t.samples.size(), 4u);
  EXPECT_EQ(SampleType(t, "foo_total"), PromType::kCounter);
  EXPECT_TRUE(IsCumulativeSample(t, "foo_total", false));
  EXPECT_FALSE(IsCumulativeSample(t, "foo_created", false));
  EXPECT_TRUE(IsCumulativeSample(t, "bar_total", false));  // untyped, named like a counter
  EXPECT_FALSE(IsCumulativeSample(t, "baz", false));
}

TEST(PrometheusTest, LabelEscapesSpecialValuesTimestampsAndSpacing) {
  PromText t = ParsePrometheusText(
      "a{path=\"C:\\\\dir\\\"x\\\"\\nend\"} 1\n"
      "b +Inf\n"
      "c -Inf\n"
      "d NaN\n"
      "e{x=\"1\",} 1.5e-3 1700000000000\n"
      "  f { y = \"2\" , x = \"1\" }   -2  \r\n"
      "g{} 0x10\n"  // hex is not a Prometheus number
      "h 7\t\n");
  EXPECT_EQ(t.bad_lines, 1u);
  ASSERT_EQ(t.samples.size(), 7u);
  EXPECT_EQ(*t.samples[0].Label("path"), "C:\\dir\"x\"\nend");
  EXPECT_EQ(LabelKey(t.samples[0].labels), "{path=\"C:\\\\dir\\\"x\\\"\\nend\"}");
  EXPECT_TRUE(std::isinf(t.samples[1].value) && t.samples[1].value > 0);
  EXPECT_TRUE(std::isinf(t.samples[2].value) && t.samples[2].value < 0);
  EXPECT_TRUE(std::isnan(t.samples[3].value));
  EXPECT_DOUBLE_EQ(t.samples[4].value, 1.5e-3);
  EXPECT_EQ(t.samples[5].name, "f");
  EXPECT_EQ(LabelKey(t.samples[5].labels), "{x=\"1\",y=\"2\"}");
  EXPECT_EQ(t.samples[5].value, -2);
  EXPECT_EQ(t.samples[6].name, "h");
}

TEST(PrometheusTest, GarbageLinesAreCountedAndSkipped) {
  PromText t = ParsePrometheusText(
      "ok 1\n"
      "{} 1\n"
      "9bad 1\n"
      "nolabelclose{a=\"b\" 1\n"
      "unquoted{a=b} 1\n"
      "unterminated{a=\"b} 1\n"
      "novalue\n"
      "novalue2{a=\"b\"}\n"
      "word abc\n"
      "glued{a=\"b\"}1\n"
      "# TYPE broken notatype\n"
      "# TYPE\n"
      "ok2 2\n");
  EXPECT_EQ(t.samples.size(), 2u);
  EXPECT_EQ(t.bad_lines, 11u);
}

// Every prefix of a real exposition and deterministic byte mutations of it: parsing never
// crashes or hangs, and every kept sample has a valid name.
TEST(PrometheusTest, SurvivesTruncationAndMutation) {
  std::string text = ReadData("vllm_metrics_after.txt") + ReadData("sglang_metrics.txt");
  for (size_t n = 0; n < text.size(); n += 7) {
    PromText t = ParsePrometheusText(std::string_view(text).substr(0, n));
    for (const PromSample& s : t.samples) EXPECT_FALSE(s.name.empty());
  }
  uint64_t state = 0x9e3779b97f4a7c15ull;
  auto next = [&] {
    state ^= state << 13;
    state ^= state >> 7;
    state ^= state << 17;
    return state;
  };
  const char kBytes[] = "{}\"\\=,# \n\r\t+-.eE0InfNaN\xff\x00";
  for (int round = 0; round < 300; ++round) {
    std::string m = text;
    for (int k = 0; k < 20; ++k) {
      m[next() % m.size()] = kBytes[next() % (sizeof kBytes - 1)];
    }
    PromText t = ParsePrometheusText(m);
    for (const PromSample& s : t.samples) EXPECT_FALSE(s.name.empty());
  }
  // One huge line without a newline.
  std::string huge = "x{a=\"" + std::string(1 << 20, 'z');
  EXPECT_EQ(ParsePrometheusText(huge).bad_lines, 1u);
}

}  // namespace
}  // namespace llmtap::report
