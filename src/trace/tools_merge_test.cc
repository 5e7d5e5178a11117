// Trace tool merge: epochs, replicas, compressed and windowed segments, the store manifest.
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
using testing::MakeRun;
using testing::ReadDecoded;
using testing::ReadAll;
using testing::SegmentSpec;
using testing::TempDir;

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
    // The row stamped 10^23 is kept (an integer beyond 64 bits, read as AIPerf reads it), so
    // the rows after it, stamped earlier, are skipped as out of order.
    EXPECT_GE(rf.written, 11u);
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
