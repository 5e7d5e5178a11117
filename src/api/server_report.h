// ServerReport: what an inference server reported about its own work on one request, beside the
// token counts every API has. Three facts, each unknown (-1, or no histogram) unless the server
// sent it, never made up as 0:
//   - cached_tokens: prompt tokens it reused from its KV cache (chat and completions
//     usage.prompt_tokens_details.cached_tokens, Responses usage.input_tokens_details
//     .cached_tokens, Messages usage.cache_read_input_tokens; llama.cpp's timings.cache_n when
//     no usage came);
//   - its own timings (llama.cpp's "timings" object: prompt and decode time and tokens);
//   - its speculative decoding on this request, in the engine-neutral terms of AIPerf's
//     per-request acceptance record (draft tokens, accepted draft tokens, verify steps, the
//     draft length k, the histogram of accepted drafts per step), read from llama.cpp's
//     timings.draft_n / draft_n_accepted, vLLM's metrics.speculative_decoding and SGLang's
//     sglext.spec_tokens_details.
// Plain data of fixed size (no heap), so the proxy carries it on the request path without
// allocating. Readers: api/response_document.h (document by document) and the proxy's
// UsageScanner (byte by byte); writers of outcome and replay lines: AppendServerReportMembers.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace llmtap::api {

// The server's own clock and counts for one request (llama.cpp "timings"); -1: not reported.
struct ServerTimings {
  int64_t prompt_n = -1;  // prompt tokens evaluated (not taken from the cache)
  int64_t cache_n = -1;   // prompt tokens taken from the cache
  int64_t decode_n = -1;  // tokens generated (llama.cpp predicted_n)
  int64_t prompt_us = -1;  // time to evaluate the prompt (sent in ms with 3 decimals)
  int64_t decode_us = -1;  // time to generate (llama.cpp predicted_ms)

  bool known() const {
    return prompt_n >= 0 || cache_n >= 0 || decode_n >= 0 || prompt_us >= 0 || decode_us >= 0;
  }
};

enum class SpecEngine : uint8_t { kNone, kLlamaCpp, kVllm, kSglang };

// "llamacpp", "vllm", "sglang" (AIPerf's engine names); "" for kNone.
std::string_view SpecEngineName(SpecEngine engine);

// Speculative decoding on one request, in AIPerf's SpecDecodeAcceptanceRecord terms.
struct SpecDecodeCounts {
  static constexpr int kMaxHistogram = 33;  // k up to 32; a longer histogram is not kept

  SpecEngine engine = SpecEngine::kNone;  // kNone: nothing was reported
  int64_t num_draft_tokens = -1;
  int64_t num_accepted_draft_tokens = -1;
  int64_t num_spec_steps = -1;   // verify steps (llama.cpp does not report them per request)
  int64_t num_spec_tokens = -1;  // k, the longest draft of a step
  // Dense: histogram[j] = steps that accepted exactly j drafts; histogram_size 0: not reported.
  int histogram_size = 0;
  int64_t histogram[kMaxHistogram] = {};

  bool known() const { return engine != SpecEngine::kNone; }
};

struct ServerReport {
  int64_t cached_tokens = -1;
  ServerTimings timings;
  SpecDecodeCounts spec;
};

// What a later document of the same answer said over an earlier one's: each member `newer`
// knows replaces the one in `into` (a speculative-decoding report, whole).
void MergeServerReport(const ServerReport& newer, ServerReport* into);

// Token counts a server sent only in its timings (llama.cpp streams without include_usage send
// no usage, but their finish chunk has timings): fills the unknown (negative) prompt and
// completion counts (prompt: prompt_n + cache_n; completion: decode_n) and cached_tokens
// (cache_n). True when a token count came from the timings.
bool FillFromTimings(int64_t* prompt_tokens, int64_t* completion_tokens, ServerReport* r);

// The outcome and replay lines' members for `r`, each after a comma:
//   ,"cached_tokens":N|null,"server":{"prompt_n":..,"cache_n":..,"prompt_ms":..,"decode_n":..,
//   "decode_ms":..}|null,"spec":{"engine":"llamacpp","num_draft_tokens":..,
//   "num_accepted_draft_tokens":..,"num_spec_steps":..|null,"num_spec_tokens":..|null,
//   "acceptance_histogram":{"0":39,"3":3}|null}|null
// (unknown members of an object are null; the histogram is sparse with string keys, as AIPerf
// writes its record). Appends to `out`.
void AppendServerReportMembers(const ServerReport& r, std::string* out);

}  // namespace llmtap::api
