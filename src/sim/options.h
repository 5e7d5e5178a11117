// Options of the simulated inference server (`llmtap sim`). Plain data; every default below is
// what `llmtap sim` uses when the matching flag is not given.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace llmtap {
class Logger;
}  // namespace llmtap

namespace llmtap::sim {

// When the first token and the following ones appear. All times are drawn deterministically from
// the server seed and the request's text, so the same request gets the same timing.
struct TimingOptions {
  // Time to first token = ttft_ms + prefill_us_per_token * (uncached prompt tokens) / 1000.
  double ttft_ms = 20.0;
  double prefill_us_per_token = 20.0;
  // Every decode step after the first token takes itl_ms, plus a uniform jitter in
  // [-itl_jitter_ms, +itl_jitter_ms] (never below zero). With speculative decoding one step can
  // emit several tokens.
  double itl_ms = 10.0;
  double itl_jitter_ms = 2.0;
  // Output length when the request gives no max_tokens / max_completion_tokens: normal with this
  // mean and standard deviation, rounded, clamped to [1, output_tokens_max]. Such requests end
  // with finish_reason "stop"; requests with a limit generate exactly that many tokens and end
  // with "length".
  double output_tokens_mean = 128.0;
  double output_tokens_stddev = 64.0;
  uint32_t output_tokens_max = 4096;
};

// The prefix cache: the prompt's approximate tokens in fixed blocks, each block identified by a
// hash chained over every block before it (as vLLM's automatic prefix caching does), held in an
// LRU of `blocks` blocks. A cached block costs no prefill time.
struct PrefixCacheOptions {
  uint32_t block_tokens = 16;
  uint64_t blocks = 65536;  // 0 turns the cache off
};

// Speculative decoding with prompt-lookup (n-gram) drafts, by vLLM's "ngram" method's rules
// (specdec/ngram.h, the proposer `llmtap specdec` uses): at every decode step the longest suffix
// of prompt + output of ngram_max down to ngram_min tokens is looked up at its earliest earlier
// occurrence, and the tokens that followed become a draft of up to num_spec_tokens tokens.
// Drafted tokens that match what the model "generates" are accepted; a step emits the accepted
// tokens plus one.
struct SpecDecodeOptions {
  uint32_t num_spec_tokens = 5;  // 0 turns speculative decoding off
  uint32_t ngram_min = 2;
  uint32_t ngram_max = 4;
  // The generated text copies spans of the prompt for a fraction of its tokens equal to
  // copy_scale * (r - 0.1), clamped to [0, 0.9], where r is the prompt's repetitiveness (the
  // share of its token 3-grams already seen earlier in it; prose has r < 0.1). Repetitive
  // prompts (code editing) therefore get high acceptance, free chat low acceptance.
  double copy_scale = 1.5;
};

// What the sim reports of its own work on each generation, beside usage (whose
// prompt_tokens_details.cached_tokens it always sends), in one real engine's shape
// (tests/engine/SHAPES.md): none (the default), llama.cpp's `timings` (llama-server), or vLLM's
// per-request speculative-decoding metrics (`--per-request-spec-decode-metrics summary`).
enum class ReportShape : uint8_t { kNone, kLlamaCpp, kVllm };

struct SimOptions {
  // The first served name (what responses and the metrics' model_name label say).
  std::string_view FirstServedName() const {
    return served_model_names.empty() ? std::string_view(model) : served_model_names.front();
  }
  // Whether a request naming `name` is served (an empty name: a request naming none).
  bool Serves(std::string_view name) const {
    if (any_model || name.empty()) return true;
    if (served_model_names.empty()) return name == model;
    return std::find(served_model_names.begin(), served_model_names.end(), name) !=
           served_model_names.end();
  }
  // The model a response names: under any_model the one asked for (when given), else the first
  // served name.
  std::string_view ResponseModel(std::string_view asked) const {
    return any_model && !asked.empty() ? asked : FirstServedName();
  }

  // Listen address; port 0 picks a free port (read it back with SimServer::port()).
  std::string host = "127.0.0.1";
  uint16_t port = 8000;
  // I/O threads, each with its own event loop; one listening socket hands them connections in
  // turn.
  uint32_t threads = 1;
  // The model, as vLLM's --model: /v1/models shows it as each served name's "root".
  std::string model = "llmtap-sim";
  // The names requests may ask for, as vLLM's --served-model-name; empty means {model}. Every
  // response names the first one, as vLLM's do. A request naming another model gets vLLM's 404
  // ("The model `x` does not exist."); a request naming none is served.
  std::vector<std::string> served_model_names;
  // Serve every model name, and answer with the name asked for (replaying a trace whose model
  // the sim does not serve).
  bool any_model = false;
  // Largest `n` (choices per request) accepted (400 above). The n choices are generated side by
  // side: one prefill, then decode steps shared by all of them.
  uint32_t max_n = 128;
  uint64_t seed = 0;
  // Requests running at once; later ones wait in a FIFO queue. 0 = no limit.
  uint32_t max_concurrency = 0;
  // Largest accepted request body; larger ones get 413.
  uint64_t max_body_bytes = 64ull << 20;
  // Largest max_tokens accepted (400 above it).
  uint32_t max_model_len = 131072;
  // A keep-alive connection idle this long, or a write blocked this long, is closed.
  double idle_timeout_s = 60.0;
  // Where failures (a connection's exception, a failed accept) are logged. Not owned; nullptr
  // means Logger::Stderr(). Must outlive the server.
  Logger* logger = nullptr;
  TimingOptions timing;
  PrefixCacheOptions cache;
  SpecDecodeOptions spec;
  ReportShape report = ReportShape::kNone;
};

}  // namespace llmtap::sim
