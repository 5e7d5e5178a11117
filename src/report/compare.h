// `llmtap compare`: the metrics of several replays side by side, with each run's ratio to the
// first (the baseline), e.g. spec decoding on (B) against off (A): a throughput ratio B/A of
// 1.6 is a 1.6x speedup, a latency ratio of 0.6 a 40 % cut. Pure functions; any thread.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace llmtap::report {

struct CompareRow {
  std::string key;    // JSON pointer into summary.json, e.g. "/metrics/ttft_ms/p99"
  std::string label;  // e.g. "TTFT p99"
  std::string unit;
  int better = 0;  // +1 higher is better, -1 lower is better, 0 neither
  // One per run; nullopt where absent. A boolean reads as 1 (true) or 0 (false).
  std::vector<std::optional<double>> values;
  // values[i] / values[0], for i >= 1 (nullopt when either is absent or values[0] == 0).
  std::vector<std::optional<double>> ratios;
};

// The rows, in display order; rows absent from every run are left out.
std::vector<CompareRow> CompareSummaries(const std::vector<nlohmann::json>& summaries);

// {"runs": [{"label","path"}], "baseline": 0, "rows": [{"key","label","unit","better",
//  "values": [x|null], "ratios": [null, x|null, ...]}]}
nlohmann::json CompareToJson(const std::vector<std::string>& labels,
                             const std::vector<std::string>& paths,
                             const std::vector<CompareRow>& rows);

// A console table: one column per run, then one ratio column per run after the first.
std::string CompareToText(const std::vector<std::string>& labels,
                          const std::vector<CompareRow>& rows);

}  // namespace llmtap::report
