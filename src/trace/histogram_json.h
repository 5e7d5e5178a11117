// A stats Histogram as the JSON reports print it (`llmtap stats --json`, `llmtap sessions
// --json`): null when empty, else count, mean, min, p50, p90, p99, max and sum. A pure
// function; any thread. Json is nlohmann::json or nlohmann::ordered_json.
#pragma once

#include <nlohmann/json.hpp>

#include "trace/stats.h"

namespace llmtap::trace {

template <typename Json = nlohmann::ordered_json>
Json HistogramJson(const Histogram& h) {
  if (h.count() == 0) return nullptr;
  return {{"count", h.count()},      {"mean", h.mean()},        {"min", h.min()},
          {"p50", h.Percentile(50)}, {"p90", h.Percentile(90)}, {"p99", h.Percentile(99)},
          {"max", h.max()},          {"sum", h.sum()}};
}

}  // namespace llmtap::trace
