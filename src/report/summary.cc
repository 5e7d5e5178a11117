#include "report/summary.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <sstream>

namespace llmtap::report {
namespace {

using nlohmann::json;

json Opt(const std::optional<double>& v) { return v ? json(*v) : json(nullptr); }
json Opt(const std::optional<int64_t>& v) { return v ? json(*v) : json(nullptr); }

// Field readers: false when present with the wrong type (or absent when required).
bool GetNumber(const json& j, const char* key, double* out, bool required, std::string* error) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) {
    if (required) *error = std::string("missing \"") + key + "\"";
    return !required;
  }
  if (!it->is_number()) {
    *error = std::string("\"") + key + "\" is not a number";
    return false;
  }
  *out = it->get<double>();
  return true;
}

bool GetOptNumber(const json& j, const char* key, std::optional<double>* out, std::string* error) {
  double v = 0;
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) {
    out->reset();
    return true;
  }
  if (!GetNumber(j, key, &v, true, error)) return false;
  *out = v;
  return true;
}

bool GetOptInt(const json& j, const char* key, std::optional<int64_t>* out, std::string* error) {
  std::optional<double> v;
  if (!GetOptNumber(j, key, &v, error)) return false;
  if (v) *out = static_cast<int64_t>(std::llround(*v));
  return true;
}

bool GetString(const json& j, const char* key, std::string* out, std::string* error) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return true;
  if (!it->is_string()) {
    *error = std::string("\"") + key + "\" is not a string";
    return false;
  }
  *out = it->get<std::string>();
  return true;
}

bool GetBool(const json& j, const char* key, bool* out, std::string* error) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return true;
  if (!it->is_boolean()) {
    *error = std::string("\"") + key + "\" is not a boolean";
    return false;
  }
  *out = it->get<bool>();
  return true;
}

std::optional<double> Metric(const RequestResult& r, const std::string& metric) {
  if (metric == "ttft_ms") return r.ttft_ms;
  if (metric == "ttst_ms") return r.ttst_ms;
  if (metric == "itl_ms") return r.itl_ms;
  if (metric == "latency_ms") return r.latency_ms;
  if (metric == "max_chunk_gap_ms") return r.max_chunk_gap_ms;
  return std::nullopt;
}

bool Completed(const RequestResult& r) {
  return r.error.empty() && r.status >= 200 && r.status < 300;
}

}  // namespace

json RequestResultToJson(const RequestResult& r) {
  json j = {{"index", r.index},
            {"shard", r.shard},
            {"endpoint", r.endpoint},
            {"stream", r.stream},
            {"scheduled_ms", r.scheduled_ms},
            {"sent_ms", Opt(r.sent_ms)},
            {"lag_ms", r.lag_ms},
            {"done_ms", r.done_ms},
            {"status", r.status},
            {"error", r.error.empty() ? json(nullptr) : json(r.error)},
            {"ttft_ms", Opt(r.ttft_ms)},
            {"ttst_ms", Opt(r.ttst_ms)},
            {"latency_ms", r.latency_ms},
            {"itl_ms", Opt(r.itl_ms)},
            {"max_chunk_gap_ms", Opt(r.max_chunk_gap_ms)},
            {"chunks", r.chunks},
            {"input_tokens", Opt(r.input_tokens)},
            {"output_tokens", Opt(r.output_tokens)},
            {"tokens_from", r.tokens_from},
            {"warmup", r.warmup},
            {"held_ms", r.held_ms}};
  if (!r.chunk_gaps_ms.empty()) j["chunk_gaps_ms"] = r.chunk_gaps_ms;
  if (r.session_turn) j["session_turn"] = true;
  if (r.causal_shift_ms) j["causal_shift_ms"] = *r.causal_shift_ms;
  if (r.captured_latency) j["captured_latency"] = *r.captured_latency;
  // Server truth, only when the server reported it (records of other servers stay unchanged).
  if (r.cached_tokens) j["cached_tokens"] = *r.cached_tokens;
  if (!r.server.is_null()) j["server"] = r.server;
  if (!r.spec.is_null()) j["spec"] = r.spec;
  if (!r.finish_reason.empty()) j["finish_reason"] = r.finish_reason;
  return j;
}

bool RequestResultFromJson(const json& j, RequestResult* out, std::string* error) {
  if (!j.is_object()) {
    *error = "not a JSON object";
    return false;
  }
  RequestResult r;
  double index = 0, shard = 0, status = 0, chunks = 0;
  bool ok =
      GetNumber(j, "index", &index, true, error) && GetNumber(j, "shard", &shard, false, error) &&
      GetString(j, "endpoint", &r.endpoint, error) && GetBool(j, "stream", &r.stream, error) &&
      GetNumber(j, "scheduled_ms", &r.scheduled_ms, true, error) &&
      GetOptNumber(j, "sent_ms", &r.sent_ms, error) &&
      GetNumber(j, "lag_ms", &r.lag_ms, false, error) &&
      GetNumber(j, "done_ms", &r.done_ms, false, error) &&
      GetNumber(j, "status", &status, false, error) && GetString(j, "error", &r.error, error) &&
      GetOptNumber(j, "ttft_ms", &r.ttft_ms, error) &&
      GetOptNumber(j, "ttst_ms", &r.ttst_ms, error) &&
      GetNumber(j, "latency_ms", &r.latency_ms, false, error) &&
      GetOptNumber(j, "itl_ms", &r.itl_ms, error) &&
      GetOptNumber(j, "max_chunk_gap_ms", &r.max_chunk_gap_ms, error) &&
      GetNumber(j, "chunks", &chunks, false, error) &&
      GetOptInt(j, "input_tokens", &r.input_tokens, error) &&
      GetOptInt(j, "output_tokens", &r.output_tokens, error) &&
      GetString(j, "tokens_from", &r.tokens_from, error) &&
      GetBool(j, "warmup", &r.warmup, error) && GetNumber(j, "held_ms", &r.held_ms, false, error) &&
      GetBool(j, "session_turn", &r.session_turn, error) &&
      GetOptNumber(j, "causal_shift_ms", &r.causal_shift_ms, error);
  if (!ok) return false;
  if (auto it = j.find("captured_latency"); it != j.end() && !it->is_null()) {
    if (!it->is_boolean()) {
      *error = "\"captured_latency\" is not a boolean";
      return false;
    }
    r.captured_latency = it->get<bool>();
  }
  // Server truth (absent in the files of earlier versions: unknown).
  if (!GetOptInt(j, "cached_tokens", &r.cached_tokens, error)) return false;
  if (auto it = j.find("finish_reason"); it != j.end() && !it->is_null()) {
    if (!it->is_string()) {
      *error = "\"finish_reason\" is not a string";
      return false;
    }
    r.finish_reason = it->get<std::string>();
  }
  for (const char* key : {"server", "spec"}) {
    auto it = j.find(key);
    if (it == j.end() || it->is_null()) continue;
    if (!it->is_object()) {
      *error = std::string("\"") + key + "\" is not an object";
      return false;
    }
    (key == std::string_view("server") ? r.server : r.spec) = *it;
  }
  if (auto it = j.find("chunk_gaps_ms"); it != j.end() && !it->is_null()) {
    if (!it->is_array()) {
      *error = "\"chunk_gaps_ms\" is not an array";
      return false;
    }
    for (const json& g : *it) {
      if (!g.is_number()) {
        *error = "\"chunk_gaps_ms\" holds a non-number";
        return false;
      }
      r.chunk_gaps_ms.push_back(g.get<double>());
    }
  }
  r.index = static_cast<int64_t>(index);
  r.shard = static_cast<int>(shard);
  r.status = static_cast<int>(status);
  r.chunks = static_cast<int64_t>(chunks);
  *out = std::move(r);
  return true;
}

double Percentile(const std::vector<double>& sorted, double q) {
  if (sorted.empty()) return std::numeric_limits<double>::quiet_NaN();
  q = std::clamp(q, 0.0, 1.0);
  double h = q * static_cast<double>(sorted.size() - 1);
  size_t lo = static_cast<size_t>(std::floor(h));
  size_t hi = std::min(lo + 1, sorted.size() - 1);
  return sorted[lo] + (h - static_cast<double>(lo)) * (sorted[hi] - sorted[lo]);
}

Stats ComputeStats(std::vector<double> values) {
  Stats s;
  values.erase(
      std::remove_if(values.begin(), values.end(), [](double v) { return !std::isfinite(v); }),
      values.end());
  s.count = values.size();
  if (values.empty()) return s;
  std::sort(values.begin(), values.end());
  double sum = 0;
  for (double v : values) sum += v;
  s.mean = sum / static_cast<double>(values.size());
  s.p50 = Percentile(values, 0.50);
  s.p90 = Percentile(values, 0.90);
  s.p95 = Percentile(values, 0.95);
  s.p99 = Percentile(values, 0.99);
  s.max = values.back();
  return s;
}

json StatsToJson(const Stats& s) {
  if (s.count == 0) {
    return {{"count", 0},     {"mean", nullptr}, {"p50", nullptr}, {"p90", nullptr},
            {"p95", nullptr}, {"p99", nullptr},  {"max", nullptr}};
  }
  return {{"count", s.count}, {"mean", s.mean}, {"p50", s.p50}, {"p90", s.p90},
          {"p95", s.p95},     {"p99", s.p99},   {"max", s.max}};
}

bool ParseGoodput(const std::string& spec, std::vector<GoodputConstraint>* out,
                  std::string* error) {
  static const std::map<std::string, std::string> kAliases = {
      {"ttft", "ttft_ms"},
      {"ttft_ms", "ttft_ms"},
      {"time_to_first_token", "ttft_ms"},
      {"ttst", "ttst_ms"},
      {"ttst_ms", "ttst_ms"},
      {"time_to_second_token", "ttst_ms"},
      {"itl", "itl_ms"},
      {"itl_ms", "itl_ms"},
      {"inter_token_latency", "itl_ms"},
      {"latency", "latency_ms"},
      {"latency_ms", "latency_ms"},
      {"e2e", "latency_ms"},
      {"request_latency", "latency_ms"},
      {"max_chunk_gap", "max_chunk_gap_ms"},
      {"max_chunk_gap_ms", "max_chunk_gap_ms"},
  };
  std::string text = spec;
  std::replace(text.begin(), text.end(), ',', ' ');
  std::istringstream in(text);
  std::string item;
  std::vector<GoodputConstraint> result;
  while (in >> item) {
    size_t colon = item.find(':');
    if (colon == std::string::npos) colon = item.find('=');
    if (colon == std::string::npos) {
      *error = "goodput constraint \"" + item + "\" is not METRIC:MILLISECONDS";
      return false;
    }
    auto alias = kAliases.find(item.substr(0, colon));
    if (alias == kAliases.end()) {
      *error = "unknown goodput metric \"" + item.substr(0, colon) +
               "\" (ttft, ttst, itl, latency, max_chunk_gap)";
      return false;
    }
    std::string number = item.substr(colon + 1);
    char* end = nullptr;
    double v = std::strtod(number.c_str(), &end);
    if (number.empty() || *end != '\0' || !std::isfinite(v) || v < 0) {
      *error = "bad goodput limit \"" + number + "\" for " + alias->second;
      return false;
    }
    result.push_back({alias->second, v});
  }
  *out = std::move(result);
  return true;
}

const json& MetricDefinitions() {
  static const json kDefinitions = {
      {"ttft_ms",
       "time to first token: request sent to the first response chunk that carries output"},
      {"ttst_ms", "time to second token: first output chunk to the second one"},
      {"itl_ms",
       "inter-token latency per request: (latency - TTFT) / (output tokens - 1), requests with "
       ">= 2 output tokens"},
      {"inter_chunk_ms", "every gap between consecutive response chunks of streamed requests"},
      {"latency_ms", "end-to-end latency: request sent to the last byte of the response"},
      {"input_tokens",
       "prompt tokens per request, from usage, else the server's timings, else counted"},
      {"output_tokens",
       "generated tokens per request, from usage, else the server's timings, else counted"},
      {"lag_ms",
       "schedule lag: actual send time - scheduled send time, absolute (not relative to the "
       "least-late request)"},
      {"percentiles",
       "linear interpolation between the nearest ranks (numpy's default, as AIPerf); max is the "
       "largest value"},
      {"duration_s",
       "first measured request sent to the last measured request's end, warm-up excluded"},
      {"requests_per_s", "completed requests (no error, 2xx) / duration"},
      {"output_tokens_per_s", "output tokens of completed requests / duration"},
      {"goodput",
       "completed requests meeting every constraint (metric present and <= limit) / duration; "
       "fraction = good / completed"},
      {"open_loop_violations", "requests held back by --max-concurrency past their scheduled time"},
      {"acceptance_rate", "spec decode: accepted draft tokens / proposed draft tokens"},
      {"hit_rate",
       "server cache: prompt tokens the server reported reusing from its KV cache / prompt "
       "tokens, over the completed requests that reported both; captured_server: the same, as "
       "the capture's outcomes sidecar recorded it for the rows replayed"},
      {"mean_acceptance_length",
       "spec decode: 1 + accepted draft tokens / drafts (tokens per "
       "verification step)"},
  };
  return kDefinitions;
}

json SessionsJson(const std::string& schedule, uint64_t turns, uint64_t moved,
                  const json& without_captured_latency, const Stats& shift) {
  return {{"schedule", schedule},
          {"turns", turns},
          {"moved", moved},
          {"without_captured_latency", without_captured_latency},
          {"causal_shift_ms", StatsToJson(shift)},
          {"definition",
           "Rows with a session_id are turns of a conversation. Causal schedule: a turn is due at "
           "max(its plan time, the end of the previous turn's response in this run + the captured "
           "think time), the think time being the gap between the previous turn's captured end "
           "(its timestamp + latency_ms from the outcomes sidecar) and this turn's timestamp, "
           "divided by --speedup, or 0 when the previous turn has no captured latency "
           "(without_captured_latency counts such turns). causal_shift_ms: due time - plan time of "
           "the turns moved (moved of turns). A turn's scheduled_ms and lag_ms are counted from "
           "its causal due time."}};
}

json SummarizeSessions(const std::vector<RequestResult>& requests) {
  uint64_t turns = 0, moved = 0, without_latency = 0;
  bool latency_known = true, shift_known = true;
  std::vector<double> shifts;
  for (const RequestResult& r : requests) {
    if (!r.session_turn || !r.sent_ms || r.warmup) continue;
    ++turns;
    if (!r.captured_latency) latency_known = false;
    if (r.captured_latency == false) ++without_latency;
    if (!r.causal_shift_ms) shift_known = false;
    if (r.causal_shift_ms && *r.causal_shift_ms > 0) {
      ++moved;
      shifts.push_back(*r.causal_shift_ms);
    }
  }
  if (turns == 0) return nullptr;
  json out = SessionsJson("causal", turns, moved, without_latency, ComputeStats(std::move(shifts)));
  // Better no figure than one that misses the turns whose field is absent (a line edited or
  // written otherwise).
  if (!latency_known) out.erase("without_captured_latency");
  if (!shift_known) {
    out.erase("moved");
    out.erase("causal_shift_ms");
  }
  return out;
}

RequestTally::RequestTally(SummaryOptions options)
    : options_(std::move(options)),
      first_sent_(std::numeric_limits<double>::infinity()),
      last_done_(-std::numeric_limits<double>::infinity()) {}

void RequestTally::Add(const RequestResult& r, ValueSink& values) {
  if (r.warmup) {
    ++warmup_;
    return;
  }
  ++scheduled_;
  PerApi& api = apis_[r.endpoint];
  api.sent += r.sent_ms.has_value();
  api.errors += !r.error.empty();
  if (Completed(r)) {
    ++api.completed;
    if (r.ttft_ms) api.ttft_ms.push_back(*r.ttft_ms);
    if (r.itl_ms) api.itl_ms.push_back(*r.itl_ms);
    api.latency_ms.push_back(r.latency_ms);
  }
  if (r.held_ms > 0) ++violations_;
  held_total_ += r.held_ms;
  if (r.sent_ms) {
    ++sent_;
    values.Add(Series::kLag, r.lag_ms);
    first_sent_ = std::min(first_sent_, *r.sent_ms);
    last_done_ = std::max(last_done_, r.done_ms);
  }
  if (!r.error.empty()) {
    ++errors_;
    ++errors_by_kind_[r.error];
  }
  if (!Completed(r)) return;
  ++completed_;
  if (r.ttft_ms) values.Add(Series::kTtft, *r.ttft_ms);
  if (r.ttst_ms) values.Add(Series::kTtst, *r.ttst_ms);
  if (r.itl_ms) values.Add(Series::kItl, *r.itl_ms);
  for (double g : r.chunk_gaps_ms) values.Add(Series::kInterChunk, g);
  values.Add(Series::kLatency, r.latency_ms);
  if (r.input_tokens) values.Add(Series::kInputTokens, static_cast<double>(*r.input_tokens));
  if (r.output_tokens) {
    values.Add(Series::kOutputTokens, static_cast<double>(*r.output_tokens));
    output_sum_ += static_cast<double>(*r.output_tokens);
  }
  if (r.cached_tokens && r.input_tokens) {
    ++server_.cache_requests;
    server_.prompt_tokens += static_cast<uint64_t>(*r.input_tokens);
    server_.cached_tokens += static_cast<uint64_t>(*r.cached_tokens);
  }
  if (r.spec.is_object()) {
    const json& drafted = r.spec.value("num_draft_tokens", json());
    const json& accepted = r.spec.value("num_accepted_draft_tokens", json());
    const json& steps = r.spec.value("num_spec_steps", json());
    if (drafted.is_number() && accepted.is_number()) {
      ++server_.spec_requests;
      server_.drafted += drafted.get<double>();
      server_.accepted += accepted.get<double>();
      if (steps.is_number() && steps.get<double>() > 0) {
        ++server_.step_requests;
        server_.steps += steps.get<double>();
        server_.accepted_in_steps += accepted.get<double>();
      }
    }
  }
  bool good = true;
  for (const GoodputConstraint& c : options_.goodput) {
    std::optional<double> v = Metric(r, c.metric);
    if (!v || *v > c.max_ms) good = false;
  }
  if (good) ++good_;
}

json RequestTally::ToJson(const Stats (&stats)[kSeriesCount]) const {
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
    for (const GoodputConstraint& c : options_.goodput) constraints[c.metric] = c.max_ms;
    out["goodput"] = {
        {"constraints", constraints},
        {"good", good_},
        {"requests_per_s", rate(static_cast<double>(good_))},
        {"fraction", completed_ ? json(static_cast<double>(good_) / static_cast<double>(completed_))
                                : json(nullptr)}};
  }
  json metrics = json::object();
  for (size_t i = 0; i < kSeriesCount; ++i) metrics[kSeriesNames[i]] = StatsToJson(stats[i]);
  out["metrics"] = std::move(metrics);
  out["open_loop"] = {{"max_concurrency",
                       options_.max_concurrency ? json(*options_.max_concurrency) : json(nullptr)},
                      {"violations", violations_},
                      {"held_ms_total", held_total_}};
  out["definitions"] = MetricDefinitions();
  out["server"] = ServerJson();
  if (apis_.size() > 1) {
    json apis = json::object();
    for (const auto& [name, a] : apis_) {
      apis[name.empty() ? "(unknown)" : name] = {
          {"requests", {{"sent", a.sent}, {"completed", a.completed}, {"errors", a.errors}}},
          {"ttft_ms", StatsToJson(ComputeStats(a.ttft_ms))},
          {"itl_ms", StatsToJson(ComputeStats(a.itl_ms))},
          {"latency_ms", StatsToJson(ComputeStats(a.latency_ms))}};
    }
    out["apis"] = std::move(apis);
  }
  return out;
}

json RequestTally::ServerJson() const {
  const ServerTally& s = server_;
  if (s.cache_requests == 0 && s.spec_requests == 0) return nullptr;
  auto ratio = [](double a, double b) { return b > 0 ? json(a / b) : json(nullptr); };
  json out;
  out["cache"] = CacheJson(s.cache_requests, s.prompt_tokens, s.cached_tokens);
  out["spec"] =
      s.spec_requests == 0
          ? json(nullptr)
          : json{{"requests", s.spec_requests},
                 {"num_draft_tokens", s.drafted},
                 {"num_accepted_draft_tokens", s.accepted},
                 {"acceptance_rate", ratio(s.accepted, s.drafted)},
                 {"mean_acceptance_length",
                  s.step_requests ? json(1 + s.accepted_in_steps / s.steps) : json(nullptr)}};
  return out;
}

json CacheJson(uint64_t requests, uint64_t prompt_tokens, uint64_t cached_tokens) {
  if (requests == 0) return nullptr;
  return {{"requests", requests},
          {"prompt_tokens", prompt_tokens},
          {"cached_tokens", cached_tokens},
          {"hit_rate", prompt_tokens > 0 ? json(static_cast<double>(cached_tokens) /
                                                static_cast<double>(prompt_tokens))
                                         : json(nullptr)}};
}

json SummarizeRequests(const std::vector<RequestResult>& requests, const SummaryOptions& options) {
  struct InMemory final : RequestTally::ValueSink {
    std::vector<double> series[kSeriesCount];
    void Add(Series s, double v) override { series[static_cast<size_t>(s)].push_back(v); }
  } values;
  RequestTally tally(options);
  for (const RequestResult& r : requests) tally.Add(r, values);
  Stats stats[kSeriesCount];
  for (size_t i = 0; i < kSeriesCount; ++i) stats[i] = ComputeStats(std::move(values.series[i]));
  return tally.ToJson(stats);
}

}  // namespace llmtap::report
