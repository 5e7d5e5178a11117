#include "replay/schedule.h"

#include <algorithm>
#include <charconv>
#include <cmath>

namespace llmtap::replay {
namespace {

std::string FormatRate(double rate) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%g", rate);
  return buf;
}

}  // namespace

uint32_t SessionShard(std::string_view session_id, uint32_t count) {
  uint64_t h = 14695981039346656037ull;
  for (unsigned char c : session_id) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return static_cast<uint32_t>(h % count);
}

bool ParseShard(std::string_view text, uint32_t* index, uint32_t* count) {
  size_t slash = text.find('/');
  if (slash == std::string_view::npos) return false;
  auto parse = [](std::string_view s, uint32_t* v) {
    auto r = std::from_chars(s.data(), s.data() + s.size(), *v);
    return r.ec == std::errc() && r.ptr == s.data() + s.size() && !s.empty();
  };
  return parse(text.substr(0, slash), index) && parse(text.substr(slash + 1), count) &&
         *count > 0 && *index < *count;
}

bool Planner::Validate(const ScheduleOptions& o, std::string* error) {
  if (o.shard_count == 0 || o.shard_index >= o.shard_count) {
    *error = "--shard must be i/N with 0 <= i < N";
    return false;
  }
  if (!(o.speedup > 0) || !std::isfinite(o.speedup)) {
    *error = "--speedup must be a positive number";
    return false;
  }
  if (o.rate && !(*o.rate > 0)) {
    *error = "--rate must be positive";
    return false;
  }
  if (o.rate && o.concurrency) {
    *error = "--rate and --concurrency exclude each other";
    return false;
  }
  if (o.concurrency && *o.concurrency == 0) {
    *error = "--concurrency must be at least 1";
    return false;
  }
  return true;
}

Planner::Planner(const ScheduleOptions& options, double duration_s)
    : options_(options),
      duration_ms_(duration_s > 0 && !options.concurrency ? duration_s * 1000 : 0),
      windowed_(options.start_offset_ms || options.end_offset_ms),
      needs_timestamps_(windowed_ || (!options.rate && !options.concurrency)),
      rng_(options.seed),
      gap_(options.rate && *options.rate > 0 ? *options.rate : 1.0) {
  if (options.concurrency) {
    mode_ = "closed loop, concurrency " + std::to_string(*options.concurrency);
  } else if (options.rate) {
    mode_ = std::string(options.arrival == Arrival::kConstant ? "constant" : "poisson") + " " +
            FormatRate(*options.rate) + " req/s";
  } else {
    mode_ = "trace timestamps";
    if (options.speedup != 1) mode_ += ", speedup " + FormatRate(options.speedup);
  }
}

Planner::Decision Planner::Add(uint64_t index, uint64_t line, std::optional<double> timestamp_ms,
                               std::string_view session_id) {
  Decision d;
  const bool first_row = rows_++ == 0;
  last_backstep_ms_ = 0;
  double trace_ms = 0;
  if (needs_timestamps_) {
    if (!timestamp_ms) {
      d.verdict = first_row ? Verdict::kError : Verdict::kSkip;
      d.reason = first_row ? "line " + std::to_string(line) +
                                 " has no timestamp: give --rate or --concurrency (and no "
                                 "--start-offset / --end-offset)"
                           : "no timestamp, and the schedule needs one (trace timestamps or a "
                             "--start-offset / --end-offset window)";
      return d;
    }
    if (!first_ms_) first_ms_ = *timestamp_ms;
    trace_ms = *timestamp_ms - *first_ms_;
    if (trace_ms < latest_trace_ms_) {
      // Backwards: sent in file order, at once (see the header).
      ++out_of_order_;
      last_backstep_ms_ = latest_trace_ms_ - trace_ms;
      trace_ms = latest_trace_ms_;
    } else {
      latest_trace_ms_ = trace_ms;
    }
  }
  const double start = options_.start_offset_ms.value_or(0);
  if (windowed_) {
    if (trace_ms < start) return d;  // kOutside
    // Trace time never decreases from here on, so neither can a later row be inside.
    if (options_.end_offset_ms && trace_ms >= *options_.end_offset_ms) {
      d.verdict = Verdict::kStop;
      return d;
    }
  }
  if (options_.max_requests > 0 && planned_ >= options_.max_requests) {
    d.verdict = Verdict::kStop;
    return d;
  }
  const uint64_t k = planned_;
  if (options_.concurrency) {
    d.due_ms = 0;
  } else if (options_.rate) {
    if (options_.arrival == Arrival::kConstant) {
      d.due_ms = 1000.0 * static_cast<double>(k) / *options_.rate;
    } else {
      d.due_ms = 1000.0 * poisson_s_;
      poisson_s_ += gap_(rng_);
    }
  } else {
    d.due_ms = (trace_ms - start) / options_.speedup;
  }
  // Due times never decrease, so the first row due at or after --duration ends the plan.
  if (duration_ms_ > 0 && d.due_ms >= duration_ms_) {
    d.verdict = Verdict::kStop;
    return d;
  }
  ++planned_;
  d.verdict = Verdict::kPlanned;
  d.warmup = k < options_.warmup;
  const uint32_t shard = session_id.empty() ? static_cast<uint32_t>(index % options_.shard_count)
                                            : SessionShard(session_id, options_.shard_count);
  d.this_shard = shard == options_.shard_index;
  return d;
}

bool BuildPlan(const std::vector<TraceRequest>& rows, const ScheduleOptions& o, double duration_s,
               Plan* plan, std::string* error) {
  *plan = Plan();
  if (!Planner::Validate(o, error)) return false;
  Planner planner(o, duration_s);
  plan->closed_loop = planner.closed_loop();
  plan->concurrency = o.concurrency.value_or(0);
  plan->mode = planner.mode();
  for (size_t i = 0; i < rows.size(); ++i) {
    const TraceRequest& r = rows[i];
    const Planner::Decision d = planner.Add(r.index, r.line, r.timestamp_ms, r.session_id);
    if (d.verdict == Planner::Verdict::kError) {
      *error = d.reason;
      return false;
    }
    if (d.verdict == Planner::Verdict::kStop) break;
    if (d.verdict == Planner::Verdict::kSkip) ++plan->skipped;
    if (d.verdict != Planner::Verdict::kPlanned || !d.this_shard) continue;
    plan->items.push_back({static_cast<uint32_t>(i), d.due_ms, d.warmup});
  }
  plan->planned_total = planner.planned_total();
  plan->out_of_order = planner.out_of_order();
  return true;
}

}  // namespace llmtap::replay
