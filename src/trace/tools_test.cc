// split, stats, convert and merge, on the fixtures in tests/data/traces and on small files.
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
using testing::ReadAll;
using testing::TempDir;

using testing::Lines;
using testing::MakeRun;
using testing::SegmentSpec;

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
                dir.File("mixed_mooncake.chat.jsonl"));
  EXPECT_NE(r.outputs[1].aiperf_command.find("--endpoint-type completions"), std::string::npos);
  EXPECT_TRUE(r.outputs[2].aiperf_command.empty());

  // Every output validates for its endpoint type.
  for (int i = 0; i < 2; ++i) {
    ValidateOptions v;
    v.path = r.outputs[i].path;
    v.endpoint_type = i == 0 ? Endpoint::kChat : Endpoint::kCompletions;
    EXPECT_TRUE(ValidateTrace(v).ok()) << v.path;
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
  dir.Write("s.jsonl.outcomes.jsonl",
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
  std::string other = dir.Write("other.outcomes.jsonl",
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
  ASSERT_EQ(r.exit_code(), 0) << r.io.ToString();
  std::vector<std::string> in = Lines(ReadAll(o.path));
  std::vector<std::string> out = Lines(ReadAll(o.out));
  ASSERT_EQ(out.size(), in.size());
  for (size_t i = 0; i < in.size(); ++i) {
    size_t p = in[i].find("\"payload\":") + 10;
    EXPECT_EQ(out[i], in[i].substr(p, in[i].size() - p - 1));
  }
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
  std::string p =
      dir.Write("s.jsonl",
                "{\"timestamp\":0,\"payload\":{\"prompt\":\"a\"},\"session_id\":\"x\"}\n"
                "{\"timestamp\":5,\"payload\":{\"prompt\":\"b\"}}\n");
  ConvertOptions o;
  o.path = p;
  o.to = TraceFormat::kRaw;
  o.out = dir.File("r.jsonl");
  ConvertReport r = ConvertTrace(o);
  ASSERT_EQ(r.exit_code(), 0) << r.io.ToString();
  EXPECT_EQ(ReadAll(o.out), "{\"prompt\":\"a\"}\n{\"prompt\":\"b\"}\n");
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
  EXPECT_TRUE(ValidateTrace(v).ok());  // non-decreasing, >= 0
}

// Options that merge `inputs` into `out`.
MergeOptions MergeInto(std::vector<std::string> inputs, const std::string& out) {
  MergeOptions o;
  o.inputs = std::move(inputs);
  o.out = out;
  return o;
}

TEST(Merge, InterleavesOnEpochsWithStableTies) {
  TempDir dir;
  MergeOptions o =
      MergeInto({Fixture("replica_a.jsonl"), Fixture("replica_b.jsonl")}, dir.File("merged.jsonl"));
  MergeReport r = MergeTraces(o);
  ASSERT_EQ(r.exit_code(), 0) << r.io.ToString();
  EXPECT_EQ(ReadAll(o.out),
            "{\"timestamp\":0,\"payload\":{\"model\":\"m\",\"prompt\":\"a0\"}}\n"
            "{\"timestamp\":50,\"payload\":{\"model\":\"m\",\"prompt\":\"b0\"}}\n"
            "{\"timestamp\":100,\"payload\":{\"model\":\"m\",\"prompt\":\"a1\"}}\n"
            "{\"timestamp\":100,\"payload\":{\"model\":\"m\",\"prompt\":\"b1\"}}\n"
            "{\"timestamp\":250,\"payload\":{\"model\":\"m\",\"prompt\":\"a2\"}}\n"
            "{\"timestamp\":250,\"payload\":{\"model\":\"m\",\"prompt\":\"b2\"}}\n");
  ASSERT_TRUE(r.epoch_ms);
  EXPECT_EQ(*r.epoch_ms, 1764700001000);
  nlohmann::json m = nlohmann::json::parse(ReadAll(o.out + ".manifest.json"));
  EXPECT_EQ(m["timestamp_zero_unix_ms"], 1764700001000);
  EXPECT_EQ(m["counters"]["recorded"], 6);

  // Ties go to input order: b before a when b is listed first.
  o.inputs = {Fixture("replica_b.jsonl"), Fixture("replica_a.jsonl")};
  o.out = dir.File("merged_ba.jsonl");
  ASSERT_EQ(MergeTraces(o).exit_code(), 0);
  std::vector<std::string> ba = Lines(ReadAll(o.out));
  EXPECT_NE(ba[2].find("b1"), std::string::npos);
  EXPECT_NE(ba[3].find("a1"), std::string::npos);
}

TEST(Merge, SessionIdsOfSeveralReplicasStayDistinct) {
  TempDir dir;
  auto manifest = [&](const std::string& file, const std::string& host) {
    dir.Write(file + ".manifest.json",
              "{\"format\":\"mooncake_payload\",\"timestamp_zero_unix_ms\":1764700000000,"
              "\"host\":\"" +
                  host + "\",\"pid\":7,\"started_utc\":\"2025-12-02T18:26:40Z\"}");
  };
  std::string a = dir.Write(
      "a.jsonl",
      "{\"timestamp\":0,\"payload\":{\"prompt\":\"a0\"},\"session_id\":\"s1\"}\n"
      "{\"timestamp\":2,\"payload\":{\"prompt\":\"a1\",\"metadata\":{\"session_id\":\"x\"}}}\n"
      "{\"session_id\":\"s\\\"2\",\"timestamp\":4,\"payload\":{\"prompt\":\"a2\"}}\n"
      "{\"timestamp\":6,\"payload\":{\"prompt\":\"a3\"},\"session_id\":\"\"}\n");
  std::string b = dir.Write(
      "b.jsonl", "{\"timestamp\":1,\"payload\":{\"prompt\":\"b0\"},\"session_id\":\"s1\"}\n");
  manifest("a.jsonl", "gpu-a");
  manifest("b.jsonl", "gpu-\\\"b");
  MergeOptions o = MergeInto({a, b}, dir.File("m.jsonl"));
  MergeReport r = MergeTraces(o);
  ASSERT_EQ(r.exit_code(), 0) << r.io.ToString();
  EXPECT_EQ(
      ReadAll(o.out),
      "{\"timestamp\":0,\"payload\":{\"prompt\":\"a0\"},\"session_id\":\"gpu-a:s1\"}\n"
      "{\"timestamp\":1,\"payload\":{\"prompt\":\"b0\"},\"session_id\":\"gpu-\\\"b:s1\"}\n"
      "{\"timestamp\":2,\"payload\":{\"prompt\":\"a1\",\"metadata\":{\"session_id\":\"x\"}}}\n"
      "{\"session_id\":\"gpu-a:s\\\"2\",\"timestamp\":4,\"payload\":{\"prompt\":\"a2\"}}\n"
      "{\"timestamp\":6,\"payload\":{\"prompt\":\"a3\"},\"session_id\":\"\"}\n");
  EXPECT_TRUE(r.session_ids_qualified);
  EXPECT_EQ(r.session_rows_qualified, 3u);
  EXPECT_NE(RenderMergeText(r).find("3 rows have theirs written as <replica>:<id>"),
            std::string::npos);

  // --keep-session-ids: as they are.
  o.keep_session_ids = true;
  o.out = dir.File("kept.jsonl");
  o.force = true;
  ASSERT_EQ(MergeTraces(o).exit_code(), 0);
  EXPECT_NE(ReadAll(o.out).find("\"session_id\":\"s1\"}\n{\"timestamp\":1,"), std::string::npos);

  // Files of one replica (a rotated capture): nothing to tell apart.
  manifest("b.jsonl", "gpu-a");
  o.keep_session_ids = false;
  o.out = dir.File("one.jsonl");
  r = MergeTraces(o);
  ASSERT_EQ(r.exit_code(), 0);
  EXPECT_FALSE(r.session_ids_qualified);
  EXPECT_EQ(ReadAll(o.out).find("gpu-a:"), std::string::npos);

  // Two uploading replicas on one host: their local manifests name them under "upload".
  dir.Write("a.jsonl.manifest.json",
            "{\"format\":\"mooncake_payload\",\"timestamp_zero_unix_ms\":1764700000000,"
            "\"host\":\"h\",\"upload\":{\"replica\":\"r1\"}}");
  dir.Write("b.jsonl.manifest.json",
            "{\"format\":\"mooncake_payload\",\"timestamp_zero_unix_ms\":1764700000000,"
            "\"host\":\"h\",\"upload\":{\"replica\":\"r2\"}}");
  o.out = dir.File("uploading.jsonl");
  ASSERT_EQ(MergeTraces(o).exit_code(), 0);
  EXPECT_NE(ReadAll(o.out).find("\"session_id\":\"r2:s1\""), std::string::npos);
}

TEST(Merge, LaterEpochShiftsEveryRow) {
  TempDir dir;
  // c starts 1 s before a: its rows come first and a's are shifted by 1000 ms.
  std::string c = dir.Write("c.jsonl",
                            "{\"timestamp\":0,\"payload\":{\"prompt\":\"c0\"}}\n"
                            "{\"timestamp\":1000,\"payload\":{\"prompt\":\"c1\"}}\n");
  dir.Write("c.jsonl.manifest.json",
            "{\"format\":\"mooncake_payload\",\"timestamp_zero_unix_ms\":1764700000000}");
  MergeOptions o = MergeInto({Fixture("replica_a.jsonl"), c}, dir.File("m.jsonl"));
  ASSERT_EQ(MergeTraces(o).exit_code(), 0);
  std::vector<std::string> m = Lines(ReadAll(o.out));
  ASSERT_EQ(m.size(), 5u);
  EXPECT_NE(m[0].find("c0"), std::string::npos);
  EXPECT_EQ(m[1].substr(0, 18), "{\"timestamp\":1000,");  // a0 (input 0) before c1 at a tie
  EXPECT_NE(m[1].find("a0"), std::string::npos);
  EXPECT_NE(m[2].find("c1"), std::string::npos);
  EXPECT_EQ(m[4].substr(0, 18), "{\"timestamp\":1250,");
}

TEST(Merge, RefusalsAndAssumeAligned) {
  TempDir dir;
  MergeOptions o =
      MergeInto({Fixture("replica_a.jsonl"), Fixture("mixed_raw.jsonl")}, dir.File("m.jsonl"));
  MergeReport no_manifest = MergeTraces(o);
  EXPECT_EQ(no_manifest.exit_code(), 2);
  EXPECT_NE(no_manifest.io.ToString().find("--assume-aligned"), std::string::npos);

  o.assume_aligned = true;
  MergeReport mixed = MergeTraces(o);
  EXPECT_EQ(mixed.exit_code(), 2);
  EXPECT_NE(mixed.io.ToString().find("different formats"), std::string::npos);

  std::string x = dir.Write("x.jsonl",
                            "{\"timestamp\":5,\"payload\":{\"prompt\":\"x\"}}\n"
                            "{\"timestamp\":3,\"payload\":{\"prompt\":\"y\"}}\n");
  o.inputs = {x, Fixture("hashed.jsonl")};
  o.out = dir.File("m2.jsonl");
  MergeReport aligned = MergeTraces(o);
  EXPECT_EQ(aligned.exit_code(), 1);  // x's decreasing row is reported and skipped
  EXPECT_EQ(aligned.written, 5u);
  EXPECT_FALSE(aligned.epoch_ms);
  std::vector<std::string> m = Lines(ReadAll(o.out));
  EXPECT_EQ(m[0].substr(0, 15), "{\"timestamp\":0,");
  EXPECT_NE(m[1].find("\"timestamp\":5,\"payload\""), std::string::npos);
}

// Segments of `runs` written under dir/<replica>/ as the capture leaves them (data, .zst or
// not, and the capture's manifest; or the store's manifest with `store_manifests`). Returns
// the data paths in key order, and the segments in that order.
std::vector<std::string> WriteSegments(const TempDir& dir, std::vector<SegmentSpec> segments,
                                       std::vector<SegmentSpec>* ordered,
                                       bool store_manifests = false) {
  std::vector<std::pair<std::string, SegmentSpec>> keyed;
  for (SegmentSpec& s : segments) {
    std::filesystem::create_directories(dir.File(s.replica));
    std::string path = dir.File(s.replica + "/" + s.DataName());
    std::string plain = dir.File(s.replica + "/" + s.PlainName());
    std::string stored = testing::StoredBytes(s, dir.File("scratch"));
    dir.Write(s.replica + "/" + s.DataName(), stored);
    std::string manifest = testing::LocalManifest(s, plain);
    if (store_manifests) {
      manifest = testing::StoreManifest(
          manifest, s.replica, "fleet/" + s.replica + "/" + s.DataName(), stored, s.lines.size());
    }
    dir.Write(s.replica + "/" + s.PlainName() + ".manifest.json", manifest);
    keyed.emplace_back(path, std::move(s));
  }
  std::sort(keyed.begin(), keyed.end(),
            [](const auto& a, const auto& b) { return a.first < b.first; });
  std::vector<std::string> paths;
  ordered->clear();
  for (auto& [p, s] : keyed) {
    paths.push_back(p);
    ordered->push_back(std::move(s));
  }
  return paths;
}

std::vector<const SegmentSpec*> Pointers(const std::vector<SegmentSpec>& v) {
  std::vector<const SegmentSpec*> out;
  for (const SegmentSpec& s : v) out.push_back(&s);
  return out;
}

// Two replicas' rotated runs, interleaved in time.
std::vector<SegmentSpec> TwoRuns() {
  std::vector<SegmentSpec> a = MakeRun("gpu-a", 1796378400000, 4, 30, 1, true);
  std::vector<SegmentSpec> b = MakeRun("gpu-b", 1796378400013, 3, 45, 2, true);
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

std::string ReadDecoded(const std::string& path) {
  std::string text;
  EXPECT_TRUE(store::ReadWhole(path, &text).ok()) << path;
  return text;
}

TEST(Merge, CompressedSegmentsAndOutputAsPlain) {
  TempDir dir;
  std::vector<SegmentSpec> segs;
  MergeOptions o = MergeInto(WriteSegments(dir, TwoRuns(), &segs), dir.File("merged.jsonl.zst"));
  MergeReport r = MergeTraces(o);
  ASSERT_EQ(r.exit_code(), 0) << RenderMergeText(r);
  std::vector<std::string> want = testing::ExpectedMerge(Pointers(segs));
  EXPECT_EQ(Lines(ReadDecoded(o.out)), want);
  EXPECT_EQ(r.written, want.size());
  EXPECT_EQ(r.inputs.size(), 7u);
  // The manifest is named after the uncompressed name, as every reader looks for it.
  nlohmann::json m = nlohmann::json::parse(ReadAll(dir.File("merged.jsonl.manifest.json")));
  EXPECT_EQ(m["file"]["records"], want.size());
  EXPECT_EQ(m["merged_from"].size(), 7u);
  EXPECT_EQ(m["timestamp_zero_unix_ms"], 1796378400000);

  // Segments are opened in turn, not all at once: two replicas, so about two open.
  EXPECT_LE(r.planned_open, 3u);
  EXPECT_LE(r.max_open, r.planned_open);
  EXPECT_GE(r.max_open, 2u);

  // Tiny buffers: the same rows, read 4 KiB at a time.
  o.out = dir.File("small.jsonl");
  o.read_budget_bytes = 16 << 10;
  o.min_chunk_bytes = 4096;
  MergeReport small = MergeTraces(o);
  ASSERT_EQ(small.exit_code(), 0) << RenderMergeText(small);
  EXPECT_EQ(small.chunk_bytes, 4096u);
  EXPECT_EQ(Lines(ReadAll(o.out)), want);

  // The merged output merges again as one input, unchanged.
  MergeOptions again;
  again.inputs = {dir.File("merged.jsonl.zst")};
  again.out = dir.File("again.jsonl");
  ASSERT_EQ(MergeTraces(again).exit_code(), 0);
  EXPECT_EQ(Lines(ReadAll(again.out)), want);
}

TEST(Merge, LinesLongerThanTheReadSize) {
  TempDir dir;
  std::vector<SegmentSpec> specs = MakeRun("r", 1796378400000, 2, 5, 3, true);
  for (SegmentSpec& s : specs) {
    for (std::string& l : s.lines) l.insert(l.find("\"prompt\":\"") + 10, std::string(20000, 'y'));
  }
  std::vector<SegmentSpec> segs;
  MergeOptions o = MergeInto(WriteSegments(dir, specs, &segs), dir.File("m.jsonl"));
  o.read_budget_bytes = 8192;
  o.min_chunk_bytes = 4096;
  MergeReport r = MergeTraces(o);
  ASSERT_EQ(r.exit_code(), 0) << RenderMergeText(r);
  EXPECT_EQ(Lines(ReadAll(o.out)), testing::ExpectedMerge(Pointers(segs)));
}

TEST(Merge, WindowKeepsFromToAndLeavesSegmentsOutsideUnread) {
  TempDir dir;
  std::vector<SegmentSpec> segs;
  MergeOptions o;
  o.inputs = WriteSegments(dir, TwoRuns(), &segs);
  // From the middle of gpu-a's second file to the middle of its third.
  const SegmentSpec* a2 = nullptr;
  const SegmentSpec* a1 = nullptr;
  for (const SegmentSpec& s : segs) {
    if (s.replica == "gpu-a" && s.sequence == 2) a2 = &s;
    if (s.replica == "gpu-a" && s.sequence == 1) a1 = &s;
  }
  ASSERT_TRUE(a1 && a2);
  const int64_t from = a2->epoch_ms + a2->last_timestamp_ms / 2;
  const int64_t to = from + 700;
  o.from_unix_ms = from;
  o.to_unix_ms = to;
  // A segment wholly before the window is never opened: its data may as well be gone.
  std::filesystem::remove(dir.File("gpu-a/" + a1->DataName()));
  o.out = dir.File("w.jsonl");
  MergeReport r = MergeTraces(o);
  ASSERT_EQ(r.exit_code(), 0) << RenderMergeText(r);
  std::vector<std::string> want = testing::ExpectedMerge(Pointers(segs), from, to);
  ASSERT_FALSE(want.empty());
  EXPECT_EQ(Lines(ReadAll(o.out)), want);
  EXPECT_GE(r.segments_outside_window, 2u);
  EXPECT_GT(r.rows_outside_window, 0u);
  nlohmann::json m = nlohmann::json::parse(ReadAll(o.out + ".manifest.json"));
  EXPECT_EQ(m["window"]["from_unix_ms"], from);
  EXPECT_EQ(m["window"]["to_unix_ms"], to);

  // On the fixtures: a at +1000, +1100, +1250; b at +1050, +1100, +1250 (ms after 1764700000000).
  MergeOptions f;
  f.inputs = {Fixture("replica_a.jsonl"), Fixture("replica_b.jsonl")};
  f.out = dir.File("f.jsonl");
  f.from_unix_ms = 1764700001050;
  f.to_unix_ms = 1764700001250;
  MergeReport fr = MergeTraces(f);
  ASSERT_EQ(fr.exit_code(), 0) << RenderMergeText(fr);
  EXPECT_EQ(ReadAll(f.out),
            "{\"timestamp\":0,\"payload\":{\"model\":\"m\",\"prompt\":\"b0\"}}\n"
            "{\"timestamp\":50,\"payload\":{\"model\":\"m\",\"prompt\":\"a1\"}}\n"
            "{\"timestamp\":50,\"payload\":{\"model\":\"m\",\"prompt\":\"b1\"}}\n");
  EXPECT_EQ(*fr.epoch_ms, 1764700001050);

  // --from/--to need epochs.
  f.inputs = {Fixture("hashed.jsonl")};
  f.assume_aligned = true;
  f.out = dir.File("g.jsonl");
  EXPECT_EQ(MergeTraces(f).exit_code(), 2);
}

TEST(Merge, SegmentsCheckedAgainstTheStoreManifest) {
  TempDir dir;
  std::vector<SegmentSpec> segs;
  std::vector<SegmentSpec> specs = MakeRun("r", 1796378400000, 4, 20, 5, false);
  std::vector<std::string> paths = WriteSegments(dir, specs, &segs, /*store_manifests=*/true);
  // 1: one byte more than its manifest says (skipped unread); 2: same size, other bytes (read,
  // then the SHA-256 differs); 3: a line fewer than its manifest's "records".
  dir.Write("r/" + segs[1].DataName(), ReadAll(paths[1]) + "\n");
  SegmentSpec changed = segs[2];
  changed.lines[0][changed.lines[0].find("\"m\"") + 1] = 'M';
  ASSERT_EQ(changed.Text().size(), ReadAll(paths[2]).size());
  dir.Write("r/" + segs[2].DataName(), changed.Text());
  std::string m3 = ReadAll(dir.File("r/" + segs[3].PlainName() + ".manifest.json"));
  nlohmann::json j3 = nlohmann::json::parse(m3);
  j3["records"] = segs[3].lines.size() + 1;
  dir.Write("r/" + segs[3].PlainName() + ".manifest.json", j3.dump());

  MergeOptions o = MergeInto(paths, dir.File("m.jsonl"));
  MergeReport r = MergeTraces(o);
  EXPECT_EQ(r.exit_code(), 1) << RenderMergeText(r);
  ASSERT_EQ(r.segment_issues.size(), 3u) << RenderMergeText(r);
  EXPECT_EQ(r.segment_issues[0].data, paths[1]);
  EXPECT_NE(r.segment_issues[0].reason.find("its manifest says"), std::string::npos);
  EXPECT_NE(r.segment_issues[0].reason.find("skipped"), std::string::npos);
  EXPECT_EQ(r.segment_issues[1].data, paths[2]);
  EXPECT_NE(r.segment_issues[1].reason.find("SHA-256"), std::string::npos);
  EXPECT_EQ(r.segment_issues[2].data, paths[3]);
  EXPECT_NE(r.segment_issues[2].reason.find("lines"), std::string::npos);
  // Segment 1's rows are not in the output; 2's and 3's are (their faults show at their end).
  EXPECT_EQ(Lines(ReadAll(o.out)), testing::ExpectedMerge({&segs[0], &changed, &segs[3]}));
  std::string text = RenderMergeText(r);
  EXPECT_NE(text.find("segment " + paths[1] + ": "), std::string::npos) << text;
}

// A segment whose manifest gives its SHA-256 has its capture-framed rows placed without a
// parse; the same bytes without that manifest are parsed row by row. Both merge alike.
TEST(Merge, CaptureRowsTakenWithoutAParseMergeAsParsed) {
  TempDir dir;
  std::string deep = "{\"timestamp\":12,\"payload\":{\"a\":" + std::string(1100, '[') +
                     std::string(1100, ']') + "}}";
  const std::vector<std::string> rows = {
      "{\"timestamp\":0,\"payload\":{\"model\":\"m\",\"prompt\":\"plain\"}}",
      "  {\"timestamp\":1,\"payload\":{\"prompt\":\"whitespace around\"}}\t",
      "",
      "{\"timestamp\":2,\"payload\":{\"p\":\"{\\\"timestamp\\\":999,\\\"payload\\\":1}\","
      "\"timestamp\":7}}",
      "{\"timestamp\":3,\"payload\":{\"p\":\"caf\\u00e9 \\ud83d\\ude00\"}}",
      "{\"timestamp\":3,\"payload\":{\"p\":\"lone \\ud800\"}}",
      "{\"timestamp\":4,\"payload\":{\"temperature\":1e400}}",
      "{\"timestamp\":4,\"payload\":{\"seed\":123456789012345678901234}}",
      "{\"timestamp\":5,\"payload\":{\"x\":1.5e3,\"id\":\"9e9\"}}",
      "{\"timestamp\":5.5,\"payload\":{\"prompt\":\"decimal\"}}",
      "{\"timestamp\":-1,\"payload\":{}}",
      "{\"timestamp\":100000000000000000000000,\"payload\":{}}",
      "{\"timestamp\":6,\"payload\":{\"prompt\":\"after a huge one\"}}",
      "{\"model\":\"m\",\"messages\":[]}",
      "{\"input_length\":5,\"timestamp\":7}",
      "{\"timestamp\":8,\"payload\":{\"prompt\":\"x\"},\"timestamp\":1}",
      "{\"timestamp\":9,\"payload\":{\"prompt\":\"crlf\"}}\r",
      "{\"timestamp\":10,\"payload\":{\"prompt\":\"ok\"}}",
      deep,
      "{\"timestamp\":13,\"payload\":{\"prompt\":\"before the torn line\"}}",
  };
  std::string text;
  for (const std::string& r : rows) text += r + "\n";
  std::filesystem::create_directories(dir.File("fast"));
  std::filesystem::create_directories(dir.File("parsed"));
  // A torn last line that ends in '}' and is not JSON (the parser is asked), and one that is.
  for (const std::string& torn : {std::string("{\"timestamp\":14,\"payload\":{\"p\":{\"q\":1}"),
                                  std::string("{\"timestamp\":14,\"payload\":{\"p\":1}}")}) {
    SCOPED_TRACE(torn);
    const std::string data = text + torn;
    const std::string name = "requests.20261204T100000.000Z.jsonl";
    std::string fast = dir.Write("fast/" + name, data);
    dir.Write("fast/" + name + ".manifest.json",
              "{\"format\":\"mooncake_payload\",\"timestamp_zero_unix_ms\":1796378400000,"
              "\"records\":" +
                  std::to_string(rows.size()) + ",\"objects\":[{\"role\":\"data\",\"key\":\"r/" +
                  name + "\",\"bytes\":" + std::to_string(data.size()) + ",\"sha256\":\"" +
                  testing::Sha256Hex(data) + "\"}]}");
    std::string parsed = dir.Write("parsed/" + name, data);
    dir.Write("parsed/" + name + ".manifest.json",
              "{\"format\":\"mooncake_payload\",\"timestamp_zero_unix_ms\":1796378400000}");
    MergeOptions o;
    o.force = true;
    o.inputs = {fast, Fixture("replica_a.jsonl")};
    o.out = dir.File("fast.jsonl");
    MergeReport rf = MergeTraces(o);
    o.inputs = {parsed, Fixture("replica_a.jsonl")};
    o.out = dir.File("parsed.jsonl");
    MergeReport rp = MergeTraces(o);
    ASSERT_TRUE(rf.io.ok()) << rf.io.ToString();
    EXPECT_TRUE(rf.segment_issues.empty()) << RenderMergeText(rf);
    EXPECT_EQ(ReadAll(dir.File("fast.jsonl")), ReadAll(dir.File("parsed.jsonl")));
    EXPECT_EQ(rf.written, rp.written);
    EXPECT_GE(rf.written, 12u);
    ASSERT_EQ(rf.skipped.total, rp.skipped.total);
    ASSERT_EQ(rf.skipped.kept.size(), rp.skipped.kept.size());
    for (size_t i = 0; i < rf.skipped.kept.size(); ++i) {
      // "DIR/fast/NAME:LINE: why" and "DIR/parsed/NAME:LINE: why"
      const std::string& a = rf.skipped.kept[i].reason;
      const std::string& b = rp.skipped.kept[i].reason;
      EXPECT_EQ(a.substr(a.find(name)), b.substr(b.find(name)));
    }
  }
}

TEST(Merge, CountersAreEachRunsLatestSummedOverRuns) {
  TempDir dir;
  std::vector<SegmentSpec> a = MakeRun("a", 1796378400000, 3, 10, 7, false, /*pid=*/11);
  std::vector<SegmentSpec> b = MakeRun("b", 1796378400005, 2, 4, 8, false, /*pid=*/12);
  a.insert(a.end(), b.begin(), b.end());
  std::vector<SegmentSpec> segs;
  MergeOptions o = MergeInto(WriteSegments(dir, a, &segs), dir.File("m.jsonl"));
  MergeReport r = MergeTraces(o);
  ASSERT_EQ(r.exit_code(), 0) << RenderMergeText(r);
  nlohmann::json m = nlohmann::json::parse(ReadAll(o.out + ".manifest.json"));
  // Run a recorded 30 (its files say 10, 20, 30), run b 8 (4, 8): not 10+20+30+4+8.
  EXPECT_EQ(m["counters"]["recorded"], 38);
  EXPECT_EQ(m["file"]["records"], 38);
}

TEST(Merge, NegativeTimestampsAreSkipped) {
  TempDir dir;
  std::string x = dir.Write("x.jsonl",
                            "{\"timestamp\":-5,\"payload\":{\"prompt\":\"x\"}}\n"
                            "{\"timestamp\":3,\"payload\":{\"prompt\":\"y\"}}\n");
  dir.Write("x.jsonl.manifest.json",
            "{\"format\":\"mooncake_payload\",\"timestamp_zero_unix_ms\":1764700000000}");
  MergeOptions o = MergeInto({x, Fixture("replica_a.jsonl")}, dir.File("m.jsonl"));
  MergeReport r = MergeTraces(o);
  EXPECT_EQ(r.exit_code(), 1);
  EXPECT_EQ(r.written, 4u);
  ASSERT_EQ(r.skipped.kept.size(), 1u);
  EXPECT_NE(r.skipped.kept[0].reason.find("x.jsonl:1: negative"), std::string::npos);
}

TEST(Merge, ParsesTimes) {
  int64_t ms = 0;
  ASSERT_TRUE(ParseTimeArg("2026-12-04T10:00:00Z", &ms).ok());
  EXPECT_EQ(ms, 1796378400000);
  ASSERT_TRUE(ParseTimeArg("2026-12-04T10:00:00.25Z", &ms).ok());
  EXPECT_EQ(ms, 1796378400250);
  ASSERT_TRUE(ParseTimeArg("2026-12-04 10:00:00.123456+00:00", &ms).ok());
  EXPECT_EQ(ms, 1796378400123);
  ASSERT_TRUE(ParseTimeArg("1796378400001", &ms).ok());
  EXPECT_EQ(ms, 1796378400001);
  Status secs = ParseTimeArg("1796378400", &ms);
  EXPECT_FALSE(secs.ok());
  EXPECT_NE(secs.message().find("seconds"), std::string::npos);
  EXPECT_FALSE(ParseTimeArg("2026-12-04T10:00:00", &ms).ok());  // no zone
  EXPECT_FALSE(ParseTimeArg("2026-12-04T10:00:00+01:00", &ms).ok());
  EXPECT_FALSE(ParseTimeArg("2026-02-30T10:00:00Z", &ms).ok());
  EXPECT_FALSE(ParseTimeArg("2026-12-04T25:00:00Z", &ms).ok());
  EXPECT_FALSE(ParseTimeArg("yesterday", &ms).ok());
  EXPECT_FALSE(ParseTimeArg("", &ms).ok());
}

}  // namespace
}  // namespace llmtap::trace
