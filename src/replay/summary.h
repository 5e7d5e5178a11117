// The outputs of a replay, in the schemas src/report reads (the HTML report, `llmtap compare`,
// `llmtap report merge`): every request as a report::RequestResult (one requests.jsonl line),
// and summary.json = report::SummarizeRequests (all statistics, computed the same way for one
// run and for merged shards) plus the run's own fields. Pure functions except WriteOutputs,
// which writes files; any thread may call them.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "replay/metrics.h"
#include "report/summary.h"

namespace llmtap::replay {

// Run-wide facts that are not in the per-request results.
struct RunFacts {
  std::string command;
  std::string url;
  std::string trace;
  uint32_t shard_index = 0;
  uint32_t shard_count = 1;
  int64_t started_at_unix_ms = 0;
  std::optional<uint32_t> max_concurrency;
  std::string server_metrics_json;  // "" = null
};

// Times rounded to the microsecond. A request never sent (the run was interrupted) has no
// sent_ms; lag, latency and done are 0.
report::RequestResult ToReportResult(const RequestResult& r, uint32_t shard);

// Every request of the plan, in send order (unsent ones last, in plan order). `with_unsent`:
// keep requests never sent (an open-loop schedule's; a closed loop lists only what it sent).
std::vector<report::RequestResult> ToReportResults(const std::vector<RequestResult>& results,
                                                   uint32_t shard, bool with_unsent);

nlohmann::json BuildSummary(const std::vector<report::RequestResult>& requests,
                            const RunFacts& facts,
                            const std::vector<report::GoodputConstraint>& goodput);

// A few lines for the console: counts, throughput, then one row per metric.
std::string RenderConsole(const nlohmann::json& summary);

// DIR/summary.json, DIR/requests.jsonl and DIR/report.html (report::WriteRunDir).
bool WriteOutputs(const std::string& dir, const std::vector<report::RequestResult>& requests,
                  const nlohmann::json& summary, std::string* error);

}  // namespace llmtap::replay
