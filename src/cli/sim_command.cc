// `llmtap sim`: runs the simulated OpenAI-compatible inference server until SIGINT/SIGTERM.
#include <cstdio>
#include <memory>
#include <string>

#include "cli/commands.h"
#include "cli/listen.h"
#include "sim/server.h"

namespace llmtap::cli {
namespace {

struct SimFlags {
  std::string listen = "127.0.0.1:8000";
  std::string report = "none";
  sim::SimOptions options;
};

int RunSim(SimFlags& flags) {
  if (!SplitListen("llmtap sim", flags.listen, &flags.options.host, &flags.options.port)) {
    return 2;
  }
  flags.options.report = flags.report == "llamacpp" ? sim::ReportShape::kLlamaCpp
                         : flags.report == "vllm"   ? sim::ReportShape::kVllm
                                                    : sim::ReportShape::kNone;
  // Block the stop signals in every thread; this one waits for them below.
  StopSignals stop_signals;

  sim::SimServer server(flags.options);
  std::string error;
  if (!server.Start(&error)) {
    std::fprintf(stderr, "llmtap sim: %s\n", error.c_str());
    return 1;
  }
  std::printf("llmtap sim: listening on %s (%s, threads %u)\n",
              ListenUrl(flags.options.host, server.port()).c_str(),
              sim::DescribeModels(flags.options).c_str(), flags.options.threads);
  std::fflush(stdout);
  stop_signals.Wait();
  server.Stop();
  return 0;
}

}  // namespace

void AddSimCommand(CLI::App& app) {
  auto flags = std::make_shared<SimFlags>();
  sim::SimOptions& o = flags->options;
  CLI::App* cmd = app.add_subcommand(
      "sim",
      "Run a simulated OpenAI-compatible inference server (POST /v1/chat/completions, "
      "/v1/completions, /v1/responses, /v1/embeddings, /v1/rerank (also /v2/rerank, /rerank); "
      "GET /v1/models, /health, /v1/metrics) that also serves Anthropic's Messages API (POST "
      "/v1/messages). Token timing, prefix caching and speculative decoding are modelled for "
      "chat, completions, responses and messages, deterministically under --seed. The Responses "
      "API answers as vLLM does (a message, or with tool_choice \"required\" or a named "
      "function one function_call item; streamed as response.* events); `store` (the default) "
      "keeps each response's conversation in memory for `previous_response_id`, the last 10000 "
      "responses stored or continued (least recently used evicted; an unknown id is a 404). "
      "Messages answers text or a forced tool_use block, streamed as Anthropic's events or not, "
      "errors in Anthropic's shape; its max_tokens is required and caps the drawn length. "
      "Embeddings are "
      "unit vectors hashed from the input's words (1024 floats unless `dimensions` asks "
      "otherwise; float or base64), answered at once; rerank scores each document by the "
      "cosine of its vector with the query's, mapped to [0, 1]. Stops on SIGINT or SIGTERM.");
  AddListenOption(cmd, &flags->listen);
  cmd->add_option("--threads", o.threads, "I/O threads")
      ->check(CLI::Range(1, 256))
      ->capture_default_str();
  cmd->add_option("--model", o.model,
                  "the model, as vLLM's --model: the name served when --served-model-name is not "
                  "given, and each served name's \"root\" in /v1/models")
      ->capture_default_str();
  cmd->add_option("--served-model-name", o.served_model_names,
                  "the model names requests may ask for, one or more (as vLLM's; default: "
                  "--model). Responses name the first. A request naming another model gets "
                  "vLLM's 404 (\"The model `x` does not exist.\"); one naming none is served")
      ->expected(1, -1);
  cmd->add_flag("--any-model", o.any_model,
                "serve every model name, answering with the name asked for (to replay a trace "
                "whose model this sim does not serve)");
  cmd->add_option("--seed", o.seed,
                  "seed of every random draw (same seed + same request = same "
                  "text and timing; a request's integer `seed` field is mixed in, so equal "
                  "prompts with different seeds get different answers)")
      ->capture_default_str();
  cmd->add_option("--max-concurrency", o.max_concurrency,
                  "requests generated at once; more wait in a FIFO queue (0 = no limit)")
      ->capture_default_str();
  cmd->add_option("--max-body-bytes", o.max_body_bytes, "largest request body (413 above)")
      ->check(CLI::Range(uint64_t{1}, uint64_t{1} << 32))
      ->capture_default_str();
  cmd->add_option("--max-model-len", o.max_model_len, "largest max_tokens accepted (400 above)")
      ->check(CLI::Range(1u, 1u << 24))
      ->capture_default_str();
  cmd->add_option("--idle-timeout-s", o.idle_timeout_s,
                  "close a connection idle (or a write blocked) this long")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  // Timing model.
  cmd->add_option("--ttft-ms", o.timing.ttft_ms,
                  "base time to first token, added to the prefill cost")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str()
      ->group("Timing model");
  cmd->add_option("--prefill-us-per-token", o.timing.prefill_us_per_token,
                  "prefill cost per uncached prompt token (microseconds)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str()
      ->group("Timing model");
  cmd->add_option("--itl-ms", o.timing.itl_ms,
                  "mean time of one decode step (inter-token latency without speculation)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str()
      ->group("Timing model");
  cmd->add_option("--itl-jitter-ms", o.timing.itl_jitter_ms,
                  "each decode step varies uniformly by up to this much either way")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str()
      ->group("Timing model");
  cmd->add_option("--output-tokens-mean", o.timing.output_tokens_mean,
                  "output length when a request sets no max_tokens: normal with this mean...")
      ->check(CLI::PositiveNumber)
      ->capture_default_str()
      ->group("Timing model");
  cmd->add_option("--output-tokens-stddev", o.timing.output_tokens_stddev,
                  "...and this standard deviation (finish_reason \"stop\")")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str()
      ->group("Timing model");
  cmd->add_option("--output-tokens-max", o.timing.output_tokens_max, "cap of that distribution")
      ->check(CLI::Range(1u, 1u << 24))
      ->capture_default_str()
      ->group("Timing model");
  // Prefix cache.
  cmd->add_option("--cache-block-tokens", o.cache.block_tokens,
                  "prefix-cache block size in approximate tokens")
      ->check(CLI::Range(1u, 1u << 20))
      ->capture_default_str()
      ->group("Prefix cache");
  cmd->add_option("--cache-blocks", o.cache.blocks,
                  "blocks the LRU prefix cache holds (0 = no prefix cache)")
      ->capture_default_str()
      ->group("Prefix cache");
  // Speculative decoding.
  cmd->add_option("--spec-tokens", o.spec.num_spec_tokens,
                  "draft tokens per step, prompt-lookup (n-gram) speculation (0 = off)")
      ->check(CLI::Range(0u, 64u))
      ->capture_default_str()
      ->group("Speculative decoding");
  cmd->add_option("--spec-ngram-min", o.spec.ngram_min, "shortest n-gram looked up")
      ->check(CLI::Range(1u, 16u))
      ->capture_default_str()
      ->group("Speculative decoding");
  cmd->add_option("--spec-ngram-max", o.spec.ngram_max, "longest n-gram looked up")
      ->check(CLI::Range(1u, 16u))
      ->capture_default_str()
      ->group("Speculative decoding");
  cmd->add_option("--copy-scale", o.spec.copy_scale,
                  "generated text copies prompt spans for (this x prompt repetitiveness, at most "
                  "0.9) of its tokens; repetitiveness = share of the prompt's token 3-grams "
                  "already seen earlier in it")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str()
      ->group("Speculative decoding");
  // The report on its own work, in a real engine's shape (sim/report_shape.h).
  cmd->add_option("--server-report", flags->report,
                  "what each chat and completions answer reports of the sim's own work, beside "
                  "usage (whose prompt_tokens_details.cached_tokens is always sent): none; "
                  "llamacpp: llama-server's \"timings\" (cache_n + prompt_n = prompt_tokens, "
                  "predicted_n = completion_tokens, prompt_ms and predicted_ms from the timing "
                  "model, draft_n and draft_n_accepted when the request drafted), on the body, "
                  "on a chat stream's include_usage chunk or else its finish chunk, on a "
                  "completions stream's finish chunk (with usage, and no include_usage chunk) "
                  "and beside `response` in a Responses stream's response.completed; vllm: "
                  "vLLM's metrics.speculative_decoding (--per-request-spec-decode-metrics "
                  "summary: steps, draft and accepted tokens, k, dense acceptance histogram; "
                  "null for n > 1; none with --spec-tokens 0), on the body or a stream's "
                  "include_usage chunk. Summed over requests, the drafts agree with /v1/metrics")
      ->check(CLI::IsMember({"none", "llamacpp", "vllm"}))
      ->capture_default_str()
      ->group("Speculative decoding");
  cmd->callback([flags] { ExitWith(RunSim(*flags)); });
}

}  // namespace llmtap::cli
