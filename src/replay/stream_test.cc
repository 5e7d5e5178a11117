// Tests of the streamed replay: the Planner against the whole-trace planner it replaced, the
// Lookahead (order, bodies, its bounds, standard input, cancelling, notes), the runner end to end
// against a recording HTTP server (the same requests at the same schedule as the in-memory
// path), and the bounded-memory statistics against report::SummarizeRequests.
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

// ---------------------------------------------------------------------------------------------
// The Planner, fed row by row, plans what BuildPlan planned over the whole trace before replay
// streamed (copied here from that version as the reference) for every trace whose timestamps
// do not go backwards, which captures never do.

struct RefItem {
  uint32_t request;
  double due;
  bool warmup;
  bool operator==(const RefItem&) const = default;
};

bool ReferencePlan(const std::vector<TraceRequest>& rows, const ScheduleOptions& o,
                   double duration_s, std::vector<RefItem>* items, uint64_t* planned_total) {
  const bool windowed = o.start_offset_ms || o.end_offset_ms;
  bool all_timed = true;
  for (const TraceRequest& r : rows) all_timed = all_timed && r.timestamp_ms.has_value();
  if (!all_timed && (windowed || (!o.rate && !o.concurrency))) return false;
  std::vector<uint32_t> order(rows.size());
  std::iota(order.begin(), order.end(), 0u);
  std::vector<double> trace_ms(rows.size(), 0.0);
  if (all_timed && !rows.empty()) {
    double first = *rows[0].timestamp_ms;
    for (const TraceRequest& r : rows) first = std::min(first, *r.timestamp_ms);
    for (size_t i = 0; i < rows.size(); ++i) trace_ms[i] = *rows[i].timestamp_ms - first;
    if (!o.rate && !o.concurrency) {
      std::stable_sort(order.begin(), order.end(),
                       [&](uint32_t a, uint32_t b) { return trace_ms[a] < trace_ms[b]; });
    }
  }
  const double start = o.start_offset_ms.value_or(0);
  std::vector<uint32_t> picked;
  for (uint32_t i : order) {
    if (windowed) {
      if (trace_ms[i] < start) continue;
      if (o.end_offset_ms && trace_ms[i] >= *o.end_offset_ms) continue;
    }
    picked.push_back(i);
  }
  if (o.max_requests > 0 && picked.size() > o.max_requests) picked.resize(o.max_requests);
  std::vector<double> due(picked.size(), 0.0);
  bool closed = false;
  if (o.concurrency) {
    closed = true;
  } else if (o.rate) {
    std::mt19937_64 rng(o.seed);
    std::exponential_distribution<double> gap(*o.rate);
    double t = 0;
    for (size_t k = 0; k < picked.size(); ++k) {
      if (o.arrival == Arrival::kConstant) {
        due[k] = 1000.0 * static_cast<double>(k) / *o.rate;
      } else {
        due[k] = 1000.0 * t;
        t += gap(rng);
      }
    }
  } else {
    for (size_t k = 0; k < picked.size(); ++k) due[k] = (trace_ms[picked[k]] - start) / o.speedup;
  }
  size_t n = picked.size();
  if (duration_s > 0 && !closed) {
    n = static_cast<size_t>(std::lower_bound(due.begin(), due.end(), duration_s * 1000.0) -
                            due.begin());
  }
  *planned_total = n;
  items->clear();
  for (size_t k = 0; k < n; ++k) {
    const TraceRequest& r = rows[picked[k]];
    if (r.index % o.shard_count != o.shard_index) continue;
    items->push_back({picked[k], due[k], k < o.warmup});
  }
  return true;
}

TEST(PlannerTest, SameAsTheWholeTracePlanOnCaptures) {
  std::mt19937_64 rng(7);
  auto uniform = [&](int lo, int hi) {
    return lo + static_cast<int>(rng() % static_cast<uint64_t>(hi - lo + 1));
  };
  int compared = 0;
  for (int round = 0; round < 3000; ++round) {
    std::vector<TraceRequest> rows(static_cast<size_t>(uniform(1, 120)));
    double t = uniform(0, 5000) + (round % 2 ? 0.25 : 0);
    for (size_t i = 0; i < rows.size(); ++i) {
      rows[i].index = i;
      rows[i].line = i + 1;
      rows[i].timestamp_ms = t;
      t += uniform(0, 4) == 0 ? 0 : uniform(1, 40) + (uniform(0, 1) ? 0.5 : 0);
    }
    const double span = t;
    ScheduleOptions o;
    o.speedup = std::vector<double>{1, 2.5, 10, 0.5}[static_cast<size_t>(uniform(0, 3))];
    switch (uniform(0, 4)) {
      case 1:
        o.start_offset_ms = uniform(0, static_cast<int>(span) / 2);
        break;
      case 2:
        o.end_offset_ms = uniform(0, static_cast<int>(span));
        break;
      case 3:
        o.start_offset_ms = uniform(0, static_cast<int>(span) / 2);
        o.end_offset_ms = *o.start_offset_ms + uniform(0, static_cast<int>(span));
        break;
      default:
        break;
    }
    switch (uniform(0, 3)) {
      case 1:
        o.rate = uniform(1, 500);
        o.arrival = Arrival::kConstant;
        break;
      case 2:
        o.rate = uniform(1, 500) / 3.0;
        o.arrival = Arrival::kPoisson;
        o.seed = rng();
        break;
      case 3:
        o.concurrency = static_cast<uint32_t>(uniform(1, 8));
        break;
      default:
        break;
    }
    if (uniform(0, 2) == 0) o.max_requests = static_cast<uint64_t>(uniform(1, 100));
    if (uniform(0, 2) == 0) o.warmup = static_cast<uint64_t>(uniform(0, 30));
    o.shard_count = static_cast<uint32_t>(uniform(1, 3));
    o.shard_index = static_cast<uint32_t>(uniform(0, static_cast<int>(o.shard_count) - 1));
    const double duration_s = uniform(0, 2) == 0 ? uniform(1, 3000) / 1000.0 : 0;

    std::vector<RefItem> expected;
    uint64_t expected_total = 0;
    ASSERT_TRUE(ReferencePlan(rows, o, duration_s, &expected, &expected_total));
    Plan plan;
    std::string error;
    ASSERT_TRUE(BuildPlan(rows, o, duration_s, &plan, &error)) << error;
    std::vector<RefItem> got;
    for (const PlannedRequest& p : plan.items) got.push_back({p.request, p.scheduled_ms, p.warmup});
    ASSERT_EQ(got, expected) << "round " << round;
    ASSERT_EQ(plan.planned_total, expected_total) << "round " << round;
    EXPECT_EQ(plan.out_of_order, 0u);
    compared += static_cast<int>(got.size());
  }
  EXPECT_GT(compared, 10000);
}

// ---------------------------------------------------------------------------------------------
// The Lookahead.

std::unique_ptr<tokenizer::Tokenizer> Builtin() {
  std::string error;
  auto tok = tokenizer::Tokenizer::Load("builtin", &error);
  EXPECT_TRUE(tok) << error;
  return tok;
}

// Takes every row, waiting (on the waker) when the queue is empty, as the runner does.
std::vector<DueRequest> TakeAll(Lookahead& input, size_t limit = SIZE_MAX) {
  std::mutex mu;
  std::condition_variable cv;
  bool woken = false;
  const std::function<void()> wake = [&] {
    std::lock_guard lock(mu);
    woken = true;
    cv.notify_all();
  };
  std::vector<DueRequest> rows;
  while (rows.size() < limit) {
    {
      std::lock_guard lock(mu);
      woken = false;
    }
    DueRequest due;
    const Lookahead::Pop got = input.TryPop(&due, wake);
    if (got == Lookahead::Pop::kRow) {
      rows.push_back(std::move(due));
      continue;
    }
    if (got == Lookahead::Pop::kEnd) break;
    std::unique_lock lock(mu);
    cv.wait(lock, [&] { return woken; });
  }
  return rows;
}

// Payload rows, 1 ms apart, whose prompts are 200 to 1,700 bytes long.
std::string PayloadTrace(size_t n, uint64_t seed = 1) {
  std::mt19937_64 rng(seed);
  std::string text;
  for (size_t i = 0; i < n; ++i) {
    const std::string prompt(200 + rng() % 1500, static_cast<char>('a' + i % 26));
    text += R"({"timestamp":)" + std::to_string(1000 + i) +
            R"(,"payload":{"model":"m","prompt":")" + prompt + R"(","max_tokens":4}})" + "\n";
  }
  return text;
}

Lookahead::Options InputOf(const std::string& path) {
  Lookahead::Options o;
  o.load.input.path = path;
  o.note_prefix = path + ":";
  return o;
}

TEST(LookaheadTest, RowsInPlanOrderWithTheBodiesOfTheWholeTraceLoad) {
  TempFile file(PayloadTrace(3000));
  Lookahead::Options o = InputOf(file.path());
  o.load.input.model = "rewritten";
  o.load.input.stream = true;
  o.max_rows = 64;
  o.max_bytes = 32 << 10;
  Lookahead input(o);
  std::string error;
  ASSERT_TRUE(input.Start(&error)) << error;
  // Full before anything is taken: the reader waits for room (WaitPrimed returns on that).
  input.WaitPrimed(1e12, 60000);
  EXPECT_FALSE(input.finished());
  EXPECT_TRUE(input.max_rows_held() == 64 || input.max_bytes_held() > (32 << 10) - 2000);
  std::vector<DueRequest> rows = TakeAll(input);
  input.Stop();

  LoadOptions load;
  load.input = o.load.input;
  LoadedTrace whole;
  ASSERT_TRUE(LoadTrace(load, &whole, &error)) << error;
  ASSERT_EQ(rows.size(), 3000u);
  for (size_t i = 0; i < rows.size(); ++i) {
    ASSERT_EQ(rows[i].slot, i);
    ASSERT_EQ(rows[i].request.index, i);
    ASSERT_EQ(rows[i].request.line, i + 1);
    ASSERT_EQ(rows[i].scheduled_ms, static_cast<double>(i));
    ASSERT_EQ(rows[i].request.body, whole.requests[i].body);
    ASSERT_TRUE(rows[i].request.stream);
  }
  // The bound held the whole time (checked at every push, not sampled).
  EXPECT_LE(input.max_rows_held(), 64u);
  EXPECT_LE(input.max_bytes_held(), size_t{32} << 10);
  const Lookahead::Totals t = input.totals();
  EXPECT_EQ(t.counts.rows, 3000u);
  EXPECT_EQ(t.counts.completions, 3000u);
  EXPECT_EQ(t.planned_total, 3000u);
  EXPECT_EQ(input.planned(), 3000u);
  EXPECT_TRUE(input.error().empty());
  EXPECT_EQ(input.file_size(),
            static_cast<uint64_t>(std::ifstream(file.path()).seekg(0, std::ios::end).tellg()));
}

TEST(LookaheadTest, ARowLargerThanTheByteBoundGoesAlone) {
  TempFile file(PayloadTrace(200));
  Lookahead::Options o = InputOf(file.path());
  o.max_bytes = 100;  // every body is larger
  Lookahead input(o);
  std::string error;
  ASSERT_TRUE(input.Start(&error)) << error;
  EXPECT_EQ(TakeAll(input).size(), 200u);
  input.Stop();
  EXPECT_EQ(input.max_rows_held(), 1u);
}

TEST(LookaheadTest, ShardsAndHashedRows) {
  std::string text;
  for (int i = 0; i < 40; ++i) {
    text += R"({"timestamp":)" + std::to_string(10 * i) + R"(,"input_length":)" +
            std::to_string(20 + i) + R"(,"output_length":3,"hash_ids":[)" + std::to_string(i % 4) +
            "," + std::to_string(i) + "]}\n";
  }
  TempFile file(text);
  auto tok = Builtin();
  std::string error;
  auto synthetic = SyntheticPrompts::Make(*tok, 16, &error);
  ASSERT_TRUE(synthetic) << error;
  Lookahead::Options o = InputOf(file.path());
  o.load.synthetic = synthetic.get();
  int model_calls = 0;
  o.load.default_model = [&] {
    ++model_calls;
    return std::string("served");
  };
  o.schedule.shard_index = 1;
  o.schedule.shard_count = 3;
  o.schedule.speedup = 2;
  Lookahead input(o);
  ASSERT_TRUE(input.Start(&error)) << error;
  std::vector<DueRequest> rows = TakeAll(input);
  input.Stop();

  LoadOptions load = o.load;
  LoadedTrace whole;
  ASSERT_TRUE(LoadTrace(load, &whole, &error)) << error;
  ASSERT_EQ(rows.size(), 13u);  // 1, 4, ..., 37
  for (size_t k = 0; k < rows.size(); ++k) {
    const uint64_t index = 1 + 3 * k;
    EXPECT_EQ(rows[k].request.index, index);
    EXPECT_EQ(rows[k].slot, k);
    EXPECT_EQ(rows[k].scheduled_ms, 10.0 * static_cast<double>(index) / 2);  // whole schedule
    EXPECT_EQ(rows[k].request.body, whole.requests[index].body);
    EXPECT_FALSE(rows[k].request.chat);
  }
  EXPECT_EQ(model_calls, 2);  // once per read of the trace
  EXPECT_EQ(input.totals().hashed_model, "served");
  EXPECT_EQ(input.totals().planned_total, 40u);
  EXPECT_EQ(input.totals().counts.rows_hashed, 40u);
}

TEST(LookaheadTest, StandardInput) {
  const std::string text = PayloadTrace(500, 3);
  int pipe_fds[2];
  ASSERT_EQ(pipe(pipe_fds), 0);
  const int saved_stdin = dup(0);
  ASSERT_GE(saved_stdin, 0);
  ASSERT_EQ(dup2(pipe_fds[0], 0), 0);
  ::close(pipe_fds[0]);
  // Written in small pieces, so that rows arrive while the reader waits on the pipe.
  std::thread writer([&] {
    for (size_t at = 0; at < text.size(); at += 777) {
      const std::string_view piece = std::string_view(text).substr(at, 777);
      ASSERT_EQ(::write(pipe_fds[1], piece.data(), piece.size()),
                static_cast<ssize_t>(piece.size()));
    }
    ::close(pipe_fds[1]);
  });
  Lookahead::Options o = InputOf("-");
  o.schedule.rate = 100;
  o.schedule.arrival = Arrival::kConstant;
  o.max_rows = 16;
  Lookahead input(o);
  std::string error;
  ASSERT_TRUE(input.Start(&error)) << error;
  std::vector<DueRequest> rows = TakeAll(input);
  input.Stop();
  writer.join();
  ASSERT_EQ(dup2(saved_stdin, 0), 0);
  ::close(saved_stdin);

  ASSERT_EQ(rows.size(), 500u);
  for (size_t i = 0; i < rows.size(); ++i) {
    EXPECT_EQ(rows[i].request.index, i);
    EXPECT_DOUBLE_EQ(rows[i].scheduled_ms, 10.0 * static_cast<double>(i));
  }
  EXPECT_LE(input.max_rows_held(), 16u);
  EXPECT_EQ(input.file_size(), 0u);  // unknown for a pipe: progress shows rows read
  EXPECT_EQ(input.rows_read(), 500u);
}

TEST(LookaheadTest, CancelStopsTheReaderAndKeepsTheQueuedRows) {
  TempFile file(PayloadTrace(5000));
  Lookahead::Options o = InputOf(file.path());
  o.max_rows = 10;
  Lookahead input(o);
  std::string error;
  ASSERT_TRUE(input.Start(&error)) << error;
  std::vector<DueRequest> taken = TakeAll(input, 3);
  input.WaitPrimed(1e12, 60000);  // full again: the reader waits for room
  input.Stop();                   // must not hang on the full queue
  std::vector<DueRequest> rest = input.TakeQueued();
  ASSERT_EQ(taken.size(), 3u);
  ASSERT_FALSE(rest.empty());
  EXPECT_LE(rest.size(), 10u);
  for (size_t i = 0; i < rest.size(); ++i) EXPECT_EQ(rest[i].slot, 3 + i);
  EXPECT_LT(input.totals().counts.rows, 5000u);  // reading stopped early
  DueRequest due;
  EXPECT_EQ(input.TryPop(&due, [] {}), Lookahead::Pop::kEnd);
}

TEST(LookaheadTest, NotesNameTheLineAndBackwardsRowsGoOutAtOnce) {
  TempFile file(
      "{\"timestamp\":100,\"payload\":{\"prompt\":\"a\"}}\n"
      "{\"timestamp\":150,\"payload\":{\"prompt\":\"b\"}}\n"
      "not json\n"
      "\n"
      "{\"timestamp\":120,\"payload\":{\"prompt\":\"c\"}}\n"
      "{\"payload\":{\"prompt\":\"no timestamp\"}}\n"
      "{\"timestamp\":200,\"payload\":{\"prompt\":\"d\"}}\n");
  Lookahead input(InputOf(file.path()));
  std::string error;
  ASSERT_TRUE(input.Start(&error)) << error;
  std::vector<DueRequest> rows = TakeAll(input);
  input.Stop();
  ASSERT_EQ(rows.size(), 4u);
  std::vector<double> due;
  for (const DueRequest& r : rows) due.push_back(r.scheduled_ms);
  EXPECT_EQ(due, (std::vector<double>{0, 50, 50, 100}));  // "c" right after "b"
  EXPECT_EQ(rows[2].request.line, 5u);
  const std::vector<std::string> notes = input.TakeNotes();
  ASSERT_EQ(notes.size(), 3u);
  EXPECT_EQ(notes[0], file.path() + ":3: not a JSON object (skipped)");
  EXPECT_EQ(notes[1], file.path() +
                          ":5: timestamp 120 is 30 ms before an earlier row's; sent at once, in "
                          "file order");
  EXPECT_EQ(notes[2].rfind(file.path() + ":6: no timestamp", 0), 0u) << notes[2];
  const Lookahead::Totals t = input.totals();
  EXPECT_EQ(t.out_of_order, 1u);
  EXPECT_EQ(t.counts.skipped, 2u);
  EXPECT_EQ(t.counts.rows, 5u);
}

TEST(LookaheadTest, AFirstRowWithoutTimestampEndsTheInput) {
  TempFile file("{\"model\":\"m\",\"prompt\":\"raw\"}\n");
  Lookahead input(InputOf(file.path()));
  std::string error;
  ASSERT_TRUE(input.Start(&error)) << error;
  input.WaitPrimed(1000, 60000);
  EXPECT_TRUE(input.finished());
  EXPECT_EQ(input.planned(), 0u);
  EXPECT_NE(input.error().find("line 1 has no timestamp: give --rate or --concurrency"),
            std::string::npos)
      << input.error();

  Lookahead missing(InputOf("/nonexistent/trace.jsonl"));
  EXPECT_FALSE(missing.Start(&error));
  EXPECT_EQ(error.rfind("/nonexistent/trace.jsonl: ", 0), 0u) << error;
  Lookahead::Options bad = InputOf(file.path());
  bad.schedule.speedup = 0;
  Lookahead bad_input(bad);
  EXPECT_FALSE(bad_input.Start(&error));
  EXPECT_NE(error.find("--speedup"), std::string::npos);
}

// ---------------------------------------------------------------------------------------------
// The runner end to end, against a server that records what it receives (and answers each
// request `delay` after reading it).

class RecordingServer {
 public:
  struct Received {
    std::string target;
    std::string body;
  };

  explicit RecordingServer(std::chrono::milliseconds delay = {})
      : delay_(delay), acceptor_(ioc_, {asio::ip::make_address("127.0.0.1"), 0}) {
    port_ = acceptor_.local_endpoint().port();
    thread_ = std::thread([this] { AcceptLoop(); });
  }
  ~RecordingServer() {
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
      std::this_thread::sleep_for(delay_);
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
  asio::io_context ioc_;
  asio::ip::tcp::acceptor acceptor_;
  uint16_t port_ = 0;
  std::thread thread_;
  std::mutex mu_;
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
      expected[r.index] = {r.chat ? "/v1/chat/completions" : "/v1/completions", r.body,
                           p.scheduled_ms, p.warmup};
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
  in.schedule.speedup = 0.01;  // 1 ms apart becomes 100 ms: the run would take 5 s
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
  std::thread interrupt([] {
    std::this_thread::sleep_for(std::chrono::milliseconds(250));
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

std::vector<RequestResult> RunSessions(const std::string& path, std::chrono::milliseconds delay,
                                       std::optional<std::chrono::milliseconds> interrupt_after,
                                       bool causal, RunOutcome* outcome) {
  RecordingServer server(delay);
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
    interrupt = std::thread([after = *interrupt_after] {
      std::this_thread::sleep_for(after);
      ::kill(::getpid(), SIGINT);
    });
  }
  EXPECT_TRUE(RunPlan(input, run, nullptr, outcome, &error)) << error;
  if (interrupt.joinable()) interrupt.join();
  input.Stop();
  return results;
}

TEST(RunnerTest, SessionTurnsWaitForTheTurnBeforeThemToEnd) {
  // Turns 10 ms apart in the trace, answers after 60 ms: every turn after a session's first
  // waits, none is sent before its predecessor ended; without causality they overlap.
  TempFile file = SessionTrace(3, 4, 10);
  for (bool causal : {true, false}) {
    SCOPED_TRACE(causal ? "causal" : "timestamps");
    RunOutcome outcome;
    std::vector<RequestResult> results =
        RunSessions(file.path(), std::chrono::milliseconds(60), std::nullopt, causal, &outcome);
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
    if (causal) {
      EXPECT_EQ(early, 0u);
    } else {
      EXPECT_GT(early, 0u);  // so the check above can fail
    }
  }
}

TEST(RunnerTest, AnInterruptedCausalRunListsTheTurnsStillWaiting) {
  // 4 sessions of 10 turns 1 ms apart, answers after 150 ms: at the interruption most turns
  // wait in the gate. The run ends at once (not when they would have been due) and lists them.
  TempFile file = SessionTrace(4, 10, 1);
  RunOutcome outcome;
  const auto start = std::chrono::steady_clock::now();
  std::vector<RequestResult> results = RunSessions(file.path(), std::chrono::milliseconds(150),
                                                   std::chrono::milliseconds(250), true, &outcome);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(2));
  EXPECT_TRUE(outcome.interrupted);
  ASSERT_EQ(results.size(), 40u);
  size_t sent = 0;
  for (const RequestResult& r : results) sent += r.sent;
  EXPECT_GE(sent, 4u);
  EXPECT_LE(sent, 12u);  // at most the first two or three turns of each session
}

// ---------------------------------------------------------------------------------------------
// Statistics with bounded memory, against report's in-memory ones.

double Round3(double v) { return std::round(v * 1000.0) / 1000.0; }

void ExpectSameStats(const report::Stats& got, const report::Stats& want, const char* what) {
  SCOPED_TRACE(what);
  ASSERT_EQ(got.count, want.count);
  if (want.count == 0) return;
  EXPECT_EQ(got.p50, want.p50);
  EXPECT_EQ(got.p90, want.p90);
  EXPECT_EQ(got.p95, want.p95);
  EXPECT_EQ(got.p99, want.p99);
  EXPECT_EQ(got.max, want.max);
  EXPECT_NEAR(got.mean, want.mean, 1e-12 * std::max(1.0, std::abs(want.mean)));
}

TEST(ValueSpoolTest, ExactlyTheStatisticsOfComputeStats) {
  std::mt19937_64 rng(11);
  std::vector<std::vector<double>> sets = {
      {},
      {42},
      {3, 3, 3, 3, 3},
      {-5, 0, -0.0, 7.5, 1e300, -1e300, 2e-300, std::nan(""), INFINITY},
      {0.001, 0.002, 0.001, 1000000.123},
  };
  for (int s = 0; s < 12; ++s) {
    std::vector<double> v(1 + rng() % 5000);
    for (double& x : v) {
      switch (s % 4) {
        case 0:  // lag-like: tens of microseconds, rounded like every time in the outputs
          x = Round3(std::exponential_distribution<double>(30)(rng));
          break;
        case 1:  // token counts
          x = static_cast<double>(rng() % 4000);
          break;
        case 2:  // latencies over a wide range
          x = Round3(std::exp(std::uniform_real_distribution<double>(-3, 12)(rng)));
          break;
        default:  // few distinct values, many repeats
          x = static_cast<double>(rng() % 3) * 0.5;
      }
    }
    sets.push_back(std::move(v));
  }
  for (size_t limit : {size_t{1}, size_t{7}, size_t{1} << 20}) {
    // In a file, and in memory when no directory takes one.
    for (const bool file : {true, false}) {
      for (const std::vector<double>& values : sets) {
        ValueSpool spool(limit);
        std::string error;
        EXPECT_EQ(spool.Open({"", file ? "/tmp" : "/nonexistent-llmtap-dir"}, &error), file)
            << error;
        for (double x : values) spool.Add(x);
        report::Stats got;
        ASSERT_TRUE(spool.Compute(&got, &error)) << error;
        ExpectSameStats(got, report::ComputeStats(values),
                        ("limit " + std::to_string(limit) + (file ? ", file, " : ", memory, ") +
                         std::to_string(values.size()) + " values")
                            .c_str());
      }
    }
  }
}

TEST(SummaryBuilderTest, SameAsSummarizeRequests) {
  std::mt19937_64 rng(3);
  auto maybe = [&](double v) {
    return rng() % 5 ? std::optional<double>(Round3(v)) : std::nullopt;
  };
  std::vector<report::RequestResult> requests(4000);
  for (size_t i = 0; i < requests.size(); ++i) {
    report::RequestResult& r = requests[i];
    r.index = static_cast<int64_t>(i);
    r.endpoint = i % 2 ? "chat" : "completions";
    r.scheduled_ms = Round3(static_cast<double>(i) * 0.7);
    r.warmup = i < 30;
    r.held_ms = rng() % 10 == 0 ? Round3((rng() % 100000) / 7.0) : 0;
    if (rng() % 50 == 0) continue;  // never sent
    r.sent_ms = Round3(r.scheduled_ms + (rng() % 1000) / 3000.0);
    r.lag_ms = Round3(*r.sent_ms - r.scheduled_ms);
    r.latency_ms = Round3((rng() % 100000) / 13.0);
    r.done_ms = Round3(*r.sent_ms + r.latency_ms);
    r.status = rng() % 20 == 0 ? 503 : 200;
    if (r.status != 200) r.error = "http_5xx";
    if (rng() % 40 == 0) r.error = "timeout";
    r.ttft_ms = maybe((rng() % 50000) / 11.0);
    r.ttst_ms = maybe((rng() % 5000) / 17.0);
    r.itl_ms = maybe((rng() % 5000) / 19.0);
    r.max_chunk_gap_ms = maybe((rng() % 9000) / 23.0);
    if (rng() % 4) r.input_tokens = static_cast<int64_t>(rng() % 3000);
    if (rng() % 4) r.output_tokens = static_cast<int64_t>(rng() % 500);
    for (size_t g = rng() % 12; g > 0; --g) r.chunk_gaps_ms.push_back(Round3((rng() % 900) / 29.0));
  }
  for (const bool with_goodput : {false, true}) {
    report::SummaryOptions options;
    options.max_concurrency = 7;
    if (with_goodput) {
      options.goodput = {{"ttft_ms", 2000}, {"latency_ms", 5000}, {"max_chunk_gap_ms", 300}};
    }
    SummaryBuilder builder(options);
    std::string error;
    ASSERT_TRUE(builder.Open({"/tmp"}, &error)) << error;
    for (const report::RequestResult& r : requests) builder.Add(r);
    json got;
    ASSERT_TRUE(builder.Summarize(&got, &error)) << error;
    json want = report::SummarizeRequests(requests, options);
    // Means are summed in another order (and precision): equal up to the last bits.
    for (auto& [name, stats] : want["metrics"].items()) {
      json& g = got["metrics"][name];
      if (stats["mean"].is_number()) {
        EXPECT_NEAR(g["mean"].get<double>(), stats["mean"].get<double>(),
                    1e-9 * std::abs(stats["mean"].get<double>()))
            << name;
      }
      g["mean"] = nullptr;
      stats["mean"] = nullptr;
    }
    EXPECT_EQ(got, want) << got.dump(1) << "\n" << want.dump(1);
  }
}

}  // namespace
}  // namespace llmtap::replay
