#include "sim/generator.h"

#include <algorithm>
#include <memory>
#include <vector>

#include "sim/rng.h"
#include "sim/text.h"
#include "specdec/ngram.h"

namespace llmtap::sim {

double Repetitiveness(std::span<const uint64_t> token_hashes) {
  if (token_hashes.size() < 4) return 0.0;
  // Positions whose 3-gram occurred earlier = all 3-grams minus the distinct ones.
  thread_local std::vector<uint64_t> grams;
  grams.clear();
  grams.reserve(token_hashes.size());
  for (size_t e = 2; e < token_hashes.size(); ++e) {
    grams.push_back(Fold(Fold(token_hashes[e - 2], token_hashes[e - 1]), token_hashes[e]));
  }
  const size_t total = grams.size();
  std::sort(grams.begin(), grams.end());
  const size_t distinct =
      static_cast<size_t>(std::unique(grams.begin(), grams.end()) - grams.begin());
  if (grams.capacity() > (1u << 20)) grams = {};
  return static_cast<double>(total - distinct) / static_cast<double>(total);
}

namespace {

constexpr double kMaxCopyFraction = 0.9;
// Prose repeats few of its 3-grams (a few percent); below this, a prompt is not copied from.
constexpr double kRepetitivenessFloor = 0.1;
constexpr uint32_t kMinRun = 8, kMaxRun = 32;

}  // namespace

void Generate(std::string_view prompt, std::span<const uint64_t> prompt_hashes,
              std::span<const uint32_t> prompt_offsets, uint32_t output_tokens, uint64_t seed,
              const SpecDecodeOptions& spec, Generation* out_gen) {
  Generation& g = *out_gen;
  g.text.clear();
  g.step_ends.clear();
  g.tokens = 0;
  g.copied_tokens = 0;
  g.spec.drafts = g.spec.draft_tokens = g.spec.accepted_tokens = 0;
  const size_t p = prompt_hashes.size();
  Rng rng(HashCombine(seed, 0x67656e));

  // 1. The output tokens: hashes, and the text with each token's end offset.
  // Scratch reused across calls on this thread.
  thread_local std::vector<uint64_t> out;
  thread_local std::vector<uint32_t> ends;
  out.clear();
  ends.clear();
  if (out.capacity() > (1u << 20)) out = {}, ends = {};
  out.reserve(output_tokens);
  ends.reserve(output_tokens);
  g.text.reserve(static_cast<size_t>(output_tokens) * 5);

  double copy_fraction = 0.0;
  if (p >= kMinRun) {
    const double r = Repetitiveness(prompt_hashes);
    copy_fraction = std::clamp(spec.copy_scale * (r - kRepetitivenessFloor), 0.0, kMaxCopyFraction);
  }
  const double mean_run = (kMinRun + kMaxRun) / 2.0;
  const double start_copy = copy_fraction / ((1.0 - copy_fraction) * mean_run);

  size_t copy_pos = 0, copy_left = 0;
  bool after_period = false, after_break = false;
  // The text must split back into exactly these tokens (`llmtap specdec --tokenizer sim`
  // re-tokenizes captured responses): a token goes after the last one only when ApproxTokenize
  // keeps them apart. A copied span that would run into the word before it is not started (or
  // ends there); a paragraph break after whitespace becomes a word. " word" and "." always fit.
  auto fits = [&](std::string_view tok) {
    if (ends.empty()) return true;
    const size_t b = ends.size() >= 2 ? ends[ends.size() - 2] : 0;
    return TokensStayApart(std::string_view(g.text).substr(b), tok);
  };
  auto prompt_token = [&](size_t i) {
    const size_t b = prompt_offsets[i];
    const size_t e = i + 1 < p ? prompt_offsets[i + 1] : prompt.size();
    return prompt.substr(b, e - b);
  };
  auto push = [&](std::string_view tok) {
    out.push_back(HashBytes(tok));
    g.text.append(tok);
    ends.push_back(static_cast<uint32_t>(g.text.size()));
  };
  while (out.size() < output_tokens) {
    if (copy_left == 0 && start_copy > 0 && rng.Uniform() < start_copy) {
      copy_pos = rng.Below(p);
      copy_left = kMinRun + rng.Below(kMaxRun - kMinRun + 1);
    }
    if (copy_left > 0 && copy_pos < p && fits(prompt_token(copy_pos))) {
      out.push_back(prompt_hashes[copy_pos]);
      g.text.append(prompt_token(copy_pos));
      ends.push_back(static_cast<uint32_t>(g.text.size()));
      ++g.copied_tokens;
      after_break = false;  // the word after a copied span starts with its space
      ++copy_pos;
      --copy_left;
      continue;
    }
    copy_left = 0;
    if (after_period) {
      after_period = false;
      if (rng.Below(6) == 0 && fits("\n\n")) {
        push("\n\n");
        after_break = true;
        continue;
      }
    } else if (!out.empty() && rng.Below(12) == 0) {
      push(".");
      after_period = true;
      continue;
    }
    char word[8];
    word[0] = ' ';
    const std::string_view w = VocabWord(rng.Below(kVocabSize));
    std::copy(w.begin(), w.end(), word + 1);
    const size_t skip = after_break ? 1 : 0;  // a paragraph starts without a space
    after_break = false;
    push(std::string_view(word + skip, w.size() + 1 - skip));
  }
  g.tokens = output_tokens;

  // 2. Engine steps, with prompt-lookup drafts when speculative decoding is on: vLLM's n-gram
  // proposer and greedy verification (specdec/ngram.h), replayed over the prompt's tokens and
  // these output tokens, exactly as `llmtap specdec` replays a captured request.
  const uint32_t k = spec.num_spec_tokens;
  g.step_ends.push_back(ends[0]);
  if (k == 0 || out.size() == 1) {
    g.spec.accepted_per_pos.assign(k, 0);
    for (size_t i = 1; i < out.size(); ++i) g.step_ends.push_back(ends[i]);
    return;
  }
  thread_local std::vector<uint32_t> prompt_ids, out_ids;
  thread_local std::vector<specdec::SimStep> steps;
  prompt_ids.resize(p);
  for (size_t i = 0; i < p; ++i) prompt_ids[i] = TokenId(prompt_hashes[i]);
  out_ids.resize(out.size());
  for (size_t i = 0; i < out.size(); ++i) out_ids[i] = TokenId(out[i]);
  specdec::NgramOptions options;
  options.min_n = std::max<uint32_t>(1, spec.ngram_min);
  options.max_n = std::max(options.min_n, spec.ngram_max);
  options.k = k;
  thread_local std::unique_ptr<specdec::NgramProposer> proposer;
  if (!proposer || proposer->options().min_n != options.min_n ||
      proposer->options().max_n != options.max_n || proposer->options().k != options.k) {
    proposer = std::make_unique<specdec::NgramProposer>(options);
  }
  const specdec::SpecStats stats = proposer->Simulate(prompt_ids, out_ids, &steps);
  g.spec.drafts = stats.drafts;
  g.spec.draft_tokens = stats.draft_tokens;
  g.spec.accepted_tokens = stats.accepted_tokens;
  g.spec.accepted_per_pos = stats.accepted_per_pos;
  size_t pos = 1;
  for (const specdec::SimStep& step : steps) {
    pos = std::min(pos + step.accepted + 1, out.size());
    g.step_ends.push_back(ends[pos - 1]);
  }
  if (prompt_ids.capacity() > (1u << 20)) prompt_ids = {}, out_ids = {};
  if (steps.capacity() > (1u << 16)) steps = {};
}

}  // namespace llmtap::sim
