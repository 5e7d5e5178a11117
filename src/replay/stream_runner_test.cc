// Streamed replay's runner against a recording server: schedule, sessions, interruption.
#include <fcntl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <csignal>
#include <fstream>
#include <map>
#include <mutex>
#include <numeric>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <gtest/gtest.h>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/string_body.hpp>
#include <boost/beast/http/write.hpp>
#include <nlohmann/json.hpp>

#include "common/testing/temp_files.h"
#include "replay/input.h"
#include "replay/lookahead.h"
#include "replay/runner.h"
#include "replay/schedule.h"
#include "replay/stream_test_util.h"
#include "replay/summary.h"
#include "replay/synthetic.h"
#include "report/summary.h"
#include "tokenizer/tokenizer.h"

namespace llmtap::replay {
namespace {

using llmtap::testing::TempFile;
using nlohmann::json;
namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using namespace stream_test_util;

// ---------------------------------------------------------------------------------------------
// The runner end to end, against a server that records what it receives (and answers each
// request `delay` after reading it; or, holding, only once released (Release, or its end), or
// after `kHoldLimit` at the latest: a run that waits for a held answer still ends, and the
// answers it got show that it waited).

class RecordingServer {
 public:
  struct Received {
    std::string target;
    std::string body;
  };

  static constexpr std::chrono::seconds kHoldLimit{120};

  explicit RecordingServer(std::chrono::milliseconds delay = {}, bool hold = false)
      : delay_(delay), hold_(hold), acceptor_(ioc_, {asio::ip::make_address("127.0.0.1"), 0}) {
    port_ = acceptor_.local_endpoint().port();
    thread_ = std::thread([this] { AcceptLoop(); });
  }
  ~RecordingServer() {
    Release();
    ::shutdown(acceptor_.native_handle(), SHUT_RDWR);
    thread_.join();
    {
      std::lock_guard lock(mu_);
      for (int fd : fds_) ::shutdown(fd, SHUT_RDWR);
    }
    for (std::thread& t : connections_) t.join();
  }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }
  std::vector<Received> received() {
    std::lock_guard lock(mu_);
    return received_;
  }
  // Waits (at most `limit`: a guard against a hang only) until `n` requests have been
  // received; whether they were.
  bool WaitReceived(size_t n, std::chrono::seconds limit = std::chrono::seconds(120)) {
    std::unique_lock lock(mu_);
    return received_cv_.wait_for(lock, limit, [&] { return received_.size() >= n; });
  }
  // Holding: lets every held answer (and every later one) go.
  void Release() {
    {
      std::lock_guard lock(mu_);
      released_ = true;
    }
    released_cv_.notify_all();
  }
  // Answers sent (or being sent) so far.
  size_t answered() {
    std::lock_guard lock(mu_);
    return answered_;
  }

 private:
  void AcceptLoop() {
    for (;;) {
      asio::ip::tcp::socket socket(ioc_);
      boost::system::error_code ec;
      acceptor_.accept(socket, ec);
      if (ec) return;
      std::lock_guard lock(mu_);
      fds_.push_back(socket.native_handle());
      connections_.emplace_back(
          [this, s = std::make_shared<asio::ip::tcp::socket>(std::move(socket))] { Serve(*s); });
    }
  }
  void Serve(asio::ip::tcp::socket& socket) {
    beast::flat_buffer buffer;
    for (;;) {
      http::request<http::string_body> req;
      boost::system::error_code ec;
      http::read(socket, buffer, req, ec);
      if (ec) return;
      {
        std::lock_guard lock(mu_);
        received_.push_back({std::string(req.target()), req.body()});
      }
      received_cv_.notify_all();
      std::this_thread::sleep_for(delay_);
      {
        std::unique_lock lock(mu_);
        if (hold_) released_cv_.wait_for(lock, kHoldLimit, [&] { return released_; });
        ++answered_;
      }
      http::response<http::string_body> res{http::status::ok, 11};
      res.set(http::field::content_type, "application/json");
      res.body() =
          R"({"choices":[{"index":0,"text":"ok"}],"usage":{"prompt_tokens":3,"completion_tokens":1}})";
      res.keep_alive(req.keep_alive());
      res.prepare_payload();
      http::write(socket, res, ec);
      if (ec) return;
    }
  }

  const std::chrono::milliseconds delay_;
  const bool hold_;
  asio::io_context ioc_;
  asio::ip::tcp::acceptor acceptor_;
  uint16_t port_ = 0;
  std::thread thread_;
  std::mutex mu_;
  std::condition_variable received_cv_;
  std::condition_variable released_cv_;
  bool released_ = false;
  size_t answered_ = 0;
  std::vector<int> fds_;
  std::vector<std::thread> connections_;
  std::vector<Received> received_;
};

struct Expected {
  std::string target;
  std::string body;
  double scheduled_ms;
  bool warmup;
};

TEST(RunnerTest, SendsWhatTheWholeTracePathSentOnItsSchedule) {
  // Mixed rows: chat and completion payloads, a raw row's twin with a timestamp, hashed rows.
  std::string text;
  for (int i = 0; i < 60; ++i) {
    const std::string ts = R"({"timestamp":)" + std::to_string(5000 + 3 * i + (i / 7) * 4);
    if (i % 4 == 0) {
      text += ts + R"(,"payload":{"model":"a","messages":[{"role":"user","content":"q)" +
              std::to_string(i) + R"("}],"stream":false}})";
    } else if (i % 4 == 1) {
      text += ts + R"(,"payload":{"model":"a","prompt":"p)" + std::to_string(i) + R"("}})";
    } else if (i % 4 == 2) {
      text += ts + R"(,"input_length":)" + std::to_string(30 + i) +
              R"(,"output_length":2,"hash_ids":[1,)" + std::to_string(i) + "]}";
    } else {
      text += ts + R"(,"payload":{"prompt":"x)" + std::to_string(i) + R"(","max_tokens":3}})";
    }
    text += "\n";
  }
  TempFile file(text);
  auto tok = Builtin();
  std::string error;
  auto synthetic = SyntheticPrompts::Make(*tok, 16, &error);
  ASSERT_TRUE(synthetic) << error;

  struct Case {
    const char* name;
    ScheduleOptions schedule;
    std::optional<uint32_t> max_concurrency;
  };
  std::vector<Case> cases;
  auto add = [&](const char* name, auto set) {
    Case c{name, ScheduleOptions(), std::nullopt};
    set(c);
    cases.push_back(c);
  };
  add("timestamps", [](Case& c) { c.schedule.speedup = 4; });
  add("window, warmup", [](Case& c) {
    c.schedule.speedup = 4;
    c.schedule.start_offset_ms = 20;
    c.schedule.end_offset_ms = 150;
    c.schedule.warmup = 3;
  });
  add("shard 1/3", [](Case& c) {
    c.schedule.speedup = 4;
    c.schedule.shard_index = 1;
    c.schedule.shard_count = 3;
  });
  add("poisson", [](Case& c) {
    c.schedule.rate = 2000;
    c.schedule.seed = 5;
    c.schedule.max_requests = 40;
  });
  add("constant, held", [](Case& c) {
    c.schedule.rate = 3000;
    c.schedule.arrival = Arrival::kConstant;
    c.max_concurrency = 1;
  });
  add("closed loop", [](Case& c) { c.schedule.concurrency = 3; });

  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    Lookahead::Options in = InputOf(file.path());
    in.load.input.model = "m2";
    in.load.synthetic = synthetic.get();
    in.schedule = c.schedule;
    in.max_rows = 8;  // the runner waits on the input at times
    in.max_bytes = 2000;

    // Before: the whole trace loaded, then planned.
    LoadOptions load = in.load;
    LoadedTrace whole;
    ASSERT_TRUE(LoadTrace(load, &whole, &error)) << error;
    Plan plan;
    ASSERT_TRUE(BuildPlan(whole.requests, c.schedule, 0, &plan, &error)) << error;
    std::map<uint64_t, Expected> expected;
    for (const PlannedRequest& p : plan.items) {
      const TraceRequest& r = whole.requests[p.request];
      expected[r.index] = {std::string(api::EndpointPath(r.endpoint)), r.body, p.scheduled_ms,
                           p.warmup};
    }
    ASSERT_FALSE(expected.empty());

    RecordingServer server;
    Lookahead input(in);
    ASSERT_TRUE(input.Start(&error)) << error;
    input.WaitPrimed(1000, 5000);
    RunOptions run;
    run.url = server.url();
    run.threads = 2;
    run.max_concurrency = c.max_concurrency;
    std::vector<RequestResult> results;
    run.on_results = [&](std::vector<RequestResult>& ended) {
      for (RequestResult& r : ended) results.push_back(std::move(r));
    };
    RunOutcome outcome;
    ASSERT_TRUE(RunPlan(input, run, tok.get(), &outcome, &error)) << error;
    input.Stop();

    ASSERT_EQ(results.size(), expected.size());
    for (const RequestResult& r : results) {
      auto it = expected.find(r.index);
      ASSERT_NE(it, expected.end()) << r.index;
      EXPECT_TRUE(r.ok()) << r.index;
      EXPECT_EQ(r.warmup, it->second.warmup) << r.index;
      if (!c.schedule.concurrency) {
        EXPECT_EQ(r.scheduled_ms, it->second.scheduled_ms) << r.index;
        EXPECT_GE(r.sent_ms, r.scheduled_ms) << r.index;
      }
    }
    std::multiset<std::pair<std::string, std::string>> sent, want;
    for (const auto& q : server.received()) sent.insert({q.target, q.body});
    for (const auto& [index, e] : expected) want.insert({e.target, e.body});
    EXPECT_TRUE(sent == want);
  }
}

TEST(RunnerTest, AnInterruptedOpenLoopListsTheRowsItNeverSent) {
  TempFile file(PayloadTrace(50));
  Lookahead::Options in = InputOf(file.path());
  // 1 ms apart becomes 10 s: the run would take 8 minutes, so the interruption comes in its
  // middle however late a loaded machine delivers it.
  in.schedule.speedup = 0.0001;
  RecordingServer server;
  Lookahead input(in);
  std::string error;
  ASSERT_TRUE(input.Start(&error)) << error;
  RunOptions run;
  run.url = server.url();
  std::vector<RequestResult> results;
  run.on_results = [&](std::vector<RequestResult>& ended) {
    for (RequestResult& r : ended) results.push_back(std::move(r));
  };
  // SIGINT once the run is under way: 250 ms in, and not before the first row reached the
  // server. RunPlan installs its SIGINT handler just before it sends; a fixed 250 ms alone could
  // beat that on a loaded machine under TSan (the default action would kill the test) or come
  // before anything was sent (the check `sent >= 1` below).
  std::thread interrupt([&server] {
    std::this_thread::sleep_for(std::chrono::milliseconds(250));
    server.WaitReceived(1);
    ::kill(::getpid(), SIGINT);
  });
  RunOutcome outcome;
  ASSERT_TRUE(RunPlan(input, run, nullptr, &outcome, &error)) << error;
  interrupt.join();
  input.Stop();
  EXPECT_TRUE(outcome.interrupted);
  ASSERT_EQ(results.size(), 50u);  // all were read ahead: every one is listed
  size_t sent = 0;
  for (size_t i = 0; i < results.size(); ++i) {
    if (results[i].sent) {
      ++sent;
      continue;
    }
    EXPECT_EQ(results[i].index, i);  // never-sent ones last, in plan order
  }
  EXPECT_GE(sent, 1u);
  EXPECT_LT(sent, 50u);
}

// Sessions of `turns` turns, `gap_ms` apart in the trace, interleaved.
TempFile SessionTrace(int sessions, int turns, int gap_ms) {
  std::string text;
  for (int k = 0; k < turns; ++k) {
    for (int s = 0; s < sessions; ++s) {
      text += R"({"timestamp":)" + std::to_string(1000 + k * gap_ms + s) +
              R"(,"payload":{"model":"m","prompt":"s)" + std::to_string(s) + " t" +
              std::to_string(k) + R"("},"session_id":"s)" + std::to_string(s) + "\"}\n";
    }
  }
  return TempFile(text);
}

// With `interrupt_after`: SIGINT that long after the start, and not before `interrupt_once`
// requests reached the server (so the run's SIGINT handler is in place and they were sent, however
// slow the machine). `hold`: the server holds every answer (RecordingServer), until it received
// `release_after` requests when that is not 0. `answered`: the answers the server had sent when
// the run ended.
std::vector<RequestResult> RunSessions(const std::string& path, std::chrono::milliseconds delay,
                                       std::optional<std::chrono::milliseconds> interrupt_after,
                                       bool causal, RunOutcome* outcome,
                                       size_t interrupt_once = 1, bool hold = false,
                                       size_t release_after = 0, size_t* answered = nullptr) {
  RecordingServer server(delay, hold);
  Lookahead input(InputOf(path));
  std::string error;
  EXPECT_TRUE(input.Start(&error)) << error;
  RunOptions run;
  run.url = server.url();
  run.threads = 2;
  run.causal_sessions = causal;
  std::vector<RequestResult> results;
  run.on_results = [&](std::vector<RequestResult>& ended) {
    for (RequestResult& r : ended) results.push_back(std::move(r));
  };
  std::thread interrupt;
  if (interrupt_after) {
    interrupt = std::thread([after = *interrupt_after, interrupt_once, &server] {
      std::this_thread::sleep_for(after);
      server.WaitReceived(interrupt_once);
      ::kill(::getpid(), SIGINT);
    });
  }
  std::thread release;
  if (release_after > 0) {
    release = std::thread([release_after, &server] {
      EXPECT_TRUE(server.WaitReceived(release_after));
      server.Release();
    });
  }
  EXPECT_TRUE(RunPlan(input, run, nullptr, outcome, &error)) << error;
  if (answered != nullptr) *answered = server.answered();
  if (interrupt.joinable()) interrupt.join();
  if (release.joinable()) release.join();
  input.Stop();
  return results;
}

TEST(RunnerTest, SessionTurnsWaitForTheTurnBeforeThemToEnd) {
  // Turns 10 ms apart in the trace, answers after 60 ms: every turn after a session's first
  // waits, none is sent before its predecessor ended. Without causality they overlap, every
  // one: there the server holds every answer until it has received all 12 requests, so each
  // later turn went out before the one before it ended, however the machine times things.
  TempFile file = SessionTrace(3, 4, 10);
  for (bool causal : {true, false}) {
    SCOPED_TRACE(causal ? "causal" : "timestamps");
    RunOutcome outcome;
    std::vector<RequestResult> results =
        causal ? RunSessions(file.path(), std::chrono::milliseconds(60), std::nullopt, true,
                             &outcome)
               : RunSessions(file.path(), std::chrono::milliseconds(0), std::nullopt, false,
                             &outcome, 1, /*hold=*/true, /*release_after=*/12);
    ASSERT_EQ(results.size(), 12u);
    std::sort(results.begin(), results.end(),
              [](const RequestResult& a, const RequestResult& b) { return a.index < b.index; });
    size_t early = 0;
    for (size_t i = 0; i < results.size(); ++i) {
      const RequestResult& r = results[i];
      EXPECT_TRUE(r.ok()) << i;
      EXPECT_TRUE(r.session_turn);
      EXPECT_GE(r.sent_ms, r.scheduled_ms) << i;  // lag from the causal due time
      const double plan_ms = static_cast<double>(i / 3) * 10 + static_cast<double>(i % 3);
      EXPECT_DOUBLE_EQ(r.scheduled_ms - r.causal_shift_ms, plan_ms) << i;
      if (i < 3) {
        EXPECT_EQ(r.causal_shift_ms, 0) << i;
        continue;
      }
      const RequestResult& prev = results[i - 3];  // the same session's turn before
      if (r.sent_ms < prev.done_ms) ++early;
      if (causal) {
        EXPECT_GE(r.sent_ms, prev.done_ms) << i;
        // No sidecar, so no think time: due at the predecessor's end.
        EXPECT_DOUBLE_EQ(r.scheduled_ms, prev.done_ms) << i;
        EXPECT_GT(r.causal_shift_ms, 40) << i;
      } else {
        EXPECT_EQ(r.causal_shift_ms, 0) << i;
      }
    }
    // Without causality, every later turn (so the check above can fail).
    EXPECT_EQ(early, causal ? 0u : 9u);
  }
}

// Hashed session rows are turns whose input_length / hash_ids are their new content, as AIPerf
// reads them (history.h): turn k goes out as every earlier turn's prompt, each followed by the
// answer the server gave it, then its own prompt; chat as messages, completions as one prompt.
TEST(RunnerTest, HashedSessionTurnsGoAfterTheConversationSoFar) {
  std::string text;
  for (int k = 0; k < 3; ++k) {
    for (int s = 0; s < 2; ++s) {
      text += R"({"timestamp":)" + std::to_string(1000 + 5 * k + s) + R"(,"input_length":)" +
              std::to_string(20 + 10 * k + s) + R"(,"output_length":3,"hash_ids":[)" +
              std::to_string(100 * s + 2 * k) + "," + std::to_string(100 * s + 2 * k + 1) +
              R"(],"session_id":"s)" + std::to_string(s) + "\"}\n";
    }
  }
  // A sessionless hashed row is sent alone.
  text += R"({"timestamp":1020,"input_length":9,"output_length":2,"hash_ids":[7]})"
          "\n";
  TempFile file(text);
  auto tok = Builtin();
  std::string error;
  auto synthetic = SyntheticPrompts::Make(*tok, 16, &error);
  ASSERT_TRUE(synthetic) << error;
  auto prompt = [&](int s, int k) {
    const uint64_t ids[] = {uint64_t(100 * s + 2 * k), uint64_t(100 * s + 2 * k + 1)};
    return synthetic->Prompt(ids, 20 + 10 * k + s);
  };
  for (bool chat : {true, false}) {
    SCOPED_TRACE(chat ? "chat" : "completions");
    RecordingServer server(std::chrono::milliseconds(5));
    Lookahead::Options in = InputOf(file.path());
    in.load.input.model = "m";
    in.load.input.hashed_chat = chat;
    in.load.synthetic = synthetic.get();
    Lookahead input(in);
    ASSERT_TRUE(input.Start(&error)) << error;
    RunOptions run;
    run.url = server.url();
    run.threads = 2;
    std::vector<RequestResult> results;
    run.on_results = [&](std::vector<RequestResult>& ended) {
      for (RequestResult& r : ended) results.push_back(std::move(r));
    };
    RunOutcome outcome;
    ASSERT_TRUE(RunPlan(input, run, tok.get(), &outcome, &error)) << error;
    input.Stop();
    ASSERT_EQ(results.size(), 7u);
    for (const RequestResult& r : results) EXPECT_TRUE(r.ok()) << r.index;

    std::map<std::string, json> by_last;  // body by its own (last) prompt
    for (const auto& q : server.received()) {
      json b = json::parse(q.body);
      EXPECT_EQ(q.target, chat ? "/v1/chat/completions" : "/v1/completions");
      std::string last = chat ? b["messages"].back()["content"].get<std::string>()
                              : b["prompt"].get<std::string>();
      by_last[last] = b;
    }
    for (int s = 0; s < 2; ++s) {
      for (int k = 0; k < 3; ++k) {
        SCOPED_TRACE("session " + std::to_string(s) + " turn " + std::to_string(k));
        if (chat) {
          ASSERT_TRUE(by_last.count(prompt(s, k)));
          EXPECT_EQ(by_last[prompt(s, k)]["max_tokens"], 3);
          const json& messages = by_last[prompt(s, k)]["messages"];
          ASSERT_EQ(messages.size(), size_t(2 * k + 1));
          for (int j = 0; j <= k; ++j) {
            EXPECT_EQ(messages[2 * j], (json{{"role", "user"}, {"content", prompt(s, j)}}));
            if (j < k) {
              EXPECT_EQ(messages[2 * j + 1], (json{{"role", "assistant"}, {"content", "ok"}}));
            }
          }
        } else {
          std::string want;
          for (int j = 0; j <= k; ++j) want += prompt(s, j) + (j < k ? "ok" : "");
          EXPECT_TRUE(by_last.count(want));
        }
      }
    }
    // The sessionless row: its own prompt alone.
    const uint64_t seven[] = {7};
    const std::string alone = synthetic->Prompt(seven, 9);
    ASSERT_TRUE(by_last.count(alone));
    EXPECT_EQ(by_last[alone]["max_tokens"], 2);
    if (chat) {
      EXPECT_EQ(by_last[alone]["messages"].size(), 1u);
    }
  }
}

TEST(RunnerTest, AnInterruptedCausalRunListsTheTurnsStillWaiting) {
  // 4 sessions of 10 turns 1 ms apart, every answer held by the server: once the first turn of
  // each session was sent, every other turn waits in the gate for an answer that does not come
  // (however long the machine takes). SIGINT then: the run ends at once, not when those turns
  // would have been due (never: a run that waited would end only when the server let the answers
  // go after kHoldLimit, and send them all), and lists them. "At once" is not timed: the run
  // ended while the server still held every answer.
  TempFile file = SessionTrace(4, 10, 1);
  RunOutcome outcome;
  size_t answered = 0;
  std::vector<RequestResult> results =
      RunSessions(file.path(), std::chrono::milliseconds(0), std::chrono::milliseconds(0), true,
                  &outcome, /*interrupt_once=*/4, /*hold=*/true, /*release_after=*/0, &answered);
  EXPECT_EQ(answered, 0u) << "the run waited for the held answers";
  EXPECT_TRUE(outcome.interrupted);
  ASSERT_EQ(results.size(), 40u);
  size_t sent = 0;
  for (const RequestResult& r : results) sent += r.sent;
  EXPECT_EQ(sent, 4u);  // the first turn of each session, and no other
}

}  // namespace
}  // namespace llmtap::replay
