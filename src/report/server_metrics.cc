#include "report/server_metrics.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <limits>

#include "net/http_get.h"
#include "report/prometheus.h"

namespace llmtap::report {
namespace {

using nlohmann::json;

constexpr const char* kDrafts = "vllm:spec_decode_num_drafts_total";
constexpr const char* kDraftTokens = "vllm:spec_decode_num_draft_tokens_total";
constexpr const char* kAccepted = "vllm:spec_decode_num_accepted_tokens_total";
constexpr const char* kAcceptedPerPos = "vllm:spec_decode_num_accepted_tokens_per_pos_total";
constexpr const char* kSglangRate = "sglang:spec_accept_rate";
constexpr const char* kSglangLength = "sglang:spec_accept_length";

struct Tracked {
  const char* name;
  bool average;  // a ratio: averaged over label sets, not summed
};
// Gauges kept as time series (load, cache, SGLang's acceptance) and counters whose cumulative
// value is plotted.
constexpr Tracked kTrackedGauges[] = {
    {"vllm:num_requests_running", false},
    {"vllm:num_requests_waiting", false},
    {"vllm:kv_cache_usage_perc", true},
    {"vllm:gpu_cache_usage_perc", true},
    {"sglang:num_running_reqs", false},
    {"sglang:num_queue_reqs", false},
    {"sglang:token_usage", true},
    {"sglang:gen_throughput", false},
    {kSglangRate, true},
    {kSglangLength, true},
};
constexpr const char* kTrackedCounters[] = {kDrafts, kDraftTokens, kAccepted,
                                            "vllm:generation_tokens_total",
                                            "sglang:generation_tokens_total"};

json Number(double v) { return std::isfinite(v) ? json(v) : json(nullptr); }

json Ratio(double num, double den) { return den > 0 ? json(num / den) : json(nullptr); }

// G over the points after the first (the first scrape is the state before the run).
json GaugeStats(const std::vector<std::optional<double>>& points) {
  size_t n = 0;
  double sum = 0, lo = std::numeric_limits<double>::infinity(), hi = -lo, last = 0;
  for (size_t i = 1; i < points.size(); ++i) {
    if (!points[i]) continue;
    double v = *points[i];
    ++n;
    sum += v;
    lo = std::min(lo, v);
    hi = std::max(hi, v);
    last = v;
  }
  if (n == 0) return nullptr;
  return json{{"count", n},
              {"mean", Number(sum / static_cast<double>(n))},
              {"min", Number(lo)},
              {"max", Number(hi)},
              {"last", Number(last)}};
}

}  // namespace

void ServerMetricsSeries::AddScrape(double t_s, std::string_view text) {
  PromText parsed = ParsePrometheusText(text);
  const bool first = ok_ == 0;
  ++ok_;
  t_s_.push_back(t_s);
  const size_t point = t_s_.size() - 1;

  std::map<std::string, std::pair<double, size_t>> tracked;  // name -> sum, label sets
  for (const PromSample& s : parsed.samples) {
    if (!std::isfinite(s.value)) continue;
    for (const Tracked& g : kTrackedGauges) {
      if (s.name == g.name) {
        auto& [sum, count] = tracked[s.name];
        sum += s.value;
        ++count;
      }
    }
    if (!IsCumulativeSample(parsed, s.name, /*include_buckets=*/false)) continue;
    for (const char* c : kTrackedCounters) {
      if (s.name == c) tracked[s.name].first += s.value;
    }
    std::string key = s.name + LabelKey(s.labels);
    auto [it, inserted] = counters_.try_emplace(key);
    Counter& c = it->second;
    if (inserted) {
      c.name = s.name;
      c.labels = s.labels;
      // A series that appears after the first scrape was created during the window: from 0.
      c.increase = first ? 0 : s.value;
    } else if (s.value < c.last) {
      ++c.resets;  // the server restarted: the counter began again at 0
      c.increase += s.value;
    } else {
      c.increase += s.value - c.last;
    }
    c.last = s.value;
  }
  for (const auto& [name, agg] : tracked) {
    bool average = false;
    for (const Tracked& g : kTrackedGauges) {
      if (name == g.name) average = g.average;
    }
    auto& points = series_[name];
    points.resize(point);  // pads scrapes where the metric was absent
    points.push_back(average && agg.second ? agg.first / static_cast<double>(agg.second)
                                           : agg.first);
  }
}

void ServerMetricsSeries::AddFailure(double /*t_s*/, const std::string& error) {
  ++failed_;
  if (first_error_.empty()) first_error_ = error;
}

json ServerMetricsSeries::ToJson(const std::string& url, const std::string& error) const {
  json out;
  out["url"] = url.empty() ? json(nullptr) : json(url);
  out["error"] = error.empty() ? json(nullptr) : json(error);
  out["scrapes"] = {{"ok", ok_},
                    {"failed", failed_},
                    {"first_error", first_error_.empty() ? json(nullptr) : json(first_error_)}};
  out["window_s"] = t_s_.size() >= 2 ? Number(t_s_.back() - t_s_.front()) : json(nullptr);

  // Counters: increases summed per name, and per label set when there are several.
  std::map<std::string, std::vector<const Counter*>> by_name;
  for (const auto& [key, c] : counters_) by_name[c.name].push_back(&c);
  json counters = json::object();
  std::map<std::string, double> delta;
  for (const auto& [name, list] : by_name) {
    double sum = 0;
    int resets = 0;
    for (const Counter* c : list) {
      sum += c->increase;
      resets += c->resets;
    }
    delta[name] = sum;
    json entry = {{"delta", Number(sum)}, {"resets", resets}};
    if (list.size() > 1) {
      json rows = json::array();
      for (const Counter* c : list) {
        json labels = json::object();
        for (const auto& [k, v] : c->labels) labels[k] = v;
        rows.push_back({{"labels", labels}, {"delta", Number(c->increase)}});
      }
      entry["by_labels"] = std::move(rows);
    }
    counters[name] = std::move(entry);
  }
  out["counters"] = std::move(counters);

  json gauges = json::object();
  for (const Tracked& g : kTrackedGauges) {
    auto it = series_.find(g.name);
    if (it == series_.end()) continue;
    json stats = GaugeStats(it->second);
    if (!stats.is_null()) gauges[g.name] = std::move(stats);
  }

  json spec = nullptr;
  if (delta.count(kDrafts) || delta.count(kDraftTokens) || delta.count(kAccepted)) {
    double drafts = delta[kDrafts], draft_tokens = delta[kDraftTokens], accepted = delta[kAccepted];
    std::vector<double> per_pos;
    for (const auto& [key, c] : counters_) {
      if (c.name != kAcceptedPerPos) continue;
      const std::string* pos = nullptr;
      for (const auto& [k, v] : c.labels) {
        if (k == "position") pos = &v;
      }
      if (!pos || pos->empty() || pos->size() > 4 ||
          pos->find_first_not_of("0123456789") != std::string::npos) {
        continue;
      }
      size_t i = std::strtoul(pos->c_str(), nullptr, 10);
      if (per_pos.size() <= i) per_pos.resize(i + 1, 0.0);
      per_pos[i] += c.increase;
    }
    json positions = json::array();
    for (double a : per_pos) positions.push_back(Ratio(a, drafts));
    json length = drafts > 0 ? json(1.0 + accepted / drafts) : json(nullptr);
    spec = {{"source", "vllm_counters"},
            {"acceptance_rate", Ratio(accepted, draft_tokens)},
            {"mean_acceptance_length", length},
            {"drafts", Number(drafts)},
            {"draft_tokens", Number(draft_tokens)},
            {"accepted_tokens", Number(accepted)},
            {"per_position_acceptance", std::move(positions)}};
  } else if (gauges.contains(kSglangRate) || gauges.contains(kSglangLength)) {
    json rate = gauges.contains(kSglangRate) ? gauges[kSglangRate] : json(nullptr);
    json length = gauges.contains(kSglangLength) ? gauges[kSglangLength] : json(nullptr);
    spec = {{"source", "sglang_gauges"},
            {"acceptance_rate", rate.is_null() ? json(nullptr) : rate["mean"]},
            {"mean_acceptance_length", length.is_null() ? json(nullptr) : length["mean"]},
            {"accept_rate", rate},
            {"accept_length", length}};
  }
  out["spec_decode"] = std::move(spec);
  out["gauges"] = std::move(gauges);

  json series = {{"t_s", t_s_}};
  for (const auto& [name, points] : series_) {
    json values = json::array();
    for (size_t i = 0; i < t_s_.size(); ++i) {
      values.push_back(i < points.size() && points[i] ? Number(*points[i]) : json(nullptr));
    }
    series[name] = std::move(values);
  }
  out["series"] = std::move(series);
  return out;
}

namespace {

// Why a scrape of `url` is not usable ("" when it is: 200 with Prometheus samples).
std::string ScrapeProblem(const std::string& url, const net::HttpGetResult& r) {
  if (!r.error.empty()) return r.error;
  if (r.status != 200) return url + ": HTTP " + std::to_string(r.status);
  if (ParsePrometheusText(r.body).samples.empty()) return url + ": no Prometheus samples";
  return "";
}

}  // namespace

std::string DiscoverMetricsUrl(const std::string& target_url, std::chrono::milliseconds timeout,
                               std::string* body, std::string* error,
                               const std::vector<std::string>& headers,
                               const net::TlsClientContext* tls) {
  std::string origin = net::HttpOrigin(target_url);
  if (origin.empty()) {
    *error = net::HttpGetUrlProblem(target_url);
    return "";
  }
  std::string reasons;
  for (const char* path : {"/metrics", "/v1/metrics"}) {
    std::string url = origin + path;
    net::HttpGetResult r = net::HttpGet(url, timeout, net::kHttpGetMaxBodyBytes, headers, tls);
    std::string problem = ScrapeProblem(url, r);
    if (problem.empty()) {
      *body = std::move(r.body);
      return url;
    }
    if (!reasons.empty()) reasons += "; ";
    reasons += problem;
  }
  *error = "no metrics endpoint found (" + reasons + ")";
  return "";
}

ServerMetricsSampler::ServerMetricsSampler(Options options) : options_(std::move(options)) {}

ServerMetricsSampler::~ServerMetricsSampler() { Finish(); }

double ServerMetricsSampler::Now() const {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count();
}

bool ServerMetricsSampler::Start(std::string* error) {
  t0_ = std::chrono::steady_clock::now();
  std::string body;
  if (options_.url.empty()) {
    headers_ = options_.headers;  // the target's own origin
    url_ = DiscoverMetricsUrl(options_.target_url, options_.timeout, &body, &start_error_, headers_,
                              options_.tls.get());
  } else {
    const std::string origin = net::HttpOrigin(options_.url);
    if (!origin.empty() && origin == net::HttpOrigin(options_.target_url))
      headers_ = options_.headers;
    net::HttpGetResult r = net::HttpGet(options_.url, options_.timeout, net::kHttpGetMaxBodyBytes,
                                        headers_, options_.tls.get());
    start_error_ = ScrapeProblem(options_.url, r);
    if (start_error_.empty()) {
      url_ = options_.url;
      body = std::move(r.body);
    }
  }
  if (url_.empty()) {
    *error = start_error_;
    return false;
  }
  t0_ = std::chrono::steady_clock::now();
  {
    std::lock_guard lock(mu_);
    series_.AddScrape(0.0, body);
  }
  started_ = true;
  return true;
}

void ServerMetricsSampler::Scrape() {
  net::HttpGetResult r =
      net::HttpGet(url_, options_.timeout, net::kHttpGetMaxBodyBytes, headers_, options_.tls.get());
  double t = Now();
  std::lock_guard lock(mu_);
  if (r.status == 200) {
    series_.AddScrape(t, r.body);
  } else {
    series_.AddFailure(t, !r.error.empty() ? r.error : "HTTP " + std::to_string(r.status));
  }
}

void ServerMetricsSampler::Sample() {
  if (started_ && !finished_) Scrape();
}

void ServerMetricsSampler::StartBackground() {
  if (!started_ || finished_ || thread_.joinable()) return;
  thread_ = std::thread([this] {
    std::unique_lock lock(mu_);
    while (!stop_) {
      if (cv_.wait_for(lock, options_.interval, [this] { return stop_; })) break;
      lock.unlock();
      Scrape();
      lock.lock();
    }
  });
}

void ServerMetricsSampler::Finish() {
  if (!started_ || finished_) return;
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  Scrape();
  finished_ = true;
}

json ServerMetricsSampler::ToJson() const {
  std::lock_guard lock(mu_);
  return series_.ToJson(url_, start_error_);
}

}  // namespace llmtap::report
