// Replay's run summary: request and run fields, merged shards, session figures.
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "common/testing/temp_files.h"
#include "replay/input.h"
#include "replay/metrics.h"
#include "replay/response.h"
#include "replay/runner.h"
#include "replay/schedule.h"
#include "replay/summary.h"
#include "replay/synthetic.h"
#include "report/run_dir.h"
#include "report/summary.h"
#include "tokenizer/tokenizer.h"

namespace llmtap::replay {
namespace {

using llmtap::testing::TempDir;
using nlohmann::json;

TEST(SummaryTest, RequestsAndRunFields) {
  std::vector<RequestResult> rs(4);
  for (size_t i = 0; i < rs.size(); ++i) {
    RequestResult& r = rs[i];
    r.index = 10 + i;
    r.sent = true;
    r.stream = true;
    r.scheduled_ms = 10.0 * static_cast<double>(i);
    r.sent_ms = r.scheduled_ms + 0.25;
    r.done_ms = r.sent_ms + 100;
    r.status = 200;
    r.ttft_ms = 20.00049;
    r.ttst_ms = 5;
    r.itl_ms = 10;
    r.output_tokens = 9;
    r.input_tokens = 30;
    r.tokens_from_usage = true;
    r.chunks = 9;
    r.gaps_ms = {10, 10};
    r.max_chunk_gap_ms = 10;
  }
  rs[0].warmup = true;
  rs[1].sent_ms = 30;  // sent after rs[2]
  rs[1].done_ms = 130;
  rs[3].error = ErrorKind::kHttp5xx;
  rs[3].status = 503;
  rs.push_back(RequestResult());  // never sent
  rs.back().index = 99;
  rs.back().scheduled_ms = 40;

  const TempDir tmp;
  const std::string& dir = tmp.path();
  report::SummaryOptions options;
  RunOutputs outputs(options, 2);
  std::string error;
  std::string warning;
  ASSERT_TRUE(outputs.Open(dir, &error, &warning)) << error;
  EXPECT_EQ(warning, "");
  // In the order they ended: requests.jsonl keeps it.
  for (size_t i : {0, 2, 1, 3, 4}) outputs.Add(rs[i]);
  EXPECT_EQ(outputs.requests(), 5u);
  EXPECT_EQ(outputs.failed(), 1u);
  json statistics;
  ASSERT_TRUE(outputs.Summarize(&statistics, &error)) << error;

  RunFacts f;
  f.command = "llmtap replay t.jsonl";
  f.url = "http://x:1";
  f.trace = "t.jsonl";
  f.shard_index = 2;
  f.shard_count = 3;
  f.started_at_unix_ms = 1234;
  f.server_metrics_json = R"({"url":null})";
  f.input = {{"rows", 5}};
  json s = BuildSummary(statistics, f);
  for (const char* k : {"tool", "version", "command", "url", "trace", "shard", "started_at_unix_ms",
                        "duration_s", "requests", "throughput", "goodput", "metrics", "open_loop",
                        "definitions", "server_metrics", "input"}) {
    EXPECT_TRUE(s.contains(k)) << k;
  }
  EXPECT_EQ(s["tool"], "llmtap replay");
  EXPECT_EQ(s["shard"]["index"], 2);
  EXPECT_EQ(s["shard"]["count"], 3);
  EXPECT_EQ(s["started_at_unix_ms"], 1234);
  EXPECT_TRUE(s["server_metrics"].contains("url"));
  EXPECT_EQ(s["requests"]["warmup"], 1);
  EXPECT_EQ(s["requests"]["sent"], 3);
  EXPECT_EQ(s["requests"]["completed"], 2);
  EXPECT_EQ(s["requests"]["errors"], 1);
  EXPECT_FALSE(RenderConsole(s).empty());
  bool html_skipped = true;
  ASSERT_TRUE(outputs.Finish(s, &html_skipped, &error)) << error;
  EXPECT_FALSE(html_skipped);

  std::vector<report::RequestResult> out;
  ASSERT_TRUE(report::ReadRequestsJsonl(dir + "/requests.jsonl", &out, &error)) << error;
  ASSERT_EQ(out.size(), 5u);
  EXPECT_EQ(out[0].index, 10);  // in the order they were added (ended), the unsent one last
  EXPECT_EQ(out[1].index, 12);
  EXPECT_EQ(out[2].index, 11);
  EXPECT_EQ(out[4].index, 99);
  EXPECT_FALSE(out[4].sent_ms);
  const report::RequestResult& q = out[3];
  EXPECT_EQ(q.shard, 2);
  EXPECT_EQ(q.endpoint, "chat");
  EXPECT_EQ(q.error, "http_5xx");
  EXPECT_DOUBLE_EQ(q.lag_ms, 0.25);
  EXPECT_DOUBLE_EQ(q.latency_ms, 100);
  EXPECT_DOUBLE_EQ(*q.ttft_ms, 20);  // rounded to the microsecond
  EXPECT_EQ(q.tokens_from, "usage");
  EXPECT_EQ(q.chunk_gaps_ms, (std::vector<double>{10, 10}));
  // The same statistics as report::SummarizeRequests over the file's requests.
  json reference = report::SummarizeRequests(out, options);
  EXPECT_EQ(reference["requests"], statistics["requests"]);
  EXPECT_EQ(reference["metrics"]["lag_ms"], statistics["metrics"]["lag_ms"]);
  std::ifstream html(dir + "/report.html");
  EXPECT_TRUE(html.good());

  f.server_metrics_json.clear();
  EXPECT_TRUE(BuildSummary(statistics, f)["server_metrics"].is_null());
}

// Requests of a causal replay: sessionless rows, and session turns (every third row) of which
// some moved (by shifts not a whole microsecond, one below half a microsecond), some without a
// captured latency, a warm-up turn and a turn never sent.
std::vector<RequestResult> SessionRun() {
  std::vector<RequestResult> rs(60);
  for (size_t i = 0; i < rs.size(); ++i) {
    RequestResult& r = rs[i];
    r.index = i;
    r.sent = true;
    r.scheduled_ms = 10.0 * static_cast<double>(i);
    r.sent_ms = r.scheduled_ms + 0.25;
    r.done_ms = r.sent_ms + 50 + static_cast<double>(i % 7);
    r.status = 200;
    r.output_tokens = 4;
    if (i % 3 != 0) continue;
    r.session_turn = true;
    r.captured_latency = i % 4 != 0;
    r.causal_shift_ms = i % 2 ? 0.1234567 * static_cast<double>(i) : 0;
  }
  rs[9].causal_shift_ms = 0.0004;  // rounds to 0: not moved, in requests.jsonl as in the summary
  // Responses rows continuing a chain, in both shards (by index parity) below.
  for (size_t i : {4, 5, 8}) rs[i].chain = ChainLink::kRemapped;
  rs[7].chain = ChainLink::kNotInTrace;
  rs[0].warmup = true;
  rs[57].sent = false;
  return rs;
}

// One run's summary.json and requests.jsonl in `dir`, as `llmtap replay --out` writes them.
json WriteRun(const std::vector<RequestResult>& rs, const std::string& dir, uint32_t shard,
              uint32_t shards, bool causal) {
  report::SummaryOptions options;
  RunOutputs outputs(options, shard, causal);
  std::string error, warning;
  EXPECT_TRUE(outputs.Open(dir, &error, &warning)) << error;
  for (const RequestResult& r : rs) outputs.Add(r);
  json statistics;
  EXPECT_TRUE(outputs.Summarize(&statistics, &error)) << error;
  RunFacts f;
  f.shard_index = shard;
  f.shard_count = shards;
  f.started_at_unix_ms = 1000;
  EXPECT_TRUE(outputs.Sessions(causal ? "causal" : "timestamps", &f.sessions, &error)) << error;
  f.response_chains = outputs.Chains(ResponsesChain::kRemap);
  json summary = BuildSummary(statistics, f);
  bool html_skipped = false;
  EXPECT_TRUE(outputs.Finish(summary, &html_skipped, &error)) << error;
  return summary;
}

std::string ReadText(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// The same "sessions" figures; the shifts' mean is summed in another precision (ValueSpool) and
// order, so equal to its last bits only.
void ExpectSameSessions(const json& got, const json& want) {
  ASSERT_EQ(got.size(), want.size()) << got;
  for (const char* key : {"schedule", "turns", "moved", "without_captured_latency", "definition"}) {
    EXPECT_EQ(got[key], want[key]) << key;
  }
  for (const char* key : {"count", "p50", "p90", "p95", "p99", "max"}) {
    EXPECT_EQ(got["causal_shift_ms"][key], want["causal_shift_ms"][key]) << key;
  }
  EXPECT_NEAR(got["causal_shift_ms"]["mean"].get<double>(),
              want["causal_shift_ms"]["mean"].get<double>(), 1e-12);
}

// `llmtap report merge` of two shards of a causal replay reports the "sessions" figures of the
// single run over the same requests (each turn's line carries what the summary counts), and its
// Responses chains' counts.
TEST(SummaryTest, MergedShardsKeepTheSessionFigures) {
  const TempDir tmp;
  const std::string& dir = tmp.path();
  const std::vector<RequestResult> rs = SessionRun();
  const json single = WriteRun(rs, dir + "/single", 0, 1, true);
  ASSERT_TRUE(single.contains("sessions"));
  const json& sessions = single["sessions"];
  EXPECT_EQ(sessions["schedule"], "causal");
  EXPECT_EQ(sessions["turns"], 18);  // 20 turns, less the warm-up and the unsent one
  EXPECT_EQ(sessions["moved"], 8);   // the odd turns but 9 (below half a microsecond) and 57
  EXPECT_EQ(sessions["without_captured_latency"], 4);  // 12, 24, 36, 48 (0 is warm-up)
  EXPECT_DOUBLE_EQ(sessions["causal_shift_ms"]["max"].get<double>(), 6.296);  // 0.1234567 * 51

  // requests.jsonl: the turns carry the fields (the shift to the microsecond), other rows none.
  std::vector<report::RequestResult> lines;
  std::string error;
  ASSERT_TRUE(report::ReadRequestsJsonl(dir + "/single/requests.jsonl", &lines, &error)) << error;
  ASSERT_EQ(lines.size(), rs.size());
  for (const report::RequestResult& q : lines) {
    const RequestResult& r = rs[static_cast<size_t>(q.index)];
    EXPECT_EQ(q.session_turn, r.session_turn) << q.index;
    EXPECT_EQ(q.causal_shift_ms.has_value(), r.session_turn && r.sent) << q.index;
    EXPECT_EQ(q.captured_latency.has_value(), r.session_turn && r.sent) << q.index;
    EXPECT_EQ(q.captured_latency.value_or(r.captured_latency), r.captured_latency) << q.index;
  }
  EXPECT_DOUBLE_EQ(*lines[21].causal_shift_ms, 2.593);
  // What the run computed is what report::SummarizeSessions makes of its file.
  ExpectSameSessions(report::SummarizeSessions(lines), sessions);

  // Two shards (by index parity) on the same clock, merged.
  std::vector<RequestResult> s0, s1;
  for (const RequestResult& r : rs) (r.index % 2 ? s1 : s0).push_back(r);
  WriteRun(s0, dir + "/s0", 0, 2, true);
  WriteRun(s1, dir + "/s1", 1, 2, true);
  std::vector<report::RunDir> runs(2);
  ASSERT_TRUE(report::LoadRun(dir + "/s0", true, &runs[0], &error)) << error;
  ASSERT_TRUE(report::LoadRun(dir + "/s1", true, &runs[1], &error)) << error;
  report::MergeOutput merged;
  ASSERT_TRUE(report::MergeRuns(runs, &merged, &error)) << error;
  EXPECT_TRUE(merged.warnings.empty()) << merged.warnings[0];
  ASSERT_TRUE(merged.summary.contains("sessions"));
  ExpectSameSessions(merged.summary["sessions"], sessions);
  // The Responses chains' counts: the single run's, in both.
  EXPECT_EQ(single["response_chains"]["rows"], 4);
  EXPECT_EQ(single["response_chains"]["remapped"], 3);
  EXPECT_EQ(merged.summary["response_chains"], single["response_chains"]);
}

// Lines of rows without a session_id are the same whether the run follows sessions or not; and
// a run that does not (--schedule timestamps) writes no session fields at all.
TEST(SummaryTest, SessionFieldsOnlyOnCausalTurns) {
  const TempDir tmp;
  const std::string& dir = tmp.path();
  std::vector<RequestResult> sessionless = SessionRun();
  for (RequestResult& r : sessionless) r.session_turn = false;
  WriteRun(sessionless, dir + "/causal", 0, 1, true);
  WriteRun(sessionless, dir + "/timestamps", 0, 1, false);
  const std::string causal = ReadText(dir + "/causal/requests.jsonl");
  EXPECT_FALSE(causal.empty());
  EXPECT_EQ(causal, ReadText(dir + "/timestamps/requests.jsonl"));
  for (const char* field : {"session_turn", "causal_shift_ms", "captured_latency"}) {
    EXPECT_EQ(causal.find(field), std::string::npos) << field;
  }
  const json timestamps = WriteRun(SessionRun(), dir + "/turns", 0, 1, false);
  EXPECT_EQ(timestamps["sessions"]["schedule"], "timestamps");
  EXPECT_TRUE(timestamps["sessions"]["without_captured_latency"].is_null());
  const std::string lines = ReadText(dir + "/turns/requests.jsonl");
  for (const char* field : {"session_turn", "causal_shift_ms", "captured_latency"}) {
    EXPECT_EQ(lines.find(field), std::string::npos) << field;
  }
}

// Responses chains (chains.h, inline.h): the counts by how each row went, the inlined rows by
// where their predecessor's output came from, and the hint a refused previous_response_id gets.
TEST(SummaryTest, ResponseChainCountsAndTheRefusalHint) {
  std::vector<RequestResult> rs(6);
  for (RequestResult& r : rs) {
    r.sent = true;
    r.endpoint = api::Endpoint::kResponses;
    r.status = 200;
    r.done_ms = 10;
  }
  rs[1].chain = rs[2].chain = ChainLink::kInlinedCaptured;
  rs[3].chain = ChainLink::kInlinedReplayed;
  rs[4].chain = ChainLink::kPredecessorFailed;
  auto chains = [&](ResponsesChain mode, bool refused) {
    rs[4].previous_id_refused = refused;
    rs[4].status = refused ? 400 : 200;
    rs[4].error = refused ? ErrorKind::kHttp4xx : ErrorKind::kNone;
    RunOutputs outputs(report::SummaryOptions(), 0);
    std::string error, warning;
    EXPECT_TRUE(outputs.Open("", &error, &warning)) << error;
    for (const RequestResult& r : rs) outputs.Add(r);
    json statistics;
    EXPECT_TRUE(outputs.Summarize(&statistics, &error)) << error;
    RunFacts f;
    f.response_chains = outputs.Chains(mode);
    return BuildSummary(statistics, f);  // as summary.json has it, for the console
  };
  json summary = chains(ResponsesChain::kInline, false);
  const json inlined = summary["response_chains"];
  EXPECT_EQ(inlined["mode"], "inline");
  EXPECT_EQ(inlined["rows"], 4);
  EXPECT_EQ(inlined["inlined"], 3);
  EXPECT_EQ(inlined["inlined_output"], json({{"captured", 2}, {"replayed", 1}}));
  EXPECT_EQ(inlined["sent_with_captured_id"]["predecessor_failed"], 1);
  EXPECT_FALSE(inlined["sent_with_captured_id"].contains("inlined_captured_output"));
  std::string console = RenderConsole(summary);
  EXPECT_NE(console.find("4 rows with previous_response_id, 3 sent with the conversation so far "
                         "inlined (predecessor's output: 2 captured, 1 from this run's target)"),
            std::string::npos)
      << console;
  EXPECT_EQ(console.find("--responses-chain"), std::string::npos) << console;

  summary = chains(ResponsesChain::kRemap, true);
  const json refused = summary["response_chains"];
  EXPECT_EQ(refused["mode"], "remap");
  EXPECT_EQ(refused["previous_response_id_refused"], 1);
  console = RenderConsole(summary);
  EXPECT_NE(console.find("1 rows refused by the target for previous_response_id (HTTP 400): the "
                         "target keeps no responses: replay with --responses-chain inline"),
            std::string::npos)
      << console;
  // A summary of an older llmtap (no mode, no refusal count) still renders.
  summary["response_chains"] = {{"rows", 2}, {"remapped", 2}, {"sent_with_captured_id", {}}};
  EXPECT_NE(RenderConsole(summary).find("2 sent with the id"), std::string::npos);
}

}  // namespace
}  // namespace llmtap::replay
