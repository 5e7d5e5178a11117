// Capture core's rotation, outcomes sidecar, and capture files moved or deleted meanwhile.
#include "capture/capture.h"

#include <sys/stat.h>
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

// --- Rotation and the outcomes sidecar ---

// The capture files of a rotated run in time order: rotated ones (by name), then the current.
std::vector<std::string> CaptureFiles(const fs::path& dir, const std::string& current) {
  std::vector<std::string> rotated;
  for (const auto& e : fs::directory_iterator(dir)) {
    const std::string name = e.path().filename().string();
    if (name.rfind("requests.2", 0) == 0 && name.size() > 6 &&
        name.compare(name.size() - 6, 6, ".jsonl") == 0 &&
        name.find(".outcomes") == std::string::npos) {
      rotated.push_back(e.path().string());
    }
  }
  std::sort(rotated.begin(), rotated.end());
  rotated.push_back(current);
  return rotated;
}

TEST_F(CaptureTest, RotatesBySizeEachFileCompleteWithItsOwnTimestampsAndManifest) {
  CaptureOptions o = Options();
  const std::string line0 = "{\"timestamp\":0,\"payload\":" + std::string(kChatCompact) + "}\n";
  o.config.rotate_bytes = static_cast<int64_t>(line0.size() * 5 / 2 + 20);  // 2 lines per file
  Capture cap(o);
  ASSERT_TRUE(cap.Start().ok());
  for (int i = 0; i < 7; ++i) {
    EXPECT_EQ(cap.Offer("/v1/chat/completions", kChat), OfferDecision::kQueued);
    env_.AdvanceClock(std::chrono::milliseconds(1500));  // names differ by their first record
  }
  cap.Stop();
  const auto files = CaptureFiles(dir_, Path());
  ASSERT_EQ(files.size(), 4u);
  size_t total = 0;
  for (size_t i = 0; i < files.size(); ++i) {
    SCOPED_TRACE(files[i]);
    const std::string content = ReadFile(files[i]);
    const auto lines = Lines(content);
    EXPECT_EQ(lines.size(), i + 1 < files.size() ? 2u : 1u);
    EXPECT_LE(content.size(), static_cast<size_t>(o.config.rotate_bytes));
    int64_t last = -1;
    for (size_t k = 0; k < lines.size(); ++k) {
      const int64_t ts = Json::parse(lines[k])["timestamp"].get<int64_t>();
      if (k == 0) {
        EXPECT_EQ(ts, 0) << "each file counts from its own first record";
      }
      EXPECT_GE(ts, last);
      last = ts;
    }
    total += lines.size();
    Json m = Json::parse(ReadFile(ManifestPathFor(files[i])));
    EXPECT_EQ(m["capture_path"], files[i]);
    EXPECT_EQ(m["file"]["records"], lines.size());
    EXPECT_EQ(m["file"]["bytes"], content.size());
    EXPECT_EQ(m["file"]["sequence"], i + 1);
    EXPECT_EQ(m["state"], i + 1 < files.size() ? "rotated" : "stopped");
    EXPECT_TRUE(m["timestamp_zero_unix_ms"].is_number_integer());
    struct stat st;
    ASSERT_EQ(::stat(files[i].c_str(), &st), 0);
    EXPECT_EQ(st.st_mode & 0777, 0600u);
  }
  EXPECT_EQ(total, 7u);
  const auto c = cap.counters();
  EXPECT_EQ(c.files_rotated, 3u);
  EXPECT_EQ(c.recorded, 7u);
  ExpectAccounted(c);
}

TEST_F(CaptureTest, RotatesByTimeEvenWhenNoRecordComes) {
  // An hour on the writer's clock (env_), which the test moves: no real pause, however long,
  // finishes a file here (with 100 ms, a pause of the test after the second record let the
  // writer finish that file too).
  CaptureOptions o = Options();
  o.config.rotate_ms = 3600 * 1000;
  Capture cap(o);
  ASSERT_TRUE(cap.Start().ok());
  EXPECT_EQ(cap.Offer("/v1/chat/completions", kChat), OfferDecision::kQueued);
  ASSERT_TRUE(WaitUntil([&] { return cap.counters().recorded == 1; }));
  EXPECT_EQ(cap.counters().files_rotated, 0u);
  env_.AdvanceClock(std::chrono::hours(1));
  // No further record: the writer's own timer finishes the file.
  ASSERT_TRUE(WaitUntil([&] { return cap.counters().files_rotated == 1; }));
  EXPECT_EQ(CaptureFiles(dir_, Path()).size(), 2u);
  EXPECT_EQ(ReadFile(Path()), "") << "the new file starts empty";
  EXPECT_EQ(cap.Offer("/v1/completions", kCompletion), OfferDecision::kQueued);
  cap.Stop();
  const auto files = CaptureFiles(dir_, Path());
  ASSERT_EQ(files.size(), 2u);
  EXPECT_EQ(Lines(ReadFile(files[0])).size(), 1u);
  const auto current = Lines(ReadFile(files[1]));
  ASSERT_EQ(current.size(), 1u);
  EXPECT_EQ(Json::parse(current[0])["timestamp"], 0);
  EXPECT_EQ(cap.counters().files_rotated, 1u) << "an idle, empty file is not rotated";
}

TEST_F(CaptureTest, RequestedRotationFinishesTheFileAndAnEmptyOneStays) {
  Capture cap(Options());
  ASSERT_TRUE(cap.Start().ok());
  cap.RequestRotation();  // nothing recorded yet: nothing to rotate
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_EQ(cap.counters().files_rotated, 0u);
  cap.Offer("/v1/chat/completions", kChat);
  ASSERT_TRUE(WaitUntil([&] { return cap.counters().recorded == 1; }));
  cap.RequestRotation();
  ASSERT_TRUE(WaitUntil([&] { return cap.counters().files_rotated == 1; }));
  cap.Stop();
  const auto files = CaptureFiles(dir_, Path());
  ASSERT_EQ(files.size(), 2u);
  EXPECT_EQ(Lines(ReadFile(files[0])).size(), 1u);
  EXPECT_EQ(ReadFile(files[1]), "");
}

TEST_F(CaptureTest, TicketsOnlyWithOutcomesOn) {
  Capture cap(Options());
  ASSERT_TRUE(cap.Start().ok());
  uint64_t ticket = 99;
  EXPECT_EQ(cap.Offer("/v1/chat/completions", kChat, &ticket), OfferDecision::kQueued);
  EXPECT_EQ(ticket, 0u);
  cap.ReportOutcome(ticket, ResponseOutcome());
  cap.Stop();
  EXPECT_FALSE(fs::exists(OutcomesPathFor(Path())));
}

ResponseOutcome MakeOutcome(int status, int64_t ttft_us, int64_t total_us, int64_t prompt,
                            int64_t completion, std::string_view reason) {
  ResponseOutcome o;
  o.status = status;
  o.ttft_us = ttft_us;
  o.total_us = total_us;
  o.prompt_tokens = prompt;
  o.completion_tokens = completion;
  o.SetFinishReason(reason);
  return o;
}

TEST_F(CaptureTest, OutcomesNameTheirRecordsLineInAnyCompletionOrder) {
  CaptureOptions o = Options();
  o.config.outcomes = true;
  Capture cap(o);
  ASSERT_TRUE(cap.Start().ok());
  EXPECT_TRUE(cap.outcomes_enabled());
  uint64_t t[3];
  const std::string_view bodies[3] = {kChat, kCompletion, R"({"prompt":"third"})"};
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(cap.Offer("/v1/completions", bodies[i], &t[i]), OfferDecision::kQueued);
    EXPECT_NE(t[i], 0u);
    env_.AdvanceClock(std::chrono::milliseconds(10));
  }
  cap.ReportOutcome(t[2], MakeOutcome(200, 1500, 20250, 7, 3, "stop"));
  ResponseOutcome cancelled = MakeOutcome(200, 999, 5000, -1, -1, "");
  cancelled.client_cancelled = true;
  cap.ReportOutcome(t[0], cancelled);
  ResponseOutcome failed = MakeOutcome(502, -1, 3000, -1, -1, "");
  failed.error = "connect";
  cap.ReportOutcome(t[1], failed);
  cap.Stop();

  const auto records = Lines(ReadFile(Path()));
  ASSERT_EQ(records.size(), 3u);
  const auto outcomes = Lines(ReadFile(OutcomesPathFor(Path())));
  ASSERT_EQ(outcomes.size(), 3u);
  EXPECT_EQ(outcomes[0],
            R"({"line":3,"timestamp":20,"status":200,"ttft_ms":1.500,"latency_ms":20.250,)"
            R"("prompt_tokens":7,"completion_tokens":3,"finish_reason":"stop",)"
            R"("usage_source":"usage","cached_tokens":null,"server":null,"spec":null,)"
            R"("cancelled":false,"error":null})");
  for (const std::string& line : outcomes) {
    Json out = Json::parse(line);
    const Json record = Json::parse(records.at(out["line"].get<size_t>() - 1));
    EXPECT_EQ(out["timestamp"], record["timestamp"]);
  }
  Json first = Json::parse(outcomes[1]);
  EXPECT_EQ(first["line"], 1);
  EXPECT_EQ(first["cancelled"], true);
  EXPECT_TRUE(first["prompt_tokens"].is_null());
  EXPECT_TRUE(first["finish_reason"].is_null());
  Json second = Json::parse(outcomes[2]);
  EXPECT_EQ(second["status"], 502);
  EXPECT_TRUE(second["ttft_ms"].is_null());
  EXPECT_EQ(second["error"], "connect");
  const auto c = cap.counters();
  EXPECT_EQ(c.outcomes_written, 3u);
  EXPECT_EQ(c.outcomes_lost, 0u);
  struct stat st;
  ASSERT_EQ(::stat(OutcomesPathFor(Path()).c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  Json m = Json::parse(ReadFile(ManifestPathFor(Path())));
  EXPECT_EQ(m["outcomes_path"], OutcomesPathFor(Path()));
  EXPECT_EQ(m["counters"]["outcomes_written"], 3);
}

TEST_F(CaptureTest, ARecordLostToTheDiskShiftsLinesAndLosesItsOutcome) {
  CaptureOptions o = Options();
  o.config.outcomes = true;
  Capture cap(o);
  ASSERT_TRUE(cap.Start().ok());
  env_.SetDiskSpace(0);
  uint64_t lost = 0, kept = 0;
  cap.Offer("/v1/chat/completions", kChat, &lost);
  ASSERT_TRUE(WaitUntil([&] { return cap.counters().write_failed_records == 1; }));
  env_.SetDiskSpace(-1);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));  // past the back-off
  cap.Offer("/v1/completions", kCompletion, &kept);
  cap.ReportOutcome(kept, MakeOutcome(200, 10, 20, 1, 2, "length"));
  cap.ReportOutcome(lost, MakeOutcome(200, 10, 20, 1, 2, "stop"));
  cap.Stop();
  const auto outcomes = Lines(ReadFile(OutcomesPathFor(Path())));
  ASSERT_EQ(outcomes.size(), 1u);
  EXPECT_EQ(Json::parse(outcomes[0])["line"], 1);
  EXPECT_EQ(Json::parse(outcomes[0])["finish_reason"], "length");
  const auto c = cap.counters();
  EXPECT_EQ(c.outcomes_written, 1u);
  EXPECT_EQ(c.outcomes_lost, 1u);
}

// `o` with outcomes on and every file taking exactly one record.
CaptureOptions OneRecordPerFile(CaptureOptions o) {
  o.config.outcomes = true;
  o.config.rotate_bytes = 10;
  return o;
}

// Offers two records to `cap` (OneRecordPerFile) so that each lands in a file of its own, the
// first one finished by rotation: their tickets.
void TwoRecordsAcrossARotation(Capture& cap, FaultEnv& env, uint64_t* a, uint64_t* b) {
  cap.Offer("/v1/chat/completions", kChat, a);
  ASSERT_TRUE(WaitUntil([&] { return cap.counters().recorded == 1; }));
  env.AdvanceClock(std::chrono::seconds(2));
  cap.Offer("/v1/completions", kCompletion, b);
  ASSERT_TRUE(WaitUntil([&] { return cap.counters().files_rotated == 1; }));
}

TEST_F(CaptureTest, AnOutcomeArrivingAfterRotationGoesToItsRecordsFile) {
  Capture cap(OneRecordPerFile(Options()));
  ASSERT_TRUE(cap.Start().ok());
  uint64_t a = 0, b = 0;
  ASSERT_NO_FATAL_FAILURE(TwoRecordsAcrossARotation(cap, env_, &a, &b));
  cap.ReportOutcome(b, MakeOutcome(200, 1, 2, 3, 4, "stop"));
  cap.ReportOutcome(a, MakeOutcome(200, 1, 2, 5, 6, "length"));  // the long stream ends last
  cap.Stop();
  const auto files = CaptureFiles(dir_, Path());
  ASSERT_EQ(files.size(), 2u);
  const auto old_outcomes = Lines(ReadFile(OutcomesPathFor(files[0])));
  ASSERT_EQ(old_outcomes.size(), 1u);
  EXPECT_EQ(Json::parse(old_outcomes[0])["completion_tokens"], 6);
  EXPECT_EQ(Json::parse(old_outcomes[0])["line"], 1);
  const auto new_outcomes = Lines(ReadFile(OutcomesPathFor(files[1])));
  ASSERT_EQ(new_outcomes.size(), 1u);
  EXPECT_EQ(Json::parse(new_outcomes[0])["completion_tokens"], 4);
  Json m = Json::parse(ReadFile(ManifestPathFor(files[0])));
  EXPECT_EQ(m["outcomes_path"], OutcomesPathFor(files[0]));
}

// Shadow pairs (proxy --shadow) ride on their row's outcome: the pairs sidecar of the row's file
// gets {"line":L,"timestamp":T,<members>}, in the order the outcomes complete; a pair of a request
// capture did not record goes to the current file's sidecar with line null; rotation renames the
// sidecar with its file, and a pair due after the rotation still lands beside its row's file.
TEST_F(CaptureTest, ShadowPairsJoinTheirRowsAndFollowRotation) {
  Capture cap(OneRecordPerFile(Options()));
  ASSERT_TRUE(cap.Start().ok());
  uint64_t a = 0, b = 0;
  ASSERT_NO_FATAL_FAILURE(TwoRecordsAcrossARotation(cap, env_, &a, &b));
  ResponseOutcome ob = MakeOutcome(200, 1, 2, 3, 4, "stop");
  ob.shadow_pair = R"("path":"/v1/completions","pair":"b")";
  cap.ReportOutcome(b, std::move(ob));
  cap.ReportShadowPair(R"("path":"/v1/completions","pair":"unrecorded")");
  ResponseOutcome oa = MakeOutcome(200, 1, 2, 5, 6, "length");
  oa.shadow_pair = R"("path":"/v1/chat/completions","pair":"a")";
  cap.ReportOutcome(a, std::move(oa));  // the long stream ends last, after the rotation
  cap.Stop();
  const auto files = CaptureFiles(dir_, Path());
  ASSERT_EQ(files.size(), 2u);
  const auto old_pairs = Lines(ReadFile(ShadowPairsPathFor(files[0])));
  ASSERT_EQ(old_pairs.size(), 1u);
  const Json pa = Json::parse(old_pairs[0]);
  EXPECT_EQ(pa["pair"], "a");
  EXPECT_EQ(pa["line"], 1);
  EXPECT_EQ(pa["timestamp"], 0);
  const auto new_pairs = Lines(ReadFile(ShadowPairsPathFor(files[1])));
  ASSERT_EQ(new_pairs.size(), 2u);
  EXPECT_EQ(Json::parse(new_pairs[0])["pair"], "b");
  EXPECT_EQ(Json::parse(new_pairs[0])["line"], 1);
  EXPECT_EQ(Json::parse(new_pairs[1]),
            Json::parse(R"({"line":null,"timestamp":null,"path":"/v1/completions",)"
                        R"("pair":"unrecorded"})"));
  // The outcome lines are unchanged by the pair that rode on them.
  EXPECT_EQ(Lines(ReadFile(OutcomesPathFor(files[0]))).size(), 1u);
  EXPECT_FALSE(Json::parse(Lines(ReadFile(OutcomesPathFor(files[0])))[0]).contains("pair"));
  EXPECT_EQ(cap.counters().shadow_pairs_written, 3u);
  EXPECT_EQ(cap.counters().shadow_pairs_lost, 0u);
}

TEST_F(CaptureTest, OlderOutcomesSidecarIsMovedAsideWithItsCapture) {
  { std::ofstream(Path()) << "{\"timestamp\":0,\"payload\":{}}\n"; }
  { std::ofstream(OutcomesPathFor(Path())) << "{\"line\":1}\n"; }
  { std::ofstream(ShadowPairsPathFor(Path())) << "{\"line\":1}\n"; }
  CaptureOptions o = Options();
  o.config.outcomes = true;
  Capture cap(o);
  ASSERT_TRUE(cap.Start().ok());
  uint64_t t = 0;
  cap.Offer("/v1/completions", kCompletion, &t);
  cap.ReportOutcome(t, MakeOutcome(200, 1, 2, 3, 4, "stop"));
  cap.Stop();
  EXPECT_EQ(Lines(ReadFile(OutcomesPathFor(Path()))).size(), 1u);
  EXPECT_FALSE(fs::exists(ShadowPairsPathFor(Path())));  // the older run's pairs went aside too
  int shadow_asides = 0;
  for (const auto& e : fs::directory_iterator(dir_)) {
    shadow_asides += e.path().filename().string().ends_with(".shadow.ndjson");
  }
  EXPECT_EQ(shadow_asides, 1);
  int asides = 0;
  for (const auto& e : fs::directory_iterator(dir_)) {
    const std::string name = e.path().filename().string();
    if (name != "requests.jsonl.outcomes.ndjson" &&
        name.find(".outcomes.ndjson") != std::string::npos) {
      ++asides;
      EXPECT_EQ(ReadFile(e.path()), "{\"line\":1}\n");
    }
  }
  EXPECT_EQ(asides, 1);
}

TEST_F(CaptureTest, CaptureFileMovedAwayWhileCapturingStartsANewFile) {
  CaptureOptions o = Options();
  o.config.outcomes = true;
  Capture cap(o);
  ASSERT_TRUE(cap.Start().ok());
  uint64_t t1 = 0, t2 = 0;
  cap.Offer("/v1/chat/completions", kChat, &t1);
  ASSERT_TRUE(WaitUntil([&] { return cap.counters().recorded == 1; }));
  cap.ReportOutcome(t1, MakeOutcome(200, 1, 2, 3, 4, "stop"));
  ASSERT_TRUE(WaitUntil([&] { return cap.counters().outcomes_written == 1; }));
  const std::string moved = (dir_ / "moved.jsonl").string();
  fs::rename(Path(), moved);                                   // as `mv` or a log shipper would
  std::this_thread::sleep_for(std::chrono::milliseconds(50));  // past the identity check interval
  cap.Offer("/v1/completions", kCompletion, &t2);
  cap.ReportOutcome(t2, MakeOutcome(200, 1, 2, 5, 6, "length"));
  cap.Stop();
  EXPECT_EQ(Lines(ReadFile(moved)).size(), 1u);
  const auto current = Lines(ReadFile(Path()));
  ASSERT_EQ(current.size(), 1u);
  EXPECT_EQ(Json::parse(current[0])["payload"], Json::parse(kCompletion));
  EXPECT_EQ(Json::parse(current[0])["timestamp"], 0);
  const auto outcomes = Lines(ReadFile(OutcomesPathFor(Path())));
  ASSERT_EQ(outcomes.size(), 1u) << "the new file's sidecar holds only its own records";
  EXPECT_EQ(Json::parse(outcomes[0])["completion_tokens"], 6);
  EXPECT_EQ(Json::parse(outcomes[0])["line"], 1);
  EXPECT_GE(logger_.Count("moved or deleted"), 1);
  ExpectAccounted(cap.counters());
}

TEST_F(CaptureTest, CaptureFileDeletedWhileCapturingStartsANewFile) {
  Capture cap(Options());
  ASSERT_TRUE(cap.Start().ok());
  cap.Offer("/v1/chat/completions", kChat);
  ASSERT_TRUE(WaitUntil([&] { return cap.counters().recorded == 1; }));
  fs::remove(Path());
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  cap.Offer("/v1/completions", kCompletion);
  cap.Stop();
  const auto current = Lines(ReadFile(Path()));
  ASSERT_EQ(current.size(), 1u);
  EXPECT_EQ(Json::parse(current[0])["payload"], Json::parse(kCompletion));
  Json m = Json::parse(ReadFile(ManifestPathFor(Path())));
  EXPECT_EQ(m["file"]["records"], 1);
  EXPECT_EQ(m["file"]["sequence"], 2);
}

TEST(ResponseOutcomeTest, FinishReasonIsCutAndKeptPrintable) {
  ResponseOutcome o;
  o.SetFinishReason(std::string(100, 'x'));
  EXPECT_EQ(std::string(o.finish_reason), std::string(31, 'x'));
  o.SetFinishReason("st\"op\n\xff");
  std::string line;
  AppendOutcomeLine(1, 0, o, /*with_response=*/false, &line);
  EXPECT_TRUE(Json::accept(line)) << line;
  EXPECT_EQ(Json::parse(line)["finish_reason"], "st\"op??");
}

TEST(ResponseOutcomeTest, ResponseMemberOnlyWithCaptureResponses) {
  ResponseOutcome o;
  o.status = 200;
  std::string off;
  AppendOutcomeLine(1, 0, o, /*with_response=*/false, &off);
  EXPECT_FALSE(Json::parse(off).contains("response")) << off;
  std::string unreadable;  // capture_responses on, but no JSON or event-stream body
  AppendOutcomeLine(1, 0, o, /*with_response=*/true, &unreadable);
  EXPECT_EQ(unreadable, off.substr(0, off.size() - 1) + R"(,"response":null})");

  o.has_response = true;
  o.response.text = "Line \"one\"\n\x01 caf\xc3\xa9 \xf0\x9f\x98\x80";
  o.response.reasoning = "hmm";
  o.response.tool_calls = {{0, "get_weather", R"({"city": "Paris"})"}, {3, "f", ""}};
  o.response.truncated = true;
  std::string line;
  AppendOutcomeLine(1, 0, o, /*with_response=*/true, &line);
  EXPECT_EQ(line.substr(off.size() - 1),
            R"(,"response":{"text":"Line \"one\"\n\u0001 café 😀","reasoning":"hmm",)"
            R"("tool_calls":[{"name":"get_weather","arguments":"{\"city\": \"Paris\"}"},)"
            R"({"name":"f","arguments":""}],"truncated":true}})");
  const Json parsed = Json::parse(line);
  EXPECT_EQ(parsed["response"]["text"], o.response.text);
  EXPECT_EQ(parsed["response"]["tool_calls"][0]["arguments"], R"({"city": "Paris"})");

  // Ill-formed UTF-8 from the upstream still makes a JSON line.
  o.response.text = "ok \xff\xc3 end";
  o.response.tool_calls.clear();
  line.clear();
  AppendOutcomeLine(1, 0, o, /*with_response=*/true, &line);
  ASSERT_TRUE(Json::accept(line)) << line;
  EXPECT_EQ(Json::parse(line)["response"]["text"], "ok \xef\xbf\xbd\xef\xbf\xbd end");
}

TEST_F(CaptureTest, CaptureResponsesPutsTheTextInTheOutcomesAndCountsTruncations) {
  CaptureOptions o = Options();
  o.config.outcomes = true;
  o.config.capture_responses = true;
  Capture cap(o);
  ASSERT_TRUE(cap.Start().ok());
  EXPECT_TRUE(cap.responses_enabled());
  uint64_t t[3];
  for (uint64_t& ticket : t) cap.Offer("/v1/chat/completions", kChat, &ticket);
  ResponseOutcome full = MakeOutcome(200, 10, 20, 1, 2, "stop");
  full.has_response = true;
  full.response.text = "Hello there";
  cap.ReportOutcome(t[0], std::move(full));
  ResponseOutcome cut = MakeOutcome(200, 10, 20, 1, 2, "length");
  cut.has_response = true;
  cut.response.text = "Hel";
  cut.response.truncated = true;
  cap.ReportOutcome(t[1], std::move(cut));
  cap.ReportOutcome(t[2], MakeOutcome(502, -1, 20, -1, -1, ""));  // no body was read
  cap.Stop();
  const auto outcomes = Lines(ReadFile(OutcomesPathFor(Path())));
  ASSERT_EQ(outcomes.size(), 3u);
  EXPECT_EQ(Json::parse(outcomes[0])["response"]["text"], "Hello there");
  EXPECT_EQ(Json::parse(outcomes[0])["response"]["truncated"], false);
  EXPECT_EQ(Json::parse(outcomes[1])["response"]["truncated"], true);
  EXPECT_TRUE(Json::parse(outcomes[2])["response"].is_null());
  EXPECT_EQ(cap.counters().responses_truncated, 1u);
  Json m = Json::parse(ReadFile(ManifestPathFor(Path())));
  EXPECT_EQ(m["counters"]["responses_truncated"], 1);
  EXPECT_EQ(m["config"]["capture_responses"], true);
}

TEST(RotatedNameTest, MillisecondTimeOfTheFirstRecord) {
  EXPECT_EQ(RotatedName("/c/requests.jsonl", 1234567, 0), "/c/requests.19700101T000000.001Z.jsonl");
  EXPECT_EQ(RotatedName("/c/requests.jsonl", 0, 3), "/c/requests.19700101T000000.000Z-3.jsonl");
  EXPECT_EQ(OutcomesPathFor("/c/r.jsonl"), "/c/r.jsonl.outcomes.ndjson");
}

}  // namespace
}  // namespace llmtap
