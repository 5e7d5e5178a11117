// Capture with upload_url against a real S3 server (Ceph RGW, started by tests/lib/with_rgw.sh,
// which sets AWS_*, LLMTAP_TEST_BUCKET, and LLMTAP_RGW / LLMTAP_RGW_DIR to pause the store).
//
// Each test checks that the numbers add up exactly: every request offered is recorded once in
// exactly one uploaded file, or counted under one reason.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <thread>
#include <tuple>

#include "capture/capture.h"
#include "capture/capture_test_util.h"
#include "common/testing/fault_env.h"
#include "common/testing/temp_files.h"
#include "store/s3_client.h"
#include "store/sha256.h"
#include "store/stream.h"
#include "store/testing/s3_test_env.h"

namespace llmtap {
namespace {

namespace fs = std::filesystem;
using Json = nlohmann::ordered_json;
using testing::CapturingLogger;

using s3test::Bucket;
using capture_test_util::WaitUntil;

// Pauses (stops radosgw) or resumes the test's store.
void Store(const char* verb) {
  const std::string cmd = std::string("bash ") + std::getenv("LLMTAP_RGW") + " " + verb + " " +
                          std::getenv("LLMTAP_RGW_DIR") + " >/dev/null";
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
}

std::string Body(int i) {
  return R"({"model":"m","messages":[{"role":"user","content":"request number )" +
         std::to_string(i) + R"( with some padding to give it size"}],"max_tokens":16})";
}

struct Segment {
  Json manifest;
  std::string manifest_key;
};

class UploadTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_FALSE(Bucket().empty()) << "run under tests/lib/with_rgw.sh";
    const std::string name = ::testing::UnitTest::GetInstance()->current_test_info()->name();
    prefix_ = "upload/" + name + "-" + std::to_string(getpid()) + "/";
    store::S3Config config;
    ASSERT_OK(store::S3Config::FromEnvironment(&config));
    client_ = std::make_unique<store::S3Client>(config);
  }

  CaptureOptions Options(const std::string& replica = "r1") {
    CaptureOptions o;
    o.config.path = (dir_ / "requests.jsonl").string();
    o.config.upload_url = "s3://" + Bucket() + "/" + prefix_;
    o.config.replica = replica;
    o.config.rotate_bytes = 8 * 1024;
    o.config.outcomes = true;
    o.logger = &logger_;
    o.manifest_interval = std::chrono::milliseconds(200);
    o.upload.initial_backoff = std::chrono::milliseconds(50);
    o.upload.max_backoff = std::chrono::milliseconds(400);
    // Stop returns as soon as every file is up; this only bounds a store that never answers
    // (a guard against a hang: a loaded machine must not turn a slow store into a file "lost"
    // here, and back-off is at most 400 ms).
    o.upload.stop_timeout = std::chrono::milliseconds(120000);
    o.upload.part_bytes = 5 << 20;
    return o;
  }

  // Offers requests [from, to) and reports an outcome for each recorded one.
  void OfferRange(Capture* cap, int from, int to) {
    for (int i = from; i < to; ++i) {
      uint64_t ticket = 0;
      cap->Offer("/v1/chat/completions", Body(i), &ticket);
      if (ticket != 0) {
        ResponseOutcome outcome;
        outcome.status = 200;
        cap->ReportOutcome(ticket, outcome);
      }
    }
  }

  // Starts `cap`, offers it requests [0, n) (reporting their outcomes) and stops it.
  void RunOver(Capture* cap, int n) {
    ASSERT_OK(cap->Start());
    OfferRange(cap, 0, n);
    cap->Stop();
  }

  // Every complete segment of `replica`, checked against its objects: sizes and SHA-256 as the
  // manifest says, and the data object's line count equal to "records".
  std::vector<Segment> Segments(const std::string& replica) {
    std::vector<store::S3Object> objects;
    EXPECT_TRUE(client_->ListObjects(Bucket(), prefix_ + replica + "/", &objects).ok());
    std::vector<Segment> out;
    for (const auto& o : objects) {
      if (!o.key.ends_with(".manifest.json")) continue;
      std::string text;
      EXPECT_TRUE(client_->GetObject(Bucket(), o.key, 0, 0, &text).ok());
      Segment s;
      s.manifest = Json::parse(text);
      s.manifest_key = o.key;
      for (const Json& obj : s.manifest["objects"]) {
        std::string data;
        EXPECT_TRUE(client_->GetObject(Bucket(), obj["key"], 0, 0, &data).ok()) << obj["key"];
        EXPECT_EQ(data.size(), obj["bytes"].get<uint64_t>()) << obj["key"];
        store::Sha256 sha;
        sha.Update(data);
        EXPECT_EQ(sha.HexDigest(), obj["sha256"].get<std::string>()) << obj["key"];
      }
      out.push_back(std::move(s));
    }
    return out;
  }

  // The request bodies in every uploaded data object of `replica`, with how often each appears.
  std::map<std::string, int> UploadedBodies(const std::string& replica, uint64_t* records) {
    std::map<std::string, int> bodies;
    *records = 0;
    for (const Segment& s : Segments(replica)) {
      *records += s.manifest["records"].get<uint64_t>();
      for (const Json& obj : s.manifest["objects"]) {
        if (obj["role"] != "data") continue;
        std::string text;
        EXPECT_TRUE(
            store::ReadWhole("s3://" + Bucket() + "/" + obj["key"].get<std::string>(), &text).ok());
        uint64_t lines = 0;
        size_t pos = 0;
        while (pos < text.size()) {
          size_t nl = text.find('\n', pos);
          Json row = Json::parse(text.substr(pos, nl - pos));
          ++bodies[row["payload"].dump()];
          ++lines;
          pos = nl + 1;
        }
        EXPECT_EQ(lines, s.manifest["records"].get<uint64_t>()) << obj["key"];
      }
    }
    return bodies;
  }

  // Replica r1's uploaded files hold `n` records, each of a different request, so every one of
  // the `n` requests offered is in exactly one of them.
  void ExpectEachRecordUploadedOnce(uint64_t n) {
    uint64_t records = 0;
    std::map<std::string, int> bodies = UploadedBodies("r1", &records);
    EXPECT_EQ(records, n);
    ASSERT_EQ(bodies.size(), n);
    for (const auto& [body, times] : bodies) EXPECT_EQ(times, 1) << body;
  }

  static void ExpectAccounted(const CaptureCountersSnapshot& c) {
    EXPECT_EQ(c.Unaccounted(), 0) << "matched=" << c.matched << " recorded=" << c.recorded;
    EXPECT_EQ(c.queued_records, 0u);
  }

  size_t LocalFiles() {
    size_t n = 0;
    for (const auto& e : fs::directory_iterator(dir_)) n += e.is_regular_file();
    return n;
  }

  const testing::TempDir tmp_;
  const fs::path dir_ = tmp_.path();
  std::string prefix_;
  std::unique_ptr<store::S3Client> client_;
  CapturingLogger logger_;
};

TEST_F(UploadTest, EveryRecordIsInExactlyOneUploadedFile) {
  Capture cap(Options());
  ASSERT_NO_FATAL_FAILURE(RunOver(&cap, 400));
  const CaptureCountersSnapshot c = cap.counters();
  ExpectAccounted(c);
  EXPECT_EQ(c.recorded, 400u);
  EXPECT_GT(c.files_rotated, 5u);
  EXPECT_EQ(c.files_uploaded, c.files_rotated + 1);  // the last file goes up at stop
  EXPECT_EQ(c.upload_files_waiting, 0u);
  EXPECT_EQ(c.upload_bytes_waiting, 0u);

  ASSERT_NO_FATAL_FAILURE(ExpectEachRecordUploadedOnce(400));
  const std::vector<Segment> segments = Segments("r1");
  ASSERT_EQ(segments.size(), c.files_uploaded);
  for (const Segment& s : segments) {
    ASSERT_EQ(s.manifest["objects"].size(), 2u);  // data and outcomes
    EXPECT_EQ(s.manifest["replica"], "r1");
    EXPECT_TRUE(s.manifest["timestamp_zero_unix_ms"].is_number_integer());
    EXPECT_EQ(s.manifest["file"]["records"], s.manifest["records"]);
  }
  // Nothing is left on disk once the store confirmed it.
  EXPECT_EQ(LocalFiles(), 0u) << logger_.lines().back();
}

TEST_F(UploadTest, ZstdSegmentsReadBackAsTheSameRows) {
  CaptureOptions o = Options();
  o.config.compress_zstd = true;
  Capture cap(o);
  ASSERT_NO_FATAL_FAILURE(RunOver(&cap, 200));
  ExpectAccounted(cap.counters());
  for (const Segment& s : Segments("r1")) {
    for (const Json& obj : s.manifest["objects"]) {
      EXPECT_TRUE(obj["key"].get<std::string>().ends_with(".zst")) << obj["key"];
    }
    EXPECT_FALSE(s.manifest_key.ends_with(".zst.manifest.json"));
  }
  uint64_t records = 0;
  EXPECT_EQ(UploadedBodies("r1", &records).size(), 200u);
  EXPECT_EQ(records, 200u);
}

TEST_F(UploadTest, FilesStartedInOneMillisecondNeverShareAName) {
  // One record per file, all within a few milliseconds, while the uploader removes (and
  // compresses) finished files: a freed local name must not be used again, or the store's
  // object of the earlier file would be replaced.
  CaptureOptions o = Options();
  o.config.rotate_bytes = 100;
  o.config.compress_zstd = true;
  Capture cap(o);
  ASSERT_NO_FATAL_FAILURE(RunOver(&cap, 40));
  EXPECT_EQ(cap.counters().files_uploaded, 40u);
  uint64_t records = 0;
  const std::map<std::string, int> bodies = UploadedBodies("r1", &records);
  EXPECT_EQ(bodies.size(), 40u);
  EXPECT_EQ(records, 40u);
  EXPECT_EQ(Segments("r1").size(), 40u);
}

TEST_F(UploadTest, KeepLocalKeepsFilesAndARestartDoesNotSendThemAgain) {
  CaptureOptions o = Options();
  o.config.keep_local = true;
  {
    Capture cap(o);
    ASSERT_NO_FATAL_FAILURE(RunOver(&cap, 100));
    EXPECT_GT(cap.counters().files_uploaded, 1u);
  }
  const size_t files = LocalFiles();
  EXPECT_GT(files, 3u);
  Capture again(o);
  ASSERT_OK(again.Start());
  again.Stop();
  EXPECT_EQ(again.counters().files_uploaded, 0u);
  EXPECT_EQ(LocalFiles(), files);
  uint64_t records = 0;
  EXPECT_EQ(UploadedBodies("r1", &records).size(), 100u);
}

TEST_F(UploadTest, MissingBucketWarnsOnceThenFilesWaitForTheNextStart) {
  CaptureOptions o = Options();
  o.config.upload_url = "s3://no-such-bucket-llmtap/" + prefix_;
  o.upload.stop_timeout = std::chrono::milliseconds(300);
  {
    Capture cap(o);
    ASSERT_NO_FATAL_FAILURE(RunOver(&cap, 100));  // serving goes on: all recorded locally
    const CaptureCountersSnapshot c = cap.counters();
    ExpectAccounted(c);
    EXPECT_EQ(c.recorded, 100u);
    EXPECT_EQ(c.files_uploaded, 0u);
    EXPECT_GT(c.upload_requests_failed, 0u);
    EXPECT_GT(c.upload_files_waiting, 0u);
  }
  EXPECT_EQ(logger_.Count("is not possible yet"), 1);
  EXPECT_GE(logger_.Count("create the bucket"), 1);
  EXPECT_GT(LocalFiles(), 3u);

  // The next start, with the right bucket, sends what the first run left.
  Capture next(Options());
  ASSERT_OK(next.Start());
  next.Stop();
  EXPECT_GT(next.counters().files_uploaded, 1u);
  uint64_t records = 0;
  std::map<std::string, int> bodies = UploadedBodies("r1", &records);
  EXPECT_EQ(records, 100u);
  EXPECT_EQ(bodies.size(), 100u);
  EXPECT_EQ(LocalFiles(), 0u);
}

TEST_F(UploadTest, WrongCredentialsAreOneWarningThatNamesTheFix) {
  const std::string secret = std::getenv("AWS_SECRET_ACCESS_KEY");
  setenv("AWS_SECRET_ACCESS_KEY", "wrong-secret-value", 1);
  CaptureOptions o = Options();
  o.upload.stop_timeout = std::chrono::milliseconds(200);
  Capture cap(o);
  ASSERT_NO_FATAL_FAILURE(RunOver(&cap, 20));
  setenv("AWS_SECRET_ACCESS_KEY", secret.c_str(), 1);
  EXPECT_EQ(cap.counters().recorded, 20u);
  EXPECT_EQ(logger_.Count("is not possible yet"), 1);
  EXPECT_GE(logger_.Count("AWS_SECRET_ACCESS_KEY"), 1);
  for (const std::string& line : logger_.lines()) {
    EXPECT_EQ(line.find("wrong-secret-value"), std::string::npos) << line;
  }
}

TEST_F(UploadTest, StoreDownThenUpLosesNothing) {
  Capture cap(Options());
  ASSERT_OK(cap.Start());
  OfferRange(&cap, 0, 50);
  Store("pause");
  OfferRange(&cap, 50, 250);
  cap.RequestRotation();
  // Files wait while the store is down: the rotation just asked for finishes a file whose
  // upload can only fail, however late the uploader gets to it.
  ASSERT_TRUE(WaitUntil([&] { return cap.counters().upload_requests_failed > 0; }));
  EXPECT_GT(cap.counters().upload_files_waiting, 0u);
  Store("resume");
  OfferRange(&cap, 250, 300);
  cap.Stop();
  const CaptureCountersSnapshot c = cap.counters();
  ExpectAccounted(c);
  EXPECT_EQ(c.recorded, 300u);
  EXPECT_EQ(c.upload_files_waiting, 0u);
  EXPECT_GT(c.upload_retries, 0u);
  ExpectEachRecordUploadedOnce(300);
}

TEST_F(UploadTest, DiskBudgetRefusesAndCountsWhileTheStoreIsDown) {
  CaptureOptions o = Options();
  o.config.max_local_bytes = 40 * 1024;
  Capture cap(o);
  ASSERT_OK(cap.Start());
  Store("pause");
  int offered = 0;
  for (; offered < 3000 && cap.counters().skipped_upload_backlog < 20; offered += 10) {
    OfferRange(&cap, offered, offered + 10);
    std::this_thread::sleep_for(std::chrono::milliseconds(5));  // let the writer catch up
  }
  CaptureCountersSnapshot c = cap.counters();
  EXPECT_GE(c.skipped_upload_backlog, 20u);
  // The disk stays within the budget plus what was queued when the budget was reached.
  uint64_t on_disk = 0;
  for (const auto& e : fs::directory_iterator(dir_)) {
    if (e.is_regular_file()) on_disk += e.file_size();
  }
  EXPECT_LT(on_disk, 2 * 40 * 1024u) << on_disk;
  Store("resume");
  // Until the store took every file and the budget counts none of them: both counters, as the
  // uploader lowers the bytes just after the file count, and the budget reads the bytes.
  ASSERT_TRUE(WaitUntil([&] {
    const CaptureCountersSnapshot now = cap.counters();
    return now.upload_files_waiting == 0 && now.upload_bytes_waiting == 0;
  }));
  const uint64_t refused = cap.counters().skipped_upload_backlog;
  OfferRange(&cap, offered, offered + 10);  // recording again once the store took the files
  EXPECT_EQ(cap.counters().skipped_upload_backlog, refused);
  cap.Stop();
  c = cap.counters();
  ExpectAccounted(c);
  EXPECT_EQ(c.recorded + c.skipped_upload_backlog, static_cast<uint64_t>(offered + 10));
  uint64_t records = 0;
  EXPECT_EQ(UploadedBodies("r1", &records).size(), c.recorded);
  EXPECT_EQ(records, c.recorded);
  EXPECT_GE(logger_.Count("max_local_bytes"), 1);
}

TEST_F(UploadTest, AnUnfinishedMultipartUploadOfAnEarlierRunIsAbortedAndRedone) {
  // An earlier run died during a multipart upload: its local file is still there (under its
  // rotated name), and the store holds an unfinished upload of the same key.
  const std::string name = "requests.20261204T100000.000Z.jsonl";
  std::string content;
  for (int i = 0; content.size() < (6u << 20); ++i) {
    content += R"({"timestamp":)" + std::to_string(i) + R"(,"payload":)" + Body(i) + "}\n";
  }
  {
    std::unique_ptr<store::ByteSink> sink;
    ASSERT_OK(store::OpenSink((dir_ / name).string(), &sink));
    ASSERT_OK(sink->Write(content));
    ASSERT_OK(sink->Close());
  }
  const std::string key = prefix_ + "r1/" + name;
  std::string upload_id, etag;
  ASSERT_OK(client_->CreateMultipartUpload(Bucket(), key, &upload_id));
  ASSERT_OK(client_->UploadPart(Bucket(), key, upload_id, 1, content.substr(0, 5 << 20), &etag));

  Capture cap(Options());
  ASSERT_OK(cap.Start());
  cap.Stop();
  EXPECT_EQ(cap.counters().files_uploaded, 1u);
  std::vector<store::S3MultipartUpload> uploads;
  ASSERT_OK(client_->ListMultipartUploads(Bucket(), prefix_, &uploads));
  EXPECT_TRUE(uploads.empty());
  std::string stored;
  ASSERT_OK(client_->GetObject(Bucket(), key, 0, 0, &stored));
  EXPECT_TRUE(stored == content);
  const std::vector<Segment> segments = Segments("r1");
  ASSERT_EQ(segments.size(), 1u);
  EXPECT_EQ(segments[0].manifest["records"].get<uint64_t>(),
            static_cast<uint64_t>(std::count(content.begin(), content.end(), '\n')));
  EXPECT_EQ(LocalFiles(), 0u);
}

// A run that dies at a step of a file's trip to the store (UploaderOptions::crash_after: from
// that step on the uploader does nothing more, as after a SIGKILL), then a restart: every record
// is in the store exactly once, nothing is left on disk, and no multipart upload stays open.
class UploadCrashTest : public UploadTest,
                        public ::testing::WithParamInterface<std::tuple<UploadStep, bool>> {};

TEST_P(UploadCrashTest, ARestartStoresEveryRecordOnceAndLeavesNothing) {
  const auto [step, zstd] = GetParam();
  CaptureOptions o = Options();
  o.config.compress_zstd = zstd;
  int reached = 0;  // upload thread only, read after it is joined
  o.upload.crash_after = [&reached, step](UploadStep s) { return s == step && reached++ == 0; };
  {
    Capture cap(o);
    ASSERT_NO_FATAL_FAILURE(RunOver(&cap, 100));  // several files (rotate_bytes 8 KiB)
    ExpectAccounted(cap.counters());
  }
  ASSERT_EQ(reached, 1) << "the step was never reached";
  ASSERT_GT(LocalFiles(), 0u);
  o.upload.crash_after = nullptr;
  Capture again(o);
  ASSERT_OK(again.Start());
  again.Stop();
  ASSERT_NO_FATAL_FAILURE(ExpectEachRecordUploadedOnce(100));
  std::vector<std::string> left;
  for (const auto& e : fs::directory_iterator(dir_)) left.push_back(e.path().filename());
  EXPECT_TRUE(left.empty()) << ::testing::PrintToString(left);
  std::vector<store::S3MultipartUpload> uploads;
  ASSERT_OK(client_->ListMultipartUploads(Bucket(), prefix_, &uploads));
  EXPECT_TRUE(uploads.empty());
}

INSTANTIATE_TEST_SUITE_P(
    EveryStep, UploadCrashTest,
    ::testing::Values(std::tuple{UploadStep::kDataCompressed, true},
                      std::tuple{UploadStep::kOutcomesCompressed, true},
                      std::tuple{UploadStep::kDataPut, true},
                      std::tuple{UploadStep::kOutcomesPut, true},
                      std::tuple{UploadStep::kManifestPut, true},
                      std::tuple{UploadStep::kLocalManifestRemoved, true},
                      std::tuple{UploadStep::kLocalOutcomesRemoved, true},
                      std::tuple{UploadStep::kLocalDataRemoved, true},
                      std::tuple{UploadStep::kDataPut, false},
                      std::tuple{UploadStep::kManifestPut, false},
                      std::tuple{UploadStep::kLocalManifestRemoved, false},
                      std::tuple{UploadStep::kLocalDataRemoved, false}));

// The file that was open when the process died: what SIGKILL leaves on disk is what the files
// hold while the capture runs, so the test copies them mid-run (replica r0's run) and starts
// replica r1 on the copy.
TEST_F(UploadTest, TheFileOpenAtAKillIsUploadedWithAManifestThatPlacesIt) {
  const testing::TempDir copy_tmp;
  const fs::path copy = copy_tmp.path();
  CaptureOptions o = Options("r0");
  o.config.rotate_bytes = 0;  // one file
  o.manifest_interval = std::chrono::hours(1);
  {
    Capture cap(o);
    ASSERT_OK(cap.Start());
    OfferRange(&cap, 0, 40);
    ASSERT_TRUE(WaitUntil([&] { return cap.counters().recorded >= 40; }));
    for (const auto& e : fs::directory_iterator(dir_)) {
      fs::copy_file(e.path(), copy / e.path().filename());
    }
    cap.Stop();
  }
  CaptureOptions r1 = Options("r1");
  r1.config.path = (copy / "requests.jsonl").string();
  {
    Capture cap(r1);
    ASSERT_OK(cap.Start());
    cap.Stop();
    EXPECT_EQ(cap.counters().files_uploaded, 1u);
  }
  ASSERT_NO_FATAL_FAILURE(ExpectEachRecordUploadedOnce(40));
  const std::vector<Segment> segments = Segments("r1");
  ASSERT_EQ(segments.size(), 1u);
  const Json& m = segments[0].manifest;
  EXPECT_EQ(m["state"], "recovered");
  EXPECT_EQ(m["recovered"]["epoch_from"], "manifest");
  EXPECT_TRUE(m["timestamp_zero_unix_ms"].is_number_integer());
  EXPECT_EQ(m["file"]["records"], 40);
  EXPECT_EQ(m["records"], 40);
  EXPECT_TRUE(fs::is_empty(copy));
}

TEST_F(UploadTest, AFileLeftWithoutItsManifestGetsOneThatPlacesIt) {
  // Killed between moving the open file aside and moving its manifest.
  const std::string name = "requests.20261204T100000Z.jsonl";
  std::string content;
  for (int i = 0; i < 5; ++i) {
    content += R"({"timestamp":)" + std::to_string(i * 7) + R"(,"payload":)" + Body(i) + "}\n";
  }
  { std::ofstream(dir_ / name, std::ios::binary) << content; }
  Capture cap(Options());
  ASSERT_OK(cap.Start());
  cap.Stop();
  ASSERT_NO_FATAL_FAILURE(ExpectEachRecordUploadedOnce(5));
  const std::vector<Segment> segments = Segments("r1");
  ASSERT_EQ(segments.size(), 1u);
  EXPECT_EQ(segments[0].manifest["state"], "recovered");
  EXPECT_EQ(segments[0].manifest["recovered"]["epoch_from"], "file_mtime");
  EXPECT_EQ(segments[0].manifest["file"]["last_timestamp_ms"], 28);
  EXPECT_TRUE(segments[0].manifest["timestamp_zero_unix_ms"].is_number_integer());
  EXPECT_EQ(LocalFiles(), 0u);
}

TEST_F(UploadTest, LeftoversOfAnOlderVersionAreCleanedUp) {
  // An older llmtap removed a finished file's data before its manifest, and a kill in between
  // left the manifest alone; a manifest write cut short left its temp file.
  const std::string name = "requests.20261204T100000.000Z.jsonl";
  const std::string content = R"({"timestamp":0,"payload":)" + Body(0) + "}\n";
  { std::ofstream(dir_ / name, std::ios::binary) << content; }
  { std::ofstream(dir_ / (name + ".manifest.json")) << R"({"state":"rotated"})"; }
  {
    Capture cap(Options());
    ASSERT_OK(cap.Start());
    cap.Stop();
  }
  fs::remove(dir_ / name);  // as if uploaded and removed, manifest left behind
  { std::ofstream(dir_ / (name + ".manifest.json")) << R"({"state":"rotated"})"; }
  { std::ofstream(dir_ / "requests.jsonl.manifest.json.tmp.999999") << "{"; }
  Capture cap(Options());
  ASSERT_OK(cap.Start());
  cap.Stop();
  std::vector<std::string> left;
  for (const auto& e : fs::directory_iterator(dir_)) left.push_back(e.path().filename());
  EXPECT_TRUE(left.empty()) << ::testing::PrintToString(left);
  ASSERT_NO_FATAL_FAILURE(ExpectEachRecordUploadedOnce(1));
}

}  // namespace
}  // namespace llmtap
