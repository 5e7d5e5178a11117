// Capture core: the decision chain, its records, session ids, sampling, concurrent offers.
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

TEST_F(CaptureTest, RecordsMooncakeLinesWithCompactPayloadAndTimestamps) {
  Capture cap(Options());
  ASSERT_TRUE(cap.Start().ok());
  const auto before = std::chrono::steady_clock::now();
  EXPECT_EQ(cap.Offer("/v1/chat/completions", kChat), OfferDecision::kQueued);
  env_.AdvanceClock(std::chrono::milliseconds(540));
  EXPECT_EQ(cap.Offer("/v1/completions", kCompletion), OfferDecision::kQueued);
  // The real time between the two offers, at most (this thread may have been paused meanwhile).
  const int64_t between_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                                 std::chrono::steady_clock::now() - before)
                                 .count();
  cap.Stop();
  auto lines = Lines(ReadFile(Path()));
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(lines[0], "{\"timestamp\":0,\"payload\":" + std::string(kChatCompact) + "}");
  Json second = Json::parse(lines[1]);
  EXPECT_GE(second["timestamp"].get<int64_t>(), 540);
  EXPECT_LE(second["timestamp"].get<int64_t>(), 540 + between_ms + 1);
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

// A row for an API other than chat or completions names it (AIPerf's endpoint type) after its
// payload, before any session id (session_fields from the body still found); chat and
// completions rows, and raw_payload rows, are as before.
TEST_F(CaptureTest, RowsOfOtherApisNameTheirEndpointType) {
  CaptureOptions o = Options();
  o.config.endpoint_pattern = ".*";
  o.config.session_fields = {"metadata.user_id"};
  Capture cap(o);
  ASSERT_TRUE(cap.Start().ok());
  const std::string messages =
      R"({"model":"m","max_tokens":8,"system":"s","metadata":{"user_id":"u1"},"messages":[]})";
  const std::string embeddings = R"({"model":"m","input":"x"})";
  const std::string rerank = R"({"query":"q","documents":["a"]})";
  EXPECT_EQ(cap.Offer("/v1/messages?beta=true", messages), OfferDecision::kQueued);
  EXPECT_EQ(cap.Offer("/v1/embeddings", embeddings), OfferDecision::kQueued);
  EXPECT_EQ(cap.Offer("/v2/rerank", rerank), OfferDecision::kQueued);
  EXPECT_EQ(cap.Offer("/v1/responses", embeddings), OfferDecision::kQueued);
  EXPECT_EQ(cap.Offer("/v1/chat/completions", R"({"messages":[]})"), OfferDecision::kQueued);
  EXPECT_EQ(cap.Offer("/generate", embeddings), OfferDecision::kQueued);
  cap.Stop();
  EXPECT_EQ(
      Lines(ReadFile(Path())),
      (std::vector<std::string>{
          "{\"timestamp\":0,\"payload\":" + messages +
              ",\"endpoint_type\":\"messages\",\"session_id\":\"u1\"}",
          "{\"timestamp\":0,\"payload\":" + embeddings + ",\"endpoint_type\":\"embeddings\"}",
          "{\"timestamp\":0,\"payload\":" + rerank + ",\"endpoint_type\":\"cohere_rankings\"}",
          "{\"timestamp\":0,\"payload\":" + embeddings + ",\"endpoint_type\":\"responses\"}",
          PlainRow(0, R"({"messages":[]})"), PlainRow(0, embeddings)}));
  ExpectAccounted(cap.counters());
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

// What a host that does not hold every body uses (the in-process middleware): WouldRecord says
// whose body to hold, and OfferOversized counts a body dropped past max_request_bytes as Offer
// counts one it was given.
TEST_F(CaptureTest, WouldRecordAndOfferOversizedCountAsOfferDoes) {
  CaptureOptions o = Options();
  o.config.max_request_bytes = 100;
  Capture cap(o);
  EXPECT_FALSE(cap.WouldRecord("/v1/completions"));  // not started
  ASSERT_TRUE(cap.Start().ok());
  EXPECT_TRUE(cap.WouldRecord("/v1/completions"));
  EXPECT_TRUE(cap.WouldRecord("/v1/chat/completions?x=1"));
  EXPECT_FALSE(cap.WouldRecord("/v1/models"));
  EXPECT_EQ(cap.OfferOversized("/v1/completions", 5000), OfferDecision::kTooLarge);
  EXPECT_EQ(cap.OfferOversized("/v1/completions", 3), OfferDecision::kTooLarge);
  EXPECT_EQ(cap.OfferOversized("/v1/models", 5000), OfferDecision::kNotMatched);
  cap.Stop();
  EXPECT_FALSE(cap.WouldRecord("/v1/completions"));
  const auto c = cap.counters();
  EXPECT_EQ(c.offered, 3u);
  EXPECT_EQ(c.matched, 2u);
  EXPECT_EQ(c.skipped_too_large, 2u);
  ExpectAccounted(c);
  CaptureOptions disabled = Options("off.jsonl");
  disabled.enabled = false;
  Capture off(disabled);
  EXPECT_FALSE(off.WouldRecord("/v1/completions"));
  EXPECT_EQ(off.OfferOversized("/v1/completions", 5000), OfferDecision::kDisabled);
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
  uint64_t non_standard = 0;
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
    } else if (outcome == "non_standard_json") {
      EXPECT_EQ(got, OfferDecision::kNonStandardJson) << file;
      ++non_standard;
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
  EXPECT_EQ(cap.counters().non_standard_json, non_standard);
  EXPECT_EQ(non_standard, 3u);  // nan.json, infinity.json, lone_surrogate.json
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

}  // namespace
}  // namespace llmtap
