// The statistics of a replay, computed from its per-request results: the part of summary.json
// that depends only on the requests ("requests", "duration_s", "throughput", "goodput",
// "metrics", "open_loop", "definitions"). `llmtap replay` and `llmtap report merge` both call
// SummarizeRequests, so a merged run's numbers are computed exactly as one run's.
//
// Percentiles: linear interpolation between the two nearest ranks, as numpy.percentile's default
// and AIPerf: for the n sorted values x[0..n-1] and q in [0, 1], h = q * (n - 1) and
// p = x[floor h] + (h - floor h) * (x[floor h + 1] - x[floor h]).
//
// Pure functions; any thread may call them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace llmtap::report {

// One line of requests.jsonl. Times in milliseconds; *_ms times from the run's start.
struct RequestResult {
  int64_t index = 0;  // position in the trace
  int shard = 0;
  std::string endpoint;  // the API (api::EndpointName): chat, completions, responses, ...
  bool stream = false;
  double scheduled_ms = 0;
  std::optional<double> sent_ms;  // null: never sent (cancelled before its time)
  double lag_ms = 0;              // sent - scheduled
  double done_ms = 0;
  int status = 0;  // HTTP status; 0 when no response
  // "" when the request succeeded, else connect, tls, timeout, http_4xx, http_5xx, protocol or
  // cancelled.
  std::string error;
  std::optional<double> ttft_ms, ttst_ms;
  double latency_ms = 0;
  std::optional<double> itl_ms, max_chunk_gap_ms;
  int64_t chunks = 0;
  std::optional<int64_t> input_tokens, output_tokens;
  std::string tokens_from = "usage";  // "usage", "timings" (the server's, no usage) or "counted"
  bool warmup = false;
  double held_ms = 0;  // time held back by --max-concurrency
  // Every gap between consecutive response chunks (streaming); optional in the file. The
  // inter_chunk_ms statistics are computed over these, so a run written without them reports
  // inter_chunk_ms with count 0.
  std::vector<double> chunk_gaps_ms;
  // A turn of a session (its row has a session_id) replayed under --schedule causal
  // (replay/sessions.h); in the file only then, so that other rows' lines stay as they were.
  // causal_shift_ms (sent turns): how far causality moved it, its causal due time (its
  // scheduled_ms) - its plan time, 0 when it went out on its plan time. captured_latency (sent
  // turns): whether the outcomes sidecar gave its captured latency (without it, the turn after it
  // gets no think time). They make summary.json's "sessions" (SummarizeSessions), so that
  // `llmtap report merge` recomputes it.
  bool session_turn = false;
  std::optional<double> causal_shift_ms;
  std::optional<bool> captured_latency;
  // What the server reported of its own work on this request, as the capture's outcome lines
  // write it (api/server_report.h): the prompt tokens it reused from its cache, its own timings
  // ("server": prompt_n, cache_n, prompt_ms, decode_n, decode_ms) and its speculative decoding
  // ("spec": AIPerf's per-request acceptance record). Unknown: nullopt and null.
  std::optional<int64_t> cached_tokens;
  nlohmann::json server;
  nlohmann::json spec;
  // Choice 0's finish reason as the response gave it ("stop", "length", ...); "" when it gave
  // none (then absent from the file).
  std::string finish_reason;
};

nlohmann::json RequestResultToJson(const RequestResult& r);
// False, with the reason, when a required field is missing or has the wrong type.
bool RequestResultFromJson(const nlohmann::json& j, RequestResult* out, std::string* error);

struct Stats {
  size_t count = 0;
  double mean = 0, p50 = 0, p90 = 0, p95 = 0, p99 = 0, max = 0;
};

// The q-quantile (q in [0, 1]) of sorted values, by the interpolation above. NaN when empty.
double Percentile(const std::vector<double>& sorted, double q);
Stats ComputeStats(std::vector<double> values);
// {"count","mean","p50","p90","p95","p99","max"}; all but count null when count == 0.
nlohmann::json StatsToJson(const Stats& s);

// A goodput constraint: a request is good when it completed and every constrained metric is
// present and <= its limit (AIPerf's --goodput). Metrics: ttft_ms, ttst_ms, itl_ms, latency_ms,
// max_chunk_gap_ms.
struct GoodputConstraint {
  std::string metric;
  double max_ms = 0;
};

// Parses "ttft:200 itl:20" (also "ttft_ms:200", comma- or space-separated, AIPerf's
// "time_to_first_token:200" and "inter_token_latency:20", "request_latency:..."). False with
// a reason on an unknown metric or a bad number.
bool ParseGoodput(const std::string& spec, std::vector<GoodputConstraint>* out, std::string* error);

struct SummaryOptions {
  std::vector<GoodputConstraint> goodput;   // empty: "goodput" is null
  std::optional<uint32_t> max_concurrency;  // reported in open_loop
  // The measured window's length. Default: from the first measured request's send to the
  // last measured request's end (AIPerf's benchmark duration), warm-up excluded.
  std::optional<double> duration_s;
};

// The value series of summary.json's "metrics", in its order (kSeriesNames).
enum class Series : size_t {
  kTtft,
  kTtst,
  kItl,
  kInterChunk,
  kLatency,
  kInputTokens,
  kOutputTokens,
  kLag,
};
inline constexpr size_t kSeriesCount = 8;
inline constexpr const char* kSeriesNames[kSeriesCount] = {
    "ttft_ms",    "ttst_ms",      "itl_ms",        "inter_chunk_ms",
    "latency_ms", "input_tokens", "output_tokens", "lag_ms"};

// summary.json's statistics, one request at a time: the counts are kept here, and each metric
// value is handed to the caller's ValueSink, which keeps the values as it likes (in memory for
// SummarizeRequests, spooled to disk by the replay's SummaryBuilder, replay/summary.h) and gives
// their Stats back to ToJson. Both therefore count alike by construction. One thread at a time.
class RequestTally {
 public:
  class ValueSink {
   public:
    virtual void Add(Series series, double value) = 0;

   protected:
    ~ValueSink() = default;
  };

  explicit RequestTally(SummaryOptions options);
  void Add(const RequestResult& r, ValueSink& values);
  // Everything SummarizeRequests returns, with `stats` the statistics of each series' values.
  nlohmann::json ToJson(const Stats (&stats)[kSeriesCount]) const;

 private:
  // summary.json's "server": the server-reported cache hit rate (cached / prompt tokens of the
  // completed requests that reported both) and speculative decoding (summed over the requests
  // that reported it); null when no request reported either.
  nlohmann::json ServerJson() const;
  // A run mixing APIs (RequestResult::endpoint) is summarized per API too: "apis" in ToJson,
  // with each API's counts and its TTFT, ITL and latency statistics (these values are kept in
  // memory, 24 bytes per completed request, so only the runs that mix APIs pay for them).
  struct PerApi {
    size_t sent = 0, completed = 0, errors = 0;
    std::vector<double> ttft_ms, itl_ms, latency_ms;
  };
  const SummaryOptions options_;
  std::map<std::string, PerApi> apis_;
  // What the servers reported (completed requests): prompt and cached tokens of the requests
  // whose cached tokens were reported, and the speculative decoding of those that drafted.
  struct ServerTally {
    size_t cache_requests = 0, spec_requests = 0, step_requests = 0;
    uint64_t prompt_tokens = 0, cached_tokens = 0;
    double drafted = 0, accepted = 0;
    double steps = 0, accepted_in_steps = 0;  // of the requests whose steps were reported
  };
  ServerTally server_;
  size_t scheduled_ = 0, sent_ = 0, completed_ = 0, errors_ = 0, warmup_ = 0, good_ = 0,
         violations_ = 0;
  std::map<std::string, size_t> errors_by_kind_;
  double output_sum_ = 0, held_total_ = 0;
  double first_sent_, last_done_;
};

// Which requests count: warm-up requests are counted in requests.warmup and nothing else.
// completed = no error and a 2xx status; errors = any error kind. Latency and token metrics are
// over completed requests; lag over every sent request. Throughputs are per duration_s.
nlohmann::json SummarizeRequests(const std::vector<RequestResult>& requests,
                                 const SummaryOptions& options);

// summary.json's "sessions": what the replay's schedule did to the session turns sent, warm-up
// left out. `schedule`: "causal" when the run followed sessions, else why not ("timestamps",
// "closed loop"); `without_captured_latency`: the number of turns whose own captured latency was
// unknown, or null when not causal; `shift`: the statistics of the moved turns' causal_shift_ms
// (moved = shift > 0).
nlohmann::json SessionsJson(const std::string& schedule, uint64_t turns, uint64_t moved,
                            const nlohmann::json& without_captured_latency, const Stats& shift);

// "sessions" from the per-request fields above, as `llmtap replay` computes it while running
// (turns: session_turn rows sent, warm-up left out): a causal run's, since only a causal replay
// writes the fields. Null when no such turn was sent. "without_captured_latency" is left out
// when a turn lacks captured_latency.
nlohmann::json SummarizeSessions(const std::vector<RequestResult>& requests);

// A server cache figure: {"requests", "prompt_tokens", "cached_tokens", "hit_rate"} (hit_rate
// null when there were no prompt tokens); null when no request reported its cache.
nlohmann::json CacheJson(uint64_t requests, uint64_t prompt_tokens, uint64_t cached_tokens);

// The one-line definition of every metric and figure in the summary, by key.
const nlohmann::json& MetricDefinitions();

}  // namespace llmtap::report
