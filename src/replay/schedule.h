// The replay plan: which trace rows this process sends, and when. The Planner decides row by row,
// in file order, so the trace is never held whole (src/replay/lookahead.h streams it through);
// BuildPlan runs it over rows already in memory (small traces, tests).
//
//   - Fixed schedule (the default): a row is due (timestamp - first row's timestamp - start
//     offset) / speedup ms after the run starts. --start-offset / --end-offset pick a window in
//     trace time.
//   - --rate R: rows are due at a constant rate or as a Poisson process (seeded), in file order.
//   - --concurrency N: closed loop, no schedule: N requests in flight, each sent when one ends.
// The plan is made over the whole trace before sharding, so N shards (--shard i/N) sent from N
// processes together follow the one schedule. A row without a session_id goes to shard
// index % N; a row with one to shard SessionShard(session_id, N), so that every turn of a
// conversation is sent by the one process that can hold it back until the turn before it ended
// (causal replay, sessions.h). --max-requests and --warmup count over that whole plan too.
//
// Timestamps going backwards: captures never do (timestamps never decrease in file order), but a
// hand-made or concatenated trace may. Rows are sent in file order: a row whose timestamp is
// earlier than an earlier row's is due at the same time as the latest row before it (so it is
// sent at once, right after that row), and is counted and named by line (out_of_order()).
// Its scheduled_ms is that clamped time, so its lag is the sender's lateness only.
//
// Rows without a timestamp where the schedule needs one (fixed schedule, or a window): the first
// row fails the run with a message naming the line (a raw_payload trace needs --rate or
// --concurrency); a later one is skipped and counted, like any other bad row.
//
// Threads: a Planner belongs to one thread. ParseShard and BuildPlan are pure functions.
#pragma once

#include <cstdint>
#include <optional>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "replay/input.h"
#include "replay/options.h"

namespace llmtap::replay {

class Planner {
 public:
  enum class Verdict {
    kPlanned,  // in the plan: see due_ms / warmup / this_shard
    kOutside,  // before the window's start: not sent, not counted as skipped
    kSkip,     // cannot be placed (no timestamp): *reason says why; count it as skipped
    kStop,     // no row from here on can be in the plan (window end, --max-requests, --duration)
    kError,    // the run cannot go on (*reason): the first row has no timestamp
  };
  struct Decision {
    Verdict verdict = Verdict::kOutside;
    double due_ms = 0;        // after the run's start (0 in a closed loop)
    bool warmup = false;      // among the first --warmup planned requests (over all shards)
    bool this_shard = false;  // the row's shard (see the header) is shard_index
    std::string reason;       // kSkip, kError
  };

  // `duration_s` > 0 stops (open loop) at the first row due at or after it. Check the options
  // with Validate first.
  Planner(const ScheduleOptions& options, double duration_s);

  // False with *error when the options cannot make a plan (a bad shard, speedup, rate, ...).
  static bool Validate(const ScheduleOptions& options, std::string* error);

  // The next row in file order: its row index, line number, timestamp and session_id ("" for
  // none).
  Decision Add(uint64_t index, uint64_t line, std::optional<double> timestamp_ms,
               std::string_view session_id = {});

  // "trace timestamps, speedup 10", "poisson 20 req/s", "closed loop, concurrency 8".
  const std::string& mode() const { return mode_; }
  bool closed_loop() const { return options_.concurrency.has_value(); }
  uint64_t planned_total() const { return planned_; }  // over all shards
  uint64_t out_of_order() const { return out_of_order_; }
  // When the latest kPlanned or kOutside row was out of order: how far (ms of trace time) its
  // timestamp lies before the latest timestamp seen earlier. 0 otherwise.
  double last_backstep_ms() const { return last_backstep_ms_; }

 private:
  const ScheduleOptions options_;
  const double duration_ms_;
  const bool windowed_;
  const bool needs_timestamps_;
  std::string mode_;
  std::optional<double> first_ms_;
  double latest_trace_ms_ = 0;  // the largest (timestamp - first) so far
  uint64_t rows_ = 0;           // rows seen
  uint64_t planned_ = 0;
  uint64_t out_of_order_ = 0;
  double last_backstep_ms_ = 0;
  std::mt19937_64 rng_;
  std::exponential_distribution<double> gap_;
  double poisson_s_ = 0;  // the next Poisson arrival
};

struct PlannedRequest {
  uint32_t request = 0;     // position in the rows given to BuildPlan
  double scheduled_ms = 0;  // due time after the run's start (0 in a closed loop)
  bool warmup = false;
};

struct Plan {
  std::vector<PlannedRequest> items;  // this shard's, in due order
  bool closed_loop = false;
  uint32_t concurrency = 0;    // closed loop only
  uint64_t planned_total = 0;  // over all shards
  uint64_t out_of_order = 0;   // rows sent at once because their timestamp went backwards
  uint64_t skipped = 0;        // rows without the timestamp the schedule needs
  std::string mode;
};

// The Planner over rows in memory (in file order). False with *error for bad options or when
// the first row has no timestamp the schedule needs.
bool BuildPlan(const std::vector<TraceRequest>& rows, const ScheduleOptions& options,
               double duration_s, Plan* plan, std::string* error);

// The shard (0 <= shard < count) of the rows of conversation `session_id`: FNV-1a (64 bits) of
// its bytes, modulo count; the same in every process and on every machine.
uint32_t SessionShard(std::string_view session_id, uint32_t count);

// Parses "i/N" (0 <= i < N).
bool ParseShard(std::string_view text, uint32_t* index, uint32_t* count);

}  // namespace llmtap::replay
