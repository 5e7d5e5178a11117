// summary.json's statistics (SummaryBuilder, one request at a time) and the run's facts added
// to them (BuildSummary). Called by RunOutputs (run_outputs.cc) and Replay (replay.cc).
#include "replay/summary.h"

#include <algorithm>
#include <limits>

#include "common/version.h"

namespace llmtap::replay {
namespace {
using nlohmann::json;
}  // namespace

SummaryBuilder::SummaryBuilder(report::SummaryOptions options)
    : options_(std::move(options)),
      first_sent_(std::numeric_limits<double>::infinity()),
      last_done_(-std::numeric_limits<double>::infinity()) {}

bool SummaryBuilder::Open(const std::vector<std::string>& dirs, std::string* error) {
  bool files = true;
  for (ValueSpool* v : {&ttft_, &ttst_, &itl_, &gaps_, &latency_, &input_, &output_, &lag_}) {
    files = v->Open(dirs, error) && files;
  }
  return files;
}

// report::SummarizeRequests' loop, one request at a time.
void SummaryBuilder::Add(const report::RequestResult& r) {
  if (r.warmup) {
    ++warmup_;
    return;
  }
  ++scheduled_;
  if (r.held_ms > 0) ++violations_;
  held_total_ += r.held_ms;
  if (r.sent_ms) {
    ++sent_;
    lag_.Add(r.lag_ms);
    first_sent_ = std::min(first_sent_, *r.sent_ms);
    last_done_ = std::max(last_done_, r.done_ms);
  }
  if (!r.error.empty()) {
    ++errors_;
    ++errors_by_kind_[r.error];
  }
  if (!(r.error.empty() && r.status >= 200 && r.status < 300)) return;
  ++completed_;
  if (r.ttft_ms) ttft_.Add(*r.ttft_ms);
  if (r.ttst_ms) ttst_.Add(*r.ttst_ms);
  if (r.itl_ms) itl_.Add(*r.itl_ms);
  for (double g : r.chunk_gaps_ms) gaps_.Add(g);
  latency_.Add(r.latency_ms);
  if (r.input_tokens) input_.Add(static_cast<double>(*r.input_tokens));
  if (r.output_tokens) {
    output_.Add(static_cast<double>(*r.output_tokens));
    output_sum_ += static_cast<double>(*r.output_tokens);
  }
  bool good = true;
  for (const report::GoodputConstraint& c : options_.goodput) {
    std::optional<double> v;
    if (c.metric == "ttft_ms") v = r.ttft_ms;
    if (c.metric == "ttst_ms") v = r.ttst_ms;
    if (c.metric == "itl_ms") v = r.itl_ms;
    if (c.metric == "latency_ms") v = r.latency_ms;
    if (c.metric == "max_chunk_gap_ms") v = r.max_chunk_gap_ms;
    if (!v || *v > c.max_ms) good = false;
  }
  if (good) ++good_;
}

bool SummaryBuilder::Summarize(json* out_json, std::string* error) {
  const double duration_s = options_.duration_s ? *options_.duration_s
                            : sent_             ? std::max(0.0, (last_done_ - first_sent_) / 1000.0)
                                                : 0.0;
  auto rate = [&](double n) { return duration_s > 0 ? json(n / duration_s) : json(nullptr); };
  json out;
  out["duration_s"] = duration_s;
  json by_kind = json::object();
  for (const auto& [kind, n] : errors_by_kind_) by_kind[kind] = n;
  out["requests"] = {{"scheduled", scheduled_},   {"sent", sent_},
                     {"completed", completed_},   {"errors", errors_},
                     {"errors_by_kind", by_kind}, {"warmup", warmup_}};
  out["throughput"] = {{"requests_per_s", rate(static_cast<double>(completed_))},
                       {"output_tokens_per_s", rate(output_sum_)}};
  if (options_.goodput.empty()) {
    out["goodput"] = nullptr;
  } else {
    json constraints = json::object();
    for (const report::GoodputConstraint& c : options_.goodput) constraints[c.metric] = c.max_ms;
    out["goodput"] = {
        {"constraints", constraints},
        {"good", good_},
        {"requests_per_s", rate(static_cast<double>(good_))},
        {"fraction", completed_ ? json(static_cast<double>(good_) / static_cast<double>(completed_))
                                : json(nullptr)}};
  }
  json metrics = json::object();
  const std::pair<const char*, ValueSpool*> spools[] = {
      {"ttft_ms", &ttft_},         {"ttst_ms", &ttst_},       {"itl_ms", &itl_},
      {"inter_chunk_ms", &gaps_},  {"latency_ms", &latency_}, {"input_tokens", &input_},
      {"output_tokens", &output_}, {"lag_ms", &lag_}};
  for (const auto& [name, spool] : spools) {
    report::Stats stats;
    if (!spool->Compute(&stats, error)) return false;
    metrics[name] = report::StatsToJson(stats);
  }
  out["metrics"] = std::move(metrics);
  out["open_loop"] = {{"max_concurrency",
                       options_.max_concurrency ? json(*options_.max_concurrency) : json(nullptr)},
                      {"violations", violations_},
                      {"held_ms_total", held_total_}};
  out["definitions"] = report::MetricDefinitions();
  *out_json = std::move(out);
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
  s["server_metrics"] = nullptr;
  if (!f.server_metrics_json.empty()) {
    json m = json::parse(f.server_metrics_json, nullptr, false);
    if (!m.is_discarded()) s["server_metrics"] = std::move(m);
  }
  return s;
}

}  // namespace llmtap::replay
