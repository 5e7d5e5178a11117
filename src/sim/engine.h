// The simulated engine: turns a parsed request into a Plan (what to generate, when) through the
// timing, prefix-cache and speculative-decoding models, and keeps the counters /v1/metrics shows.
// Thread-safe: any thread may call every method.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "sim/generator.h"
#include "sim/options.h"
#include "sim/prefix_cache.h"
#include "sim/request.h"
#include "sim/rng.h"
#include "sim/timing_model.h"

namespace llmtap::sim {

// One generated answer: a choice of the response.
struct Choice {
  Generation gen;
  bool length_capped = false;  // finish_reason "length" (else "stop")
};

struct Plan {
  // The request's n choices (choice 0 is what an n=1 request gets). They are generated side by
  // side, as vLLM runs a request's sequences in one batch: one prefill, then shared decode steps
  // until the longest one ends.
  std::vector<Choice> choices;
  uint32_t prompt_tokens = 0;
  uint32_t cached_tokens = 0;
  double prefill_s = 0;  // time to first token, after any queueing
  double decode_s = 0;   // the decode steps after the first token, all together
  Rng step_rng{0};       // draws the decode steps' durations (TimingModel::StepSeconds)
  uint64_t id = 0;       // distinct per request; shown as the response id

  // Tokens generated over all choices (the usage's completion_tokens).
  uint64_t completion_tokens() const {
    uint64_t t = 0;
    for (const Choice& c : choices) t += c.gen.tokens;
    return t;
  }
  // Engine steps until the last choice ends.
  size_t steps() const {
    size_t s = 0;
    for (const Choice& c : choices) s = std::max(s, c.gen.step_ends.size());
    return s;
  }
  // The choice whose last event ends the response: the last of those that take every step.
  uint32_t last_to_finish() const {
    const size_t s = steps();
    uint32_t last = 0;
    for (uint32_t i = 0; i < choices.size(); ++i) {
      if (choices[i].gen.step_ends.size() == s) last = i;
    }
    return last;
  }
};

// Counters, in the units vLLM exports them. Gauges can be read while they change.
struct SimMetrics {
  std::atomic<uint64_t> requests_ok_length{0}, requests_ok_stop{0};
  std::atomic<uint64_t> requests_aborted{0};  // client went away mid-generation
  std::atomic<uint64_t> http_errors_4xx{0};
  std::atomic<uint64_t> prompt_tokens{0}, generation_tokens{0};
  std::atomic<uint64_t> cache_query_tokens{0}, cache_hit_tokens{0};
  std::atomic<uint64_t> spec_drafts{0}, spec_draft_tokens{0}, spec_accepted_tokens{0};
  std::unique_ptr<std::atomic<uint64_t>[]> spec_accepted_per_pos;  // num_spec_tokens entries
  std::atomic<int64_t> running{0}, waiting{0}, open_connections{0};
};

class Engine {
 public:
  explicit Engine(const SimOptions& options);

  // Plans one request: counts its prompt tokens, looks its blocks up in (and adds them to) the
  // prefix cache, draws its output length and text. Call when the request is admitted.
  // `*plan` is overwritten; its buffers are reused.
  void MakePlan(const SimRequest& request, Plan* plan);
  Plan MakePlan(const SimRequest& request) {
    Plan plan;
    MakePlan(request, &plan);
    return plan;
  }
  // Counts a plan's generated tokens and drafts once it has been fully sent; each choice counts
  // as one finished request (vLLM's engine runs each of n sequences as a request of its own).
  void RecordFinished(const Plan& plan);

  // Prometheus text exposition of every counter.
  std::string MetricsText() const;

  const SimOptions& options() const { return options_; }
  const TimingModel& timing() const { return timing_; }
  const PrefixCache& cache() const { return cache_; }
  SimMetrics& metrics() { return metrics_; }
  const SimMetrics& metrics() const { return metrics_; }

 private:
  const SimOptions options_;
  const TimingModel timing_;
  PrefixCache cache_;
  SimMetrics metrics_;
  std::atomic<uint64_t> next_id_{0};
};

}  // namespace llmtap::sim
