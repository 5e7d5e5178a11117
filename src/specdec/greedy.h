// The replay of one request's decoding under greedy verification, shared by the proposers of
// this directory (ngram.h, suffix.h), and its counters. The rules (vLLM's scheduler and metrics)
// are written out in ngram.h, "Scheduler and verification" and "This library's replay"; a
// proposer only supplies its drafts.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace llmtap::specdec {

// Per-request counters. Field names follow vLLM's vllm:spec_decode_* counters where they exist.
struct SpecStats {
  uint64_t tokens = 0;          // response tokens replayed (after the max_model_len cut)
  uint64_t ignored_tokens = 0;  // response tokens past max_model_len, not replayed
  uint64_t steps = 0;           // decode steps after the prefill step (response[0])
  uint64_t steps_without_draft = 0;
  uint64_t drafts = 0;                     // num_drafts: steps with a non-empty scheduled draft
  uint64_t draft_tokens = 0;               // num_draft_tokens
  uint64_t accepted_tokens = 0;            // num_accepted_tokens
  std::vector<uint64_t> accepted_per_pos;  // num_accepted_tokens_per_pos, size k

  // vLLM's mean acceptance length, 1 + accepted / drafts (0 when there were no drafts).
  double AcceptanceLength() const {
    return drafts ? 1.0 + static_cast<double>(accepted_tokens) / static_cast<double>(drafts) : 0;
  }
  // Tokens emitted per decode step: (tokens - 1) / steps; 1 without speculation.
  double TokensPerStep() const {
    return steps ? static_cast<double>(tokens - 1) / static_cast<double>(steps) : 0;
  }
  // Adds `other`'s counters to these (accepted_per_pos grows to the longer of the two).
  void Add(const SpecStats& other);
};

// One decode step of a replay (for tests and debugging).
struct SimStep {
  std::vector<uint32_t> draft;  // as scheduled, after the max_model_len trim; empty: no draft
  uint32_t accepted = 0;
  bool operator==(const SimStep&) const = default;
};

// Greedy verification of a non-empty `draft` at response position `pos` (of the first n
// tokens): counts the draft and its accepted tokens (per position) in `st`; returns how many.
inline size_t VerifyDraft(std::span<const uint32_t> draft, std::span<const uint32_t> response,
                          size_t pos, size_t n, SpecStats* st) {
  ++st->drafts;
  st->draft_tokens += draft.size();
  size_t a = 0;
  while (a < draft.size() && pos + a < n && draft[a] == response[pos + a]) ++a;
  st->accepted_tokens += a;
  for (size_t i = 0; i < a && i < st->accepted_per_pos.size(); ++i) ++st->accepted_per_pos[i];
  return a;
}

// Replays one request: `k` is num_speculative_tokens (the size of accepted_per_pos; a draft is
// never longer), `max_model_len` 0 for no limit. The proposer is three callables:
//   begin(n)                 the request starts; n response tokens will be replayed (n may be 0);
//                            the proposer takes the prompt as its context;
//   emit(tokens, context)    a step emitted `tokens` (the prefill step's one token first); the
//                            context is now `context` tokens long (prompt included);
//   propose(&draft)          the draft for the current context (overwrite `draft`).
// `draft` is scratch space. With `trace`, every decode step is recorded there (overwritten).
template <class Begin, class Emit, class Propose>
SpecStats ReplayGreedy(uint32_t k, uint64_t max_model_len, std::span<const uint32_t> prompt,
                       std::span<const uint32_t> response, std::vector<uint32_t>& draft,
                       std::vector<SimStep>* trace, Begin&& begin, Emit&& emit, Propose&& propose) {
  if (trace) trace->clear();
  SpecStats st;
  st.accepted_per_pos.assign(k, 0);
  const uint64_t mml = max_model_len;
  size_t n = response.size();
  if (mml > 0) {
    const size_t room = mml > prompt.size() ? static_cast<size_t>(mml - prompt.size()) : 0;
    if (n > room) {
      st.ignored_tokens = n - room;
      n = room;
    }
  }
  st.tokens = n;
  begin(n);
  if (n == 0) return st;
  size_t context = prompt.size() + 1;
  emit(response.subspan(0, 1), context);  // the prefill step's token
  size_t pos = 1;
  while (pos < n) {
    ++st.steps;
    propose(&draft);
    if (mml > 0 && !draft.empty()) {
      // The scheduler's cap: context + draft + the step's own token <= max_model_len. Here
      // context <= prompt + n - 1 <= mml - 1.
      const size_t room = static_cast<size_t>(mml - 1 - context);
      if (draft.size() > room) draft.resize(room);
    }
    if (trace) trace->push_back(SimStep{draft, 0});
    if (draft.empty()) {
      ++st.steps_without_draft;
      emit(response.subspan(pos, 1), ++context);
      ++pos;
      continue;
    }
    const size_t a = VerifyDraft(draft, response, pos, n, &st);
    if (trace) trace->back().accepted = static_cast<uint32_t>(a);
    const size_t end = std::min(pos + a + 1, n);
    context += end - pos;
    emit(response.subspan(pos, end - pos), context);
    pos = end;
  }
  return st;
}

// Replays one request at several values of k over ONE proposer state, equal to one ReplayGreedy
// per k (specdec_test checks this) at a fraction of the cost. It needs a proposer whose state at
// context length N is the same however the N tokens arrived (in which chunks): the n-gram
// index, and the suffix trees (an append of several tokens is the appends of each in turn). Then
// the state a k's step at position pos sees is that after prompt + pos tokens, so the steps of
// all k are taken in order of position and the state is only ever extended. Without a
// max_model_len: a request cut by it would end with a chunk that differs per k. The callables:
//   begin(n)                 as ReplayGreedy's;
//   extend(tokens, context)  the state grows by `tokens`, to `context` tokens (prompt included);
//                            at the end, by the rest of the response;
//   propose(i, &draft)       the draft for the current context at point i (num_speculative_tokens
//                            ks[i], and whatever else the caller's point i holds).
// `*out` gets one SpecStats per point, in order.
template <class Begin, class Extend, class Propose>
void ReplayGreedySweep(std::span<const uint32_t> ks, std::span<const uint32_t> prompt,
                       std::span<const uint32_t> response, std::vector<uint32_t>& draft,
                       std::vector<SpecStats>* out, Begin&& begin, Extend&& extend,
                       Propose&& propose) {
  const size_t n = response.size();
  out->assign(ks.size(), SpecStats{});
  for (size_t i = 0; i < ks.size(); ++i) {
    (*out)[i].accepted_per_pos.assign(ks[i], 0);
    (*out)[i].tokens = n;
  }
  begin(n);
  if (n == 0) return;
  extend(response.subspan(0, 1), prompt.size() + 1);  // the prefill step's token
  size_t have = 1;
  thread_local std::vector<size_t> pos;
  pos.assign(ks.size(), 1);
  for (;;) {
    // The next position any k steps from; the steps of every k there, in the order of ks.
    size_t at = n;
    for (size_t p : pos) at = std::min(at, p);
    if (at == n) break;
    if (at > have) {
      extend(response.subspan(have, at - have), prompt.size() + at);
      have = at;
    }
    for (size_t i = 0; i < ks.size(); ++i) {
      if (pos[i] != at) continue;
      SpecStats& st = (*out)[i];
      ++st.steps;
      propose(i, &draft);
      if (draft.empty()) {
        ++st.steps_without_draft;
        ++pos[i];
        continue;
      }
      pos[i] = std::min(at + VerifyDraft(draft, response, at, n, &st) + 1, n);
    }
  }
  if (have < n) extend(response.subspan(have, n - have), prompt.size() + n);
}

inline void SpecStats::Add(const SpecStats& o) {
  tokens += o.tokens;
  ignored_tokens += o.ignored_tokens;
  steps += o.steps;
  steps_without_draft += o.steps_without_draft;
  drafts += o.drafts;
  draft_tokens += o.draft_tokens;
  accepted_tokens += o.accepted_tokens;
  if (accepted_per_pos.size() < o.accepted_per_pos.size()) {
    accepted_per_pos.resize(o.accepted_per_pos.size(), 0);
  }
  for (size_t i = 0; i < o.accepted_per_pos.size(); ++i)
    accepted_per_pos[i] += o.accepted_per_pos[i];
}

}  // namespace llmtap::specdec
