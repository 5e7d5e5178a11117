// Server metrics: counter increases and spec-decode acceptance from scrapes (vLLM and SGLang
// fixtures), the HTTP fetcher's failures, and the sampler against `llmtap sim` in-process, whose
// acceptance figures must equal what its raw counters imply.
#include "report/server_metrics.h"

#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/read_until.hpp>
#include <boost/asio/write.hpp>
#include <nlohmann/json.hpp>

#include "common/testing/http_client.h"
#include "net/http_get.h"
#include "sim/server.h"
#include "sim/testdata/fast_options.h"
#include "test_util.h"

namespace llmtap::report {
namespace {

using nlohmann::json;
using testing::ReadData;

TEST(ServerMetricsTest, VllmCounterDeltasAndAcceptance) {
  ServerMetricsSeries s;
  s.AddScrape(0.0, ReadData("vllm_metrics_before.txt"));
  s.AddScrape(1.0, ReadData("vllm_metrics_after.txt"));  // same text twice: no increase
  s.AddScrape(2.0, ReadData("vllm_metrics_after.txt"));
  json j = s.ToJson("http://h:8000/metrics", "");
  EXPECT_EQ(j["url"], "http://h:8000/metrics");
  EXPECT_TRUE(j["error"].is_null());
  EXPECT_EQ(j["scrapes"]["ok"], 3);
  EXPECT_EQ(j["scrapes"]["failed"], 0);
  EXPECT_DOUBLE_EQ(j["window_s"].get<double>(), 2.0);

  const json& c = j["counters"];
  EXPECT_DOUBLE_EQ(c["vllm:spec_decode_num_drafts_total"]["delta"].get<double>(), 500);
  EXPECT_DOUBLE_EQ(c["vllm:generation_tokens_total"]["delta"].get<double>(), 1400);
  EXPECT_DOUBLE_EQ(c["vllm:time_to_first_token_seconds_count"]["delta"].get<double>(), 35);
  EXPECT_DOUBLE_EQ(c["vllm:time_to_first_token_seconds_sum"]["delta"].get<double>(), 3.5);
  EXPECT_FALSE(c.contains("vllm:time_to_first_token_seconds_bucket"));
  EXPECT_FALSE(c.contains("vllm:generation_tokens_created"));
  EXPECT_FALSE(c.contains("vllm:num_requests_running"));
  // Summed over finished_reason, and listed per label set.
  const json& success = c["vllm:request_success_total"];
  EXPECT_DOUBLE_EQ(success["delta"].get<double>(), 35);
  ASSERT_EQ(success["by_labels"].size(), 3u);
  double stop = -1;
  for (const json& row : success["by_labels"]) {
    if (row["labels"]["finished_reason"] == "stop") stop = row["delta"].get<double>();
  }
  EXPECT_DOUBLE_EQ(stop, 30);
  EXPECT_FALSE(c["vllm:generation_tokens_total"].contains("by_labels"));

  const json& spec = j["spec_decode"];
  EXPECT_EQ(spec["source"], "vllm_counters");
  EXPECT_DOUBLE_EQ(spec["drafts"].get<double>(), 500);
  EXPECT_DOUBLE_EQ(spec["draft_tokens"].get<double>(), 1500);
  EXPECT_DOUBLE_EQ(spec["accepted_tokens"].get<double>(), 900);
  EXPECT_DOUBLE_EQ(spec["acceptance_rate"].get<double>(), 900.0 / 1500.0);
  EXPECT_DOUBLE_EQ(spec["mean_acceptance_length"].get<double>(), 1.0 + 900.0 / 500.0);
  ASSERT_EQ(spec["per_position_acceptance"].size(), 3u);
  EXPECT_DOUBLE_EQ(spec["per_position_acceptance"][0].get<double>(), 400.0 / 500.0);
  EXPECT_DOUBLE_EQ(spec["per_position_acceptance"][1].get<double>(), 300.0 / 500.0);
  EXPECT_DOUBLE_EQ(spec["per_position_acceptance"][2].get<double>(), 200.0 / 500.0);

  // Gauges: statistics over the scrapes after the first; series over all of them.
  EXPECT_EQ(j["gauges"]["vllm:num_requests_running"]["count"], 2);
  EXPECT_DOUBLE_EQ(j["gauges"]["vllm:num_requests_running"]["mean"].get<double>(), 2.0);
  EXPECT_EQ(j["series"]["t_s"], json({0.0, 1.0, 2.0}));
  EXPECT_EQ(j["series"]["vllm:num_requests_running"], json({0.0, 2.0, 2.0}));
  EXPECT_EQ(j["series"]["vllm:spec_decode_num_drafts_total"], json({1000.0, 1500.0, 1500.0}));
}

TEST(ServerMetricsTest, SumsEnginesHandlesResetsAndLateSeries) {
  ServerMetricsSeries s;
  auto text = [](int e0, int e1, int dt0, int acc0, const char* late) {
    std::string t =
        "# TYPE vllm:spec_decode_num_drafts counter\n"
        "vllm:spec_decode_num_drafts_total{engine=\"0\"} " +
        std::to_string(e0) + "\n" + "vllm:spec_decode_num_drafts_total{engine=\"1\"} " +
        std::to_string(e1) + "\n" + "vllm:spec_decode_num_draft_tokens_total{engine=\"0\"} " +
        std::to_string(dt0) + "\n" + "vllm:spec_decode_num_accepted_tokens_total{engine=\"0\"} " +
        std::to_string(acc0) + "\n";
    return t + late;
  };
  s.AddScrape(0, text(100, 10, 400, 200, ""));
  s.AddScrape(1, text(150, 20, 600, 300, ""));
  // Engine 0 restarted: its counters began again from 0.
  s.AddScrape(2, text(20, 30, 80, 40,
                      "vllm:spec_decode_num_accepted_tokens_per_pos_total{position=\"1\"} 5\n"));
  s.AddFailure(2.5, "connect http://h/metrics: Connection refused");
  s.AddScrape(3, text(50, 40, 200, 100,
                      "vllm:spec_decode_num_accepted_tokens_per_pos_total{position=\"1\"} 8\n"));
  json j = s.ToJson("u", "");
  const json& drafts = j["counters"]["vllm:spec_decode_num_drafts_total"];
  // engine 0: +50, then reset to 20 (+20), then +30 = 100; engine 1: +30.
  EXPECT_DOUBLE_EQ(drafts["delta"].get<double>(), 130);
  EXPECT_EQ(drafts["resets"], 1);
  EXPECT_EQ(drafts["by_labels"].size(), 2u);
  EXPECT_EQ(j["scrapes"]["failed"], 1);
  EXPECT_EQ(j["scrapes"]["first_error"], "connect http://h/metrics: Connection refused");
  const json& spec = j["spec_decode"];
  // draft tokens: +200, reset +80, +120 = 400; accepted: +100, +40, +60 = 200.
  EXPECT_DOUBLE_EQ(spec["acceptance_rate"].get<double>(), 200.0 / 400.0);
  EXPECT_DOUBLE_EQ(spec["mean_acceptance_length"].get<double>(), 1.0 + 200.0 / 130.0);
  // Position 1 appeared during the window: counted from 0. Position 0 never reported.
  ASSERT_EQ(spec["per_position_acceptance"].size(), 2u);
  EXPECT_DOUBLE_EQ(spec["per_position_acceptance"][0].get<double>(), 0.0);
  EXPECT_DOUBLE_EQ(spec["per_position_acceptance"][1].get<double>(), 8.0 / 130.0);
}

TEST(ServerMetricsTest, NoDraftsGivesNullRatios) {
  ServerMetricsSeries s;
  s.AddScrape(0, ReadData("vllm_metrics_before.txt"));
  s.AddScrape(1, ReadData("vllm_metrics_before.txt"));
  json spec = s.ToJson("u", "")["spec_decode"];
  EXPECT_EQ(spec["source"], "vllm_counters");
  EXPECT_DOUBLE_EQ(spec["drafts"].get<double>(), 0);
  EXPECT_TRUE(spec["acceptance_rate"].is_null());
  EXPECT_TRUE(spec["mean_acceptance_length"].is_null());
  EXPECT_TRUE(spec["per_position_acceptance"][0].is_null());
}

TEST(ServerMetricsTest, SglangGaugesSampledOverTime) {
  ServerMetricsSeries s;
  s.AddScrape(0, ReadData("sglang_metrics.txt"));  // before the run: 0.27 / 2.9, left out
  auto gauges = [](double rate, double length) {
    return "# TYPE sglang:spec_accept_rate gauge\nsglang:spec_accept_rate{model_name=\"m\"} " +
           std::to_string(rate) +
           "\n# TYPE sglang:spec_accept_length "
           "gauge\nsglang:spec_accept_length{model_name=\"m\"} " +
           std::to_string(length) + "\n";
  };
  s.AddScrape(1, gauges(0.5, 3.0));
  s.AddScrape(2, gauges(0.7, 3.4));
  s.AddScrape(3, gauges(0.6, 3.2));
  json j = s.ToJson("u", "");
  const json& spec = j["spec_decode"];
  EXPECT_EQ(spec["source"], "sglang_gauges");
  EXPECT_NEAR(spec["acceptance_rate"].get<double>(), 0.6, 1e-12);
  EXPECT_NEAR(spec["mean_acceptance_length"].get<double>(), 3.2, 1e-12);
  EXPECT_EQ(spec["accept_rate"]["count"], 3);
  EXPECT_DOUBLE_EQ(spec["accept_rate"]["min"].get<double>(), 0.5);
  EXPECT_DOUBLE_EQ(spec["accept_rate"]["max"].get<double>(), 0.7);
  EXPECT_DOUBLE_EQ(spec["accept_rate"]["last"].get<double>(), 0.6);
  EXPECT_EQ(j["series"]["sglang:spec_accept_rate"], json({0.27, 0.5, 0.7, 0.6}));
  // Gauges absent from later scrapes are null there.
  EXPECT_EQ(j["series"]["sglang:num_running_reqs"], json({12.0, nullptr, nullptr, nullptr}));
  EXPECT_DOUBLE_EQ(j["counters"]["sglang:generation_tokens_total"]["delta"].get<double>(), 0);
}

TEST(ServerMetricsTest, NoSpecMetricsGivesNullSpecDecode) {
  ServerMetricsSeries s;
  s.AddScrape(0, "up 1\n");
  s.AddScrape(1, "up 1\n");
  json j = s.ToJson("", "no metrics endpoint found");
  EXPECT_TRUE(j["spec_decode"].is_null());
  EXPECT_TRUE(j["url"].is_null());
  EXPECT_EQ(j["error"], "no metrics endpoint found");
}

TEST(HttpGetTest, RefusedAndSilentServersAreErrors) {
  namespace asio = boost::asio;
  asio::io_context ioc;
  // A listener that accepts and never answers: the deadline must end the request.
  asio::ip::tcp::acceptor silent(ioc, {asio::ip::make_address("127.0.0.1"), 0});
  uint16_t port = silent.local_endpoint().port();
  net::HttpGetResult r = net::HttpGet("http://127.0.0.1:" + std::to_string(port) + "/metrics",
                                      std::chrono::milliseconds(200));
  EXPECT_EQ(r.status, 0);
  EXPECT_NE(r.error.find("timed out"), std::string::npos) << r.error;
  silent.close();
  r = net::HttpGet("http://127.0.0.1:" + std::to_string(port) + "/metrics",
                   std::chrono::milliseconds(2000));
  EXPECT_EQ(r.status, 0);
  EXPECT_FALSE(r.error.empty());
  std::string error;
  ServerMetricsSampler::Options o;
  o.target_url = "http://127.0.0.1:" + std::to_string(port);
  ServerMetricsSampler sampler(o);
  EXPECT_FALSE(sampler.Start(&error));
  EXPECT_NE(error.find("no metrics endpoint"), std::string::npos) << error;
  sampler.Finish();
  EXPECT_TRUE(sampler.ToJson()["url"].is_null());
}

// A Prometheus endpoint that answers `count` connections, one request each, and keeps every
// request head it read.
class RecordingMetricsServer {
 public:
  explicit RecordingMetricsServer(int count)
      : acceptor_(ioc_, {boost::asio::ip::make_address("127.0.0.1"), 0}) {
    thread_ = std::thread([this, count] {
      for (int i = 0; i < count; ++i) {
        boost::asio::ip::tcp::socket s(ioc_);
        acceptor_.accept(s);
        std::string head;
        boost::system::error_code ec;
        boost::asio::read_until(s, boost::asio::dynamic_buffer(head), "\r\n\r\n", ec);
        heads_.push_back(head);
        const std::string body = "llmtap_test_total 1\n";
        boost::asio::write(s,
                           boost::asio::buffer(
                               "HTTP/1.1 200 OK\r\nContent-Length: " + std::to_string(body.size()) +
                               "\r\nConnection: close\r\n\r\n" + body),
                           ec);
      }
    });
  }
  ~RecordingMetricsServer() {
    if (thread_.joinable()) thread_.join();
  }
  std::string origin() const {
    return "http://127.0.0.1:" + std::to_string(acceptor_.local_endpoint().port());
  }
  // Every head read, once `count` connections were served.
  const std::vector<std::string>& heads() {
    if (thread_.joinable()) thread_.join();
    return heads_;
  }

 private:
  boost::asio::io_context ioc_;
  boost::asio::ip::tcp::acceptor acceptor_;
  std::vector<std::string> heads_;
  std::thread thread_;
};

// replay's --header values (Authorization) reach the metrics endpoint of the target itself,
// and never one on another origin.
TEST(ServerMetricsTest, HeadersGoOnlyToTheTargetsOrigin) {
  const std::vector<std::string> headers = {"Authorization: Bearer sk-metrics-secret",
                                            "X-Team: infra"};
  // The request heads of a sampler's "before" and "after" scrapes. `url`: "" to discover the
  // endpoint from the target, else a path on the server; `target`: "" for the server itself.
  auto scrape_heads = [&](const std::string& url, const std::string& target) {
    RecordingMetricsServer server(2);
    ServerMetricsSampler::Options o;
    o.timeout = std::chrono::seconds(120);  // per scrape; a guard against a hang only
    o.url = url.empty() ? "" : server.origin() + url;
    o.target_url = target.empty() ? server.origin() + "/v1" : target;
    o.headers = headers;
    ServerMetricsSampler sampler(o);
    std::string error;
    EXPECT_TRUE(sampler.Start(&error)) << error;
    sampler.Finish();
    return server.heads();
  };
  const std::vector<std::string> same_origin = scrape_heads("", "");
  ASSERT_EQ(same_origin.size(), 2u);
  for (const std::string& head : same_origin) {
    EXPECT_NE(head.find("GET /metrics HTTP/1.1"), std::string::npos) << head;
    EXPECT_NE(head.find("Authorization: Bearer sk-metrics-secret\r\n"), std::string::npos) << head;
    EXPECT_NE(head.find("X-Team: infra\r\n"), std::string::npos) << head;
  }
  // Another origin (port) than the target's.
  const std::vector<std::string> other = scrape_heads("/metrics", "http://127.0.0.1:9/v1");
  ASSERT_EQ(other.size(), 2u);
  for (const std::string& head : other) {
    EXPECT_EQ(head.find("sk-metrics-secret"), std::string::npos) << head;
    EXPECT_EQ(head.find("X-Team"), std::string::npos) << head;
  }
}

// The raw value of an unlabelled-or-labelled sample line, read without the parser under test.
double RawCounter(const std::string& text, const std::string& name) {
  double sum = 0;
  size_t pos = 0;
  while ((pos = text.find(name, pos)) != std::string::npos) {
    bool line_start = pos == 0 || text[pos - 1] == '\n';
    size_t end = text.find('\n', pos);
    std::string line = text.substr(pos, end - pos);
    pos = end;
    char next = line.size() > name.size() ? line[name.size()] : '\0';
    if (!line_start || (next != '{' && next != ' ')) continue;
    sum += std::stod(line.substr(line.rfind(' ') + 1));
  }
  return sum;
}

TEST(ServerMetricsSimTest, SamplerMatchesTheSimulatorsCounters) {
  sim::SimOptions o = sim::testing::FastSimOptions();
  o.threads = 1;
  o.timing.itl_ms = 0.05;
  o.spec.num_spec_tokens = 4;
  sim::SimServer server(o);
  std::string error;
  ASSERT_TRUE(server.Start(&error)) << error;
  const std::string base = "http://127.0.0.1:" + std::to_string(server.port());
  ::llmtap::testing::HttpClient client(server.port());

  // Some traffic before the window, so that the deltas start from non-zero counters.
  const std::string prompt =
      "def add(a, b):\n    return a + b\n\ndef add(a, b):\n    return a + b\n\ndef add(a, b):\n"
      "    return a + b\n\ndef sub(a, b):\n    return a - b\n\ndef sub(a, b):\n    return a - b\n";
  auto send = [&](int n) {
    for (int i = 0; i < n; ++i) {
      auto res = client.Post(
          "/v1/completions",
          json{{"model", "m"}, {"prompt", prompt + std::to_string(i)}, {"max_tokens", 48}});
      ASSERT_EQ(res.status, 200) << res.body;
    }
  };
  send(3);

  std::string before = client.Send(boost::beast::http::verb::get, "/metrics").body;
  ServerMetricsSampler::Options so;
  so.target_url = base + "/v1";
  so.interval = std::chrono::milliseconds(20);
  // Per scrape: a guard against a hang only. With the default 2 s, a scrape that a loaded
  // machine made slower counted as failed (and `failed` must be 0 here).
  so.timeout = std::chrono::seconds(120);
  ServerMetricsSampler sampler(so);
  ASSERT_TRUE(sampler.Start(&error)) << error;
  sampler.StartBackground();
  EXPECT_EQ(sampler.url(), base + "/metrics");
  send(10);
  sampler.Sample();
  send(10);
  sampler.Finish();
  std::string after = client.Send(boost::beast::http::verb::get, "/metrics").body;
  json j = sampler.ToJson();
  server.Stop();

  const double d_drafts = RawCounter(after, "vllm:spec_decode_num_drafts_total") -
                          RawCounter(before, "vllm:spec_decode_num_drafts_total");
  const double d_tokens = RawCounter(after, "vllm:spec_decode_num_draft_tokens_total") -
                          RawCounter(before, "vllm:spec_decode_num_draft_tokens_total");
  const double d_accepted = RawCounter(after, "vllm:spec_decode_num_accepted_tokens_total") -
                            RawCounter(before, "vllm:spec_decode_num_accepted_tokens_total");
  ASSERT_GT(d_drafts, 0) << "the prompt should give the n-gram drafter something to propose";
  ASSERT_GT(d_accepted, 0);
  EXPECT_GE(j["scrapes"]["ok"].get<int>(), 3);  // before, Sample(), after, and the thread's
  EXPECT_EQ(j["scrapes"]["failed"], 0);
  const json& spec = j["spec_decode"];
  ASSERT_TRUE(spec.is_object()) << j.dump(2);
  EXPECT_EQ(spec["source"], "vllm_counters");
  EXPECT_DOUBLE_EQ(spec["drafts"].get<double>(), d_drafts);
  EXPECT_DOUBLE_EQ(spec["draft_tokens"].get<double>(), d_tokens);
  EXPECT_DOUBLE_EQ(spec["accepted_tokens"].get<double>(), d_accepted);
  EXPECT_DOUBLE_EQ(spec["acceptance_rate"].get<double>(), d_accepted / d_tokens);
  EXPECT_DOUBLE_EQ(spec["mean_acceptance_length"].get<double>(), 1.0 + d_accepted / d_drafts);
  ASSERT_EQ(spec["per_position_acceptance"].size(), 4u);
  for (int i = 0; i < 4; ++i) {
    std::string name = "vllm:spec_decode_num_accepted_tokens_per_pos_total";
    std::string label = "position=\"" + std::to_string(i) + "\"";
    auto value = [&](const std::string& text) {
      double v = -1;
      size_t pos = 0;
      while (pos < text.size()) {
        size_t eol = text.find('\n', pos);
        if (eol == std::string::npos) eol = text.size();
        std::string line = text.substr(pos, eol - pos);
        pos = eol + 1;
        if (line.rfind(name + "{", 0) == 0 && line.find(label) != std::string::npos) {
          v = std::stod(line.substr(line.rfind(' ') + 1));
        }
      }
      EXPECT_GE(v, 0) << label;
      return v;
    };
    EXPECT_DOUBLE_EQ(spec["per_position_acceptance"][i].get<double>(),
                     (value(after) - value(before)) / d_drafts)
        << "position " << i;
  }
  EXPECT_DOUBLE_EQ(j["counters"]["vllm:request_success_total"]["delta"].get<double>(), 20);
}

}  // namespace
}  // namespace llmtap::report
