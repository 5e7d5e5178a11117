// `llmtap merge` over s3:// prefixes against a real S3 server (Ceph RGW, started by
// tests/lib/with_rgw.sh, which sets AWS_* and LLMTAP_TEST_BUCKET). Segments are laid out as the
// capture's uploader lays them out (data .jsonl or .jsonl.zst, outcomes, the manifest last with
// sizes, SHA-256 and the line count), and every merge is compared with the merge of the same
// files kept locally.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "store/s3_client.h"
#include "store/stream.h"
#include "store/testing/s3_test_env.h"
#include "trace/merge.h"
#include "trace/segment_test_util.h"
#include "trace/trace_test_util.h"

namespace llmtap::trace {
namespace {

using testing::Lines;
using testing::MakeRun;
using testing::ReadDecoded;
using testing::ReadAll;
using testing::SegmentSpec;
using testing::TempDir;

using s3test::Bucket;

class MergeStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_FALSE(Bucket().empty()) << "run under tests/lib/with_rgw.sh";
    ASSERT_OK(store::S3Config::FromEnvironment(&config_));
    client_ = std::make_unique<store::S3Client>(config_);
    prefix_ = std::string("mergetest/") +
              ::testing::UnitTest::GetInstance()->current_test_info()->name() + "/";
  }
  std::string Url(const std::string& key) { return "s3://" + Bucket() + "/" + prefix_ + key; }

  // Puts one segment as the uploader does (data, then the manifest) under fleet/<replica>/,
  // and keeps the same data with the capture's own manifest in local_/<replica>/. `stored`
  // replaces the data object's bytes (after the manifest was made from the real ones);
  // without `manifest` the segment looks still uploading.
  void Put(const SegmentSpec& s, bool manifest = true, const std::string* stored = nullptr) {
    const std::string real = testing::StoredBytes(s, local_.File("scratch"));
    const std::string bytes = stored ? *stored : real;
    const std::string dir = prefix_ + "fleet/" + s.replica + "/";
    ASSERT_OK(client_->PutObject(Bucket(), dir + s.DataName(), bytes));
    std::filesystem::create_directories(local_.File(s.replica));
    local_.Write(s.replica + "/" + s.DataName(), bytes);
    const std::string local_manifest =
        testing::LocalManifest(s, "/captures/" + s.replica + "/" + s.PlainName());
    local_.Write(s.replica + "/" + s.PlainName() + ".manifest.json", local_manifest);
    if (!manifest) return;
    ASSERT_OK(client_->PutObject(Bucket(), dir + s.PlainName() + ".manifest.json",
                                 testing::StoreManifest(local_manifest, s.replica,
                                                        dir + s.DataName(), real, s.lines.size())));
    keys_.push_back(dir + s.DataName());
    local_paths_.push_back(local_.File(s.replica + "/" + s.DataName()));
  }
  void PutAll(const std::vector<SegmentSpec>& segments) {
    for (const SegmentSpec& s : segments) Put(s);
  }
  // The complete segments' local copies in the store's key order (the merge's input order).
  std::vector<std::string> LocalInOrder() {
    std::vector<std::pair<std::string, std::string>> v;
    for (size_t i = 0; i < keys_.size(); ++i) v.push_back({keys_[i], local_paths_[i]});
    std::sort(v.begin(), v.end());
    std::vector<std::string> out;
    for (auto& [k, p] : v) out.push_back(p);
    return out;
  }
  MergeReport Merge(std::vector<std::string> inputs, const std::string& out,
                    const MergeOptions& base = {}) {
    MergeOptions o = base;
    o.inputs = std::move(inputs);
    o.out = out;
    return MergeTraces(o);
  }

  store::S3Config config_;
  std::unique_ptr<store::S3Client> client_;
  std::string prefix_;
  TempDir local_;
  TempDir out_;
  std::vector<std::string> keys_;
  std::vector<std::string> local_paths_;
};

// Three replicas with interleaved times, compressed and plain segments.
std::vector<SegmentSpec> ThreeReplicas() {
  std::vector<SegmentSpec> all = MakeRun("gpu-a", 1796378400000, 4, 25, 1, true, 11);
  for (auto& s : MakeRun("gpu-b", 1796378400007, 3, 40, 2, false, 12)) all.push_back(s);
  for (auto& s : MakeRun("gpu-c", 1796378400003, 3, 30, 3, true, 13)) all.push_back(s);
  for (auto& s : all) {
    if (s.replica == "gpu-c") s.zstd = true;
  }
  return all;
}

TEST_F(MergeStoreTest, PrefixEqualsTheLocalMergeAndReportsBadSegments) {
  std::vector<SegmentSpec> segs = ThreeReplicas();
  PutAll(segs);
  // gpu-b's next file: data up, manifest not yet.
  SegmentSpec uploading = MakeRun("gpu-b", 1796378409000, 1, 5, 9, false, 12)[0];
  Put(uploading, /*manifest=*/false);
  // gpu-c: a file replaced after its upload (a line more than its manifest says).
  SegmentSpec replaced = MakeRun("gpu-c", 1796378409500, 1, 5, 10, false, 13)[0];
  replaced.sequence = 9;
  std::string longer = replaced.Text() + replaced.lines[0] + "\n";
  Put(replaced, true, &longer);
  keys_.pop_back();  // not merged
  local_paths_.pop_back();
  // An outcomes object beside a segment is not data.
  ASSERT_OK(client_->PutObject(Bucket(),
                               prefix_ + "fleet/gpu-a/" + segs[0].PlainName() + ".outcomes.ndjson",
                               "{\"line\":1}\n"));

  MergeReport r = Merge({Url("fleet/")}, out_.File("s3.jsonl"));
  ASSERT_EQ(r.exit_code(), 1) << RenderMergeText(r);
  ASSERT_EQ(r.segment_issues.size(), 2u) << RenderMergeText(r);
  EXPECT_EQ(r.segment_issues[0].data, Url("fleet/gpu-b/" + uploading.DataName()));
  EXPECT_NE(r.segment_issues[0].reason.find("no manifest"), std::string::npos);
  EXPECT_EQ(r.segment_issues[1].data, Url("fleet/gpu-c/" + replaced.DataName()));
  EXPECT_NE(r.segment_issues[1].reason.find("its manifest says"), std::string::npos);
  std::string text = RenderMergeText(r);
  EXPECT_NE(text.find("segment " + Url("fleet/gpu-b/" + uploading.DataName())), std::string::npos);
  EXPECT_EQ(r.inputs.size(), segs.size());

  // Row for row what the local copies give.
  MergeReport local = Merge(LocalInOrder(), out_.File("local.jsonl"));
  ASSERT_EQ(local.exit_code(), 0) << RenderMergeText(local);
  EXPECT_EQ(ReadAll(out_.File("s3.jsonl")), ReadAll(out_.File("local.jsonl")));
  EXPECT_EQ(r.written, local.written);
  EXPECT_EQ(r.epoch_ms, local.epoch_ms);
  std::vector<const SegmentSpec*> order;
  for (const std::string& p : LocalInOrder()) {
    for (const SegmentSpec& s : segs) {
      if (p.ends_with("/" + s.replica + "/" + s.DataName())) order.push_back(&s);
    }
  }
  ASSERT_EQ(order.size(), segs.size());
  EXPECT_EQ(Lines(ReadAll(out_.File("s3.jsonl"))), testing::ExpectedMerge(order));
  // Counters: per run the latest file's, over the three runs.
  nlohmann::json m = nlohmann::json::parse(ReadAll(out_.File("s3.jsonl.manifest.json")));
  EXPECT_EQ(m["counters"]["recorded"], r.written);
  EXPECT_EQ(m["merged_from"].size(), segs.size());
  EXPECT_EQ(m["segment_issues"].size(), 2u);

  // Into the store, compressed: the same rows; the manifest beside it.
  MergeReport up = Merge({Url("fleet/")}, Url("out/merged.jsonl.zst"));
  ASSERT_EQ(up.exit_code(), 1) << RenderMergeText(up);
  EXPECT_EQ(ReadDecoded(Url("out/merged.jsonl.zst")), ReadAll(out_.File("local.jsonl")));
  uint64_t size = 0;
  ASSERT_OK(client_->HeadObject(Bucket(), prefix_ + "out/merged.jsonl.manifest.json", &size));
  // Never over an existing object without --force.
  EXPECT_EQ(Merge({Url("fleet/")}, Url("out/merged.jsonl.zst")).exit_code(), 2);
}

TEST_F(MergeStoreTest, ChangedBytesAndDamagedManifestsAreNamed) {
  std::vector<SegmentSpec> segs = MakeRun("r", 1796378400000, 3, 20, 4, false);
  Put(segs[0]);
  SegmentSpec changed = segs[1];
  changed.lines[3][changed.lines[3].find("\"m\"") + 1] = 'M';
  std::string bytes = changed.Text();
  Put(segs[1], true, &bytes);
  Put(segs[2]);
  // A manifest that is not JSON: its segment is skipped, unread.
  SegmentSpec broken = MakeRun("r", 1796378409000, 1, 5, 5, false)[0];
  Put(broken, /*manifest=*/false);
  ASSERT_OK(client_->PutObject(
      Bucket(), prefix_ + "fleet/r/" + broken.PlainName() + ".manifest.json", "{\"format\":"));
  MergeReport r = Merge({Url("fleet/")}, out_.File("m.jsonl"));
  ASSERT_EQ(r.exit_code(), 1) << RenderMergeText(r);
  ASSERT_EQ(r.segment_issues.size(), 2u) << RenderMergeText(r);
  EXPECT_EQ(r.segment_issues[0].data, Url("fleet/r/" + broken.DataName()));
  EXPECT_NE(r.segment_issues[0].reason.find("not a JSON object"), std::string::npos);
  EXPECT_EQ(r.segment_issues[1].data, Url("fleet/r/" + segs[1].DataName()));
  EXPECT_NE(r.segment_issues[1].reason.find("SHA-256"), std::string::npos);
  // Its rows were merged before its end showed the mismatch.
  EXPECT_EQ(Lines(ReadAll(out_.File("m.jsonl"))),
            testing::ExpectedMerge({&segs[0], &changed, &segs[2]}));
}

TEST_F(MergeStoreTest, WindowAndReplicaGlob) {
  std::vector<SegmentSpec> segs = ThreeReplicas();
  PutAll(segs);
  // gpu-a's first file is damaged (its zstd is garbage of the right size): outside the
  // window it is never opened, so it is no issue.
  const SegmentSpec* a1 = nullptr;
  for (const SegmentSpec& s : segs) {
    if (s.replica == "gpu-a" && s.sequence == 1) a1 = &s;
  }
  ASSERT_TRUE(a1 != nullptr);
  SegmentSpec damaged = *a1;
  damaged.zstd = true;
  ASSERT_OK(client_->DeleteObject(Bucket(), prefix_ + "fleet/gpu-a/" + a1->DataName()));
  const std::string real = testing::StoredBytes(damaged, local_.File("scratch2"));
  std::string garbage = real.substr(0, 4) + std::string(real.size() - 4, 'G');
  ASSERT_OK(client_->PutObject(Bucket(), prefix_ + "fleet/gpu-a/" + damaged.DataName(), garbage));
  ASSERT_OK(client_->PutObject(Bucket(),
                               prefix_ + "fleet/gpu-a/" + damaged.PlainName() + ".manifest.json",
                               testing::StoreManifest(testing::LocalManifest(damaged, "x"), "gpu-a",
                                                      prefix_ + "fleet/gpu-a/" + damaged.DataName(),
                                                      garbage, damaged.lines.size())));
  int64_t from = 0;
  for (const SegmentSpec& s : segs) {
    if (s.replica == "gpu-a" && s.sequence == 2) from = s.epoch_ms + 200;
  }
  const int64_t to = from + 900;
  MergeOptions o;
  o.from_unix_ms = from;
  o.to_unix_ms = to;
  o.replica_globs = {"gpu-[ab]"};
  MergeReport r = Merge({Url("fleet/")}, out_.File("s3.jsonl"), o);
  ASSERT_EQ(r.exit_code(), 0) << RenderMergeText(r);
  EXPECT_GT(r.segments_outside_window, 0u);
  EXPECT_EQ(r.replicas_filtered_out, std::vector<std::string>{"gpu-c"});
  for (const MergeInputSummary& in : r.inputs) EXPECT_NE(in.replica, "gpu-c");

  std::vector<std::string> local_ab;
  for (const std::string& p : LocalInOrder()) {
    if (p.find("/gpu-c/") == std::string::npos) local_ab.push_back(p);
  }
  MergeReport local = Merge(local_ab, out_.File("local.jsonl"), o);
  ASSERT_EQ(local.exit_code(), 0) << RenderMergeText(local);
  EXPECT_GT(local.written, 10u);
  EXPECT_EQ(ReadAll(out_.File("s3.jsonl")), ReadAll(out_.File("local.jsonl")));

  // Without the window the damaged file is read, and reported.
  o.from_unix_ms.reset();
  o.to_unix_ms.reset();
  MergeReport all = Merge({Url("fleet/")}, out_.File("all.jsonl"), o);
  EXPECT_EQ(all.exit_code(), 1) << RenderMergeText(all);
  ASSERT_EQ(all.segment_issues.size(), 1u) << RenderMergeText(all);
  EXPECT_NE(all.segment_issues[0].reason.find("zstd"), std::string::npos);
}

TEST_F(MergeStoreTest, MixedInputsAndTheSlashlessPrefix) {
  std::vector<SegmentSpec> segs = ThreeReplicas();
  PutAll(segs);
  std::vector<std::string> local = LocalInOrder();
  // gpu-a from the store's prefix (typed without its slash), gpu-b as local files, gpu-c as
  // s3:// objects named one by one.
  std::vector<std::string> inputs = {Url("fleet/gpu-a")};
  std::vector<std::string> local_order;
  for (const std::string& p : local) {
    if (p.find("/gpu-a/") != std::string::npos) local_order.push_back(p);
  }
  for (const std::string& p : local) {
    if (p.find("/gpu-b/") != std::string::npos) {
      inputs.push_back(p);
      local_order.push_back(p);
    }
  }
  for (size_t i = 0; i < keys_.size(); ++i) {
    if (keys_[i].find("/gpu-c/") != std::string::npos) {
      inputs.push_back("s3://" + Bucket() + "/" + keys_[i]);
      local_order.push_back(local_paths_[i]);
    }
  }
  MergeReport r = Merge(inputs, out_.File("mixed.jsonl"));
  ASSERT_EQ(r.exit_code(), 0) << RenderMergeText(r);
  MergeReport l = Merge(local_order, out_.File("local.jsonl"));
  ASSERT_EQ(l.exit_code(), 0) << RenderMergeText(l);
  EXPECT_EQ(ReadAll(out_.File("mixed.jsonl")), ReadAll(out_.File("local.jsonl")));
  EXPECT_EQ(r.written, l.written);
  EXPECT_EQ(r.inputs.size(), segs.size());
}

TEST_F(MergeStoreTest, HundredsOfSegmentsInABoundedBudget) {
  std::vector<SegmentSpec> segs;
  for (int i = 0; i < 3; ++i) {
    const std::string name = std::string("r").append(std::to_string(i));
    for (auto& s : MakeRun(name, 1796378400000 + i * 5, 34, 12, 20 + static_cast<uint32_t>(i), true,
                           100 + i)) {
      segs.push_back(s);
    }
  }
  PutAll(segs);
  MergeOptions o;
  o.read_budget_bytes = 48 << 10;
  o.min_chunk_bytes = 4096;
  MergeReport r = Merge({Url("fleet/")}, out_.File("s3.jsonl"), o);
  ASSERT_EQ(r.exit_code(), 0) << RenderMergeText(r);
  EXPECT_EQ(r.inputs.size(), 102u);
  // Three replicas, one file each at a time: a few open, whatever the count of segments.
  EXPECT_LE(r.planned_open, 6u);
  EXPECT_LE(r.max_open, r.planned_open);
  EXPECT_EQ(r.chunk_bytes, std::max<size_t>(4096, (48 << 10) / (2 * r.planned_open)));
  // Connections follow the segments downloading at once (with the listing's), not their count.
  EXPECT_GE(r.store_clients, 1u);
  EXPECT_LE(r.store_clients, r.planned_open + 1) << r.store_clients;
  MergeReport local = Merge(LocalInOrder(), out_.File("local.jsonl"), o);
  ASSERT_EQ(local.exit_code(), 0);
  EXPECT_EQ(ReadAll(out_.File("s3.jsonl")), ReadAll(out_.File("local.jsonl")));
  std::string text = RenderMergeText(r);
  EXPECT_NE(text.find("more segments"), std::string::npos) << text;
}

// A file a kill left open, uploaded by an llmtap that did not yet describe such files: its
// manifest is the killed run's running one (no epoch, file.records 0, written when the file was
// opened). Skipped with a hint by default; placed from that time with --recover-epochs.
TEST_F(MergeStoreTest, RecoverEpochsPlacesAnOlderCrashSegment) {
  std::vector<SegmentSpec> segs = MakeRun("gpu-a", 1796378400000, 2, 20, 5, false, 21);
  PutAll(segs);
  const int64_t opened_ms = segs.back().epoch_ms + segs.back().last_timestamp_ms + 2;
  SegmentSpec killed = testing::MakeSegment("gpu-a", opened_ms, 15, 77);
  killed.host = "host-gpu-a";
  killed.pid = 21;
  nlohmann::ordered_json running =
      nlohmann::ordered_json::parse(testing::LocalManifest(killed, "/captures/requests.jsonl"));
  running["state"] = "running";
  running["timestamp_zero_unix_ms"] = nullptr;
  running["timestamp_zero_utc"] = nullptr;
  running["updated_utc"] = FormatUtcMillis(opened_ms * 1000000);
  running["file"]["records"] = 0;
  running["file"]["last_timestamp_ms"] = 0;
  const std::string dir = prefix_ + "fleet/gpu-a/";
  const std::string name = "requests.20261204T100500Z.jsonl";  // moved aside at the restart
  ASSERT_OK(client_->PutObject(Bucket(), dir + name, killed.Text()));
  ASSERT_OK(client_->PutObject(Bucket(), dir + name + ".manifest.json",
                               testing::StoreManifest(running.dump(2), "gpu-a", dir + name,
                                                      killed.Text(), killed.lines.size())));

  MergeReport skipped = Merge({Url("fleet/")}, out_.File("skipped.jsonl"));
  ASSERT_EQ(skipped.exit_code(), 1) << RenderMergeText(skipped);
  ASSERT_EQ(skipped.segment_issues.size(), 1u);
  EXPECT_NE(skipped.segment_issues[0].reason.find("--recover-epochs"), std::string::npos)
      << skipped.segment_issues[0].reason;

  MergeOptions o;
  o.recover_epochs = true;
  MergeReport r = Merge({Url("fleet/")}, out_.File("recovered.jsonl"), o);
  ASSERT_EQ(r.exit_code(), 0) << RenderMergeText(r);
  EXPECT_EQ(r.epochs_recovered, 1u);
  EXPECT_EQ(r.written, 55u);
  EXPECT_NE(RenderMergeText(r).find("--recover-epochs"), std::string::npos);
  std::vector<const SegmentSpec*> order = {&segs[0], &segs[1], &killed};
  EXPECT_EQ(Lines(ReadAll(out_.File("recovered.jsonl"))), testing::ExpectedMerge(order));
  nlohmann::json m = nlohmann::json::parse(ReadAll(out_.File("recovered.jsonl.manifest.json")));
  EXPECT_EQ(m["epochs_recovered"], 1);
}

TEST_F(MergeStoreTest, ErrorsSayWhatToFix) {
  // Nothing under the prefix.
  MergeReport empty = Merge({Url("nothing/")}, out_.File("a.jsonl"));
  EXPECT_EQ(empty.exit_code(), 2);
  EXPECT_NE(empty.io.message().find("no complete segment under " + Url("nothing/")),
            std::string::npos)
      << empty.io.ToString();
  // Only a segment still uploading.
  SegmentSpec s = MakeRun("r", 1796378400000, 1, 5, 1, false)[0];
  Put(s, /*manifest=*/false);
  MergeReport partial = Merge({Url("fleet/")}, out_.File("b.jsonl"));
  EXPECT_EQ(partial.exit_code(), 2);
  EXPECT_NE(partial.io.message().find("no complete segment"), std::string::npos);
  EXPECT_NE(partial.io.message().find(s.DataName()), std::string::npos) << partial.io.ToString();
  // A glob that matches no replica names the ones there.
  Put(MakeRun("gpu-z", 1796378400000, 1, 5, 2, false)[0]);
  MergeOptions o;
  o.replica_globs = {"gpu-q*"};
  MergeReport glob = Merge({Url("fleet/")}, out_.File("c.jsonl"), o);
  EXPECT_EQ(glob.exit_code(), 2);
  EXPECT_NE(glob.io.message().find("gpu-z"), std::string::npos) << glob.io.ToString();
  // No such bucket.
  MergeReport bucket = Merge({"s3://no-such-bucket-llmtap/fleet/"}, out_.File("d.jsonl"));
  EXPECT_EQ(bucket.exit_code(), 2);
  EXPECT_NE(bucket.io.message().find("bucket"), std::string::npos) << bucket.io.ToString();
  // A slashless name that is neither object nor prefix.
  MergeReport typo = Merge({Url("flet")}, out_.File("e.jsonl"));
  EXPECT_EQ(typo.exit_code(), 2);
  EXPECT_NE(typo.io.message().find("check the address"), std::string::npos) << typo.io.ToString();
  // No credentials.
  std::string key = std::getenv("AWS_ACCESS_KEY_ID");
  ::unsetenv("AWS_ACCESS_KEY_ID");
  MergeReport creds = Merge({Url("fleet/")}, out_.File("f.jsonl"));
  ::setenv("AWS_ACCESS_KEY_ID", key.c_str(), 1);
  EXPECT_EQ(creds.exit_code(), 2);
  EXPECT_NE(creds.io.message().find("AWS_ACCESS_KEY_ID"), std::string::npos) << creds.io.ToString();
  EXPECT_NE(creds.io.message().find(Url("fleet/")), std::string::npos) << creds.io.ToString();
  // Wrong credentials.
  ::setenv("AWS_SECRET_ACCESS_KEY_SAVED", std::getenv("AWS_SECRET_ACCESS_KEY"), 1);
  ::setenv("AWS_SECRET_ACCESS_KEY", "wrong", 1);
  MergeReport denied = Merge({Url("fleet/")}, out_.File("g.jsonl"));
  ::setenv("AWS_SECRET_ACCESS_KEY", std::getenv("AWS_SECRET_ACCESS_KEY_SAVED"), 1);
  EXPECT_EQ(denied.exit_code(), 2);
  EXPECT_NE(denied.io.message().find("check AWS_ACCESS_KEY_ID"), std::string::npos)
      << denied.io.ToString();
}

}  // namespace
}  // namespace llmtap::trace
