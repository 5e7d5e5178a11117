// Server metrics during a replay: the inference server's Prometheus /metrics, scraped before the
// run, periodically during it and after it, reduced to counter increases, spec-decode acceptance
// and a few time series. The result is summary.json's "server_metrics" object.
//
// Use from the replay engine (one controlling thread):
//
//   report::ServerMetricsSampler::Options o;
//   o.url = flag_server_metrics;      // empty: discover from the target
//   o.target_url = flag_url;          // e.g. http://host:8000 or http://host:8000/v1
//   report::ServerMetricsSampler sampler(o);
//   std::string error;
//   if (!sampler.Start(&error)) warn(error);   // the "before" scrape; no endpoint: inert
//   sampler.StartBackground();                  // a thread scrapes every o.interval
//   ... run ...
//   sampler.Finish();                           // stops the thread, the "after" scrape
//   summary["server_metrics"] = sampler.ToJson();
//
// Scrapes are blocking HTTP GETs on the sampler's own thread (or the caller's, with Sample()),
// never on the load generator's event loop. A failed scrape is counted and skipped.
//
// JSON (every number a JSON number; null where it cannot be computed):
// {
//   "url": "http://host:port/metrics" | null,      // null: no endpoint found
//   "error": null | "why no endpoint was found",
//   "scrapes": {"ok": n, "failed": n, "first_error": null | str},
//   "window_s": x | null,                           // first to last successful scrape
//   "counters": {                                   // every cumulative series (see
//     "<name>": {                                   //   IsCumulativeSample; no _bucket)
//       "delta": x,                                 // increase, summed over label sets
//       "resets": n,                                // times a series went down (restart)
//       "by_labels": [{"labels": {k: v}, "delta": x}]  // only when several label sets
//     }, ...},
//   "spec_decode": null | {
//     "source": "vllm_counters" | "sglang_gauges",
//     "acceptance_rate": x | null,                  // see below
//     "mean_acceptance_length": x | null,
//     // vllm_counters: Δ over the window of the vllm:spec_decode_* counters (summed over
//     // label sets). acceptance_rate = Δaccepted / Δdraft_tokens; mean_acceptance_length =
//     // 1 + Δaccepted / Δdrafts; per_position_acceptance[i] = Δaccepted_pos[i] / Δdrafts.
//     "drafts": x, "draft_tokens": x, "accepted_tokens": x,
//     "per_position_acceptance": [x, ...],
//     // sglang_gauges: the gauges sglang:spec_accept_rate and sglang:spec_accept_length
//     // over the scrapes after the first (the first shows the state before the run);
//     // acceptance_rate and mean_acceptance_length are their means.
//     "accept_rate": G | null, "accept_length": G | null
//   },
//   "gauges": {"<name>": G, ...},                   // tracked gauges (kTrackedGauges)
//   "series": {"t_s": [t, ...], "<name>": [v | null, ...], ...}
// }
// G = {"count": n, "mean": x, "min": x, "max": x, "last": x} over successful scrapes after the
// first. Tracked gauges are summed over label sets per scrape, except ratios (cache usage,
// acceptance rate and length), which are averaged. Series: tracked gauges and the cumulative
// values of the spec-decode and generation-token counters, one point per successful scrape,
// t_s in seconds since the first scrape.
#pragma once

#include <chrono>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

namespace llmtap::net {
class TlsClientContext;
}

namespace llmtap::report {

// The reduction, without I/O: feed it scrapes in time order. Not thread-safe.
class ServerMetricsSeries {
 public:
  // One scrape's Prometheus text, taken `t_s` seconds after the first scrape.
  void AddScrape(double t_s, std::string_view text);
  void AddFailure(double t_s, const std::string& error);
  // The JSON above, with "url" and "error" as given.
  nlohmann::json ToJson(const std::string& url, const std::string& error) const;
  size_t ok_scrapes() const { return ok_; }

 private:
  struct Counter {
    std::string name;
    std::vector<std::pair<std::string, std::string>> labels;
    double last = 0;
    double increase = 0;
    int resets = 0;
  };
  std::map<std::string, Counter> counters_;  // by name + LabelKey
  std::vector<double> t_s_;
  std::map<std::string, std::vector<std::optional<double>>> series_;
  size_t ok_ = 0;
  size_t failed_ = 0;
  std::string first_error_;
};

class ServerMetricsSampler {
 public:
  struct Options {
    std::string url;                          // the metrics URL; empty: discover it from target_url
    std::string target_url;                   // the replayed server's base URL
    std::chrono::milliseconds timeout{2000};  // per scrape
    std::chrono::milliseconds interval{1000};  // between background scrapes
    // Extra "Name: value" fields (replay's --header, e.g. Authorization), sent only when the
    // metrics endpoint has the same origin as target_url: a credential for the server is
    // never handed to another host.
    std::vector<std::string> headers;
    // How an https:// endpoint is checked (replay's --cacert, ...); null: the system's trust
    // store.
    std::shared_ptr<const net::TlsClientContext> tls;
  };

  explicit ServerMetricsSampler(Options options);
  ~ServerMetricsSampler();  // Finish()es
  ServerMetricsSampler(const ServerMetricsSampler&) = delete;
  ServerMetricsSampler& operator=(const ServerMetricsSampler&) = delete;

  // Finds the endpoint (DiscoverMetricsUrl when no url was given) and takes the first scrape.
  // False with a reason when no endpoint answered with Prometheus text; the sampler then does
  // nothing more and ToJson() reports the reason.
  bool Start(std::string* error);
  // A thread that scrapes every `interval` until Finish().
  void StartBackground();
  // One scrape now, on the caller's thread.
  void Sample();
  // Stops the thread and takes the last scrape. Idempotent.
  void Finish();

  const std::string& url() const { return url_; }
  // Any thread, any time (a consistent copy).
  nlohmann::json ToJson() const;

 private:
  void Scrape();
  double Now() const;

  Options options_;
  std::string url_;
  std::vector<std::string> headers_;  // options_.headers when the origin is the target's
  std::string start_error_;
  bool started_ = false;
  bool finished_ = false;
  std::chrono::steady_clock::time_point t0_;
  mutable std::mutex mu_;
  ServerMetricsSeries series_;  // guarded by mu_
  std::condition_variable cv_;
  bool stop_ = false;  // guarded by mu_
  std::thread thread_;
};

// The metrics endpoint of the server at `target_url`: its origin's /metrics, else /v1/metrics,
// whichever first answers 200 with at least one Prometheus sample. Returns the URL and that
// first response's body in *body, or "" with the reasons in *error.
std::string DiscoverMetricsUrl(const std::string& target_url, std::chrono::milliseconds timeout,
                               std::string* body, std::string* error,
                               const std::vector<std::string>& headers = {},
                               const net::TlsClientContext* tls = nullptr);

}  // namespace llmtap::report
