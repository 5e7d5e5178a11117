// What the sim reports of its own work on a generation, in one real engine's shape
// (SimOptions::report; tests/engine/SHAPES.md has what each engine sends, and where):
//   - llama.cpp's `timings`: the prefix cache's split of the prompt (cache_n + prompt_n = usage's
//     prompt_tokens, cache_n = its cached_tokens), the tokens generated (predicted_n = usage's
//     completion_tokens), the timing model's prefill and decode time, and, when the request
//     drafted anything, its draft tokens and accepted ones (draft_n, draft_n_accepted; absent,
//     not 0, otherwise), summed over the choices as usage is;
//   - vLLM's `metrics.speculative_decoding` (`--per-request-spec-decode-metrics summary`): the
//     request's verify steps, draft and accepted tokens, k and the dense histogram of accepted
//     drafts per step; null for n > 1, as vLLM's.
// Summed over requests, both equal the /v1/metrics counters vllm:spec_decode_num_drafts_total
// (verify steps), ..._num_draft_tokens_total and ..._num_accepted_tokens_total.
#pragma once

#include <cstdint>
#include <string>

#include "sim/engine.h"

namespace llmtap::sim {

// `,"timings":{"cache_n":..,"prompt_n":..,"prompt_ms":..,"prompt_per_token_ms":..,
// "prompt_per_second":..,"predicted_n":..,"predicted_ms":..,"predicted_per_token_ms":..,
// "predicted_per_second":..[,"draft_n":..,"draft_n_accepted":..]}` (llama-server's key order;
// times in whole microseconds; a rate that would be infinite is null, as llama-server's JSON
// writes it).
void AppendLlamaCppTimings(const Plan& plan, std::string* out);

// `,"metrics":{"speculative_decoding":{"mean_acceptance_length":..,"draft_acceptance_rate":..,
// "acceptance_histogram":[..],"num_spec_steps":..,"num_accepted_draft_tokens":..,
// "num_draft_tokens":..,"num_spec_tokens":k}}` (the key order of vLLM's docs), its value null
// for n > 1; nothing at all when speculation is off (k == 0). The two ratios are null for a
// request that had no verify step (no draft).
void AppendVllmSpecMetrics(const Plan& plan, uint32_t k, std::string* out);

}  // namespace llmtap::sim
