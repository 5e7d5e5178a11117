// The timing model: prefill time, per-step decode time and the output length of a request.
// Immutable after construction; any thread may call it (each caller passes its own Rng).
#pragma once

#include <cstdint>
#include <optional>

#include "sim/options.h"
#include "sim/rng.h"

namespace llmtap::sim {

class TimingModel {
 public:
  explicit TimingModel(const TimingOptions& options) : options_(options) {}

  // Seconds from the start of the request (after any queueing) to its first token.
  double PrefillSeconds(uint64_t uncached_prompt_tokens) const {
    return (options_.ttft_ms +
            options_.prefill_us_per_token * 1e-3 * static_cast<double>(uncached_prompt_tokens)) *
           1e-3;
  }
  // Seconds of one decode step (one or more tokens).
  double StepSeconds(Rng& rng) const {
    double ms = options_.itl_ms;
    if (options_.itl_jitter_ms > 0) ms += options_.itl_jitter_ms * (2.0 * rng.Uniform() - 1.0);
    return ms > 0 ? ms * 1e-3 : 0.0;
  }
  // Output tokens: the request's limit when it gives one, else a draw from the configured
  // distribution. `*length_capped` tells whether the request's limit decided it.
  uint32_t OutputTokens(std::optional<uint32_t> request_max, Rng& rng, bool* length_capped) const {
    if (request_max) {
      *length_capped = true;
      return *request_max;
    }
    *length_capped = false;
    double v = options_.output_tokens_mean + options_.output_tokens_stddev * rng.Normal();
    v = std::round(v);
    if (v < 1) v = 1;
    if (v > options_.output_tokens_max) v = options_.output_tokens_max;
    return static_cast<uint32_t>(v);
  }
  const TimingOptions& options() const { return options_; }

 private:
  TimingOptions options_;
};

}  // namespace llmtap::sim
