// The statistics of a replay: the percentile definition, request classification, throughput,
// goodput, and requests.jsonl round trips.
#include "report/summary.h"
#include "report/compare.h"

#include <cmath>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "report/run_dir.h"
#include "test_util.h"

namespace llmtap::report {
namespace {

using nlohmann::json;

// Reference values from numpy.percentile(values, q) (the default 'linear' method).
TEST(SummaryTest, PercentileIsNumpyLinearInterpolation) {
  std::vector<double> v = {1, 2, 3, 4};
  EXPECT_DOUBLE_EQ(Percentile(v, 0.50), 2.5);
  EXPECT_DOUBLE_EQ(Percentile(v, 0.90), 3.7);
  EXPECT_DOUBLE_EQ(Percentile(v, 0.99), 3.97);
  EXPECT_DOUBLE_EQ(Percentile(v, 0.0), 1);
  EXPECT_DOUBLE_EQ(Percentile(v, 1.0), 4);
  std::vector<double> w = {15, 20, 35, 40, 50};
  EXPECT_DOUBLE_EQ(Percentile(w, 0.40), 29);  // h = 1.6: 20 + 0.6 * 15
  EXPECT_DOUBLE_EQ(Percentile(w, 0.95), 48);  // h = 3.8: 40 + 0.8 * 10
  EXPECT_DOUBLE_EQ(Percentile({7}, 0.99), 7);
  EXPECT_TRUE(std::isnan(Percentile({}, 0.5)));
}

TEST(SummaryTest, StatsIgnoreNonFiniteAndSerializeEmptyAsNull) {
  Stats s = ComputeStats({4, 1, NAN, 3, 2, INFINITY});
  EXPECT_EQ(s.count, 4u);
  EXPECT_DOUBLE_EQ(s.mean, 2.5);
  EXPECT_DOUBLE_EQ(s.p50, 2.5);
  EXPECT_DOUBLE_EQ(s.max, 4);
  json empty = StatsToJson(ComputeStats({}));
  EXPECT_EQ(empty["count"], 0);
  for (const char* k : {"mean", "p50", "p90", "p95", "p99", "max"}) EXPECT_TRUE(empty[k].is_null());
}

TEST(SummaryTest, ParseGoodput) {
  std::vector<GoodputConstraint> c;
  std::string error;
  ASSERT_TRUE(ParseGoodput("ttft:200 itl:20", &c, &error)) << error;
  ASSERT_EQ(c.size(), 2u);
  EXPECT_EQ(c[0].metric, "ttft_ms");
  EXPECT_EQ(c[0].max_ms, 200);
  EXPECT_EQ(c[1].metric, "itl_ms");
  ASSERT_TRUE(
      ParseGoodput("time_to_first_token:100,inter_token_latency:3.4 latency_ms=900", &c, &error));
  ASSERT_EQ(c.size(), 3u);
  EXPECT_EQ(c[2].metric, "latency_ms");
  EXPECT_DOUBLE_EQ(c[1].max_ms, 3.4);
  EXPECT_FALSE(ParseGoodput("tpot:3", &c, &error));
  EXPECT_NE(error.find("unknown goodput metric"), std::string::npos);
  EXPECT_FALSE(ParseGoodput("ttft:abc", &c, &error));
  EXPECT_FALSE(ParseGoodput("ttft", &c, &error));
  EXPECT_FALSE(ParseGoodput("ttft:-1", &c, &error));
  ASSERT_TRUE(ParseGoodput("", &c, &error));
  EXPECT_TRUE(c.empty());
}

RequestResult Ok(int64_t index, double sent, double latency, double ttft, double itl, int out) {
  RequestResult r;
  r.index = index;
  r.endpoint = "chat";
  r.stream = true;
  r.scheduled_ms = sent - 1;
  r.sent_ms = sent;
  r.lag_ms = 1;
  r.done_ms = sent + latency;
  r.status = 200;
  r.ttft_ms = ttft;
  r.ttst_ms = itl;
  r.latency_ms = latency;
  r.itl_ms = itl;
  r.chunks = out;
  r.input_tokens = 100;
  r.output_tokens = out;
  return r;
}

TEST(SummaryTest, ClassifiesRequestsAndComputesRates) {
  std::vector<RequestResult> rs;
  RequestResult warm = Ok(0, 0, 5000, 1, 1, 10);
  warm.warmup = true;  // counted only as warm-up; its 5 s do not stretch the window
  rs.push_back(warm);
  rs.push_back(Ok(1, 1000, 1000, 100, 10, 50));   // good under ttft:150 itl:20
  rs.push_back(Ok(2, 1500, 1500, 200, 10, 100));  // TTFT too slow
  rs.push_back(Ok(3, 2000, 500, 50, 30, 10));     // ITL too slow
  RequestResult non_stream = Ok(4, 2500, 500, 0, 10, 40);
  non_stream.ttft_ms.reset();  // no TTFT: fails a TTFT constraint
  rs.push_back(non_stream);
  RequestResult failed = Ok(5, 2600, 100, 0, 0, 0);
  failed.status = 503;
  failed.error = "http_5xx";
  failed.lag_ms = 7;
  rs.push_back(failed);
  RequestResult timed_out = Ok(6, 2700, 2300, 0, 0, 0);  // ends at 5000
  timed_out.status = 0;
  timed_out.error = "timeout";
  timed_out.held_ms = 12;
  rs.push_back(timed_out);
  RequestResult unsent = Ok(7, 0, 0, 0, 0, 0);
  unsent.sent_ms.reset();
  unsent.error = "cancelled";
  unsent.status = 0;
  rs.push_back(unsent);

  SummaryOptions o;
  std::string error;
  ASSERT_TRUE(ParseGoodput("ttft:150 itl:20", &o.goodput, &error));
  o.max_concurrency = 64;
  json s = SummarizeRequests(rs, o);
  EXPECT_EQ(s["requests"]["scheduled"], 7);
  EXPECT_EQ(s["requests"]["sent"], 6);
  EXPECT_EQ(s["requests"]["completed"], 4);
  EXPECT_EQ(s["requests"]["errors"], 3);
  EXPECT_EQ(s["requests"]["errors_by_kind"],
            json({{"http_5xx", 1}, {"timeout", 1}, {"cancelled", 1}}));
  EXPECT_EQ(s["requests"]["warmup"], 1);
  // First measured send at 1000 ms, last end at 5000 ms.
  EXPECT_DOUBLE_EQ(s["duration_s"].get<double>(), 4.0);
  EXPECT_DOUBLE_EQ(s["throughput"]["requests_per_s"].get<double>(), 1.0);
  EXPECT_DOUBLE_EQ(s["throughput"]["output_tokens_per_s"].get<double>(), 200.0 / 4.0);
  EXPECT_EQ(s["goodput"]["good"], 1);
  EXPECT_DOUBLE_EQ(s["goodput"]["requests_per_s"].get<double>(), 0.25);
  EXPECT_DOUBLE_EQ(s["goodput"]["fraction"].get<double>(), 0.25);
  EXPECT_EQ(s["goodput"]["constraints"], json({{"ttft_ms", 150.0}, {"itl_ms", 20.0}}));
  // Latency over the 4 completed; TTFT over the 3 with one; lag over the 6 sent.
  EXPECT_EQ(s["metrics"]["latency_ms"]["count"], 4);
  EXPECT_DOUBLE_EQ(s["metrics"]["latency_ms"]["p50"].get<double>(), 750);
  EXPECT_EQ(s["metrics"]["ttft_ms"]["count"], 3);
  EXPECT_DOUBLE_EQ(s["metrics"]["ttft_ms"]["mean"].get<double>(), 350.0 / 3);
  EXPECT_EQ(s["metrics"]["lag_ms"]["count"], 6);
  EXPECT_DOUBLE_EQ(s["metrics"]["lag_ms"]["max"].get<double>(), 7);
  EXPECT_EQ(s["metrics"]["inter_chunk_ms"]["count"], 0);
  EXPECT_EQ(s["open_loop"]["max_concurrency"], 64);
  EXPECT_EQ(s["open_loop"]["violations"], 1);
  EXPECT_DOUBLE_EQ(s["open_loop"]["held_ms_total"].get<double>(), 12);
  EXPECT_TRUE(s["definitions"].contains("ttft_ms"));
  EXPECT_TRUE(s["definitions"].contains("percentiles"));

  o.goodput.clear();
  o.duration_s = 8.0;
  json t = SummarizeRequests(rs, o);
  EXPECT_TRUE(t["goodput"].is_null());
  EXPECT_DOUBLE_EQ(t["throughput"]["requests_per_s"].get<double>(), 0.5);
}

// A run mixing APIs is summarized per API too ("apis"), and compare shows each API's rows; a run
// of one API has no "apis".
TEST(SummaryTest, MixedApisSummarizedPerApiAndCompared) {
  std::vector<RequestResult> rs;
  rs.push_back(Ok(0, 0, 100, 10, 2, 5));
  rs.push_back(Ok(1, 10, 300, 30, 4, 5));
  RequestResult responses = Ok(2, 20, 200, 20, 3, 5);
  responses.endpoint = "responses";
  rs.push_back(responses);
  RequestResult messages = Ok(3, 30, 50, 0, 0, 0);
  messages.endpoint = "messages";
  messages.status = 404;
  messages.error = "http_4xx";
  rs.push_back(messages);
  json s = SummarizeRequests(rs, {});
  ASSERT_TRUE(s.contains("apis")) << s.dump(2);
  EXPECT_EQ(s["apis"]["chat"]["requests"], json({{"sent", 2}, {"completed", 2}, {"errors", 0}}));
  EXPECT_EQ(s["apis"]["chat"]["ttft_ms"]["p50"], 20.0);
  EXPECT_EQ(s["apis"]["responses"]["latency_ms"]["max"], 200.0);
  EXPECT_EQ(s["apis"]["messages"]["requests"]["errors"], 1);
  EXPECT_TRUE(s["apis"]["messages"]["ttft_ms"]["p50"].is_null());
  EXPECT_FALSE(SummarizeRequests({Ok(0, 0, 100, 10, 2, 5)}, {}).contains("apis"));

  std::vector<CompareRow> rows = CompareSummaries({s, s});
  bool found = false;
  for (const CompareRow& r : rows) {
    if (r.key != "/apis/responses/ttft_ms/p50") continue;
    found = true;
    EXPECT_EQ(r.label, "responses: TTFT p50");
    EXPECT_DOUBLE_EQ(*r.ratios[0], 1.0);
  }
  EXPECT_TRUE(found);
  EXPECT_NE(CompareToText({"a", "b"}, rows).find("messages: errors"), std::string::npos);
}

TEST(SummaryTest, EmptyRunHasNullRates) {
  json s = SummarizeRequests({}, {});
  EXPECT_EQ(s["requests"]["scheduled"], 0);
  EXPECT_EQ(s["duration_s"], 0.0);
  EXPECT_TRUE(s["throughput"]["requests_per_s"].is_null());
  EXPECT_TRUE(s["metrics"]["ttft_ms"]["p99"].is_null());
}

TEST(SummaryTest, RequestResultJsonRoundTrip) {
  RequestResult r = Ok(42, 10.5, 200.25, 12.5, 3.25, 64);
  r.shard = 3;
  r.chunk_gaps_ms = {1.5, 2.5};
  r.tokens_from = "counted";
  json j = RequestResultToJson(r);
  EXPECT_TRUE(j["error"].is_null());
  RequestResult back;
  std::string error;
  ASSERT_TRUE(RequestResultFromJson(j, &back, &error)) << error;
  EXPECT_EQ(RequestResultToJson(back), j);

  json bad = j;
  bad["ttft_ms"] = "fast";
  EXPECT_FALSE(RequestResultFromJson(bad, &back, &error));
  EXPECT_NE(error.find("ttft_ms"), std::string::npos);
  bad = j;
  bad.erase("scheduled_ms");
  EXPECT_FALSE(RequestResultFromJson(bad, &back, &error));
  EXPECT_FALSE(RequestResultFromJson(json::array(), &back, &error));
}

// A sessionless line has exactly the fields it always had: the fixture's lines (written before
// the session fields existed) come back with the same keys and values, and a line is byte for
// byte what it was.
TEST(SummaryTest, SessionlessLinesAreUnchanged) {
  std::vector<RequestResult> requests;
  std::string error;
  const std::string file = testing::DataPath("run_a") + "/" + kRequestsFile;
  ASSERT_TRUE(ReadRequestsJsonl(file, &requests, &error)) << error;
  std::istringstream lines(testing::ReadData("run_a/" + std::string(kRequestsFile)));
  std::string line;
  for (const RequestResult& r : requests) {
    ASSERT_TRUE(std::getline(lines, line));
    EXPECT_FALSE(r.session_turn);
    EXPECT_EQ(RequestResultToJson(r), json::parse(line)) << line;
  }
  EXPECT_TRUE(SummarizeSessions(requests).is_null());
  RequestResult r = Ok(42, 10.5, 200.25, 12.5, 3.25, 64);
  EXPECT_EQ(RequestResultToJson(r).dump(),
            R"({"chunks":64,"done_ms":210.75,"endpoint":"chat","error":null,"held_ms":0.0,)"
            R"("index":42,"input_tokens":100,"itl_ms":3.25,"lag_ms":1.0,"latency_ms":200.25,)"
            R"("max_chunk_gap_ms":null,"output_tokens":64,"scheduled_ms":9.5,"sent_ms":10.5,)"
            R"("shard":0,"status":200,"stream":true,"tokens_from":"usage","ttft_ms":12.5,)"
            R"("ttst_ms":3.25,"warmup":false})");
}

TEST(SummaryTest, SessionTurnFieldsRoundTrip) {
  RequestResult r = Ok(7, 10.5, 200.25, 12.5, 3.25, 64);
  r.session_turn = true;
  r.causal_shift_ms = 12.345;
  r.captured_latency = false;
  json j = RequestResultToJson(r);
  EXPECT_EQ(j["session_turn"], true);
  EXPECT_EQ(j["causal_shift_ms"], 12.345);
  EXPECT_EQ(j["captured_latency"], false);
  RequestResult back;
  std::string error;
  ASSERT_TRUE(RequestResultFromJson(j, &back, &error)) << error;
  EXPECT_EQ(RequestResultToJson(back), j);
  json bad = j;
  bad["captured_latency"] = 1;
  EXPECT_FALSE(RequestResultFromJson(bad, &back, &error));
  EXPECT_NE(error.find("captured_latency"), std::string::npos);
  bad = j;
  bad["session_turn"] = "yes";
  EXPECT_FALSE(RequestResultFromJson(bad, &back, &error));
}

// The "sessions" figures from the per-turn fields: sent turns only, warm-up left out; a figure
// some turn lacks the field for is left out, not undercounted.
TEST(SummaryTest, SummarizeSessionsFromTurnFields) {
  std::vector<RequestResult> rs;
  for (int i = 0; i < 6; ++i) {
    RequestResult r = Ok(i, 10.0 * i, 100, 10, 2, 8);
    r.session_turn = i != 5;                   // the last row is sessionless
    r.causal_shift_ms = i % 2 ? 10.0 * i : 0;  // turns 1 and 3 moved (5 has no session)
    r.captured_latency = i != 2;
    rs.push_back(r);
  }
  RequestResult warm = rs[1];
  warm.warmup = true;
  rs.push_back(warm);
  RequestResult unsent = rs[1];
  unsent.sent_ms.reset();
  rs.push_back(unsent);
  json s = SummarizeSessions(rs);
  EXPECT_EQ(s["schedule"], "causal");
  EXPECT_EQ(s["turns"], 5);
  EXPECT_EQ(s["moved"], 2);
  EXPECT_EQ(s["without_captured_latency"], 1);
  EXPECT_EQ(s["causal_shift_ms"]["count"], 2);
  EXPECT_EQ(s["causal_shift_ms"]["max"], 30.0);
  EXPECT_EQ(s["causal_shift_ms"]["p50"], 20.0);
  EXPECT_TRUE(s["definition"].is_string());

  rs[0].captured_latency.reset();
  s = SummarizeSessions(rs);
  EXPECT_FALSE(s.contains("without_captured_latency"));
  EXPECT_EQ(s["moved"], 2);
  rs[0].causal_shift_ms.reset();
  s = SummarizeSessions(rs);
  EXPECT_EQ(s["turns"], 5);
  EXPECT_FALSE(s.contains("moved"));
  EXPECT_FALSE(s.contains("causal_shift_ms"));
}

TEST(SummaryTest, FixtureRunLoads) {
  RunDir run;
  std::string error;
  ASSERT_TRUE(LoadRun(testing::DataPath("run_a"), true, &run, &error)) << error;
  EXPECT_EQ(run.requests.size(), 120u);
  EXPECT_EQ(run.summary["requests"]["scheduled"], 117);
  // The fixture's summary is what SummarizeRequests makes of its requests.
  SummaryOptions o;
  ASSERT_TRUE(ParseGoodput("ttft:40 itl:25", &o.goodput, &error));
  json s = SummarizeRequests(run.requests, o);
  EXPECT_EQ(s["metrics"], run.summary["metrics"]);
  EXPECT_EQ(s["goodput"], run.summary["goodput"]);
  EXPECT_EQ(s["throughput"], run.summary["throughput"]);
  EXPECT_EQ(s["duration_s"], run.summary["duration_s"]);
}

}  // namespace
}  // namespace llmtap::report
