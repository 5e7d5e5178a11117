#include "specdec/suffix.h"

#include <algorithm>
#include <cassert>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "specdec/suffix_caches.h"
#include "specdec/suffix_context.h"
#include "specdec/suffix_internal.h"
#include "specdec/suffix_tree.h"

namespace llmtap::specdec {

using suffix_internal::Context;
using suffix_internal::kRoot;
using suffix_internal::PrefixTrees;
using suffix_internal::SavedTrees;
using suffix_internal::Tree;

namespace {

constexpr uint32_t kMaxDepth = 1u << 16;

}  // namespace

Status SuffixOptions::Validate() const {
  if (max_tree_depth < 1) return Status::InvalidArgument("suffix tree depth must be >= 1");
  if (max_tree_depth > kMaxDepth) {
    return Status::InvalidArgument("suffix tree depth must be <= " + std::to_string(kMaxDepth) +
                                   " (llmtap's limit)");
  }
  if (!(max_spec_factor >= 0) || !std::isfinite(max_spec_factor)) {
    return Status::InvalidArgument("suffix max_spec_factor must be a finite number >= 0");
  }
  if (!(min_token_prob >= 0 && min_token_prob <= 1)) {
    return Status::InvalidArgument("suffix min_token_prob must be in [0, 1]");
  }
  if (!std::isfinite(max_spec_offset)) {
    return Status::InvalidArgument("suffix max_spec_offset must be finite");
  }
  return Status::Ok();
}

// --- The proposer ---

SuffixProposer::SuffixProposer(const SuffixOptions& options)
    : options_(options),
      context_(std::make_unique<Context>()),
      prompt_tree_(std::make_unique<Tree>(options.max_tree_depth)),
      global_tree_(std::make_unique<Tree>(options.max_tree_depth, true)) {
  assert(options_.Validate().ok());
  if (options_.reuse_bytes > 0) saved_ = std::make_unique<SavedTrees>(options_.reuse_bytes);
  if (options_.shared_prefix_min > 0) prefixes_ = std::make_unique<PrefixTrees>();
}

SuffixProposer::~SuffixProposer() = default;

void SuffixProposer::Reset() {
  ++version_;
  prompt_tree_->Clear();
  context_->Start({});
  tree_built_ = false;
  global_tree_->Clear();
  if (saved_) saved_->Reset();
  if (prefixes_) prefixes_->Clear();
  active_ = in_global_ = false;
}

size_t SuffixProposer::cached_requests() const { return global_tree_->sequences(); }
size_t SuffixProposer::GlobalMemoryBytes() const { return global_tree_->MemoryBytes(); }
size_t SuffixProposer::GlobalNodes() const { return global_tree_->nodes(); }
size_t SuffixProposer::GlobalTokens() const { return global_tree_->tokens(); }

std::span<const uint32_t> SuffixProposer::context() const {
  return active_ ? context_->tokens() : std::span<const uint32_t>{};
}

void SuffixProposer::StartRequest(std::span<const uint32_t> prompt) {
  ++version_;
  context_->Start(prompt);
  scan_work_ = 0;
  tree_built_ = false;
  if (options_.prompt_scan_work == 0) BuildPromptTree();
  active_ = true;
  in_global_ = options_.max_cached_requests > 0;
  if (in_global_) {
    global_tree_->BeginSequence();
    // FIFO: the oldest other request leaves while there are too many.
    while (global_tree_->sequences() > options_.max_cached_requests) {
      global_tree_->RemoveOldest();
    }
  }
}

void SuffixProposer::BuildPromptTree() {
  const std::span<const uint32_t> prompt = context_->tokens();
  tree_built_ = true;
  ++built_;
  std::unique_ptr<Tree> kept = saved_ ? saved_->TakeLongestPrefix(prompt) : nullptr;
  size_t from = 0;
  if (kept) {
    // The prompt continues a finished request's whole context: go on from its tree.
    spare_tree_ = std::move(prompt_tree_);
    prompt_tree_ = std::move(kept);
    from = prompt_tree_->NewestLength();
    ++reused_;
  } else if (const Tree* prefix = prefixes_ ? prefixes_->Longest(prompt) : nullptr) {
    // The prompt starts with a prefix that earlier ones shared: go on from a copy of its tree.
    prompt_tree_->CopyFrom(*prefix, prompt.size() + 256);
    from = prompt_tree_->NewestLength();
    ++prefix_copies_;
  } else {
    prompt_tree_->Clear(prompt.size() + 256);
    prompt_tree_->BeginSequence();
  }
  prompt_tree_->Reserve(prompt.size() - from + 256);
  if (prefixes_) {
    // A prefix shared with a recent prompt, not yet saved: its tree is copied aside on the way.
    const size_t shared = prefixes_->SharedWithRecent(prompt);
    if (shared >= from + options_.shared_prefix_min) {
      for (uint32_t t : prompt.subspan(from, shared - from)) prompt_tree_->Append(t);
      prefixes_->Save(*prompt_tree_);
      from = shared;
    }
  }
  for (uint32_t t : prompt.subspan(from)) prompt_tree_->Append(t);
}

void SuffixProposer::AddResponse(std::span<const uint32_t> tokens) {
  assert(active_);
  ++version_;
  context_->Append(tokens);
  if (tree_built_) {
    for (uint32_t t : tokens) prompt_tree_->Append(t);
  }
  if (in_global_) {
    for (uint32_t t : tokens) global_tree_->Append(t);
  }
}

void SuffixProposer::StopRequest() {
  ++version_;
  if (active_ && tree_built_ && saved_) {
    std::unique_ptr<Tree> back = saved_->Keep(std::move(prompt_tree_));
    if (!back) back = std::move(spare_tree_);
    prompt_tree_ = back ? std::move(back) : std::make_unique<Tree>(options_.max_tree_depth);
  }
  active_ = false;
}

void SuffixProposer::UpdateWalks(int kmax) {
  if (walks_version_ == version_ && walks_kmax_ == kmax) return;
  const std::span<const uint32_t> ctx = context_->tokens();
  const std::span<const uint32_t> pattern =
      ctx.last(std::min<size_t>(ctx.size(), options_.max_tree_depth));
  PromptWalks(kmax);
  global_tree_->Walks(pattern, in_global_, kmax, options_, &global_walks_);
  walks_version_ = version_;
  walks_kmax_ = kmax;
  // At every k from the longest drafting walk's length on, the draft is the same.
  saturated_k_ = 0;
  for (const Walks* w : {&prompt_walks_, &global_walks_}) {
    for (uint32_t i : w->drafting) {
      const Walks::Entry& e = w->walks[i];
      saturated_k_ = std::max(saturated_k_, std::min(static_cast<uint32_t>(e.cap), e.len));
    }
  }
  saturated_draft_.clear();
  have_saturated_ = false;
}

void SuffixProposer::PromptWalks(int kmax) {
  if (!tree_built_) {
    scan_work_ += context_->Walks(options_.max_tree_depth, kmax, options_, &prompt_walks_);
    // Past the budget, the tree (for the next proposals; these walks are the tree's already).
    if (scan_work_ > uint64_t{options_.prompt_scan_work} * context_->tokens().size()) {
      BuildPromptTree();
    }
    return;
  }
  const std::span<const uint32_t> ctx = context_->tokens();
  prompt_tree_->Walks(ctx.last(std::min<size_t>(ctx.size(), options_.max_tree_depth)), true, kmax,
                      options_, &prompt_walks_);
}

namespace {

// The reference's choice among a tree's walks at num_speculative_tokens k (at most the walks'
// kmax): the best score, ties to the longer match.
struct Picked {
  uint32_t m = 0, node = kRoot, idx = 0;
  int cap = 0;
  float score = 0;
  size_t entry = SIZE_MAX;  // in Walks::walks (none: no walk, an empty draft)
};
template <class W>
Picked Pick(const W& w, int k) {
  Picked best;
  for (size_t i = 0; i < w.walks.size(); ++i) {
    const auto& e = w.walks[i];
    const int cap = std::max(std::min(k, e.cap), 0);
    const float score =
        cap > 0 ? w.scores[e.off + std::min<uint32_t>(static_cast<uint32_t>(cap), e.len)] : 0.0f;
    if (score >= best.score) best = Picked{e.m, e.node, e.idx, cap, score, i};
  }
  return best;
}

// Pick for the draft's tokens only: the same choice among the walks with tokens (the others
// can win only when no walk has tokens, and then the draft is empty either way).
struct Drafted {
  float score = 0;
  size_t entry = SIZE_MAX;
  uint32_t n = 0;  // draft tokens
};
template <class W>
Drafted PickDrafting(const W& w, uint32_t k) {
  Drafted best;
  for (uint32_t i : w.drafting) {
    const auto& e = w.walks[i];
    const uint32_t n = std::min({k, static_cast<uint32_t>(e.cap), e.len});
    const float score = w.scores[e.off + n];
    if (score >= best.score) best = Drafted{score, i, n};
  }
  return best;
}

}  // namespace

void SuffixProposer::Propose(SuffixDraft* draft, uint32_t k) { ProposeFrom(draft, k, k); }

void SuffixProposer::ProposeFrom(SuffixDraft* draft, uint32_t k, uint32_t kmax) {
  draft->tokens.clear();
  draft->probs.clear();
  draft->score = 0;
  draft->match_len = 0;
  draft->from_prompt_tree = true;
  if (!active_) return;
  const uint64_t n_tokens = context_->tokens().size();
  int max_spec = static_cast<int>(k);
  int max_all = static_cast<int>(kmax);
  if (options_.max_model_len > 0) {
    if (n_tokens >= options_.max_model_len) return;
    const uint64_t room = options_.max_model_len - n_tokens - 1;
    max_spec = static_cast<int>(std::min<uint64_t>(static_cast<uint64_t>(max_spec), room));
    max_all = static_cast<int>(std::min<uint64_t>(static_cast<uint64_t>(max_all), room));
  }
  UpdateWalks(max_all);
  const Picked a = Pick(prompt_walks_, max_spec);
  const Picked b = Pick(global_walks_, max_spec);
  if (a.score >= b.score && prompt_walks_.eager) {
    if (a.entry != SIZE_MAX) {
      Walks::Entry& e = prompt_walks_.walks[a.entry];
      const uint32_t n = std::min(static_cast<uint32_t>(a.cap), e.len);
      if (n > 0 && e.tok == UINT32_MAX) context_->Token(&prompt_walks_, &e);
      draft->tokens.assign(prompt_walks_.tokens.begin() + e.tok,
                           prompt_walks_.tokens.begin() + e.tok + n);
      draft->probs.assign(prompt_walks_.probs.begin() + e.tok,
                          prompt_walks_.probs.begin() + e.tok + n);
      draft->score = prompt_walks_.scores[e.off + n];
    }
    draft->match_len = a.m;
  } else if (a.score >= b.score) {
    prompt_tree_->Walk(a.node, a.idx, a.cap, options_.min_token_prob, draft);
    draft->match_len = a.m;
  } else {
    global_tree_->Walk(b.node, b.idx, b.cap, options_.min_token_prob, draft);
    draft->match_len = b.m;
    draft->from_prompt_tree = false;
  }
}

void SuffixProposer::ProposeTokens(std::vector<uint32_t>* draft, uint32_t k, uint32_t kmax) {
  draft->clear();
  if (!active_) return;
  assert(options_.max_model_len == 0);
  UpdateWalks(static_cast<int>(kmax));
  if (k >= saturated_k_ && have_saturated_) {
    draft->assign(saturated_draft_.begin(), saturated_draft_.end());
    return;
  }
  DraftTokens(draft, k);
  if (k >= saturated_k_) {
    saturated_draft_.assign(draft->begin(), draft->end());
    have_saturated_ = true;
  }
}

void SuffixProposer::DraftTokens(std::vector<uint32_t>* draft, uint32_t k) {
  const Drafted a = PickDrafting(prompt_walks_, k);
  const Drafted b = PickDrafting(global_walks_, k);
  const bool prompt = a.score >= b.score;
  const Drafted& p = prompt ? a : b;
  if (p.n == 0) return;
  Walks& w = prompt ? prompt_walks_ : global_walks_;
  Walks::Entry& e = w.walks[p.entry];
  if (e.tok == UINT32_MAX && w.eager) {
    context_->Token(&w, &e);
  } else if (e.tok == UINT32_MAX) {  // the walk's tokens, once per context
    e.tok = static_cast<uint32_t>(w.tokens.size());
    (prompt ? prompt_tree_ : global_tree_)->WalkTokens(e.node, e.idx, e.len, &w.tokens);
  }
  draft->assign(w.tokens.begin() + e.tok, w.tokens.begin() + e.tok + p.n);
}

void SuffixProposer::Propose(std::vector<uint32_t>* draft) {
  SuffixDraft d;
  std::swap(d.tokens, *draft);
  Propose(&d);
  std::swap(d.tokens, *draft);
}

std::string SuffixProposer::DumpPromptTreeForTesting() const { return prompt_tree_->Dump(); }

std::string SuffixProposer::CheckForTesting() const {
  std::string s = tree_built_ ? prompt_tree_->Check() : "";
  if (!s.empty()) return "prompt tree: " + s;
  s = global_tree_->Check();
  if (!s.empty()) return "global tree: " + s;
  return "";
}

SpecStats SuffixProposer::Simulate(std::span<const uint32_t> prompt,
                                   std::span<const uint32_t> response,
                                   std::vector<SimStep>* trace) {
  const uint64_t mml = options_.max_model_len;
  bool started = false;
  SpecStats st = ReplayGreedy(
      options_.SpecTokens(), mml, prompt, response, draft_, trace,
      [&](size_t n) {
        // vLLM starts the request at its first proposal, after the prefill step, unless the
        // context has reached max_model_len by then.
        if (n == 0 || (mml > 0 && prompt.size() + 1 >= mml)) return;
        StartRequest(prompt);
        started = true;
      },
      [&](std::span<const uint32_t> tokens, size_t context) {
        // Appended by the next proposal, which vLLM skips at max_model_len.
        if (started && (mml == 0 || context < mml)) AddResponse(tokens);
      },
      [&](std::vector<uint32_t>* draft) {
        if (mml == 0) {  // the sweep's path: the same draft, its tokens only
          ProposeTokens(draft, options_.SpecTokens(), options_.SpecTokens());
          return;
        }
        Propose(&result_);
        draft->assign(result_.tokens.begin(), result_.tokens.end());
      });
  if (started) StopRequest();
  return st;
}

void SuffixProposer::SimulateSweep(std::span<const uint32_t> prompt,
                                   std::span<const uint32_t> response, std::span<const uint32_t> ks,
                                   std::vector<SpecStats>* out) {
  bool started = false;
  ReplayGreedySweep(
      ks, prompt, response, draft_, out,
      [&](size_t n) {
        if (n == 0) return;
        StartRequest(prompt);
        started = true;
      },
      [&](std::span<const uint32_t> tokens, size_t) {
        if (started) AddResponse(tokens);
      },
      [&, kmax = ks.empty() ? 0u : *std::max_element(ks.begin(), ks.end())](
          size_t i, std::vector<uint32_t>* draft) { ProposeTokens(draft, ks[i], kmax); });
  if (started) StopRequest();
}

}  // namespace llmtap::specdec
