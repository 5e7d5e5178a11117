// The replay plan: which trace rows this process sends, and when. Pure functions over the loaded
// rows' indices and timestamps; any thread may call them.
//
//   - Fixed schedule (the default): a row is due (timestamp - first timestamp - start offset) /
//     speedup ms after the run starts. --start-offset / --end-offset pick a window in trace time.
//   - --rate R: rows are due at a constant rate or as a Poisson process (seeded), in file order.
//   - --concurrency N: closed loop, no schedule: N requests in flight, each sent when one ends.
// The plan is made over the whole trace before sharding, so N shards (--shard i/N, rows with
// index % N == i) sent from N processes together follow the one schedule. --max-requests and
// --warmup count over that whole plan too.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "replay/input.h"
#include "replay/options.h"

namespace llmtap::replay {

struct PlannedRequest {
  uint32_t request = 0;     // position in LoadedTrace::requests
  double scheduled_ms = 0;  // due time after the run's start (0 in a closed loop)
  bool warmup = false;
};

struct Plan {
  std::vector<PlannedRequest> items;  // this shard's, in due order
  bool closed_loop = false;
  uint32_t concurrency = 0;    // closed loop only
  uint64_t planned_total = 0;  // over all shards
  std::string mode;            // "trace timestamps", "poisson 20 req/s", "concurrency 8"
};

// `duration_s` > 0 drops (open loop) rows due at or after it. False with *error when the
// options do not fit the rows (for example rows without timestamps and neither --rate nor
// --concurrency).
bool BuildPlan(const std::vector<TraceRequest>& rows, const ScheduleOptions& options,
               double duration_s, Plan* plan, std::string* error);

// Parses "i/N" (0 <= i < N).
bool ParseShard(std::string_view text, uint32_t* index, uint32_t* count);

}  // namespace llmtap::replay
