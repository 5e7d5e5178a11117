// Trace tools split, stats and convert, on the fixtures in tests/data/traces and on small files.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <sstream>

#include "trace/convert.h"
#include "trace/merge.h"
#include "trace/segment_test_util.h"
#include "trace/split.h"
#include "trace/stats.h"
#include "trace/trace_test_util.h"
#include "trace/validate.h"

namespace llmtap::trace {
namespace {

using testing::Fixture;
using testing::Lines;
using testing::ReadAll;
using testing::TempDir;

int Mode(const std::string& path) {
  struct stat st;
  EXPECT_EQ(::stat(path.c_str(), &st), 0) << path;
  return st.st_mode & 0777;
}

// Options that split the fixture `name` into `out_dir`.
SplitOptions SplitFixture(const std::string& name, const std::string& out_dir) {
  SplitOptions o;
  o.path = Fixture(name);
  o.out_dir = out_dir;
  return o;
}

TEST(Split, MixedMooncakeKeepsBytesAndPrintsAiperfCommands) {
  TempDir dir;
  SplitOptions o = SplitFixture("mixed_mooncake.jsonl", dir.path());
  SplitReport r = SplitTrace(o);
  ASSERT_TRUE(r.io.ok()) << r.io.ToString();
  EXPECT_EQ(r.exit_code(), 0);
  EXPECT_EQ(r.format, TraceFormat::kMooncake);
  EXPECT_EQ(r.format_source, "manifest");
  ASSERT_EQ(r.outputs.size(), 3u);
  std::vector<std::string> in = Lines(ReadAll(o.path));
  std::vector<std::string> chat = Lines(ReadAll(r.outputs[0].path));
  std::vector<std::string> comp = Lines(ReadAll(r.outputs[1].path));
  std::vector<std::string> other = Lines(ReadAll(r.outputs[2].path));
  EXPECT_EQ(chat, (std::vector<std::string>{in[0], in[2], in[5]}));
  EXPECT_EQ(comp, (std::vector<std::string>{in[1], in[4]}));
  EXPECT_EQ(other, (std::vector<std::string>{in[3]}));
  EXPECT_EQ(Mode(r.outputs[0].path), 0600);
  EXPECT_EQ(r.outputs[0].aiperf_command,
            "aiperf profile --model llama --endpoint-type chat --streaming --url localhost:8000 "
            "--custom-dataset-type mooncake_trace --input-file " +
                dir.File("mixed_mooncake.chat.jsonl") +
                " --fixed-schedule --fixed-schedule-auto-offset");
  EXPECT_NE(r.outputs[1].aiperf_command.find("--endpoint-type completions"), std::string::npos);
  EXPECT_TRUE(r.outputs[2].aiperf_command.empty());

  // Every output validates for its endpoint type.
  for (int i = 0; i < 2; ++i) {
    ValidateOptions v;
    v.path = r.outputs[i].path;
    v.endpoint_type = i == 0 ? Endpoint::kChat : Endpoint::kCompletions;
    ValidateReport vr = ValidateTrace(v);
    EXPECT_TRUE(vr.ok()) << v.path;
    EXPECT_EQ(vr.row_warnings_total, 0u) << RenderValidateText(vr);
  }

  // A second run refuses to overwrite; --force overwrites.
  SplitReport again = SplitTrace(o);
  EXPECT_EQ(again.exit_code(), 2);
  EXPECT_NE(again.io.ToString().find("--force"), std::string::npos);
  o.force = true;
  EXPECT_EQ(SplitTrace(o).exit_code(), 0);
}

TEST(Split, CreatesAMissingOutputDirectory0700) {
  TempDir dir;
  SplitOptions o = SplitFixture("mixed_mooncake.jsonl", dir.File("new/split"));
  SplitReport r = SplitTrace(o);
  ASSERT_TRUE(r.io.ok()) << r.io.ToString();
  EXPECT_EQ(Lines(ReadAll(r.outputs[0].path)).size(), 3u);
  EXPECT_EQ(Mode(dir.File("new/split")), 0700);
  EXPECT_EQ(Mode(dir.File("new")), 0700);
}

TEST(Split, RebaseRewritesOnlyTheTimestamp) {
  TempDir dir;
  SplitOptions o = SplitFixture("mixed_mooncake.jsonl", dir.path());
  o.rebase = true;
  SplitReport r = SplitTrace(o);
  ASSERT_EQ(r.exit_code(), 0);
  std::vector<std::string> chat = Lines(ReadAll(r.outputs[0].path));
  ASSERT_EQ(chat.size(), 3u);
  std::vector<std::string> in = Lines(ReadAll(o.path));
  EXPECT_EQ(chat[0], "{\"timestamp\":0" + in[0].substr(in[0].find(',')));
  EXPECT_EQ(chat[1], "{\"timestamp\":50" + in[2].substr(in[2].find(',')));
  EXPECT_EQ(chat[2], "{\"timestamp\":2400" + in[5].substr(in[5].find(',')));
  std::vector<std::string> comp = Lines(ReadAll(r.outputs[1].path));
  EXPECT_EQ(comp[0].substr(0, 15), "{\"timestamp\":0,");
  EXPECT_EQ(comp[1].substr(0, 18), "{\"timestamp\":1050,");
  // Rebased to 0: the schedule is replayed as written, with no offset to take off.
  EXPECT_TRUE(r.outputs[0].aiperf_command.ends_with(" --fixed-schedule"))
      << r.outputs[0].aiperf_command;
}

TEST(Split, RawFormatAndMalformedLines) {
  TempDir dir;
  SplitOptions o = SplitFixture("mixed_raw.jsonl", dir.path());
  SplitReport r = SplitTrace(o);
  ASSERT_EQ(r.exit_code(), 0);
  EXPECT_EQ(r.format, TraceFormat::kRaw);
  EXPECT_EQ(r.outputs[0].rows, 2u);
  EXPECT_NE(r.outputs[0].aiperf_command.find("--custom-dataset-type raw_payload"),
            std::string::npos);
  // raw_payload rows have no timestamps: no schedule to follow.
  EXPECT_EQ(r.outputs[0].aiperf_command.find("--fixed-schedule"), std::string::npos);
  // Completions go out as mooncake_payload rows without timestamps: AIPerf's raw_payload
  // loader refuses a request without 'messages'.
  EXPECT_EQ(r.outputs[1].format, TraceFormat::kMooncake);
  EXPECT_EQ(ReadAll(r.outputs[1].path),
            "{\"payload\":{\"model\":\"llama\",\"prompt\":\"Tell me\",\"max_tokens\":20}}\n");
  EXPECT_NE(r.outputs[1].aiperf_command.find("--custom-dataset-type mooncake_trace"),
            std::string::npos);
  EXPECT_EQ(r.outputs[1].aiperf_command.find("--fixed-schedule"), std::string::npos);
  EXPECT_EQ(r.outputs[2].format, TraceFormat::kRaw);
  EXPECT_NE(RenderSplitText(r).find("takes requests with 'messages' only"), std::string::npos);

  o.path = Fixture("malformed_torn.jsonl");
  SplitReport m = SplitTrace(o);
  EXPECT_EQ(m.exit_code(), 1);  // outputs written, some lines skipped
  EXPECT_EQ(m.routed, 2u);
  EXPECT_EQ(m.skipped.total, 5u);
  EXPECT_TRUE(m.torn_tail);
  EXPECT_EQ(m.skipped.kept.back().line, 8u);
  EXPECT_NE(m.skipped.kept.back().reason.find("torn last line"), std::string::npos);
  // The CRLF row is written without its '\r'.
  EXPECT_EQ(ReadAll(m.outputs[1].path),
            "{\"timestamp\":0,\"payload\":{\"model\":\"m\",\"prompt\":\"a\"}}\n");
}

TEST(Split, RefusesToWriteThroughASymlink) {
  TempDir dir;
  std::string target = dir.Write("target", "keep");
  ASSERT_EQ(::symlink(target.c_str(), dir.File("mixed_raw.chat.jsonl").c_str()), 0);
  SplitOptions o = SplitFixture("mixed_raw.jsonl", dir.path());
  o.force = true;
  SplitReport r = SplitTrace(o);
  EXPECT_EQ(r.exit_code(), 2);
  EXPECT_EQ(ReadAll(target), "keep");
}

TEST(Stats, MooncakePayloadWithManifest) {
  StatsOptions o;
  o.path = Fixture("mixed_mooncake.jsonl");
  StatsReport r = ComputeStats(o);
  ASSERT_EQ(r.exit_code(), 0);
  EXPECT_EQ(r.rows, 6u);
  EXPECT_DOUBLE_EQ(r.duration_s, 2.4);
  EXPECT_DOUBLE_EQ(r.mean_rate, 6 / 2.4);
  EXPECT_EQ(r.peak_second_count, 4u);
  EXPECT_EQ(r.endpoints["chat"], 3u);
  EXPECT_EQ(r.endpoints["completions"], 2u);
  EXPECT_EQ(r.endpoints["other"], 1u);
  EXPECT_EQ(r.models["llama"], 5u);
  EXPECT_EQ(r.stream_requests, 3u);
  EXPECT_EQ(r.max_tokens.count(), 5u);
  EXPECT_EQ(r.max_tokens.Percentile(50), 64u);
  EXPECT_EQ(r.max_tokens.max(), 128u);
  // Characters, not bytes: "Ünïcödé é text" is 14 characters.
  EXPECT_EQ(r.prompt_chars.min(), 14u);
  // Message prefixes: [S,Hi] [S,2+2?] [S,Hi,A,More]: hit rates 0, 1/2, 2/4.
  ASSERT_TRUE(r.message_prefix);
  EXPECT_NEAR(r.message_prefix->cache_hit_rate, 1.0 / 3, 1e-9);
  EXPECT_EQ(r.message_prefix->unique_prefixes, 5u);
  EXPECT_NEAR(r.message_prefix->prefix_reuse_ratio, 5.0 / 8, 1e-9);
  ASSERT_TRUE(r.effective_sample_rate);
  EXPECT_DOUBLE_EQ(*r.effective_sample_rate, 0.5);
  EXPECT_TRUE(r.warnings.empty());
  nlohmann::json j = nlohmann::json::parse(RenderStatsJson(r));
  EXPECT_EQ(j["manifest"]["effective_sample_rate"], 0.5);
  EXPECT_EQ(j["max_tokens"]["p90"], 128);
}

// The same conversation sent to chat, the Responses API (instructions + input) and Anthropic
// Messages (system + messages): the same prompt size, each API's max tokens counted, and each
// API's prompts apart; embeddings and rerank inputs counted too.
TEST(Stats, EveryApiPromptSizedAsTheChatTemplateLaysItOut) {
  TempDir dir;
  std::string p = dir.Write(
      "apis.jsonl",
      R"({"timestamp":0,"payload":{"model":"m","messages":[{"role":"system","content":"Be brief."},{"role":"user","content":"Hi there"}],"max_tokens":8}})"
      "\n"
      R"({"timestamp":1,"payload":{"model":"m","instructions":"Be brief.","input":"Hi there","max_output_tokens":9},"endpoint_type":"responses"})"
      "\n"
      R"({"timestamp":2,"payload":{"model":"m","instructions":"Be brief.","input":[{"role":"user","content":[{"type":"input_text","text":"Hi there"}]},{"type":"function_call","call_id":"c","name":"f","arguments":"{}"},{"type":"function_call_output","call_id":"c","output":"ok"}]},"endpoint_type":"responses"})"
      "\n"
      R"({"timestamp":3,"payload":{"model":"m","system":[{"type":"text","text":"Be brief."}],"messages":[{"role":"user","content":"Hi there"}],"max_tokens":10},"endpoint_type":"messages"})"
      "\n"
      R"({"timestamp":4,"payload":{"model":"m","input":["abc","de"]},"endpoint_type":"embeddings"})"
      "\n"
      R"({"timestamp":5,"payload":{"model":"m","query":"q","documents":["doc1","doc2"]},"endpoint_type":"cohere_rankings"})"
      "\n");
  StatsOptions o;
  o.path = p;
  StatsReport r = ComputeStats(o);
  ASSERT_EQ(r.exit_code(), 0) << RenderStatsText(r);
  EXPECT_EQ(r.max_tokens.count(), 3u);  // max_tokens (chat, Messages), max_output_tokens
  EXPECT_EQ(r.max_tokens.max(), 10u);
  EXPECT_EQ(r.prompt_chars_by_api["chat"].max(), 17u);
  EXPECT_EQ(r.prompt_chars_by_api["responses"].min(), 17u);
  EXPECT_EQ(r.prompt_chars_by_api["responses"].max(), 21u);  // + "{}" + "ok"
  EXPECT_EQ(r.prompt_chars_by_api["messages"].max(), 17u);
  EXPECT_EQ(r.prompt_chars_by_api["embeddings"].max(), 5u);
  EXPECT_EQ(r.prompt_chars_by_api["rankings"].max(), 9u);
  // Both Responses requests open with the same instructions: a reused prefix.
  ASSERT_TRUE(r.message_prefix);
  EXPECT_GT(r.message_prefix->cache_hit_rate, 0);
  EXPECT_NE(RenderStatsText(r).find("    messages: mean 17.0"), std::string::npos)
      << RenderStatsText(r);
  nlohmann::json j = nlohmann::json::parse(RenderStatsJson(r));
  EXPECT_EQ(j["prompt_chars_by_api"]["responses"]["max"], 21);
}

TEST(Stats, SessionsTurnsGapsAndThinkTimeFromTheOutcomes) {
  TempDir dir;
  std::string p =
      dir.Write("s.jsonl",
                "{\"timestamp\":0,\"payload\":{\"prompt\":\"a\"},\"session_id\":\"a\"}\n"
                "{\"timestamp\":100,\"payload\":{\"prompt\":\"b\"},\"session_id\":\"b\"}\n"
                "{\"timestamp\":1000,\"payload\":{\"prompt\":\"a\"},\"session_id\":\"a\"}\n"
                "{\"timestamp\":1100,\"payload\":{\"prompt\":\"-\"}}\n"
                "{\"timestamp\":1500,\"payload\":{\"prompt\":\"b\"},\"session_id\":\"b\"}\n"
                "{\"timestamp\":3000,\"payload\":{\"prompt\":\"a\"},\"session_id\":\"a\"}\n");
  // In completion order, as the proxy writes it. Line 3's response ends at 3500, after line 6
  // started: an overlapping turn.
  dir.Write("s.jsonl.outcomes.ndjson",
            "{\"line\":2,\"timestamp\":100,\"status\":200,\"latency_ms\":300.4}\n"
            "{\"line\":1,\"timestamp\":0,\"status\":200,\"latency_ms\":400}\n"
            "{\"line\":3,\"timestamp\":1000,\"status\":200,\"latency_ms\":2500}\n");
  StatsOptions o;
  o.path = p;
  StatsReport r = ComputeStats(o);
  ASSERT_EQ(r.exit_code(), 0) << r.io.ToString();
  const SessionStats& s = r.sessions;
  EXPECT_EQ(s.sessions(), 2u);
  EXPECT_EQ(s.rows(), 5u);
  EXPECT_EQ(s.turns().max(), 3u);
  EXPECT_EQ(s.turns().min(), 2u);
  EXPECT_EQ(s.gap_ms().count(), 3u);  // 1000, 1400, 2000
  EXPECT_EQ(s.gap_ms().sum(), 4400u);
  EXPECT_EQ(s.think_ms().count(), 2u);  // 1000 - 400, 1500 - 400.4
  EXPECT_EQ(s.think_ms().min(), 600u);
  EXPECT_EQ(s.think_ms().max(), 1100u);
  EXPECT_EQ(s.overlapping(), 1u);
  EXPECT_EQ(r.outcomes_joined, 3u);
  std::string text = RenderStatsText(r);
  EXPECT_NE(text.find("sessions: 2 (5 rows with a session_id"), std::string::npos) << text;
  EXPECT_NE(text.find("1 turns started before the previous ended"), std::string::npos) << text;
  nlohmann::json j = nlohmann::json::parse(RenderStatsJson(r));
  EXPECT_EQ(j["sessions"]["think_ms"]["count"], 2);

  // A sidecar of another file (an outcome past the last line): no think times, a warning.
  std::string other = dir.Write("other.outcomes.ndjson",
                                "{\"line\":1,\"timestamp\":0,\"latency_ms\":400}\n"
                                "{\"line\":40,\"timestamp\":9000,\"latency_ms\":1}\n");
  o.outcomes_path = other;
  r = ComputeStats(o);
  ASSERT_EQ(r.exit_code(), 0);
  EXPECT_EQ(r.sessions.think_ms().count(), 0u);
  EXPECT_EQ(r.sessions.gap_ms().count(), 3u);
  ASSERT_FALSE(r.warnings.empty());
  EXPECT_NE(r.warnings.back().find("does not belong to " + p), std::string::npos)
      << r.warnings.back();
  EXPECT_NE(RenderStatsText(r).find("think time: needs the outcomes sidecar"), std::string::npos);
}

TEST(Stats, ServerCacheFromTheOutcomesBesideThePrefixReuseEstimate) {
  TempDir dir;
  // Two chat requests sharing their first message: the second's "sys" (3 of 5 characters) is in
  // a prefix seen before.
  std::string p = dir.Write(
      "c.jsonl",
      "{\"timestamp\":0,\"payload\":{\"messages\":[{\"role\":\"system\",\"content\":\"sys\"},"
      "{\"role\":\"user\",\"content\":\"ab\"}]}}\n"
      "{\"timestamp\":10,\"payload\":{\"messages\":[{\"role\":\"system\",\"content\":\"sys\"},"
      "{\"role\":\"user\",\"content\":\"cd\"}]}}\n"
      "{\"timestamp\":20,\"payload\":{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}}\n");
  // The server reported its cache for the first two (the third's outcome has no cached_tokens).
  dir.Write(
      "c.jsonl.outcomes.ndjson",
      "{\"line\":2,\"timestamp\":10,\"status\":200,\"prompt_tokens\":40,\"cached_tokens\":30}\n"
      "{\"line\":1,\"timestamp\":0,\"status\":200,\"prompt_tokens\":40,\"cached_tokens\":0}\n"
      "{\"line\":3,\"timestamp\":20,\"status\":200,\"prompt_tokens\":9}\n");
  StatsOptions o;
  o.path = p;
  StatsReport r = ComputeStats(o);
  ASSERT_EQ(r.exit_code(), 0) << r.io.ToString();
  EXPECT_EQ(r.server_cache.requests, 2u);
  EXPECT_EQ(r.server_cache.prompt_tokens, 80u);
  EXPECT_EQ(r.server_cache.cached_tokens, 30u);
  ASSERT_TRUE(r.message_prefix);
  const double estimate = r.message_prefix->weighted_hit_share;
  EXPECT_GT(estimate, 0);
  std::string text = RenderStatsText(r);
  EXPECT_NE(text.find("server cache (outcomes): 37.5% of prompt tokens reused (30 of 80, 2 "
                      "requests reporting); llmtap's estimate"),
            std::string::npos)
      << text;
  nlohmann::json j = nlohmann::json::parse(RenderStatsJson(r));
  EXPECT_EQ(j["server_cache"]["cached_tokens"], 30);
  EXPECT_DOUBLE_EQ(j["server_cache"]["hit_rate"].get<double>(), 0.375);
  EXPECT_EQ(j["server_cache"]["estimate"], "message_prefix_reuse.reused_char_share");
  EXPECT_DOUBLE_EQ(j["server_cache"]["server_over_estimate"].get<double>(), 0.375 / estimate);

  // Without the sidecar: no server figure.
  o.no_outcomes = true;
  r = ComputeStats(o);
  EXPECT_TRUE(nlohmann::json::parse(RenderStatsJson(r))["server_cache"].is_null());
  EXPECT_EQ(RenderStatsText(r).find("server cache"), std::string::npos);
}

TEST(Stats, HashIdsPrefixReuseAsAiperfAnalyzeTrace) {
  StatsOptions o;
  o.path = Fixture("hashed.jsonl");
  StatsReport r = ComputeStats(o);
  ASSERT_EQ(r.exit_code(), 0);
  ASSERT_TRUE(r.hash_prefix);
  // [1,2] [1,2,3] [4] [1,5]: first-unseen hit rates 0, 2/3, 0, 1/2.
  EXPECT_NEAR(r.hash_prefix->cache_hit_rate, (2.0 / 3 + 0.5) / 4, 1e-9);
  // prefixes (1)x3 (1,2)x2 (1,2,3) (4) (1,5): 5 of 8 occurrences are repeated.
  EXPECT_NEAR(r.hash_prefix->prefix_reuse_ratio, 5.0 / 8, 1e-9);
  EXPECT_EQ(r.hash_prefix->unique_prefixes, 5u);
  EXPECT_EQ(r.hash_prefix->prefix_groups, 1u);
  EXPECT_EQ(r.input_length.max(), 1536u);
}

TEST(Stats, HistogramPercentilesWithinATenthOfAPercent) {
  Histogram h;
  for (uint64_t v = 1; v <= 100000; ++v) h.Add(v);
  EXPECT_NEAR(static_cast<double>(h.Percentile(50)), 50000.0, 50.0);
  EXPECT_NEAR(static_cast<double>(h.Percentile(99)), 99000.0, 99.0);
  EXPECT_EQ(h.max(), 100000u);
  EXPECT_EQ(h.min(), 1u);
}

TEST(Convert, MooncakeToRawKeepsPayloadBytes) {
  TempDir dir;
  ConvertOptions o;
  o.path = Fixture("mixed_mooncake.jsonl");
  o.out = dir.File("raw.jsonl");
  o.to = TraceFormat::kRaw;
  ConvertReport r = ConvertTrace(o);
  std::vector<std::string> in = Lines(ReadAll(o.path));
  std::vector<std::string> out = Lines(ReadAll(o.out));
  // Chat rows only: AIPerf's raw_payload loader refuses a file with a row without 'messages'.
  size_t k = 0, non_chat = 0;
  for (size_t i = 0; i < in.size(); ++i) {
    size_t p = in[i].find("\"payload\":") + 10;
    const std::string payload = in[i].substr(p, in[i].size() - p - 1);
    if (payload.find("\"messages\"") == std::string::npos) {
      ++non_chat;
      continue;
    }
    ASSERT_LT(k, out.size());
    EXPECT_EQ(out[k++], payload);
  }
  EXPECT_EQ(k, out.size());
  ASSERT_GT(non_chat, 0u);
  EXPECT_EQ(r.exit_code(), 1);
  EXPECT_EQ(r.skipped.total, non_chat);
  EXPECT_NE(r.skipped.kept[0].reason.find("takes chat requests only"), std::string::npos);
  EXPECT_EQ(Mode(o.out), 0600);
  // Rows without a payload are skipped, and reported.
  o.path = Fixture("hashed.jsonl");
  o.out = dir.File("raw2.jsonl");
  ConvertReport h = ConvertTrace(o);
  EXPECT_EQ(h.exit_code(), 1);
  EXPECT_EQ(h.skipped.total, 4u);
}

TEST(Convert, ToRawSaysWhichSessionIdsItCannotKeep) {
  TempDir dir;
  std::string p = dir.Write("s.jsonl",
                            "{\"timestamp\":0,\"payload\":{\"messages\":[]},\"session_id\":\"x\"}\n"
                            "{\"timestamp\":5,\"payload\":{\"messages\":[1]}}\n");
  ConvertOptions o;
  o.path = p;
  o.to = TraceFormat::kRaw;
  o.out = dir.File("r.jsonl");
  ConvertReport r = ConvertTrace(o);
  ASSERT_EQ(r.exit_code(), 0) << r.io.ToString();
  EXPECT_EQ(ReadAll(o.out), "{\"messages\":[]}\n{\"messages\":[1]}\n");
  ASSERT_EQ(r.warnings.size(), 1u);
  EXPECT_NE(r.warnings[0].find("1 rows carried a session_id"), std::string::npos);
}

TEST(Convert, RawToMooncakeTimestamps) {
  TempDir dir;
  ConvertOptions o;
  o.path = Fixture("mixed_raw.jsonl");
  o.to = TraceFormat::kMooncake;
  o.out = dir.File("zero.jsonl");
  ASSERT_EQ(ConvertTrace(o).exit_code(), 0);
  std::vector<std::string> in = Lines(ReadAll(o.path));
  std::vector<std::string> zero = Lines(ReadAll(o.out));
  ASSERT_EQ(zero.size(), 4u);
  EXPECT_EQ(zero[1], "{\"timestamp\":0,\"payload\":" + in[1] + "}");

  o.out = dir.File("constant.jsonl");
  o.rate = 4;
  o.arrival = Arrival::kConstant;
  ASSERT_EQ(ConvertTrace(o).exit_code(), 0);
  std::vector<std::string> c = Lines(ReadAll(o.out));
  EXPECT_EQ(c[3].substr(0, 17), "{\"timestamp\":750,");

  o.out = dir.File("poisson.jsonl");
  o.rate = 1000;
  o.arrival = Arrival::kPoisson;
  o.seed = 7;
  ConvertReport p = ConvertTrace(o);
  ASSERT_EQ(p.exit_code(), 0);
  o.out = dir.File("poisson2.jsonl");
  ConvertTrace(o);
  EXPECT_EQ(ReadAll(dir.File("poisson.jsonl")), ReadAll(o.out));  // seeded: reproducible
  ValidateOptions v;
  v.path = o.out;
  ValidateReport vr = ValidateTrace(v);
  EXPECT_TRUE(vr.ok());
  EXPECT_EQ(vr.row_warnings_total, 0u) << RenderValidateText(vr);  // non-decreasing, >= 0
}

}  // namespace
}  // namespace llmtap::trace
