#include "sim/engine.h"

#include <vector>

#include "sim/text.h"

namespace llmtap::sim {

using namespace std::string_view_literals;

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
  Rng length_rng(HashCombine(seed, 1));
  const uint32_t n = timing_.OutputTokens(request.max_tokens, length_rng, &plan.length_capped);
  Generate(request.prompt_text, hashes, offsets, n, seed, options_.spec, &plan.gen);
  plan.prefill_s = timing_.PrefillSeconds(plan.prompt_tokens - plan.cached_tokens);
  plan.step_rng = Rng(HashCombine(seed, 2));
  plan.id = HashCombine(options_.seed, next_id_.fetch_add(1, std::memory_order_relaxed));
}

void Engine::RecordFinished(const Plan& plan) {
  (plan.length_capped ? metrics_.requests_ok_length : metrics_.requests_ok_stop)
      .fetch_add(1, std::memory_order_relaxed);
  metrics_.generation_tokens.fetch_add(plan.gen.tokens, std::memory_order_relaxed);
  const SpecStats& s = plan.gen.spec;
  if (s.drafts == 0) return;  // skip a dozen atomic adds of zero on the hot path
  metrics_.spec_drafts.fetch_add(s.drafts, std::memory_order_relaxed);
  metrics_.spec_draft_tokens.fetch_add(s.draft_tokens, std::memory_order_relaxed);
  metrics_.spec_accepted_tokens.fetch_add(s.accepted_tokens, std::memory_order_relaxed);
  for (size_t i = 0; i < s.accepted_per_pos.size() && i < options_.spec.num_spec_tokens; ++i) {
    if (s.accepted_per_pos[i] == 0) break;  // positions are accepted in order
    metrics_.spec_accepted_per_pos[i].fetch_add(s.accepted_per_pos[i], std::memory_order_relaxed);
  }
}

namespace {

void Metric(std::string* out, const char* name, const char* type, const char* help) {
  out->append("# HELP "sv).append(name).append(" "sv).append(help).append("\n"sv);
  out->append("# TYPE "sv).append(name).append(" "sv).append(type).append("\n"sv);
}

void Sample(std::string* out, const std::string& name, const std::string& labels, uint64_t v) {
  out->append(name).append("{"sv).append(labels).append("} "sv);
  AppendUint(out, v);
  out->push_back('\n');
}

void SampleSigned(std::string* out, const std::string& name, const std::string& labels, int64_t v) {
  out->append(name)
      .append("{"sv)
      .append(labels)
      .append("} "sv)
      .append(std::to_string(v))
      .append("\n"sv);
}

// A metric with a single sample.
void OneSample(std::string* out, const char* name, const char* type, const char* help,
               const std::string& labels, uint64_t v) {
  Metric(out, name, type, help);
  Sample(out, name, labels, v);
}

void OneSampleSigned(std::string* out, const char* name, const char* type, const char* help,
                     const std::string& labels, int64_t v) {
  Metric(out, name, type, help);
  SampleSigned(out, name, labels, v);
}

}  // namespace

std::string Engine::MetricsText() const {
  auto get = [](const std::atomic<uint64_t>& a) { return a.load(std::memory_order_relaxed); };
  std::string model_label = "model_name=\"";
  AppendJsonEscaped(&model_label, options_.model);  // same escapes as Prometheus label values
  model_label.push_back('"');
  const std::string& l = model_label;
  std::string out;
  out.reserve(4096);

  OneSampleSigned(&out, "vllm:num_requests_running", "gauge", "Requests being generated.", l,
                  metrics_.running.load());
  OneSampleSigned(&out, "vllm:num_requests_waiting", "gauge",
                  "Requests waiting for --max-concurrency.", l, metrics_.waiting.load());
  Metric(&out, "vllm:request_success_total", "counter", "Requests finished, by finish reason.");
  Sample(&out, "vllm:request_success_total", l + ",finished_reason=\"length\"",
         get(metrics_.requests_ok_length));
  Sample(&out, "vllm:request_success_total", l + ",finished_reason=\"stop\"",
         get(metrics_.requests_ok_stop));
  OneSample(&out, "vllm:prompt_tokens_total", "counter", "Prompt tokens (approximate) admitted.", l,
            get(metrics_.prompt_tokens));
  OneSample(&out, "vllm:generation_tokens_total", "counter",
            "Tokens generated by finished requests.", l, get(metrics_.generation_tokens));

  OneSample(&out, "vllm:prefix_cache_queries_total", "counter",
            "Prompt tokens looked up in the prefix cache.", l, get(metrics_.cache_query_tokens));
  OneSample(&out, "vllm:prefix_cache_hits_total", "counter",
            "Prompt tokens found in the prefix cache.", l, get(metrics_.cache_hit_tokens));
  OneSample(&out, "llmtap_sim_prefix_cache_block_hits_total", "counter",
            "Prefix-cache block lookups that hit.", l, cache_.hit_blocks());
  OneSample(&out, "llmtap_sim_prefix_cache_block_misses_total", "counter",
            "Prefix-cache block lookups that missed.", l, cache_.miss_blocks());
  OneSample(&out, "llmtap_sim_prefix_cache_block_evictions_total", "counter",
            "Blocks evicted from the prefix cache (LRU).", l, cache_.evicted_blocks());
  OneSample(&out, "llmtap_sim_prefix_cache_blocks", "gauge", "Blocks held in the prefix cache.", l,
            cache_.size());

  OneSample(&out, "vllm:spec_decode_num_drafts_total", "counter", "Decode steps that had a draft.",
            l, get(metrics_.spec_drafts));
  OneSample(&out, "vllm:spec_decode_num_draft_tokens_total", "counter", "Draft tokens proposed.", l,
            get(metrics_.spec_draft_tokens));
  OneSample(&out, "vllm:spec_decode_num_accepted_tokens_total", "counter", "Draft tokens accepted.",
            l, get(metrics_.spec_accepted_tokens));
  Metric(&out, "vllm:spec_decode_num_accepted_tokens_per_pos_total", "counter",
         "Draft tokens accepted, by position in the draft.");
  for (uint32_t i = 0; i < options_.spec.num_spec_tokens; ++i) {
    Sample(&out, "vllm:spec_decode_num_accepted_tokens_per_pos_total",
           l + ",position=\"" + std::to_string(i) + "\"", get(metrics_.spec_accepted_per_pos[i]));
  }

  OneSample(&out, "llmtap_sim_requests_aborted_total", "counter",
            "Requests whose client went away before the response was complete.", l,
            get(metrics_.requests_aborted));
  OneSample(&out, "llmtap_sim_http_errors_total", "counter", "Requests answered with a 4xx error.",
            l, get(metrics_.http_errors_4xx));
  OneSampleSigned(&out, "llmtap_sim_open_connections", "gauge", "Open client connections.", l,
                  metrics_.open_connections.load());
  return out;
}

}  // namespace llmtap::sim
