// PromWriter against golden text: the exact lines the proxy (server.cc MetricsText), its capture
// observer (AppendCapturePrometheus) and the simulator (Engine::MetricsText) wrote before they
// shared this writer, so that converting them changes no byte; and the text format's escaping.
#include "common/prometheus.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <string>

namespace llmtap {
namespace {

TEST(PromWriter, ProxyGolden) {
  // The proxy's build info, a labelled family and single-sample metrics.
  std::string out;
  PromWriter w(&out);
  w.Header("llmtap_build_info", PromType::kGauge, "The llmtap version.");
  w.Sample("llmtap_build_info", {{"version", "1.2.3"}}, 1);
  w.Header("llmtap_proxy_requests_total", PromType::kCounter,
           "Requests answered, by status class (\"none\": the client went away first).");
  w.Sample("llmtap_proxy_requests_total", {{"class", "none"}}, uint64_t{0});
  w.Sample("llmtap_proxy_requests_total", {{"class", "2xx"}}, uint64_t{18446744073709551615ull});
  w.Counter("llmtap_proxy_client_cancelled_total",
            "Requests whose client went away before the response ended.", uint64_t{7});
  w.Gauge("llmtap_proxy_active_requests", "Requests in flight.", int64_t{-1});
  EXPECT_EQ(out,
            "# HELP llmtap_build_info The llmtap version.\n"
            "# TYPE llmtap_build_info gauge\n"
            "llmtap_build_info{version=\"1.2.3\"} 1\n"
            "# HELP llmtap_proxy_requests_total Requests answered, by status class (\"none\": the "
            "client went away first).\n"
            "# TYPE llmtap_proxy_requests_total counter\n"
            "llmtap_proxy_requests_total{class=\"none\"} 0\n"
            "llmtap_proxy_requests_total{class=\"2xx\"} 18446744073709551615\n"
            "# HELP llmtap_proxy_client_cancelled_total Requests whose client went away before "
            "the response ended.\n"
            "# TYPE llmtap_proxy_client_cancelled_total counter\n"
            "llmtap_proxy_client_cancelled_total 7\n"
            "# HELP llmtap_proxy_active_requests Requests in flight.\n"
            "# TYPE llmtap_proxy_active_requests gauge\n"
            "llmtap_proxy_active_requests -1\n");
}

TEST(PromWriter, CaptureObserverGolden) {
  std::string out;
  PromWriter w(&out);
  w.Gauge("llmtap_capture_enabled", "1 when payload capture is on.", 1);
  w.Counter("llmtap_capture_offered_total", "Requests offered to capture while enabled.",
            uint64_t{42});
  EXPECT_EQ(out,
            "# HELP llmtap_capture_enabled 1 when payload capture is on.\n"
            "# TYPE llmtap_capture_enabled gauge\n"
            "llmtap_capture_enabled 1\n"
            "# HELP llmtap_capture_offered_total Requests offered to capture while enabled.\n"
            "# TYPE llmtap_capture_offered_total counter\n"
            "llmtap_capture_offered_total 42\n");
}

TEST(PromWriter, SimGolden) {
  // vLLM's names hold colons; every sample carries model_name first.
  const std::string model = "org/Model-7B";
  std::string out;
  PromWriter w(&out);
  w.Gauge("vllm:num_requests_running", "Requests being generated.", int64_t{-2},
          {{"model_name", model}});
  w.Header("vllm:request_success_total", PromType::kCounter,
           "Requests finished, by finish reason.");
  w.Sample("vllm:request_success_total", {{"model_name", model}, {"finished_reason", "length"}},
           uint64_t{3});
  w.Sample("vllm:spec_decode_num_accepted_tokens_per_pos_total",
           {{"model_name", model}, {"position", std::to_string(0)}}, uint64_t{5});
  EXPECT_EQ(out,
            "# HELP vllm:num_requests_running Requests being generated.\n"
            "# TYPE vllm:num_requests_running gauge\n"
            "vllm:num_requests_running{model_name=\"org/Model-7B\"} -2\n"
            "# HELP vllm:request_success_total Requests finished, by finish reason.\n"
            "# TYPE vllm:request_success_total counter\n"
            "vllm:request_success_total{model_name=\"org/Model-7B\",finished_reason=\"length\"} "
            "3\n"
            "vllm:spec_decode_num_accepted_tokens_per_pos_total{model_name=\"org/Model-7B\","
            "position=\"0\"} 5\n");
}

TEST(PromWriter, LabelValueEscaping) {
  // The text format escapes exactly backslash, double quote and line feed in label values. The
  // simulator used JSON escaping before: the same for these three, but it wrote a tab as \t, a
  // carriage return as \r and other control bytes as \u00XX, escapes Prometheus' parser refuses
  // ("invalid escape sequence"); here they pass through raw, as the format asks.
  struct Case {
    std::string in, want;
  } cases[] = {
      {"plain", "plain"},
      {"a\\b", "a\\\\b"},
      {"say \"hi\"", "say \\\"hi\\\""},
      {"two\nlines", "two\\nlines"},
      {"tab\there", "tab\there"},
      {"cr\rhere", "cr\rhere"},
      {std::string("nul\0x", 5), std::string("nul\0x", 5)},
      {"\x01", "\x01"},
      {"caf\xc3\xa9", "caf\xc3\xa9"},
      {"\\\"\n", "\\\\\\\"\\n"},
      {"", ""},
  };
  for (const Case& c : cases) {
    std::string out;
    AppendPromLabelValue(&out, c.in);
    EXPECT_EQ(out, c.want) << c.in;
  }
  std::string page;
  PromWriter w(&page);
  w.Sample("m", {{"model_name", "a\"b\\c\nd"}}, 1);
  EXPECT_EQ(page, "m{model_name=\"a\\\"b\\\\c\\nd\"} 1\n");
}

TEST(PromWriter, HelpEscaping) {
  // HELP text escapes backslash and line feed only (a double quote stays).
  std::string out;
  PromWriter w(&out);
  w.Header("x_total", PromType::kCounter, "back\\slash \"quoted\"\nnext");
  EXPECT_EQ(out,
            "# HELP x_total back\\\\slash \"quoted\"\\nnext\n"
            "# TYPE x_total counter\n");
}

TEST(PromWriter, NameRules) {
  EXPECT_TRUE(IsValidPromMetricName("llmtap_proxy_requests_total"));
  EXPECT_TRUE(IsValidPromMetricName("vllm:num_requests_running"));
  EXPECT_TRUE(IsValidPromMetricName(":x"));
  EXPECT_TRUE(IsValidPromMetricName("_x9"));
  EXPECT_FALSE(IsValidPromMetricName(""));
  EXPECT_FALSE(IsValidPromMetricName("9x"));
  EXPECT_FALSE(IsValidPromMetricName("a-b"));
  EXPECT_FALSE(IsValidPromMetricName("a b"));
  EXPECT_FALSE(IsValidPromMetricName("a.b"));
  EXPECT_TRUE(IsValidPromLabelName("model_name"));
  EXPECT_TRUE(IsValidPromLabelName("_x"));
  EXPECT_FALSE(IsValidPromLabelName("a:b"));
  EXPECT_FALSE(IsValidPromLabelName("9a"));
  EXPECT_FALSE(IsValidPromLabelName(""));
  EXPECT_FALSE(IsValidPromLabelName("__name__"));
}

TEST(PromWriter, IntegerTypes) {
  std::string out;
  PromWriter w(&out);
  w.Sample("a", int{-5});
  w.Sample("b", 5u);
  w.Sample("c", int64_t{INT64_MIN});
  w.Sample("d", true);
  EXPECT_EQ(out, "a -5\nb 5\nc -9223372036854775808\nd 1\n");
}

TEST(PromWriter, HistogramBucketsAreCumulative) {
  std::string out;
  PromWriter w(&out);
  const double bounds[] = {-0.01, 0, 0.5};
  const uint64_t counts[] = {1, 0, 2, 3};  // per bucket; the last above every bound
  w.Histogram("d_seconds", "A delta.", bounds, counts, -0.25);
  EXPECT_EQ(out,
            "# HELP d_seconds A delta.\n# TYPE d_seconds histogram\n"
            "d_seconds_bucket{le=\"-0.01\"} 1\n"
            "d_seconds_bucket{le=\"0\"} 1\n"
            "d_seconds_bucket{le=\"0.5\"} 3\n"
            "d_seconds_bucket{le=\"+Inf\"} 6\n"
            "d_seconds_sum -0.25\n"
            "d_seconds_count 6\n");
}

}  // namespace
}  // namespace llmtap
