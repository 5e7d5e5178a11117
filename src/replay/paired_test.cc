// --paired-url: the response meter's kept output (what a pair line compares), and the runner
// sending every row to two servers, the pair as the unit of --max-concurrency, with each
// server's own headers.
#include <sys/socket.h>

#include <chrono>
#include <condition_variable>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/string_body.hpp>
#include <boost/beast/http/write.hpp>
#include <nlohmann/json.hpp>

#include "common/testing/temp_files.h"
#include "replay/lookahead.h"
#include "replay/response.h"
#include "replay/runner.h"
#include "replay/stream_test_util.h"

namespace llmtap::replay {
namespace {

namespace pasio = boost::asio;
namespace phttp = boost::beast::http;
using PairClock = std::chrono::steady_clock;

TEST(PairedMeterTest, KeepsTheOutputTheFinishReasonAndTheTokens) {
  api::DocumentReader reader;
  ResponseMeter m;
  const auto t0 = Clock::now();
  m.Begin(t0, api::Endpoint::kChat);
  m.KeepOutput(1 << 20);
  m.OnHead(200, true);
  const std::string events =
      "data: {\"choices\":[{\"index\":0,\"delta\":{\"reasoning_content\":\"hm\"}}]}\n\n"
      "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hel\"}}]}\n\n"
      "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"lo\"}}]}\n\n"
      "data: {\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":1,\"function\":"
      "{\"name\":\"f\",\"arguments\":\"{\\\"a\\\"\"}}]}}]}\n\n"
      "data: {\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"function\":"
      "{\"name\":\"g\",\"arguments\":\"{}\"}}]}}]}\n\n"
      "data: {\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":1,\"function\":"
      "{\"arguments\":\":1}\"}}]}}]}\n\n"
      "data: {\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"tool_calls\"}]}\n\n"
      "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":5,\"completion_tokens\":7}}\n\n"
      "data: [DONE]\n\n";
  m.OnBody(events, t0 + std::chrono::milliseconds(5), &reader);
  RequestResult r;
  m.Finish(true, t0 + std::chrono::milliseconds(9), "{}", nullptr, &reader, &r);
  EXPECT_EQ(r.error, ErrorKind::kNone);
  ResponseOutcome o;
  m.TakeOutcome(nullptr, &o);
  EXPECT_EQ(o.status, 200);
  EXPECT_EQ(o.prompt_tokens, 5);
  EXPECT_EQ(o.completion_tokens, 7);
  EXPECT_STREQ(o.finish_reason, "tool_calls");
  EXPECT_TRUE(o.has_response);
  EXPECT_EQ(o.response.text, "Hello");
  EXPECT_EQ(o.response.reasoning, "hm");
  ASSERT_EQ(o.response.tool_calls.size(), 2u);  // in index order
  EXPECT_EQ(o.response.tool_calls[0].name, "g");
  EXPECT_EQ(o.response.tool_calls[1].name, "f");
  EXPECT_EQ(o.response.tool_calls[1].arguments, "{\"a\":1}");
  EXPECT_FALSE(o.response.truncated);

  // A failed side has no output to compare, whatever it read.
  ResponseOutcome failed;
  m.TakeOutcome("reset", &failed);
  EXPECT_FALSE(failed.has_response);
  EXPECT_STREQ(failed.error, "reset");
}

TEST(PairedMeterTest, CutsTheKeptOutputAtACharacterBoundary) {
  api::DocumentReader reader;
  ResponseMeter m;
  const auto t0 = Clock::now();
  m.Begin(t0, api::Endpoint::kCompletions);
  m.KeepOutput(4);
  m.OnHead(200, false);
  m.OnBody("{\"choices\":[{\"index\":0,\"text\":\"ab\xc3\xa9z\",\"finish_reason\":\"stop\"}]}", t0,
           &reader);
  RequestResult r;
  m.Finish(true, t0, "{}", nullptr, &reader, &r);
  ResponseOutcome o;
  m.TakeOutcome(nullptr, &o);
  EXPECT_EQ(o.response.text, "ab\xc3\xa9");
  EXPECT_TRUE(o.response.truncated);
  EXPECT_STREQ(o.finish_reason, "stop");

  // Without KeepOutput nothing is kept.
  ResponseMeter plain;
  plain.Begin(t0, api::Endpoint::kCompletions);
  plain.OnHead(200, false);
  plain.OnBody("{\"choices\":[{\"index\":0,\"text\":\"x\"}]}", t0, &reader);
  plain.Finish(true, t0, "{}", nullptr, &reader, &r);
  ResponseOutcome p;
  plain.TakeOutcome(nullptr, &p);
  EXPECT_TRUE(p.response.text.empty());
}

// A server answering each request `delay` after reading it, recording when it read it and when
// it answered, and the request's Authorization header.
class PairTestServer {
 public:
  struct Seen {
    std::string body;
    std::string authorization;
    PairClock::time_point read, answered;
  };

  explicit PairTestServer(std::chrono::milliseconds delay)
      : delay_(delay), acceptor_(ioc_, {pasio::ip::make_address("127.0.0.1"), 0}) {
    port_ = acceptor_.local_endpoint().port();
    thread_ = std::thread([this] { Accept(); });
  }
  ~PairTestServer() {
    ::shutdown(acceptor_.native_handle(), SHUT_RDWR);
    thread_.join();
    {
      std::lock_guard lock(mu_);
      for (int fd : fds_) ::shutdown(fd, SHUT_RDWR);
    }
    for (std::thread& t : connections_) t.join();
  }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }
  std::vector<Seen> seen() {
    std::lock_guard lock(mu_);
    return seen_;
  }

 private:
  void Accept() {
    for (;;) {
      pasio::ip::tcp::socket socket(ioc_);
      boost::system::error_code ec;
      acceptor_.accept(socket, ec);
      if (ec) return;
      std::lock_guard lock(mu_);
      fds_.push_back(socket.native_handle());
      connections_.emplace_back(
          [this, s = std::make_shared<pasio::ip::tcp::socket>(std::move(socket))] { Serve(*s); });
    }
  }
  void Serve(pasio::ip::tcp::socket& socket) {
    boost::beast::flat_buffer buffer;
    for (;;) {
      phttp::request<phttp::string_body> req;
      boost::system::error_code ec;
      phttp::read(socket, buffer, req, ec);
      if (ec) return;
      Seen s{req.body(), std::string(req[phttp::field::authorization]), PairClock::now(), {}};
      std::this_thread::sleep_for(delay_);
      phttp::response<phttp::string_body> res{phttp::status::ok, 11};
      res.set(phttp::field::content_type, "application/json");
      res.body() =
          R"({"choices":[{"index":0,"text":"ok","finish_reason":"stop"}],"usage":{"prompt_tokens":3,"completion_tokens":1}})";
      res.keep_alive(req.keep_alive());
      res.prepare_payload();
      s.answered = PairClock::now();
      {
        std::lock_guard lock(mu_);
        seen_.push_back(std::move(s));
      }
      phttp::write(socket, res, ec);
      if (ec) return;
    }
  }

  const std::chrono::milliseconds delay_;
  pasio::io_context ioc_;
  pasio::ip::tcp::acceptor acceptor_;
  uint16_t port_ = 0;
  std::thread thread_;
  std::mutex mu_;
  std::vector<int> fds_;
  std::vector<std::thread> connections_;
  std::vector<Seen> seen_;
};

TEST(PairedRunnerTest, EveryRowGoesToBothServersAndThePairHoldsItsSlotUntilBothEnded) {
  constexpr size_t kRows = 12;
  llmtap::testing::TempFile file(stream_test_util::PayloadTrace(kRows));
  Lookahead::Options in = stream_test_util::InputOf(file.path());
  // Every row due at once: --max-concurrency 1 holds all but one.
  in.schedule.speedup = 1000;
  PairTestServer primary(std::chrono::milliseconds(0));
  PairTestServer paired(std::chrono::milliseconds(20));
  Lookahead input(in);
  std::string error;
  ASSERT_TRUE(input.Start(&error)) << error;
  input.WaitPrimed(1000, 5000);
  RunOptions run;
  run.url = primary.url();
  run.paired_url = paired.url();
  run.headers = {"Authorization: Bearer primary", "X-Other: 1"};
  run.paired_headers = {"authorization: Bearer paired"};
  run.threads = 2;
  run.max_concurrency = 1;
  std::vector<RequestResult> results;
  std::vector<PairRecord> pairs;
  run.on_results = [&](std::vector<RequestResult>& ended) {
    for (RequestResult& r : ended) results.push_back(std::move(r));
  };
  run.on_pairs = [&](std::vector<PairRecord>& ended) {
    for (PairRecord& p : ended) pairs.push_back(std::move(p));
  };
  RunOutcome outcome;
  ASSERT_TRUE(RunPlan(input, run, nullptr, &outcome, &error)) << error;
  input.Stop();

  ASSERT_EQ(results.size(), kRows);
  ASSERT_EQ(pairs.size(), kRows);
  std::map<int64_t, nlohmann::json> by_request;
  for (const PairRecord& p : pairs) {
    const nlohmann::json j = nlohmann::json::parse(p.line);
    by_request[j["request"].get<int64_t>()] = j;
    EXPECT_FALSE(p.candidate_failed);
    EXPECT_TRUE(p.compared && p.equal) << p.line;
    EXPECT_EQ(j["line"], j["request"].get<int64_t>() + 1);
    EXPECT_EQ(j["timestamp"], 1000 + j["request"].get<int64_t>());
    EXPECT_EQ(j["path"], "/v1/completions");
    EXPECT_EQ(j["model"], "m");
    EXPECT_EQ(j["candidate"]["finish_reason"], "stop");
    // The paired server answers 20 ms after reading: its side is the later one.
    EXPECT_GE(j["candidate"]["latency_ms"].get<double>(), 20.0) << p.line;
  }
  EXPECT_EQ(by_request.size(), kRows);

  const std::vector<PairTestServer::Seen> a = primary.seen(), b = paired.seen();
  ASSERT_EQ(a.size(), kRows);
  ASSERT_EQ(b.size(), kRows);
  for (size_t i = 0; i < kRows; ++i) {
    // The same bodies, in the same order (one pair at a time).
    EXPECT_EQ(a[i].body, b[i].body) << i;
    EXPECT_EQ(a[i].authorization, "Bearer primary");
    EXPECT_EQ(b[i].authorization, "Bearer paired");
    // The next row went out only once both sides of this one had answered, though the primary
    // answers at once: both servers see one request at a time.
    if (i + 1 < kRows) {
      EXPECT_GE(a[i + 1].read, b[i].answered) << i;
      EXPECT_GE(b[i + 1].read, b[i].answered) << i;
    }
  }
}

TEST(PairedRunnerTest, APairedHeaderThatIsNotAHeaderIsAUsageError) {
  llmtap::testing::TempFile file(stream_test_util::PayloadTrace(2));
  Lookahead input(stream_test_util::InputOf(file.path()));
  std::string error;
  ASSERT_TRUE(input.Start(&error)) << error;
  RunOptions run;
  run.url = "http://127.0.0.1:9";
  run.paired_url = "http://127.0.0.1:9";
  run.paired_headers = {"no colon"};
  RunOutcome outcome;
  EXPECT_FALSE(RunPlan(input, run, nullptr, &outcome, &error));
  EXPECT_NE(error.find("--paired-header"), std::string::npos) << error;
  input.Stop();

  Lookahead input2(stream_test_util::InputOf(file.path()));
  ASSERT_TRUE(input2.Start(&error)) << error;
  run.paired_headers.clear();
  run.paired_url = "http://127.0.0.1:99999";
  EXPECT_FALSE(RunPlan(input2, run, nullptr, &outcome, &error));
  EXPECT_NE(error.find("--paired-url"), std::string::npos) << error;
  input2.Stop();
}

}  // namespace
}  // namespace llmtap::replay
