// Capture core's files: disk faults, older captures moved aside, modes, manifest, logs.
#include "capture/capture.h"

#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "capture/capture_file.h"
#include "capture/capture_test_util.h"
#include "common/testing/fault_env.h"
#include "common/testing/temp_files.h"

namespace llmtap {
namespace {

namespace fs = std::filesystem;
using Json = nlohmann::ordered_json;
using namespace capture_test_util;
using ::testing::HasSubstr;

TEST_F(CaptureTest, FullDiskCutsBackToLastCompleteLineAndRecovers) {
  CaptureOptions o = Options();
  o.max_group_bytes = 1;  // one record per write, so the failure lands mid-record
  Capture cap(o);
  ASSERT_TRUE(cap.Start().ok());
  const std::string line0 = "{\"timestamp\":0,\"payload\":" + std::string(kChatCompact) + "}\n";
  env_.SetDiskSpace(static_cast<int64_t>(line0.size() + 10));  // room for 1 line + 10 bytes
  for (int i = 0; i < 3; ++i) cap.Offer("/v1/chat/completions", kChat);
  // Wait until all three are either recorded or lost.
  while (cap.counters().queued_records > 0)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  auto c = cap.counters();
  EXPECT_EQ(c.recorded, 1u);
  EXPECT_EQ(c.write_failed_records, 2u);
  EXPECT_EQ(ReadFile(Path()), line0);  // the 10 torn bytes were cut
  EXPECT_GE(logger_.Count("No space left on device"), 1);

  env_.SetDiskSpace(-1);                                       // space freed
  std::this_thread::sleep_for(std::chrono::milliseconds(20));  // past the back-off
  EXPECT_EQ(cap.Offer("/v1/completions", kCompletion), OfferDecision::kQueued);
  cap.Stop();
  auto lines = Lines(ReadFile(Path()));
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(Json::parse(lines[1])["payload"], Json::parse(kCompletion));
  c = cap.counters();
  EXPECT_EQ(c.recorded, 2u);
  ExpectAccounted(c);
  Json manifest = Json::parse(ReadFile(ManifestPathFor(Path())));
  EXPECT_EQ(manifest["counters"]["write_failed_records"], 2);
}

TEST_F(CaptureTest, EioIsCountedLikeAFullDisk) {
  Capture cap(Options());
  ASSERT_TRUE(cap.Start().ok());
  env_.SetFullDiskErrno(EIO);
  env_.SetDiskSpace(0);
  cap.Offer("/v1/chat/completions", kChat);
  cap.Stop();
  EXPECT_EQ(cap.counters().write_failed_records, 1u);
  EXPECT_EQ(ReadFile(Path()), "");
  EXPECT_GE(logger_.Count("Input/output error"), 1);
  ExpectAccounted(cap.counters());
}

TEST_F(CaptureTest, ShortWritesAndEintrLoseNothing) {
  env_.SetMaxWriteBytes(7);
  env_.SetEintrEvery(3);
  Capture cap(Options());
  ASSERT_TRUE(cap.Start().ok());
  for (int i = 0; i < 50; ++i) cap.Offer("/v1/chat/completions", kChat);
  cap.Stop();
  auto lines = Lines(ReadFile(Path()));
  ASSERT_EQ(lines.size(), 50u);
  for (const auto& l : lines) EXPECT_EQ(Json::parse(l)["payload"], Json::parse(kChat));
  EXPECT_EQ(cap.counters().recorded, 50u);
  EXPECT_GT(env_.writes(), 50);
  ExpectAccounted(cap.counters());
}

TEST_F(CaptureTest, SlowDiskNeverBlocksOffers) {
  // A slow disk (20 ms a write) that does not answer at all until every offer returned: how many
  // records the writer finds waiting at each write is then decided by the disk, not by how fast
  // this thread offers (with the delay alone, a paused offering thread let the writer write
  // few records at a time).
  env_.SetWriteDelay(std::chrono::microseconds(20000));
  env_.Stall();
  CaptureOptions o = Options();
  Capture cap(o);
  ASSERT_TRUE(cap.Start().ok());
  for (int i = 0; i < 200; ++i)
    EXPECT_EQ(cap.Offer("/v1/completions", kCompletion), OfferDecision::kQueued);
  env_.Unstall();
  cap.Stop();
  EXPECT_EQ(cap.counters().recorded, 200u);
  // Group commit: at most one write took records while the offers went on (it waited for the
  // disk meanwhile), and the next took all the others (200 small records are one group).
  EXPECT_LE(env_.writes(), 2);
}

TEST_F(CaptureTest, OlderCaptureIsRenamedAsideWithItsTornTailCut) {
  const std::string old_content = "{\"timestamp\":0,\"payload\":{\"a\":1}}\n{\"timestamp\":5,\"pay";
  { std::ofstream(Path(), std::ios::binary) << old_content; }
  { std::ofstream(ManifestPathFor(Path())) << "{}"; }
  Capture cap(Options());
  ASSERT_TRUE(cap.Start().ok());
  cap.Offer("/v1/completions", kCompletion);
  cap.Stop();
  // The new capture holds only the new record.
  ASSERT_EQ(Lines(ReadFile(Path())).size(), 1u);
  std::vector<fs::path> aside;
  for (const auto& e : fs::directory_iterator(dir_)) {
    std::string name = e.path().filename().string();
    if (name.starts_with("requests.") && name != "requests.jsonl" && name.ends_with(".jsonl")) {
      aside.push_back(e.path());
    }
  }
  ASSERT_EQ(aside.size(), 1u);
  EXPECT_THAT(aside[0].filename().string(),
              ::testing::MatchesRegex(R"(requests\.[0-9]{8}T[0-9]{6}\.[0-9]{3}Z\.jsonl)"));
  EXPECT_EQ(ReadFile(aside[0]), "{\"timestamp\":0,\"payload\":{\"a\":1}}\n");
  // Its manifest (here one without an epoch) now describes the file as recovered.
  Json m = Json::parse(ReadFile(ManifestPathFor(aside[0].string())));
  EXPECT_EQ(m["state"], "recovered");
  EXPECT_EQ(m["capture_path"], aside[0].string());
  EXPECT_EQ(m["format"], "mooncake_payload");
  EXPECT_EQ(m["file"]["records"], 1);
  EXPECT_EQ(m["file"]["bytes"], 34);
  EXPECT_EQ(m["file"]["last_timestamp_ms"], 0);
  EXPECT_EQ(m["recovered"]["torn_tail_bytes_cut"], 19);
  EXPECT_EQ(m["recovered"]["epoch_from"], "file_mtime");
  EXPECT_TRUE(m["timestamp_zero_unix_ms"].is_number_integer());
  EXPECT_GE(logger_.Count("torn"), 1);
}

// What a SIGKILL leaves: the files on disk as they are while the capture runs (the page cache
// outlives the process). The test copies them mid-run (keeping the data file's mtime), then
// starts a capture on the copy.
class KilledCaptureTest : public CaptureTest {
 protected:
  // Runs a capture until `n` records are in its file, and copies its files to copy_dir_.
  // Sets the wall-clock bounds of the file's epoch: started_ms_ (before the capture started)
  // and written_ms_ (once the test saw every record written).
  void RunAndCopyMidRun(int n) {
    CaptureOptions o = Options();
    o.config.outcomes = true;
    o.manifest_interval = std::chrono::hours(1);  // only the writer's own first-row manifest
    Capture cap(o);
    // Before Start, not before the first offer: the writer places records on the wall clock
    // by one (wall, monotonic) pair of readings in Start, and a pause between the two puts
    // every epoch earlier by that pause (before the first offer, on a loaded machine), never
    // earlier than the wall-clock reading that Start takes first.
    started_ms_ = env_.NowWallNanos() / 1000000;
    ASSERT_TRUE(cap.Start().ok());
    for (int i = 0; i < n; ++i) cap.Offer("/v1/chat/completions", kChat);
    ASSERT_TRUE(WaitUntil([&] { return cap.counters().recorded >= static_cast<uint64_t>(n); }));
    written_ms_ = env_.NowWallNanos() / 1000000;
    for (const auto& e : fs::directory_iterator(dir_)) {
      const fs::path to = copy_dir_ / e.path().filename();
      fs::copy_file(e.path(), to);
      fs::last_write_time(to, fs::last_write_time(e.path()));
    }
    cap.Stop();
  }
  // Starts and stops a capture at the copy; returns the manifest of the file moved aside.
  Json Recover(std::string* aside = nullptr) {
    CaptureOptions o = Options();
    o.config.path = (copy_dir_ / "requests.jsonl").string();
    {
      Capture cap(o);
      EXPECT_TRUE(cap.Start().ok());
    }
    for (const auto& e : fs::directory_iterator(copy_dir_)) {
      const std::string name = e.path().filename().string();
      if (name.ends_with("Z.jsonl")) {
        if (aside != nullptr) *aside = e.path().string();
        return Json::parse(ReadFile(ManifestPathFor(e.path().string())));
      }
    }
    ADD_FAILURE() << "no file moved aside";
    return Json();
  }
  const TempDir copy_tmp_;
  const fs::path copy_dir_ = copy_tmp_.path();
  int64_t started_ms_ = 0;
  int64_t written_ms_ = 0;
};

TEST_F(KilledCaptureTest, TheEpochReachesTheDiskBeforeTheFirstRecord) {
  ASSERT_NO_FATAL_FAILURE(RunAndCopyMidRun(3));
  // Written before the first row, and not since (manifest_interval is an hour).
  Json running = Json::parse(ReadFile(ManifestPathFor((copy_dir_ / "requests.jsonl").string())));
  EXPECT_EQ(running["state"], "running");
  ASSERT_TRUE(running["timestamp_zero_unix_ms"].is_number_integer()) << running.dump();
  const int64_t epoch = running["timestamp_zero_unix_ms"].get<int64_t>();
  EXPECT_GE(epoch, started_ms_);
  EXPECT_LE(epoch, written_ms_);
  EXPECT_EQ(running["file"]["records"], 0);
}

TEST_F(KilledCaptureTest, AFileAKillLeftIsDescribedByItsManifest) {
  ASSERT_NO_FATAL_FAILURE(RunAndCopyMidRun(5));
  const std::string live = (copy_dir_ / "requests.jsonl").string();
  const Json running = Json::parse(ReadFile(ManifestPathFor(live)));
  const std::string rows = ReadFile(live);
  { std::ofstream(live, std::ios::app | std::ios::binary) << R"({"timestamp":9,"payl)"; }
  std::string aside;
  Json m = Recover(&aside);
  EXPECT_EQ(ReadFile(aside), rows);  // the torn row cut, every whole one kept
  EXPECT_EQ(m["state"], "recovered");
  EXPECT_EQ(m["capture_path"], aside);
  EXPECT_TRUE(m["outcomes_path"].is_null());  // no outcome was reported: no sidecar
  EXPECT_EQ(m["timestamp_zero_unix_ms"], running["timestamp_zero_unix_ms"]);
  EXPECT_EQ(m["file"]["records"], 5);
  EXPECT_EQ(m["file"]["bytes"], rows.size());
  EXPECT_EQ(m["file"]["last_timestamp_ms"],
            Json::parse(Lines(rows).back())["timestamp"].get<int64_t>());
  EXPECT_EQ(m["recovered"]["epoch_from"], "manifest");
  EXPECT_EQ(m["recovered"]["previous_state"], "running");
  EXPECT_EQ(m["recovered"]["torn_tail_bytes_cut"], 20);
  EXPECT_EQ(m["recovered"]["counters_as_of_utc"], running["updated_utc"]);
  EXPECT_EQ(m["counters"], running["counters"]);  // the killed run's, as of its last manifest
}

TEST_F(KilledCaptureTest, AFileFromBeforeEpochsWereWrittenFirstGetsAnEstimate) {
  // An older llmtap's running manifest said nothing of the file's epoch until its next rewrite.
  ASSERT_NO_FATAL_FAILURE(RunAndCopyMidRun(5));
  const std::string manifest = ManifestPathFor((copy_dir_ / "requests.jsonl").string());
  Json running = Json::parse(ReadFile(manifest));
  const int64_t epoch = running["timestamp_zero_unix_ms"].get<int64_t>();
  running["timestamp_zero_unix_ms"] = nullptr;
  running["timestamp_zero_utc"] = nullptr;
  { std::ofstream(manifest, std::ios::trunc) << running.dump(2); }
  Json m = Recover();
  EXPECT_EQ(m["recovered"]["epoch_from"], "file_mtime");
  // The last write's time less the last row's offset: no earlier than the epoch, less the
  // millisecond the offsets are rounded down to and one tick of the kernel's coarse clock, which
  // stamps file times (up to a tick behind the wall clock: a write just after its row arrived, as
  // when this thread was paused between offers, can carry a time before that arrival); no later
  // than the test saw the rows written.
  timespec coarse{};
  ASSERT_EQ(::clock_getres(CLOCK_REALTIME_COARSE, &coarse), 0);
  const int64_t tick_ms = coarse.tv_sec * 1000 + (coarse.tv_nsec + 999999) / 1000000;
  const int64_t estimate = m["timestamp_zero_unix_ms"].get<int64_t>();
  EXPECT_GE(estimate, epoch - 1 - tick_ms) << "tick " << tick_ms << " ms";
  EXPECT_LE(estimate, written_ms_);
}

TEST_F(CaptureTest, ACleanlyStoppedCaptureKeepsItsManifestWhenMovedAside) {
  {
    Capture cap(Options());
    ASSERT_TRUE(cap.Start().ok());
    cap.Offer("/v1/completions", kCompletion);
  }
  const std::string stopped = ReadFile(ManifestPathFor(Path()));
  Capture cap(Options());
  ASSERT_TRUE(cap.Start().ok());
  cap.Stop();
  int found = 0;
  for (const auto& e : fs::directory_iterator(dir_)) {
    if (!e.path().filename().string().ends_with("Z.jsonl")) continue;
    EXPECT_EQ(ReadFile(ManifestPathFor(e.path().string())), stopped);
    ++found;
  }
  EXPECT_EQ(found, 1);
}

TEST_F(CaptureTest, SecondRenameAsideInTheSameSecondGetsASuffix) {
  for (int round = 0; round < 3; ++round) {
    Capture cap(Options());
    ASSERT_TRUE(cap.Start().ok());
    cap.Offer("/v1/completions", kCompletion);
    cap.Stop();
  }
  int files = 0;
  for (const auto& e : fs::directory_iterator(dir_)) {
    files += e.path().extension() == ".jsonl";
  }
  EXPECT_EQ(files, 3);  // the current capture and two older ones, none overwritten
}

TEST_F(CaptureTest, EmptyExistingFileIsReused) {
  { std::ofstream touch(Path()); }
  Capture cap(Options());
  ASSERT_TRUE(cap.Start().ok());
  cap.Offer("/v1/completions", kCompletion);
  cap.Stop();
  EXPECT_EQ(Lines(ReadFile(Path())).size(), 1u);
  int files = 0;
  for (const auto& e : fs::directory_iterator(dir_)) files += e.path().extension() == ".jsonl";
  EXPECT_EQ(files, 1);
}

TEST_F(CaptureTest, SymlinkAtThePathIsRefused) {
  const fs::path target = dir_ / "elsewhere.txt";
  { std::ofstream(target) << "do not touch\n"; }
  fs::create_symlink(target, Path());
  Capture cap(Options());
  Status s = cap.Start();
  EXPECT_EQ(s.code(), Status::Code::kRefused);
  EXPECT_THAT(s.message(), HasSubstr("symlink"));
  EXPECT_EQ(cap.Offer("/v1/completions", kCompletion), OfferDecision::kQueued);
  cap.Stop();
  EXPECT_EQ(ReadFile(target), "do not touch\n");
  EXPECT_EQ(cap.counters().write_failed_records, 1u);
  ExpectAccounted(cap.counters());
  EXPECT_GE(logger_.Count("symlink"), 1);
}

TEST_F(CaptureTest, NewFilesAre0600AndNewDirectories0700) {
  CaptureOptions o = Options("a/b/requests.jsonl");
  Capture cap(o);
  ASSERT_TRUE(cap.Start().ok());
  cap.Offer("/v1/completions", kCompletion);
  cap.Stop();
  struct stat st;
  ASSERT_EQ(::stat(o.config.path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  ASSERT_EQ(::stat(ManifestPathFor(o.config.path).c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  for (const char* d : {"a", "a/b"}) {
    ASSERT_EQ(::stat((dir_ / d).c_str(), &st), 0);
    EXPECT_EQ(st.st_mode & 0777, 0700u) << d;
  }
}

TEST_F(CaptureTest, UnwritableDestinationWarnsAndKeepsCounting) {
  { std::ofstream(dir_ / "not_a_dir") << "x"; }
  CaptureOptions o = Options("not_a_dir/requests.jsonl");
  Capture cap(o);
  Status s = cap.Start();
  EXPECT_FALSE(s.ok());
  EXPECT_GE(logger_.Count("cannot be written"), 1);
  for (int i = 0; i < 5; ++i) {
    EXPECT_EQ(cap.Offer("/v1/completions", kCompletion), OfferDecision::kQueued);
  }
  cap.Stop();
  EXPECT_EQ(cap.counters().write_failed_records, 5u);
  ExpectAccounted(cap.counters());
  // The stop line says the manifest could not be written, rather than pointing to it.
  EXPECT_EQ(logger_.Count("capture stopped: 0 recorded, 5 not recorded (the manifest could not "
                          "be written: "),
            1);
  EXPECT_EQ(logger_.Count("(see "), 0);
}

TEST_F(CaptureTest, ManifestDescribesTheCapture) {
  CaptureOptions o = Options();
  o.config.sample_rate = 1.0;
  Capture cap(o);
  ASSERT_TRUE(cap.Start().ok());
  Json running = Json::parse(ReadFile(ManifestPathFor(Path())));
  EXPECT_EQ(running["state"], "running");
  EXPECT_TRUE(running["timestamp_zero_unix_ms"].is_null());
  const int64_t before_ms = env_.NowWallNanos() / 1000000;
  cap.Offer("/v1/chat/completions", kChat);
  const int64_t after_ms = env_.NowWallNanos() / 1000000;
  cap.Offer("/v1/models", "{}");
  cap.Offer("/v1/chat/completions", "nope");
  cap.Stop();
  Json m = Json::parse(ReadFile(ManifestPathFor(Path())));
  EXPECT_EQ(m["schema"], "llmtap.capture.manifest/v1");
  EXPECT_EQ(m["state"], "stopped");
  EXPECT_EQ(m["format"], "mooncake_payload");
  EXPECT_EQ(m["capture_path"], Path());
  EXPECT_EQ(m["host"], "test-host");
  EXPECT_EQ(m["pid"], 4242);
  EXPECT_FALSE(m["llmtap_version"].get<std::string>().empty());
  for (const char* key : {"path", "format", "max_request_bytes", "sample_rate", "endpoint_pattern",
                          "max_queue_bytes"}) {
    EXPECT_TRUE(m["config"].contains(key)) << key;
  }
  EXPECT_EQ(m["config"]["max_request_bytes"], CaptureConfig::kDefaultMaxRequestBytes);
  // The first record's wall-clock time: no later than the test's reading after its offer. The
  // writer maps its monotonic clock to the wall clock by one pair of readings at its start, which
  // a pause between the two can put earlier, never later: from below only a sanity bound.
  EXPECT_LE(m["timestamp_zero_unix_ms"].get<int64_t>(), after_ms);
  EXPECT_GE(m["timestamp_zero_unix_ms"].get<int64_t>(), before_ms - 60000);
  EXPECT_EQ(m["counters"]["offered"], 3);
  EXPECT_EQ(m["counters"]["matched"], 2);
  EXPECT_EQ(m["counters"]["recorded"], 1);
  EXPECT_EQ(m["counters"]["invalid_body"], 1);
  EXPECT_EQ(m["counters"]["queued_records"], 0);
}

TEST_F(CaptureTest, ManifestIsRewrittenPeriodically) {
  CaptureOptions o = Options();
  o.manifest_interval = std::chrono::milliseconds(10);
  Capture cap(o);
  ASSERT_TRUE(cap.Start().ok());
  cap.Offer("/v1/chat/completions", kChat);
  Json m;
  // Until it shows the record (kHangGuard: a guard against a hang only).
  WaitUntil([&] {
    m = Json::parse(ReadFile(ManifestPathFor(Path())));
    return m["counters"]["recorded"] == 1;
  });
  EXPECT_EQ(m["counters"]["recorded"], 1);
  EXPECT_EQ(m["state"], "running");
  cap.Stop();
}

TEST_F(CaptureTest, LogsNeverContainPayloadAndAreRateLimited) {
  CaptureOptions o = Options();
  o.config.max_request_bytes = 100;
  o.config.max_queue_bytes = 100;
  // One interval for the whole test: "one line per reason per interval" is then one line,
  // however long a loaded machine takes over the offers.
  o.warning_interval = std::chrono::hours(1);
  Capture cap(o);
  ASSERT_TRUE(cap.Start().ok());
  const std::string secret = "SECRET-7f3a";
  env_.Stall();
  for (int i = 0; i < 50; ++i) {
    cap.Offer("/v1/completions", "{\"prompt\":\"" + secret + std::string(200, 'x') + "\"}");
    cap.Offer("/v1/completions", "{\"prompt\":\"" + secret + "\"");
    cap.Offer("/v1/completions", "{\"prompt\":\"" + secret + std::string(60, 'y') + "\"}");
  }
  env_.Unstall();
  cap.Stop();
  for (const auto& line : logger_.lines()) EXPECT_EQ(line.find(secret), std::string::npos) << line;
  // One line per reason per interval, plus start/stop lines.
  EXPECT_EQ(logger_.Count("larger than max_request_bytes"), 1);
  EXPECT_EQ(logger_.Count("not a JSON object"), 1);
  EXPECT_EQ(logger_.Count("queue full"), 1);
  ExpectAccounted(cap.counters());
}

TEST_F(CaptureTest, PathWithoutSlashUsesTheWorkingDirectory) {
  EXPECT_EQ(AsideName("requests.jsonl", 0, 0), "requests.19700101T000000.000Z.jsonl");
  EXPECT_EQ(AsideName("/x.d/requests", 1'234'567'890, 2), "/x.d/requests.19700101T000001.234Z-2");
  EXPECT_EQ(ManifestPathFor("/c/r.jsonl"), "/c/r.jsonl.manifest.json");
}

// The manifest counts each file's records by the API of their path ("file"."apis"): a
// raw_payload row cannot say it, and `llmtap split` reads it from there. Rotation starts anew.
TEST_F(CaptureTest, ManifestCountsEachFilesRecordsByApi) {
  CaptureOptions o = Options();
  o.config.format = CaptureFormat::kRawPayload;
  o.config.endpoint_pattern = ".*";
  Capture cap(o);
  ASSERT_TRUE(cap.Start().ok());
  EXPECT_EQ(Json::parse(ReadFile(ManifestPathFor(Path())))["file"]["apis"], Json::object());
  cap.Offer("/v1/chat/completions", kChat);
  cap.Offer("/v1/messages?beta=true", kChat);
  cap.Offer("/v1/chat/completions", kChat);
  cap.Offer("/v1/completions", kCompletion);
  cap.Offer("/custom", kCompletion);
  cap.Offer("/v1/messages", "not json");  // not recorded: not counted
  WaitUntil([&] { return cap.counters().recorded == 5; });
  cap.RequestRotation();
  WaitUntil([&] { return cap.counters().files_rotated == 1; });
  cap.Offer("/v1/messages", kChat);
  cap.Stop();
  std::string rotated;
  for (const auto& e : fs::directory_iterator(dir_)) {
    if (e.path().filename().string().ends_with("Z.jsonl")) rotated = e.path().string();
  }
  ASSERT_FALSE(rotated.empty());
  Json first = Json::parse(ReadFile(ManifestPathFor(rotated)));
  EXPECT_EQ(first["file"]["records"], 5);
  EXPECT_EQ(first["file"]["apis"],
            Json::parse(R"({"chat":2,"completions":1,"other":1,"messages":1})"));
  Json second = Json::parse(ReadFile(ManifestPathFor(Path())));
  EXPECT_EQ(second["file"]["apis"], Json::parse(R"({"messages":1})"));
}

// An older run's sidecars at the capture path whose capture file is gone (or empty: a run that
// recorded nothing but mirrored requests) are moved aside, not appended to.
TEST_F(CaptureTest, StraySidecarsOfAMissingCaptureAreMovedAside) {
  { std::ofstream(ShadowPairsPathFor(Path())) << "{\"line\":null,\"request\":1}\n"; }
  { std::ofstream(OutcomesPathFor(Path())) << "{\"line\":1}\n"; }
  { std::ofstream(ManifestPathFor(Path())) << "{}\n"; }
  CaptureOptions o = Options();
  o.config.outcomes = true;
  Capture cap(o);
  ASSERT_TRUE(cap.Start().ok());
  cap.ReportShadowPair(R"("request":1,"pair":"new")");
  cap.Stop();
  const auto pairs = Lines(ReadFile(ShadowPairsPathFor(Path())));
  ASSERT_EQ(pairs.size(), 1u);
  EXPECT_EQ(Json::parse(pairs[0])["pair"], "new");
  std::string aside_pairs, aside_outcomes;
  for (const auto& e : fs::directory_iterator(dir_)) {
    const std::string name = e.path().string();
    if (name == ShadowPairsPathFor(Path()) || name == OutcomesPathFor(Path())) continue;
    if (name.ends_with("Z.jsonl.shadow.ndjson")) aside_pairs = name;
    if (name.ends_with("Z.jsonl.outcomes.ndjson")) aside_outcomes = name;
    EXPECT_FALSE(name.ends_with("Z.jsonl.manifest.json")) << "the manifest is this run's";
  }
  EXPECT_EQ(ReadFile(aside_pairs), "{\"line\":null,\"request\":1}\n");
  EXPECT_EQ(ReadFile(aside_outcomes), "{\"line\":1}\n");
  EXPECT_EQ(aside_pairs.substr(0, aside_pairs.size() - 14),
            aside_outcomes.substr(0, aside_outcomes.size() - 16));
  EXPECT_EQ(logger_.Count("moved aside beside"), 1);
}

}  // namespace
}  // namespace llmtap
