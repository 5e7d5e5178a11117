#include "replay/schedule.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <numeric>
#include <random>

namespace llmtap::replay {
namespace {

std::string FormatRate(double rate) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%g", rate);
  return buf;
}

}  // namespace

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

bool BuildPlan(const std::vector<TraceRequest>& rows, const ScheduleOptions& o, double duration_s,
               Plan* plan, std::string* error) {
  *plan = Plan();
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
  const bool windowed = o.start_offset_ms || o.end_offset_ms;
  bool all_timed = true;
  for (const TraceRequest& r : rows) all_timed = all_timed && r.timestamp_ms.has_value();
  if (!all_timed && (windowed || (!o.rate && !o.concurrency))) {
    for (const TraceRequest& r : rows) {
      if (!r.timestamp_ms) {
        *error = "row " + std::to_string(r.index) +
                 " has no timestamp: give --rate or --concurrency (and no --start-offset / "
                 "--end-offset)";
        return false;
      }
    }
  }

  // Rows in due order, with their trace time (ms after the first timestamp) when timed.
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
  picked.reserve(order.size());
  for (uint32_t i : order) {
    if (windowed) {
      if (trace_ms[i] < start) continue;
      if (o.end_offset_ms && trace_ms[i] >= *o.end_offset_ms) continue;
    }
    picked.push_back(i);
  }
  if (o.max_requests > 0 && picked.size() > o.max_requests) picked.resize(o.max_requests);

  std::vector<double> due(picked.size(), 0.0);
  if (o.concurrency) {
    plan->closed_loop = true;
    plan->concurrency = *o.concurrency;
    plan->mode = "closed loop, concurrency " + std::to_string(*o.concurrency);
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
    plan->mode = std::string(o.arrival == Arrival::kConstant ? "constant" : "poisson") + " " +
                 FormatRate(*o.rate) + " req/s";
  } else {
    for (size_t k = 0; k < picked.size(); ++k) due[k] = (trace_ms[picked[k]] - start) / o.speedup;
    plan->mode = "trace timestamps";
    if (o.speedup != 1) plan->mode += ", speedup " + FormatRate(o.speedup);
  }
  size_t n = picked.size();
  if (duration_s > 0 && !plan->closed_loop) {
    n = static_cast<size_t>(std::lower_bound(due.begin(), due.end(), duration_s * 1000.0) -
                            due.begin());
  }
  plan->planned_total = n;
  for (size_t k = 0; k < n; ++k) {
    const TraceRequest& r = rows[picked[k]];
    if (r.index % o.shard_count != o.shard_index) continue;
    plan->items.push_back({picked[k], due[k], k < o.warmup});
  }
  return true;
}

}  // namespace llmtap::replay
