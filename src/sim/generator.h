// Generated text and the speculative-decoding model.
//
// The "model" writes deterministic pseudo-words, and copies spans of the prompt for a share of
// its tokens that grows with how repetitive the prompt is (code editing repeats the code it was
// given; free chat does not). Speculative decoding is then simulated exactly as vLLM's n-gram
// (prompt-lookup) method would run over that text, by the proposer `llmtap specdec` uses
// (specdec/ngram.h): at each step the longest suffix of prompt + output (ngram_max down to
// ngram_min tokens) is looked up at its earliest earlier occurrence, the tokens that followed are
// the draft, and the draft's leading tokens that equal the real next tokens are accepted. A step
// emits accepted + 1 tokens, so acceptance shortens generation.
//
// Pure functions; any thread may call them.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "sim/options.h"

namespace llmtap::sim {

struct SpecStats {
  uint64_t drafts = 0;                     // steps that had a draft
  uint64_t draft_tokens = 0;               // tokens proposed
  uint64_t accepted_tokens = 0;            // tokens accepted
  std::vector<uint64_t> accepted_per_pos;  // [i]: drafts whose token i was accepted
};

struct Generation {
  std::string text;
  // Byte offset in `text` at the end of each engine step. Step 0 is the first token (produced
  // by prefill); every later step is one decode step of one or more tokens.
  std::vector<uint32_t> step_ends;
  uint32_t tokens = 0;
  uint32_t copied_tokens = 0;  // tokens copied from the prompt
  SpecStats spec;
};

// The share of token positions (from the third on) whose 3-gram already occurred earlier in the
// sequence: 0 for text that never repeats itself, near 1 for text that is mostly repeats.
double Repetitiveness(std::span<const uint64_t> token_hashes);

// Generates `output_tokens` tokens (> 0) for a prompt given as text plus its approximate tokens
// (hashes and begin offsets, as ApproxTokenize returns them). Deterministic in all arguments.
// `*out` is overwritten; its buffers are reused (the server keeps one per connection).
void Generate(std::string_view prompt, std::span<const uint64_t> prompt_hashes,
              std::span<const uint32_t> prompt_offsets, uint32_t output_tokens, uint64_t seed,
              const SpecDecodeOptions& spec, Generation* out);
inline Generation Generate(std::string_view prompt, std::span<const uint64_t> prompt_hashes,
                           std::span<const uint32_t> prompt_offsets, uint32_t output_tokens,
                           uint64_t seed, const SpecDecodeOptions& spec) {
  Generation g;
  Generate(prompt, prompt_hashes, prompt_offsets, output_tokens, seed, spec, &g);
  return g;
}

}  // namespace llmtap::sim
