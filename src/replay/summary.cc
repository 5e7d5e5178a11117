#include "replay/summary.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "common/version.h"
#include "report/run_dir.h"

namespace llmtap::replay {
namespace {

using nlohmann::json;

double Round3(double v) { return std::round(v * 1000.0) / 1000.0; }
std::optional<double> Round3(const std::optional<double>& v) {
  return v ? std::optional<double>(Round3(*v)) : std::nullopt;
}
std::optional<int64_t> Int(const std::optional<uint64_t>& v) {
  return v ? std::optional<int64_t>(static_cast<int64_t>(*v)) : std::nullopt;
}

// Metrics in the order the console shows them.
constexpr const char* kMetrics[] = {"ttft_ms",    "ttst_ms",      "itl_ms",        "inter_chunk_ms",
                                    "latency_ms", "input_tokens", "output_tokens", "lag_ms"};

double NumberOr(const json& j, double fallback) {
  return j.is_number() ? j.get<double>() : fallback;
}

}  // namespace

report::RequestResult ToReportResult(const RequestResult& r, uint32_t shard) {
  report::RequestResult o;
  o.index = static_cast<int64_t>(r.index);
  o.shard = static_cast<int>(shard);
  o.endpoint = r.chat ? "chat" : "completions";
  o.stream = r.stream;
  o.scheduled_ms = Round3(r.scheduled_ms);
  o.warmup = r.warmup;
  o.held_ms = Round3(r.held_ms);
  if (!r.sent) return o;
  o.sent_ms = Round3(r.sent_ms);
  o.lag_ms = Round3(r.lag_ms());
  o.done_ms = Round3(r.done_ms);
  o.latency_ms = Round3(r.latency_ms());
  o.status = r.status;
  o.error = std::string(ErrorKindName(r.error));
  o.ttft_ms = Round3(r.ttft_ms);
  o.ttst_ms = Round3(r.ttst_ms);
  o.itl_ms = Round3(r.itl_ms);
  o.max_chunk_gap_ms = Round3(r.max_chunk_gap_ms);
  o.chunks = r.chunks;
  o.input_tokens = Int(r.input_tokens);
  o.output_tokens = Int(r.output_tokens);
  o.tokens_from = r.tokens_from_usage ? "usage" : "counted";
  o.chunk_gaps_ms.reserve(r.gaps_ms.size());
  for (float g : r.gaps_ms) o.chunk_gaps_ms.push_back(Round3(g));
  return o;
}

std::vector<report::RequestResult> ToReportResults(const std::vector<RequestResult>& results,
                                                   uint32_t shard, bool with_unsent) {
  std::vector<const RequestResult*> order;
  for (const RequestResult& r : results) {
    if (r.sent || with_unsent) order.push_back(&r);
  }
  std::stable_sort(order.begin(), order.end(), [](const RequestResult* a, const RequestResult* b) {
    if (a->sent != b->sent) return a->sent;
    return a->sent && a->sent_ms < b->sent_ms;
  });
  std::vector<report::RequestResult> out;
  out.reserve(order.size());
  for (const RequestResult* r : order) out.push_back(ToReportResult(*r, shard));
  return out;
}

json BuildSummary(const std::vector<report::RequestResult>& requests, const RunFacts& f,
                  const std::vector<report::GoodputConstraint>& goodput) {
  report::SummaryOptions options;
  options.goodput = goodput;
  options.max_concurrency = f.max_concurrency;
  json s = report::SummarizeRequests(requests, options);
  s["tool"] = "llmtap replay";
  s["version"] = kVersion;
  s["command"] = f.command;
  s["url"] = f.url;
  s["trace"] = f.trace;
  s["shard"] = {{"index", f.shard_index}, {"count", f.shard_count}};
  s["started_at_unix_ms"] = f.started_at_unix_ms;
  s["server_metrics"] = nullptr;
  if (!f.server_metrics_json.empty()) {
    json m = json::parse(f.server_metrics_json, nullptr, false);
    if (!m.is_discarded()) s["server_metrics"] = std::move(m);
  }
  return s;
}

std::string RenderConsole(const json& s) {
  std::string out;
  char buf[256];
  const json& q = s["requests"];
  auto count = [](const json& j) { return j.is_number() ? j.get<unsigned long long>() : 0ull; };
  std::snprintf(buf, sizeof(buf),
                "requests: %llu scheduled, %llu sent, %llu completed, %llu errors (%llu warmup "
                "requests not counted)\n",
                count(q["scheduled"]), count(q["sent"]), count(q["completed"]), count(q["errors"]),
                count(q["warmup"]));
  out += buf;
  if (count(q["errors"]) > 0) {
    out += "errors by kind:";
    for (auto& [k, v] : q["errors_by_kind"].items()) {
      if (count(v) > 0) out += " " + k + "=" + std::to_string(count(v));
    }
    out += "\n";
  }
  std::snprintf(buf, sizeof(buf), "measured %.3f s: %.2f req/s, %.1f output tok/s\n",
                NumberOr(s["duration_s"], 0), NumberOr(s["throughput"]["requests_per_s"], 0),
                NumberOr(s["throughput"]["output_tokens_per_s"], 0));
  out += buf;
  if (!s["goodput"].is_null()) {
    std::snprintf(buf, sizeof(buf), "goodput: %.2f req/s (%.1f%% of completed requests)\n",
                  NumberOr(s["goodput"]["requests_per_s"], 0),
                  100 * NumberOr(s["goodput"]["fraction"], 0));
    out += buf;
  }
  const json& ol = s["open_loop"];
  if (!ol["max_concurrency"].is_null()) {
    std::snprintf(buf, sizeof(buf),
                  "open loop: %llu requests held back by --max-concurrency %llu, %.1f ms in all\n",
                  count(ol["violations"]), count(ol["max_concurrency"]),
                  NumberOr(ol["held_ms_total"], 0));
    out += buf;
  }
  std::snprintf(buf, sizeof(buf), "%-15s %8s %10s %10s %10s %10s %10s %10s\n", "metric", "count",
                "mean", "p50", "p90", "p95", "p99", "max");
  out += buf;
  for (const char* name : kMetrics) {
    const json& d = s["metrics"][name];
    if (count(d["count"]) == 0) {
      std::snprintf(buf, sizeof(buf), "%-15s %8d %10s\n", name, 0, "-");
    } else {
      std::snprintf(buf, sizeof(buf), "%-15s %8llu %10.3f %10.3f %10.3f %10.3f %10.3f %10.3f\n",
                    name, count(d["count"]), NumberOr(d["mean"], 0), NumberOr(d["p50"], 0),
                    NumberOr(d["p90"], 0), NumberOr(d["p95"], 0), NumberOr(d["p99"], 0),
                    NumberOr(d["max"], 0));
    }
    out += buf;
  }
  return out;
}

bool WriteOutputs(const std::string& dir, const std::vector<report::RequestResult>& requests,
                  const json& summary, std::string* error) {
  return report::WriteRunDir(dir, summary, requests, error);
}

}  // namespace llmtap::replay
