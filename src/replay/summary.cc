// summary.json's statistics (SummaryBuilder, one request at a time) and the run's facts added
// to them (BuildSummary). Called by RunOutputs (run_outputs.cc) and Replay (replay.cc).
#include "replay/summary.h"

#include "common/version.h"

namespace llmtap::replay {
namespace {
using nlohmann::json;
}  // namespace

SummaryBuilder::SummaryBuilder(report::SummaryOptions options) : tally_(std::move(options)) {}

bool SummaryBuilder::Open(const std::vector<std::string>& dirs, std::string* error) {
  bool files = true;
  for (ValueSpool& v : spools_.series) files = v.Open(dirs, error) && files;
  return files;
}

// report::SummarizeRequests with the values in spools.
bool SummaryBuilder::Summarize(json* out_json, std::string* error) {
  report::Stats stats[report::kSeriesCount];
  for (size_t i = 0; i < report::kSeriesCount; ++i) {
    if (!spools_.series[i].Compute(&stats[i], error)) return false;
  }
  *out_json = tally_.ToJson(stats);
  return true;
}

json BuildSummary(json s, const RunFacts& f) {
  s["tool"] = "llmtap replay";
  s["version"] = kVersion;
  s["command"] = f.command;
  s["url"] = f.url;
  s["trace"] = f.trace;
  s["shard"] = {{"index", f.shard_index}, {"count", f.shard_count}};
  s["started_at_unix_ms"] = f.started_at_unix_ms;
  if (!f.input.is_null()) s["input"] = f.input;
  if (!f.sessions.is_null()) s["sessions"] = f.sessions;
  if (!f.response_chains.is_null()) s["response_chains"] = f.response_chains;
  if (!f.captured_server.is_null()) s["captured_server"] = f.captured_server;
  if (!f.fidelity.is_null()) s["fidelity"] = f.fidelity;
  s["server_metrics"] = nullptr;
  if (!f.server_metrics_json.empty()) {
    json m = json::parse(f.server_metrics_json, nullptr, false);
    if (!m.is_discarded()) s["server_metrics"] = std::move(m);
  }
  return s;
}

}  // namespace llmtap::replay
