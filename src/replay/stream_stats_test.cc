// Streamed replay's statistics: ValueSpool and SummaryBuilder against the whole-trace ones.
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

using nlohmann::json;

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
