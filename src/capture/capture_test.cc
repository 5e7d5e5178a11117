// Capture core end to end: decision chain, records, files, faults, manifest, concurrency.
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
#include "common/testing/fault_env.h"
#include "common/testing/temp_files.h"

namespace llmtap {
namespace {

namespace fs = std::filesystem;
using Json = nlohmann::ordered_json;
using testing::CapturingLogger;
using testing::FaultEnv;
using ::testing::HasSubstr;
using testing::TempDir;

constexpr std::string_view kChat = R"({
  "model": "m",
  "messages": [ {"role": "user", "content": "hello\nworld \u00e9"} ],
  "max_tokens": 128
})";
constexpr std::string_view kChatCompact =
    R"({"model":"m","messages":[{"role":"user","content":"hello\nworld \u00e9"}],"max_tokens":128})";
constexpr std::string_view kCompletion = R"({"model": "m", "prompt": "hi", "max_tokens": 64})";

std::string ReadFile(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::vector<std::string> Lines(const std::string& s) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start < s.size()) {
    size_t nl = s.find('\n', start);
    EXPECT_NE(nl, std::string::npos) << "file ends in a torn line";
    if (nl == std::string::npos) break;
    out.push_back(s.substr(start, nl - start));
    start = nl + 1;
  }
  return out;
}

// Removes whitespace outside strings from valid JSON: an independent statement of what the
// compact form must be, byte for byte.
std::string StripInsignificantWhitespace(std::string_view json) {
  std::string out;
  bool in_string = false;
  for (size_t i = 0; i < json.size(); ++i) {
    char c = json[i];
    if (in_string) {
      out.push_back(c);
      if (c == '\\') {
        out.push_back(json[++i]);
      } else if (c == '"') {
        in_string = false;
      }
    } else if (c == '"') {
      in_string = true;
      out.push_back(c);
    } else if (c != ' ' && c != '\t' && c != '\n' && c != '\r') {
      out.push_back(c);
    }
  }
  return out;
}

class CaptureTest : public ::testing::Test {
 protected:
  CaptureOptions Options(std::string name = "requests.jsonl") {
    CaptureOptions o;
    o.config.path = (dir_ / name).string();
    o.env = &env_;
    o.logger = &logger_;
    o.initial_backoff = std::chrono::milliseconds(1);
    o.max_backoff = std::chrono::milliseconds(5);
    return o;
  }
  std::string Path(std::string name = "requests.jsonl") { return (dir_ / name).string(); }

  static void ExpectAccounted(const CaptureCountersSnapshot& c) {
    EXPECT_EQ(c.Unaccounted(), 0) << "matched=" << c.matched << " recorded=" << c.recorded;
    EXPECT_EQ(c.queued_records, 0u);
    EXPECT_EQ(c.queue_bytes, 0u);
  }

  const TempDir tmp_;
  const fs::path dir_ = tmp_.path();
  FaultEnv env_;
  CapturingLogger logger_;
};

TEST_F(CaptureTest, RecordsMooncakeLinesWithCompactPayloadAndTimestamps) {
  Capture cap(Options());
  ASSERT_TRUE(cap.Start().ok());
  EXPECT_EQ(cap.Offer("/v1/chat/completions", kChat), OfferDecision::kQueued);
  env_.AdvanceClock(std::chrono::milliseconds(540));
  EXPECT_EQ(cap.Offer("/v1/completions", kCompletion), OfferDecision::kQueued);
  cap.Stop();
  auto lines = Lines(ReadFile(Path()));
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(lines[0], "{\"timestamp\":0,\"payload\":" + std::string(kChatCompact) + "}");
  Json second = Json::parse(lines[1]);
  EXPECT_GE(second["timestamp"].get<int64_t>(), 540);
  EXPECT_LT(second["timestamp"].get<int64_t>(), 1540);
  EXPECT_EQ(second["payload"], Json::parse(kCompletion));
  auto c = cap.counters();
  EXPECT_EQ(c.offered, 2u);
  EXPECT_EQ(c.recorded, 2u);
  EXPECT_EQ(c.bytes_written, ReadFile(Path()).size());
  ExpectAccounted(c);
}

TEST_F(CaptureTest, RawPayloadIsTheBodyAlone) {
  CaptureOptions o = Options();
  o.config.format = CaptureFormat::kRawPayload;
  Capture cap(o);
  ASSERT_TRUE(cap.Start().ok());
  EXPECT_EQ(cap.Offer("/v1/chat/completions", kChat), OfferDecision::kQueued);
  cap.Stop();
  EXPECT_EQ(ReadFile(Path()), std::string(kChatCompact) + "\n");
}

// The row of a request with a session id: the payload as always, then "session_id" last.
std::string SessionRow(int64_t ts, std::string_view compact, std::string_view escaped_id) {
  return "{\"timestamp\":" + std::to_string(ts) + ",\"payload\":" + std::string(compact) +
         ",\"session_id\":\"" + std::string(escaped_id) + "\"}";
}
std::string PlainRow(int64_t ts, std::string_view compact) {
  return "{\"timestamp\":" + std::to_string(ts) + ",\"payload\":" + std::string(compact) + "}";
}

TEST_F(CaptureTest, SessionIdsFromHeadersThenFieldsAndRowsWithoutOneUnchanged) {
  CaptureOptions o = Options();
  o.config.session_headers = {"x-session-id", "x-conversation-id"};
  o.config.session_fields = {"user", "metadata.session_id"};
  Capture cap(o);
  ASSERT_TRUE(cap.Start().ok());
  EXPECT_TRUE(cap.wants_headers());
  const std::string with_user = R"({"model":"m","prompt":"hi","user":"alice"})";
  const std::string with_meta = R"({"model":"m","prompt":"hi","metadata":{"session_id":7}})";
  const HeaderPairs both({{"X-Conversation-Id", "conv-2"}, {"X-Session-Id", "sess-1"}});
  const HeaderPairs second({{"x-conversation-id", "conv-2"}});
  const HeaderPairs none({{"authorization", "Bearer secret"}});
  OfferContext ctx;
  uint64_t ticket = 0;
  auto offer = [&](const RequestHeaders* h, std::string_view body, std::string_view id = {}) {
    ctx.headers = h;
    ctx.session_id = id;
    EXPECT_EQ(cap.Offer("/v1/completions", body, ctx, &ticket), OfferDecision::kQueued);
  };
  offer(&both, with_user);             // 1: the first header wins over the other and the body
  offer(&second, with_user);           // 2: the second header, still before the body
  offer(&none, with_user);             // 3: no header: the first field
  offer(nullptr, with_meta);           // 4: the second field, an integer
  offer(&none, kCompletion);           // 5: none at all: today's row, byte for byte
  offer(&both, with_user, "host-id");  // 6: the host's own id comes first
  EXPECT_EQ(cap.Offer("/v1/completions", with_user), OfferDecision::kQueued);  // 7: no context
  cap.Stop();
  const std::string compact_completion = R"({"model":"m","prompt":"hi","max_tokens":64})";
  EXPECT_EQ(Lines(ReadFile(Path())),
            (std::vector<std::string>{
                SessionRow(0, with_user, "sess-1"), SessionRow(0, with_user, "conv-2"),
                SessionRow(0, with_user, "alice"), SessionRow(0, with_meta, "7"),
                PlainRow(0, compact_completion), SessionRow(0, with_user, "host-id"),
                SessionRow(0, with_user, "alice")}));
  const auto c = cap.counters();
  EXPECT_EQ(c.recorded, 7u);
  EXPECT_EQ(c.with_session_id, 6u);
  EXPECT_EQ(c.bytes_written, ReadFile(Path()).size());
  ExpectAccounted(c);  // queue bytes come back to 0 although the writer lengthened rows
  Json m = Json::parse(ReadFile(ManifestPathFor(Path())));
  EXPECT_EQ(m["counters"]["with_session_id"], 6);
  EXPECT_EQ(m["config"]["session_headers"], "x-session-id,x-conversation-id");
  EXPECT_EQ(m["config"]["session_fields"], "user,metadata.session_id");
  const Json row = Json::parse(Lines(ReadFile(Path()))[0]);
  EXPECT_EQ(row["payload"], Json::parse(with_user));
  EXPECT_EQ(row["session_id"], "sess-1");
}

TEST_F(CaptureTest, SessionIdsAreCappedEscapedAndNeverLogged) {
  CaptureOptions o = Options();
  o.config.session_headers = {"x-session-id"};
  o.config.session_fields = {"user"};
  o.config.max_queue_bytes = 1 << 20;
  Capture cap(o);
  ASSERT_TRUE(cap.Start().ok());
  const std::string secret = "SECRET-\"quoted\"\n" + std::string(300, 'z');
  const HeaderPairs h({{"x-session-id", secret}});
  OfferContext ctx{.headers = &h, .session_id = {}};
  uint64_t ticket = 0;
  cap.Offer("/v1/completions", kCompletion, ctx, &ticket);
  const std::string body_secret =
      R"({"prompt":"p","user":"SECRET-\u00e9\"x)" + std::string(300, 'y') + "\"}";
  cap.Offer("/v1/completions", body_secret);
  cap.Offer("/v1/completions", "not json SECRET", ctx, &ticket);  // warned about, no id shown
  cap.Stop();
  const auto lines = Lines(ReadFile(Path()));
  ASSERT_EQ(lines.size(), 2u);
  // 256 bytes of the value, escaped as JSON.
  const std::string kept = secret.substr(0, 256);
  EXPECT_EQ(Json::parse(lines[0])["session_id"], kept);
  EXPECT_EQ(lines[0].substr(lines[0].find(",\"session_id\"")),
            R"(,"session_id":"SECRET-\"quoted\"\n)" + std::string(256 - 16, 'z') + "\"}");
  const std::string decoded = "SECRET-é\"x" + std::string(300, 'y');
  EXPECT_EQ(Json::parse(lines[1])["session_id"], decoded.substr(0, 256));
  EXPECT_EQ(Json::parse(lines[1])["payload"], Json::parse(body_secret));
  EXPECT_EQ(logger_.Count("not a JSON object"), 1);
  EXPECT_EQ(logger_.Count("SECRET"), 0);
}

TEST_F(CaptureTest, NoSessionSettingsNoIdFromHeadersAndRawRowsNeverCarryOne) {
  {
    Capture cap(Options());
    ASSERT_TRUE(cap.Start().ok());
    EXPECT_FALSE(cap.wants_headers());
    const HeaderPairs h({{"x-session-id", "s"}});
    OfferContext ctx{.headers = &h, .session_id = {}};
    uint64_t ticket = 0;
    cap.Offer("/v1/completions", R"({"prompt":"p","user":"u"})", ctx, &ticket);
    cap.Stop();
    EXPECT_EQ(ReadFile(Path()), PlainRow(0, R"({"prompt":"p","user":"u"})") + "\n");
    EXPECT_EQ(cap.counters().with_session_id, 0u);
  }
  CaptureOptions o = Options("raw.jsonl");
  o.config.format = CaptureFormat::kRawPayload;
  o.config.session_headers = {"x-session-id"};
  o.config.session_fields = {"user"};
  Capture cap(o);
  ASSERT_TRUE(cap.Start().ok());
  EXPECT_FALSE(cap.wants_headers());
  const HeaderPairs h({{"x-session-id", "s"}});
  OfferContext ctx{.headers = &h, .session_id = "host"};
  uint64_t ticket = 0;
  cap.Offer("/v1/completions", R"({"prompt":"p","user":"u"})", ctx, &ticket);
  cap.Stop();
  EXPECT_EQ(ReadFile(Path("raw.jsonl")), std::string(R"({"prompt":"p","user":"u"})") + "\n");
  EXPECT_EQ(cap.counters().with_session_id, 0u);
}

TEST_F(CaptureTest, DecisionChainOutcomes) {
  CaptureOptions o = Options();
  o.config.max_request_bytes = 64;
  Capture cap(o);
  ASSERT_TRUE(cap.Start().ok());
  EXPECT_EQ(cap.Offer("/v1/models", "{}"), OfferDecision::kNotMatched);
  EXPECT_EQ(cap.Offer("/v1/chat/completions/x", "{}"), OfferDecision::kNotMatched);
  EXPECT_EQ(cap.Offer("/v2/v1/completions", "{}"), OfferDecision::kNotMatched);
  EXPECT_EQ(cap.Offer("/v1/completions?api-version=1", kCompletion), OfferDecision::kQueued);
  EXPECT_EQ(cap.Offer("/v1/chat/completions", kChat), OfferDecision::kTooLarge);
  EXPECT_EQ(cap.Offer("/v1/chat/completions", "[1,2]"), OfferDecision::kInvalidBody);
  EXPECT_EQ(cap.Offer("/v1/chat/completions", "{\"a\":"), OfferDecision::kInvalidBody);
  EXPECT_EQ(cap.Offer("/v1/chat/completions", ""), OfferDecision::kInvalidBody);
  cap.Stop();
  auto c = cap.counters();
  EXPECT_EQ(c.offered, 8u);
  EXPECT_EQ(c.matched, 5u);
  EXPECT_EQ(c.recorded, 1u);
  EXPECT_EQ(c.skipped_too_large, 1u);
  EXPECT_EQ(c.invalid_body, 3u);
  ExpectAccounted(c);
}

TEST_F(CaptureTest, PathDecisionsAreExactPerCaptureAndPerPath) {
  // Two captures on one thread with different patterns: cached decisions must not leak.
  CaptureOptions chat_only = Options("chat.jsonl");
  chat_only.config.endpoint_pattern = "^/v1/chat/completions$";
  CaptureOptions completions_only = Options("completions.jsonl");
  completions_only.config.endpoint_pattern = "completions$";
  Capture a(chat_only), b(completions_only);
  ASSERT_TRUE(a.Start().ok());
  ASSERT_TRUE(b.Start().ok());
  const std::string long_path = "/v1/" + std::string(100, 'x') + "/chat/completions";
  for (int round = 0; round < 3; ++round) {
    EXPECT_EQ(a.Offer("/v1/chat/completions", "{}"), OfferDecision::kQueued);
    EXPECT_EQ(b.Offer("/v1/chat/completions", "{}"), OfferDecision::kQueued);
    EXPECT_EQ(a.Offer("/v1/completions", "{}"), OfferDecision::kNotMatched);
    EXPECT_EQ(b.Offer("/v1/completions", "{}"), OfferDecision::kQueued);
    EXPECT_EQ(a.Offer(long_path, "{}"), OfferDecision::kNotMatched);
    EXPECT_EQ(b.Offer(long_path, "{}"), OfferDecision::kQueued);
    EXPECT_EQ(a.Offer("/v1/chat/completionsX", "{}"), OfferDecision::kNotMatched);
    EXPECT_EQ(a.Offer("", "{}"), OfferDecision::kNotMatched);
  }
}

TEST_F(CaptureTest, DisabledCaptureTouchesNothing) {
  CaptureOptions o = Options();
  o.enabled = false;
  Capture cap(o);
  EXPECT_TRUE(cap.Start().ok());
  EXPECT_EQ(cap.Offer("/v1/chat/completions", kChat), OfferDecision::kDisabled);
  cap.Stop();
  EXPECT_FALSE(fs::exists(Path()));
  EXPECT_FALSE(fs::exists(ManifestPathFor(Path())));
  EXPECT_EQ(cap.counters().offered, 0u);
}

TEST_F(CaptureTest, OfferBeforeStartOrAfterStopIsNotRecorded) {
  Capture cap(Options());
  EXPECT_EQ(cap.Offer("/v1/chat/completions", kChat), OfferDecision::kDisabled);
  ASSERT_TRUE(cap.Start().ok());
  cap.Stop();
  cap.Stop();  // idempotent
  EXPECT_EQ(cap.Offer("/v1/chat/completions", kChat), OfferDecision::kDisabled);
  EXPECT_EQ(ReadFile(Path()), "");
}

TEST_F(CaptureTest, SizeLimitBoundaryAtOneMebibyte) {
  Capture cap(Options());
  ASSERT_TRUE(cap.Start().ok());
  const std::string head = R"({"model":"m","prompt":")";
  const std::string tail = R"("})";
  for (int64_t delta : {-1, 0, 1}) {
    const size_t size = static_cast<size_t>(CaptureConfig::kDefaultMaxRequestBytes + delta);
    std::string body = head + std::string(size - head.size() - tail.size(), 'x') + tail;
    ASSERT_EQ(body.size(), size);
    EXPECT_EQ(cap.Offer("/v1/completions", body),
              delta <= 0 ? OfferDecision::kQueued : OfferDecision::kTooLarge)
        << delta;
  }
  cap.Stop();
  auto lines = Lines(ReadFile(Path()));
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(cap.counters().skipped_too_large, 1u);
  ExpectAccounted(cap.counters());
}

TEST_F(CaptureTest, SampleRateZeroRecordsNothingAndHalfIsBernoulli) {
  CaptureOptions o = Options();
  o.config.sample_rate = 0.0;
  {
    Capture cap(o);
    ASSERT_TRUE(cap.Start().ok());
    for (int i = 0; i < 100; ++i)
      EXPECT_EQ(cap.Offer("/v1/completions", kCompletion), OfferDecision::kSampledOut);
    cap.Stop();
    EXPECT_EQ(ReadFile(Path()), "");
  }
  o.config.sample_rate = 0.25;
  o.config.path = Path("half.jsonl");
  Capture cap(o);
  ASSERT_TRUE(cap.Start().ok());
  const int n = 20000;
  for (int i = 0; i < n; ++i) cap.Offer("/v1/completions", kCompletion);
  cap.Stop();
  auto c = cap.counters();
  // Binomial(20000, 0.25): sd ~ 61; 6 sd is a bound that does not flake.
  EXPECT_NEAR(static_cast<double>(c.recorded), n * 0.25, 6 * 61.2);
  EXPECT_EQ(c.recorded + c.sampled_out, static_cast<uint64_t>(n));
  ExpectAccounted(c);
}

TEST_F(CaptureTest, CorpusIsRecordedVerbatimOrCountedUnderTheRightReason) {
  const char* src = std::getenv("LLMTAP_SOURCE_DIR");
  ASSERT_NE(src, nullptr);
  const fs::path corpus = fs::path(src) / "tests/data/requests";
  std::ifstream expected(corpus / "EXPECTED.tsv");
  ASSERT_TRUE(expected.good());
  Capture cap(Options());
  ASSERT_TRUE(cap.Start().ok());
  std::vector<std::string> recorded_bodies;
  uint64_t invalid = 0;
  std::string line;
  while (std::getline(expected, line)) {
    if (line.empty() || line[0] == '#') continue;
    std::string file = line.substr(0, line.find('\t'));
    std::string outcome = line.substr(line.find('\t') + 1);
    if (file == "file") continue;  // header
    std::string body = ReadFile(corpus / file);
    OfferDecision got = cap.Offer("/v1/chat/completions", body);
    if (outcome == "ok") {
      EXPECT_EQ(got, OfferDecision::kQueued) << file;
      recorded_bodies.push_back(body);
    } else {
      EXPECT_EQ(got, OfferDecision::kInvalidBody) << file;
      ++invalid;
    }
  }
  ASSERT_GE(recorded_bodies.size(), 8u);
  cap.Stop();
  auto lines = Lines(ReadFile(Path()));
  ASSERT_EQ(lines.size(), recorded_bodies.size());
  for (size_t i = 0; i < lines.size(); ++i) {
    // Byte-identical to the body without insignificant whitespace: same values, same key
    // order, same escapes and number spellings.
    const std::string prefix = "{\"timestamp\":";
    ASSERT_TRUE(lines[i].starts_with(prefix)) << i;
    const size_t payload_at = lines[i].find(",\"payload\":") + 11;
    EXPECT_EQ(lines[i].substr(payload_at, lines[i].size() - payload_at - 1),
              StripInsignificantWhitespace(recorded_bodies[i]))
        << i;
    EXPECT_EQ(lines[i].find('\r'), std::string::npos);
    // And, where nlohmann can represent every number, the same JSON value in the same order.
    Json body = Json::parse(recorded_bodies[i], nullptr, /*allow_exceptions=*/false);
    if (!body.is_discarded()) {
      EXPECT_EQ(Json::parse(lines[i])["payload"], body) << i;
    }
  }
  EXPECT_EQ(cap.counters().invalid_body, invalid);
  ExpectAccounted(cap.counters());
}

TEST_F(CaptureTest, EightThreadsOfferWhileWriterIsStalled) {
  CaptureOptions o = Options();
  o.config.max_request_bytes = 4096;
  o.config.max_queue_bytes = 64 * 1024;
  Capture cap(o);
  ASSERT_TRUE(cap.Start().ok());
  // Stall the disk with one record in the writer's hands.
  env_.Stall();
  ASSERT_EQ(cap.Offer("/v1/completions", kCompletion), OfferDecision::kQueued);
  while (env_.blocked_writes() == 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));

  constexpr int kThreads = 8;
  constexpr int kPerThread = 2000;
  std::atomic<int> queued{0}, dropped{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kPerThread; ++i) {
        std::string body = R"({"model":"m","prompt":"thread )" + std::to_string(t) + " req " +
                           std::to_string(i) + R"(","max_tokens":16})";
        switch (cap.Offer("/v1/completions", body)) {
          case OfferDecision::kQueued:
            ++queued;
            break;
          case OfferDecision::kDroppedQueueFull:
            ++dropped;
            break;
          default:
            ADD_FAILURE() << "unexpected outcome";
        }
      }
    });
  }
  // Every offer returns while the writer is still blocked on disk.
  for (auto& th : threads) th.join();
  EXPECT_EQ(env_.blocked_writes(), 1);
  EXPECT_EQ(queued + dropped, kThreads * kPerThread);
  EXPECT_GT(dropped.load(), 0);
  auto mid = cap.counters();
  EXPECT_EQ(mid.dropped_queue_full, static_cast<uint64_t>(dropped.load()));
  EXPECT_EQ(mid.queued_records, static_cast<uint64_t>(queued.load()) + 1);
  EXPECT_LE(mid.queue_bytes, static_cast<uint64_t>(o.config.max_queue_bytes));
  EXPECT_EQ(mid.Unaccounted(), 0);

  env_.Unstall();
  cap.Stop();
  auto lines = Lines(ReadFile(Path()));
  EXPECT_EQ(lines.size(), static_cast<size_t>(queued.load()) + 1);
  int64_t last_ts = -1;
  for (const auto& l : lines) {
    Json rec = Json::parse(l);
    EXPECT_GE(rec["timestamp"].get<int64_t>(), last_ts);
    last_ts = rec["timestamp"].get<int64_t>();
  }
  auto c = cap.counters();
  EXPECT_EQ(c.recorded, lines.size());
  ExpectAccounted(c);
}

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
  env_.SetWriteDelay(std::chrono::microseconds(20000));
  CaptureOptions o = Options();
  Capture cap(o);
  ASSERT_TRUE(cap.Start().ok());
  for (int i = 0; i < 200; ++i)
    EXPECT_EQ(cap.Offer("/v1/completions", kCompletion), OfferDecision::kQueued);
  // Group commit: 200 records need far fewer than 200 writes.
  cap.Stop();
  EXPECT_EQ(cap.counters().recorded, 200u);
  EXPECT_LT(env_.writes(), 50);
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
              ::testing::MatchesRegex(R"(requests\.[0-9]{8}T[0-9]{6}Z\.jsonl)"));
  EXPECT_EQ(ReadFile(aside[0]), "{\"timestamp\":0,\"payload\":{\"a\":1}}\n");
  EXPECT_EQ(ReadFile(ManifestPathFor(aside[0].string())), "{}");
  EXPECT_GE(logger_.Count("torn"), 1);
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
  EXPECT_NEAR(m["timestamp_zero_unix_ms"].get<double>(), static_cast<double>(before_ms), 5000);
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
  for (int i = 0; i < 500; ++i) {
    m = Json::parse(ReadFile(ManifestPathFor(Path())));
    if (m["counters"]["recorded"] == 1) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  EXPECT_EQ(m["counters"]["recorded"], 1);
  EXPECT_EQ(m["state"], "running");
  cap.Stop();
}

TEST_F(CaptureTest, LogsNeverContainPayloadAndAreRateLimited) {
  CaptureOptions o = Options();
  o.config.max_request_bytes = 100;
  o.config.max_queue_bytes = 100;
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
  EXPECT_EQ(AsideName("requests.jsonl", 0, 0), "requests.19700101T000000Z.jsonl");
  EXPECT_EQ(AsideName("/x.d/requests", 0, 2), "/x.d/requests.19700101T000000Z-2");
  EXPECT_EQ(ManifestPathFor("/c/r.jsonl"), "/c/r.jsonl.manifest.json");
}

// --- Rotation and the outcomes sidecar ---

// Waits (up to 5 s) until `done` holds.
template <typename F>
bool WaitUntil(F done) {
  for (int i = 0; i < 5000 && !done(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return done();
}

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
  CaptureOptions o = Options();
  o.config.rotate_ms = 100;
  Capture cap(o);
  ASSERT_TRUE(cap.Start().ok());
  EXPECT_EQ(cap.Offer("/v1/chat/completions", kChat), OfferDecision::kQueued);
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

TEST_F(CaptureTest, AnOutcomeArrivingAfterRotationGoesToItsRecordsFile) {
  CaptureOptions o = Options();
  o.config.outcomes = true;
  o.config.rotate_bytes = 10;  // every file takes exactly one record
  Capture cap(o);
  ASSERT_TRUE(cap.Start().ok());
  uint64_t a = 0, b = 0;
  cap.Offer("/v1/chat/completions", kChat, &a);
  ASSERT_TRUE(WaitUntil([&] { return cap.counters().recorded == 1; }));
  env_.AdvanceClock(std::chrono::seconds(2));
  cap.Offer("/v1/completions", kCompletion, &b);
  ASSERT_TRUE(WaitUntil([&] { return cap.counters().files_rotated == 1; }));
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

TEST_F(CaptureTest, OlderOutcomesSidecarIsMovedAsideWithItsCapture) {
  { std::ofstream(Path()) << "{\"timestamp\":0,\"payload\":{}}\n"; }
  { std::ofstream(OutcomesPathFor(Path())) << "{\"line\":1}\n"; }
  CaptureOptions o = Options();
  o.config.outcomes = true;
  Capture cap(o);
  ASSERT_TRUE(cap.Start().ok());
  uint64_t t = 0;
  cap.Offer("/v1/completions", kCompletion, &t);
  cap.ReportOutcome(t, MakeOutcome(200, 1, 2, 3, 4, "stop"));
  cap.Stop();
  EXPECT_EQ(Lines(ReadFile(OutcomesPathFor(Path()))).size(), 1u);
  int asides = 0;
  for (const auto& e : fs::directory_iterator(dir_)) {
    const std::string name = e.path().filename().string();
    if (name != "requests.jsonl.outcomes.jsonl" &&
        name.find(".outcomes.jsonl") != std::string::npos) {
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
  AppendOutcomeLine(1, 0, o, &line);
  EXPECT_TRUE(Json::accept(line)) << line;
  EXPECT_EQ(Json::parse(line)["finish_reason"], "st\"op??");
}

TEST(RotatedNameTest, MillisecondTimeOfTheFirstRecord) {
  EXPECT_EQ(RotatedName("/c/requests.jsonl", 1234567, 0), "/c/requests.19700101T000000.001Z.jsonl");
  EXPECT_EQ(RotatedName("/c/requests.jsonl", 0, 3), "/c/requests.19700101T000000.000Z-3.jsonl");
  EXPECT_EQ(OutcomesPathFor("/c/r.jsonl"), "/c/r.jsonl.outcomes.jsonl");
}

}  // namespace
}  // namespace llmtap
