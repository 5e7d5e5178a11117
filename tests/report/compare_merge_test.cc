// `llmtap compare` rows and ratios, and `report merge`: shards of one run merge into exactly the
// statistics of the run on the union of their requests.
#include <cmath>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "common/testing/temp_files.h"
#include "report/compare.h"
#include "report/run_dir.h"
#include "report/summary.h"
#include "test_util.h"

namespace llmtap::report {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// Equal JSON, numbers within a relative 1e-9 (sums taken in another order round differently).
void ExpectJsonNear(const json& a, const json& b, const std::string& where = "") {
  if (a.is_number() && b.is_number()) {
    double x = a.get<double>(), y = b.get<double>();
    EXPECT_NEAR(x, y, 1e-9 * std::max(1.0, std::fabs(y))) << where;
    return;
  }
  ASSERT_EQ(a.type(), b.type()) << where << ": " << a << " vs " << b;
  if (a.is_object()) {
    ASSERT_EQ(a.size(), b.size()) << where;
    for (const auto& [k, v] : a.items()) {
      ASSERT_TRUE(b.contains(k)) << where << "/" << k;
      ExpectJsonNear(v, b[k], where + "/" + k);
    }
  } else if (a.is_array()) {
    ASSERT_EQ(a.size(), b.size()) << where;
    for (size_t i = 0; i < a.size(); ++i)
      ExpectJsonNear(a[i], b[i], where + "/" + std::to_string(i));
  } else {
    EXPECT_EQ(a, b) << where;
  }
}

TEST(CompareTest, RatiosAgainstTheFirstRun) {
  RunDir a, b;
  std::string error;
  ASSERT_TRUE(LoadRun(testing::DataPath("run_a"), false, &a, &error)) << error;
  ASSERT_TRUE(LoadRun(testing::DataPath("run_b") + "/summary.json", false, &b, &error)) << error;
  std::vector<CompareRow> rows = CompareSummaries({a.summary, b.summary});
  auto row = [&](const std::string& key) -> const CompareRow& {
    for (const CompareRow& r : rows) {
      if (r.key == key) return r;
    }
    ADD_FAILURE() << "no row " << key;
    return rows.front();
  };
  const CompareRow& tput = row("/throughput/output_tokens_per_s");
  ASSERT_EQ(tput.values.size(), 2u);
  ASSERT_EQ(tput.ratios.size(), 1u);
  EXPECT_DOUBLE_EQ(*tput.ratios[0], *tput.values[1] / *tput.values[0]);
  EXPECT_GT(*tput.ratios[0], 1.0);  // run_b decodes faster
  const CompareRow& itl = row("/metrics/itl_ms/p50");
  EXPECT_LT(*itl.ratios[0], 1.0);
  const CompareRow& acc = row("/server_metrics/spec_decode/acceptance_rate");
  EXPECT_FALSE(acc.values[0].has_value());  // run_a has spec decoding off: no server figure
  EXPECT_TRUE(acc.values[1].has_value());
  EXPECT_FALSE(acc.ratios[0].has_value());

  std::string text = CompareToText({"off", "on"}, rows);
  EXPECT_NE(text.find("on/off"), std::string::npos) << text;
  EXPECT_NE(text.find("output token throughput"), std::string::npos);
  EXPECT_NE(text.find("x +"), std::string::npos);  // an improvement is marked
  json j = CompareToJson({"off", "on"}, {"a", "b"}, rows);
  EXPECT_EQ(j["runs"][1]["label"], "on");
  EXPECT_EQ(j["baseline"], 0);
  bool found = false;
  for (const json& r : j["rows"]) {
    if (r["key"] != "/throughput/output_tokens_per_s") continue;
    found = true;
    EXPECT_EQ(r["better"], "higher");
    EXPECT_TRUE(r["ratios"][0].is_null());
    EXPECT_DOUBLE_EQ(r["ratios"][1].get<double>(), *tput.ratios[0]);
  }
  EXPECT_TRUE(found);
  // A row no run has is left out.
  std::vector<CompareRow> none = CompareSummaries({json::object(), json::object()});
  EXPECT_TRUE(none.empty());
}

// The replay-fidelity rows: read from the run that has a certificate (its boolean verdict as
// 1 / 0), absent ("-") for the one without, and left out when neither run has one.
TEST(CompareTest, FidelityRows) {
  RunDir a, b;
  std::string error;
  ASSERT_TRUE(LoadRun(testing::DataPath("run_a"), false, &a, &error)) << error;
  ASSERT_TRUE(LoadRun(testing::DataPath("run_b"), false, &b, &error)) << error;
  for (const CompareRow& r : CompareSummaries({a.summary, b.summary})) {
    EXPECT_EQ(r.key.rfind("/fidelity", 0), std::string::npos) << r.key;
  }
  b.summary["fidelity"] = json::parse(testing::ReadData("fidelity.json"));
  std::vector<CompareRow> rows = CompareSummaries({a.summary, b.summary});
  std::map<std::string, const CompareRow*> by_key;
  for (const CompareRow& r : rows) by_key[r.key] = &r;
  const std::pair<const char*, double> expected[] = {
      {"/fidelity/certified", 0},
      {"/fidelity/reproduced", 8},
      {"/fidelity/gated", 10},
      {"/fidelity/groups/0/tokens/prompt_equal", 1},
      {"/fidelity/groups/0/tokens/completion_equal", 1},
      {"/fidelity/groups/0/tokens/finish_equal", 1},
      {"/fidelity/groups/0/server/cache/points", -12.4},
      {"/fidelity/groups/0/timing/ttft_ms/ratio", 1.068},
      {"/fidelity/groups/0/timing/latency_ms/ratio", 0.99},
      {"/fidelity/groups/0/timing/server_prompt_ms/ratio", 1.84},
  };
  for (const auto& [key, value] : expected) {
    ASSERT_TRUE(by_key.count(key)) << key;
    const CompareRow& r = *by_key[key];
    ASSERT_EQ(r.values.size(), 2u);
    EXPECT_FALSE(r.values[0].has_value()) << key;
    ASSERT_TRUE(r.values[1].has_value()) << key;
    EXPECT_DOUBLE_EQ(*r.values[1], value) << key;
    EXPECT_FALSE(r.ratios[0].has_value()) << key;
  }
  // server_decode_ms has no ratio (no pairs) in either run: left out.
  EXPECT_FALSE(by_key.count("/fidelity/groups/0/timing/server_decode_ms/ratio"));
  // Certified in the baseline as well: true reads as 1.
  a.summary["fidelity"] = {{"certified", true}, {"reproduced", 10}, {"gated", 10}};
  rows = CompareSummaries({a.summary, b.summary});
  const CompareRow* certified = nullptr;
  for (const CompareRow& r : rows) certified = r.key == "/fidelity/certified" ? &r : certified;
  ASSERT_NE(certified, nullptr);
  EXPECT_EQ(certified->values[0], std::optional<double>(1.0));
  EXPECT_EQ(certified->values[1], std::optional<double>(0.0));
  EXPECT_EQ(certified->ratios[0], std::optional<double>(0.0));
  std::string text = CompareToText({"a", "b"}, rows);
  EXPECT_NE(text.find("fidelity: certified (1 yes, 0 no)"), std::string::npos) << text;
  size_t line = text.find("fidelity: cache hit rate, replay - capture");
  ASSERT_NE(line, std::string::npos) << text;
  std::string cells = text.substr(line, text.find('\n', line) - line);
  EXPECT_NE(cells.find(" points "), std::string::npos) << cells;
  EXPECT_NE(cells.find(" -12.400"), std::string::npos) << cells;
  json j = CompareToJson({"a", "b"}, {"a", "b"}, rows);
  bool found = false;
  for (const json& r : j["rows"]) {
    if (r["key"] != "/fidelity/reproduced") continue;
    found = true;
    EXPECT_EQ(r["values"], json({10, 8}));
    EXPECT_DOUBLE_EQ(r["ratios"][1].get<double>(), 0.8);
  }
  EXPECT_TRUE(found);
}

// A deterministic run of `n` requests on one clock.
std::vector<RequestResult> MakeRun(int n) {
  std::vector<RequestResult> rs;
  uint64_t state = 12345;
  auto rnd = [&] {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    return static_cast<double>(state >> 11) / static_cast<double>(1ull << 53);
  };
  double t = 0;
  for (int i = 0; i < n; ++i) {
    t += 50 * rnd();
    RequestResult r;
    r.index = i;
    r.endpoint = i % 2 ? "chat" : "completions";
    r.stream = i % 4 != 0;
    r.scheduled_ms = t;
    r.lag_ms = rnd();
    r.sent_ms = t + r.lag_ms;
    r.latency_ms = 200 + 800 * rnd();
    r.done_ms = *r.sent_ms + r.latency_ms;
    r.status = 200;
    if (i % 13 == 4) {
      r.status = 500;
      r.error = "http_5xx";
    }
    if (r.stream && r.error.empty()) {
      r.ttft_ms = 20 + 60 * rnd();
      r.ttst_ms = 5 + 10 * rnd();
      r.chunk_gaps_ms = {5 + rnd(), 6 + rnd(), 4 + rnd()};
      r.max_chunk_gap_ms = 7;
    }
    r.itl_ms = 10 + 5 * rnd();
    r.output_tokens = 10 + static_cast<int>(100 * rnd());
    r.input_tokens = 100 + static_cast<int>(900 * rnd());
    r.warmup = i < 2;
    r.held_ms = i % 17 == 3 ? 4.0 : 0.0;
    // What the server reported: its cache for some requests, its speculation for others.
    if (i % 3 == 0) r.cached_tokens = *r.input_tokens / 2;
    if (i % 5 == 0) {
      r.spec = {{"engine", "llamacpp"},
                {"num_draft_tokens", 8},
                {"num_accepted_draft_tokens", i % 7},
                {"num_spec_steps", 2}};
    }
    rs.push_back(r);
  }
  return rs;
}

json RunSummary(const std::vector<RequestResult>& rs, const SummaryOptions& o, int shard, int count,
                double started_at) {
  json s = {{"tool", "llmtap replay"},
            {"version", "test"},
            {"command", "llmtap replay trace.jsonl"},
            {"url", "http://127.0.0.1:8000"},
            {"trace", "trace.jsonl"},
            {"shard", {{"index", shard}, {"count", count}}},
            {"started_at_unix_ms", started_at}};
  s.update(SummarizeRequests(rs, o));
  s["server_metrics"] = nullptr;
  return s;
}

class MergeTest : public ::testing::Test {
 protected:
  const llmtap::testing::TempDir tmp_;
  const fs::path dir_ = tmp_.path();
};

TEST_F(MergeTest, ShardsMergeIntoTheStatisticsOfTheUnion) {
  const double kStart = 1.7e12;
  SummaryOptions o;
  std::string error;
  ASSERT_TRUE(ParseGoodput("ttft:60 itl:13", &o.goodput, &error));
  o.max_concurrency = 32;
  std::vector<RequestResult> all = MakeRun(400);
  json whole = RunSummary(all, o, 0, 1, kStart);

  // Shard 1 started 250 ms later than shard 0: its times are on its own clock.
  const double kLate = 250;
  std::vector<RequestResult> s0, s1;
  for (RequestResult r : all) {
    if (r.index % 2 == 0) {
      r.shard = 0;
      s0.push_back(r);
    } else {
      r.shard = 1;
      r.scheduled_ms -= kLate;
      *r.sent_ms -= kLate;
      r.done_ms -= kLate;
      s1.push_back(r);
    }
  }
  // What the capture's server reported for each shard's rows (replay's captured_server).
  json summary0 = RunSummary(s0, o, 0, 2, kStart);
  json summary1 = RunSummary(s1, o, 1, 2, kStart + kLate);
  summary0["captured_server"] = {{"cache", CacheJson(150, 60000, 15000)}};
  summary1["captured_server"] = {{"cache", CacheJson(50, 20000, 10000)}};
  ASSERT_TRUE(WriteRunDir((dir_ / "s0").string(), summary0, s0, &error)) << error;
  ASSERT_TRUE(WriteRunDir((dir_ / "s1").string(), summary1, s1, &error)) << error;

  std::vector<RunDir> runs(2);
  ASSERT_TRUE(LoadRun((dir_ / "s0").string(), true, &runs[0], &error)) << error;
  ASSERT_TRUE(LoadRun((dir_ / "s1").string(), true, &runs[1], &error)) << error;
  MergeOutput merged;
  ASSERT_TRUE(MergeRuns(runs, &merged, &error)) << error;
  EXPECT_TRUE(merged.warnings.empty()) << merged.warnings[0];
  ASSERT_EQ(merged.requests.size(), all.size());

  for (const char* key : {"requests", "throughput", "goodput", "metrics", "open_loop", "duration_s",
                          "definitions", "server"}) {
    ExpectJsonNear(merged.summary[key], whole[key], key);
  }
  ASSERT_TRUE(whole["server"]["cache"].is_object());
  ASSERT_TRUE(whole["server"]["spec"].is_object());
  EXPECT_EQ(merged.summary["captured_server"]["cache"], CacheJson(200, 80000, 25000));
  EXPECT_DOUBLE_EQ(merged.summary["captured_server"]["cache"]["hit_rate"].get<double>(), 0.3125);
  EXPECT_EQ(merged.summary["tool"], "llmtap report merge");
  EXPECT_FALSE(merged.summary.contains("sessions"));  // no session turns
  EXPECT_EQ(merged.summary["shard"]["count"], 2);
  EXPECT_DOUBLE_EQ(merged.summary["started_at_unix_ms"].get<double>(), kStart);
  // The requests themselves are back on one clock, in schedule order.
  for (size_t i = 0; i < all.size(); ++i) {
    EXPECT_NEAR(merged.requests[i].scheduled_ms, all[i].scheduled_ms, 1e-6);
    EXPECT_EQ(merged.requests[i].index, all[i].index);
  }

  ASSERT_TRUE(WriteRunDir((dir_ / "merged").string(), merged.summary, merged.requests, &error));
  EXPECT_TRUE(fs::exists(dir_ / "merged" / kReportFile));
  RunDir back;
  ASSERT_TRUE(LoadRun((dir_ / "merged").string(), true, &back, &error)) << error;
  EXPECT_EQ(back.requests.size(), all.size());
}

// Causal replay's session turns: every third request, some moved, some without a captured
// latency; the shards' "sessions" are what each replay computed over its own turns.
std::vector<RequestResult> WithSessionTurns(std::vector<RequestResult> rs) {
  for (RequestResult& r : rs) {
    if (r.index % 3 != 0) continue;
    r.session_turn = true;
    if (!r.sent_ms) continue;
    r.causal_shift_ms = r.index % 2 ? 0.5 * static_cast<double>(r.index % 50) : 0;
    r.captured_latency = r.index % 7 != 0;
  }
  return rs;
}

// Shard i of 2 (by index parity) with its summary, shard 1 started `late` ms after shard 0.
std::vector<RequestResult> ShardOf(const std::vector<RequestResult>& all, int shard, double late) {
  std::vector<RequestResult> out;
  for (RequestResult r : all) {
    if (r.index % 2 != shard) continue;
    r.shard = shard;
    r.scheduled_ms -= shard * late;
    if (r.sent_ms) *r.sent_ms -= shard * late;
    r.done_ms -= shard * late;
    out.push_back(r);
  }
  return out;
}

TEST_F(MergeTest, SessionFiguresOfCausalShardsAreThoseOfTheSingleRun) {
  const double kStart = 1.7e12, kLate = 250;
  SummaryOptions o;
  std::string error;
  const std::vector<RequestResult> all = WithSessionTurns(MakeRun(400));
  const json whole_sessions = SummarizeSessions(all);
  ASSERT_TRUE(whole_sessions.is_object());
  ASSERT_GT(whole_sessions["moved"].get<int>(), 10);
  ASSERT_GT(whole_sessions["without_captured_latency"].get<int>(), 0);
  auto write_shard = [&](int shard, const std::vector<RequestResult>& rs, json sessions) {
    json s = RunSummary(rs, o, shard, 2, kStart + shard * kLate);
    if (!sessions.is_null()) s["sessions"] = std::move(sessions);
    const std::string dir = (dir_ / ("s" + std::to_string(shard))).string();
    ASSERT_TRUE(WriteRunDir(dir, s, rs, &error)) << error;
  };
  auto merge = [&](MergeOutput* merged) {
    std::vector<RunDir> runs(2);
    ASSERT_TRUE(LoadRun((dir_ / "s0").string(), true, &runs[0], &error)) << error;
    ASSERT_TRUE(LoadRun((dir_ / "s1").string(), true, &runs[1], &error)) << error;
    ASSERT_TRUE(MergeRuns(runs, merged, &error)) << error;
  };
  const std::vector<RequestResult> s0 = ShardOf(all, 0, kLate), s1 = ShardOf(all, 1, kLate);
  write_shard(0, s0, SummarizeSessions(s0));
  write_shard(1, s1, SummarizeSessions(s1));
  MergeOutput merged;
  merge(&merged);
  EXPECT_TRUE(merged.warnings.empty()) << merged.warnings[0];
  ASSERT_TRUE(merged.summary.contains("sessions"));
  ExpectJsonNear(merged.summary["sessions"], whole_sessions, "sessions");

  // Shard 1 written by an llmtap that did not mark its turns: its summary counts turns its
  // requests do not show, so the merged figures would be short. Left out, with a warning.
  std::vector<RequestResult> unmarked = s1;
  for (RequestResult& r : unmarked) {
    r.session_turn = false;
    r.causal_shift_ms.reset();
    r.captured_latency.reset();
  }
  write_shard(1, unmarked, SummarizeSessions(s1));
  merge(&merged);
  EXPECT_FALSE(merged.summary.contains("sessions"));
  ASSERT_EQ(merged.warnings.size(), 1u);
  EXPECT_NE(merged.warnings[0].find("\"sessions\" left out"), std::string::npos)
      << merged.warnings[0];

  // Shard 1 replayed its sessions on --schedule timestamps: nothing to merge them with.
  json timestamps = SummarizeSessions(s1);
  timestamps["schedule"] = "timestamps";
  write_shard(1, unmarked, timestamps);
  merge(&merged);
  EXPECT_FALSE(merged.summary.contains("sessions"));
  ASSERT_EQ(merged.warnings.size(), 1u);
  EXPECT_NE(merged.warnings[0].find("\"timestamps\" schedule"), std::string::npos)
      << merged.warnings[0];

  // Shard 1 had no session rows at all: shard 0's turns are the run's.
  write_shard(1, ShardOf(MakeRun(400), 1, kLate), nullptr);
  merge(&merged);
  EXPECT_TRUE(merged.warnings.empty()) << merged.warnings[0];
  ExpectJsonNear(merged.summary["sessions"], SummarizeSessions(s0), "sessions");
}

TEST_F(MergeTest, InconsistentShardsAreWarnings) {
  SummaryOptions o;
  std::vector<RequestResult> all = MakeRun(20);
  json a = RunSummary(all, o, 0, 3, 1e12);
  json b = RunSummary(all, o, 0, 3, 1e12);  // same index again, same requests again
  b["trace"] = "other.jsonl";
  b["goodput"] = {{"constraints", {{"ttft_ms", 5.0}}}};
  std::string error;
  ASSERT_TRUE(WriteRunDir((dir_ / "a").string(), a, all, &error));
  ASSERT_TRUE(WriteRunDir((dir_ / "b").string(), b, all, &error));
  std::vector<RunDir> runs(2);
  ASSERT_TRUE(LoadRun((dir_ / "a").string(), true, &runs[0], &error));
  ASSERT_TRUE(LoadRun((dir_ / "b").string(), true, &runs[1], &error));
  MergeOutput merged;
  ASSERT_TRUE(MergeRuns(runs, &merged, &error));
  std::string all_warnings;
  for (const std::string& w : merged.warnings) all_warnings += w + "\n";
  EXPECT_NE(all_warnings.find("shard index 0 appears more than once"), std::string::npos)
      << all_warnings;
  EXPECT_NE(all_warnings.find("different traces"), std::string::npos);
  EXPECT_NE(all_warnings.find("goodput constraints differ"), std::string::npos);
  EXPECT_NE(all_warnings.find("2 outputs merged, but the shards say 3"), std::string::npos);
  EXPECT_NE(all_warnings.find("share a (shard, index)"), std::string::npos);
  EXPECT_EQ(merged.summary["warnings"].size(), merged.warnings.size());
}

TEST_F(MergeTest, BadInputsAreErrors) {
  RunDir run;
  std::string error;
  EXPECT_FALSE(LoadRun((dir_ / "missing").string(), false, &run, &error));
  fs::create_directories(dir_ / "bad");
  std::string summary = "{\"tool\":\"llmtap replay\"}";
  ASSERT_TRUE(WriteFileAtomically((dir_ / "bad" / kSummaryFile).string(), summary, &error));
  EXPECT_FALSE(LoadRun((dir_ / "bad").string(), true, &run, &error));  // no requests.jsonl
  ASSERT_TRUE(WriteFileAtomically((dir_ / "bad" / kRequestsFile).string(),
                                  "{\"index\":0,\"scheduled_ms\":1}\n\nnot json\n", &error));
  EXPECT_FALSE(LoadRun((dir_ / "bad").string(), true, &run, &error));
  EXPECT_NE(error.find("requests.jsonl:3: not JSON"), std::string::npos) << error;
  ASSERT_TRUE(WriteFileAtomically((dir_ / "bad" / kSummaryFile).string(), "[1]", &error));
  EXPECT_FALSE(LoadRun((dir_ / "bad").string(), false, &run, &error));
  MergeOutput merged;
  EXPECT_FALSE(MergeRuns({}, &merged, &error));
}

}  // namespace
}  // namespace llmtap::report
