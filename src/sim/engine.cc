#include "sim/engine.h"

#include <string>
#include <vector>

#include "common/prometheus.h"
#include "sim/text.h"

namespace llmtap::sim {

Engine::Engine(const SimOptions& options)
    : options_(options), timing_(options.timing), cache_(options.cache.blocks) {
  metrics_.spec_accepted_per_pos =
      std::make_unique<std::atomic<uint64_t>[]>(options_.spec.num_spec_tokens);
}

void Engine::MakePlan(const SimRequest& request, Plan* out) {
  Plan& plan = *out;
  plan.cached_tokens = 0;
  // Scratch reused across requests on this thread (bounded below).
  thread_local std::vector<uint64_t> hashes;
  thread_local std::vector<uint32_t> offsets;
  hashes.clear();
  offsets.clear();
  if (hashes.capacity() > (1u << 22)) hashes = {}, offsets = {};
  hashes.reserve(request.prompt_text.size() / 4 + 8);
  offsets.reserve(request.prompt_text.size() / 4 + 8);
  ApproxTokenize(request.prompt_text, &hashes, &offsets);
  plan.prompt_tokens = static_cast<uint32_t>(hashes.size());

  const uint32_t bs = options_.cache.block_tokens;
  if (bs > 0 && options_.cache.blocks > 0) {
    const std::vector<uint64_t> blocks = ChainedBlockHashes(hashes, bs);
    // As vLLM: at least the last prompt token is always computed, so a fully cached prompt
    // still recomputes its last block.
    const uint64_t max_hit = plan.prompt_tokens > 0 ? (plan.prompt_tokens - 1) / bs : 0;
    if (!blocks.empty()) {
      plan.cached_tokens = static_cast<uint32_t>(cache_.LookupAndInsert(blocks, max_hit) * bs);
    }
  }
  metrics_.prompt_tokens.fetch_add(plan.prompt_tokens, std::memory_order_relaxed);
  metrics_.cache_query_tokens.fetch_add(plan.prompt_tokens, std::memory_order_relaxed);
  if (plan.cached_tokens > 0) {
    metrics_.cache_hit_tokens.fetch_add(plan.cached_tokens, std::memory_order_relaxed);
  }

  // The request's seed: the server seed and the prompt's tokens (already hashed above).
  uint64_t seed = Mix64(options_.seed ^ hashes.size());
  for (uint64_t h : hashes) seed = Fold(seed, h);
  seed = Mix64(seed);
  // The request's own `seed` field, when sent: equal prompts then differ by it, as sampled
  // answers do (a request without one is unchanged).
  if (request.seed) seed = HashCombine(seed, static_cast<uint64_t>(*request.seed));
  // Choice 0 draws from the request's seed (an n=1 request is unchanged by n's existence); each
  // further choice from a seed of its own.
  plan.choices.resize(request.n);
  for (uint32_t i = 0; i < request.n; ++i) {
    Choice& c = plan.choices[i];
    const uint64_t choice_seed = i == 0 ? seed : HashCombine(seed, 0x63686f6963650000ull + i);
    Rng length_rng(HashCombine(choice_seed, 1));
    uint32_t n = timing_.OutputTokens(request.max_tokens, length_rng, &c.length_capped);
    if (request.length_cap && n >= *request.length_cap) {
      n = *request.length_cap;
      c.length_capped = true;
    }
    Generate(request.prompt_text, hashes, offsets, n, choice_seed, options_.spec, &c.gen);
  }
  plan.prefill_s = timing_.PrefillSeconds(plan.prompt_tokens - plan.cached_tokens);
  plan.step_rng = Rng(HashCombine(seed, 2));
  // The decode steps' durations, drawn ahead from a copy of step_rng: the same draws the stream
  // then takes step by step.
  Rng steps = plan.step_rng;
  plan.decode_s = 0;
  for (size_t i = 1, n = plan.steps(); i < n; ++i) plan.decode_s += timing_.StepSeconds(steps);
  plan.id = HashCombine(options_.seed, next_id_.fetch_add(1, std::memory_order_relaxed));
}

void Engine::RecordFinished(const Plan& plan) {
  for (const Choice& c : plan.choices) {
    (c.length_capped ? metrics_.requests_ok_length : metrics_.requests_ok_stop)
        .fetch_add(1, std::memory_order_relaxed);
    metrics_.generation_tokens.fetch_add(c.gen.tokens, std::memory_order_relaxed);
    const SpecStats& s = c.gen.spec;
    if (s.drafts == 0) continue;  // skip a dozen atomic adds of zero on the hot path
    metrics_.spec_drafts.fetch_add(s.drafts, std::memory_order_relaxed);
    metrics_.spec_draft_tokens.fetch_add(s.draft_tokens, std::memory_order_relaxed);
    metrics_.spec_accepted_tokens.fetch_add(s.accepted_tokens, std::memory_order_relaxed);
    for (size_t i = 0; i < s.accepted_per_pos.size() && i < options_.spec.num_spec_tokens; ++i) {
      if (s.accepted_per_pos[i] == 0) break;  // positions are accepted in order
      metrics_.spec_accepted_per_pos[i].fetch_add(s.accepted_per_pos[i], std::memory_order_relaxed);
    }
  }
}

std::string Engine::MetricsText() const {
  auto get = [](const std::atomic<uint64_t>& a) { return a.load(std::memory_order_relaxed); };
  const PromLabel model{"model_name", options_.FirstServedName()};
  std::string out;
  out.reserve(4096);
  PromWriter w(&out);

  w.Gauge("vllm:num_requests_running", "Requests being generated.", metrics_.running.load(),
          {model});
  w.Gauge("vllm:num_requests_waiting", "Requests waiting for --max-concurrency.",
          metrics_.waiting.load(), {model});
  w.Header("vllm:request_success_total", PromType::kCounter,
           "Requests finished, by finish reason.");
  w.Sample("vllm:request_success_total", {model, {"finished_reason", "length"}},
           get(metrics_.requests_ok_length));
  w.Sample("vllm:request_success_total", {model, {"finished_reason", "stop"}},
           get(metrics_.requests_ok_stop));
  w.Counter("vllm:prompt_tokens_total", "Prompt tokens (approximate) admitted.",
            get(metrics_.prompt_tokens), {model});
  w.Counter("vllm:generation_tokens_total", "Tokens generated by finished requests.",
            get(metrics_.generation_tokens), {model});

  w.Counter("vllm:prefix_cache_queries_total", "Prompt tokens looked up in the prefix cache.",
            get(metrics_.cache_query_tokens), {model});
  w.Counter("vllm:prefix_cache_hits_total", "Prompt tokens found in the prefix cache.",
            get(metrics_.cache_hit_tokens), {model});
  w.Counter("llmtap_sim_prefix_cache_block_hits_total", "Prefix-cache block lookups that hit.",
            cache_.hit_blocks(), {model});
  w.Counter("llmtap_sim_prefix_cache_block_misses_total", "Prefix-cache block lookups that missed.",
            cache_.miss_blocks(), {model});
  w.Counter("llmtap_sim_prefix_cache_block_evictions_total",
            "Blocks evicted from the prefix cache (LRU).", cache_.evicted_blocks(), {model});
  w.Gauge("llmtap_sim_prefix_cache_blocks", "Blocks held in the prefix cache.", cache_.size(),
          {model});

  w.Counter("vllm:spec_decode_num_drafts_total", "Decode steps that had a draft.",
            get(metrics_.spec_drafts), {model});
  w.Counter("vllm:spec_decode_num_draft_tokens_total", "Draft tokens proposed.",
            get(metrics_.spec_draft_tokens), {model});
  w.Counter("vllm:spec_decode_num_accepted_tokens_total", "Draft tokens accepted.",
            get(metrics_.spec_accepted_tokens), {model});
  w.Header("vllm:spec_decode_num_accepted_tokens_per_pos_total", PromType::kCounter,
           "Draft tokens accepted, by position in the draft.");
  for (uint32_t i = 0; i < options_.spec.num_spec_tokens; ++i) {
    w.Sample("vllm:spec_decode_num_accepted_tokens_per_pos_total",
             {model, {"position", std::to_string(i)}}, get(metrics_.spec_accepted_per_pos[i]));
  }

  w.Counter("llmtap_sim_requests_aborted_total",
            "Requests whose client went away before the response was complete.",
            get(metrics_.requests_aborted), {model});
  w.Counter("llmtap_sim_http_errors_total", "Requests answered with a 4xx error.",
            get(metrics_.http_errors_4xx), {model});
  w.Gauge("llmtap_sim_open_connections", "Open client connections.",
          metrics_.open_connections.load(), {model});
  return out;
}

}  // namespace llmtap::sim
