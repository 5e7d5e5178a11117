// Streamed replay's input: the Planner against the whole-trace plan, and Lookahead.
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
using namespace stream_test_util;

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
  EXPECT_EQ(t.counts.apis[api::Endpoint::kCompletions], 3000u);
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
    EXPECT_FALSE(rows[k].request.chat());
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

// The Lookahead links Responses rows through the outcomes' response ids before planning, so a
// chain's rows share a session and a shard, and carry what the runner needs to remap.
TEST(LookaheadTest, LinksResponsesChainsBeforeSharding) {
  std::string trace;
  for (int k = 0; k < 6; ++k) {
    trace += R"({"timestamp":)" + std::to_string(k) + R"(,"payload":{"model":"m","input":"t)" +
             std::to_string(k) + "\"";
    if (k > 0 && k != 3)
      trace += R"(,"previous_response_id":"resp_)" + std::to_string(k - 1) + "\"";
    if (k == 3) trace += R"(,"previous_response_id":"resp_gone")";
    trace += R"(},"endpoint_type":"responses"})";
    trace += "\n";
  }
  TempFile file(trace);
  std::vector<DueRequest> rows;
  std::map<uint64_t, uint32_t> shard_of;  // by row index
  for (uint32_t shard = 0; shard < 2; ++shard) {
    Lookahead::Options in;
    in.load.input.path = file.path();
    in.schedule.shard_index = shard;
    in.schedule.shard_count = 2;
    std::vector<std::string> ids;
    for (int k = 0; k < 6; ++k) ids.push_back("resp_" + std::to_string(k));
    in.captured = [ids](uint64_t line, std::optional<double>) {
      return std::optional<Lookahead::Options::Captured>(
          Lookahead::Options::Captured{12.0, ids[line - 1], {}});
    };
    Lookahead input(in);
    std::string error;
    ASSERT_TRUE(input.Start(&error)) << error;
    for (DueRequest& due : TakeAll(input)) {
      shard_of[due.request.index] = shard;
      rows.push_back(std::move(due));
    }
    input.Stop();
  }
  ASSERT_EQ(rows.size(), 6u);
  std::sort(rows.begin(), rows.end(), [](const DueRequest& a, const DueRequest& b) {
    return a.request.index < b.request.index;
  });
  for (int k = 0; k < 6; ++k) {
    const TraceRequest& r = rows[k].request;
    EXPECT_EQ(r.response_id, "resp_" + std::to_string(k));
    EXPECT_EQ(r.session_id, k < 3 ? "resp_0" : "resp_3") << k;
    EXPECT_EQ(r.chain, k == 0 || k == 3 ? (k == 0 ? ChainLink::kNone : ChainLink::kNotInTrace)
                                        : ChainLink::kLinked)
        << k;
  }
  // One shard sends each chain whole.
  for (uint64_t k = 0; k < 6; ++k) {
    EXPECT_EQ(shard_of[k], SessionShard(k < 3 ? "resp_0" : "resp_3", 2)) << k;
  }
}

}  // namespace
}  // namespace llmtap::replay
