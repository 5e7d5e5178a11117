// Tests only: the brute-force reference of a request's replay under greedy verification (vLLM's
// scheduler and metrics, ngram.h "Scheduler and verification"), written as plainly as possible
// and independently of greedy.h's ReplayGreedy, for the differential tests of the proposers
// (ngram_test.cc, suffix_test.cc). The proposer under test supplies its drafts and, if it keeps
// state, hooks for the request's start and the context's growth.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

#include "specdec/greedy.h"

namespace llmtap::specdec::testing {

using Tokens = std::vector<uint32_t>;

// A hook that does nothing (RefReplay's default start and append).
struct NoHook {
  template <class... Args>
  void operator()(const Args&...) const {}
};

// Replays `response` after `prompt` with k draft tokens per step (the size of
// accepted_per_pos) and the server's max_model_len (0: none): the response is cut to
// max_model_len - prompt tokens; its first token is the prefill step's; then every decode step
// takes propose(context)'s draft, cut to max_model_len - 1 - context tokens, accepts its longest
// prefix that matches the response, and emits the accepted tokens and the next one. `start()`
// runs once the cut response has tokens, before its first one; append(context, tokens) before
// `tokens` (the prefill step's, then each step's emitted ones) join the context. Every step goes
// into *trace.
template <class Propose, class Start = NoHook, class Append = NoHook>
SpecStats RefReplay(uint32_t k, uint64_t max_model_len, const Tokens& prompt, Tokens response,
                    std::vector<SimStep>* trace, Propose propose, Start start = {},
                    Append append = {}) {
  const uint64_t mml = max_model_len;
  trace->clear();
  SpecStats st;
  st.accepted_per_pos.assign(k, 0);
  if (mml > 0) {
    const size_t room = mml > prompt.size() ? mml - prompt.size() : 0;
    if (response.size() > room) {
      st.ignored_tokens = response.size() - room;
      response.resize(room);
    }
  }
  st.tokens = response.size();
  if (response.empty()) return st;
  start();
  Tokens ctx = prompt;
  auto add = [&](const Tokens& tokens) {
    append(std::as_const(ctx), tokens);
    ctx.insert(ctx.end(), tokens.begin(), tokens.end());
  };
  add({response[0]});
  size_t pos = 1;
  while (pos < response.size()) {
    ++st.steps;
    Tokens draft = propose(std::as_const(ctx));
    if (mml > 0 && draft.size() > mml - 1 - ctx.size()) draft.resize(mml - 1 - ctx.size());
    size_t a = 0;
    while (a < draft.size() && pos + a < response.size() && draft[a] == response[pos + a]) ++a;
    trace->push_back(SimStep{draft, static_cast<uint32_t>(a)});
    if (draft.empty()) {
      ++st.steps_without_draft;
    } else {
      ++st.drafts;
      st.draft_tokens += draft.size();
      st.accepted_tokens += a;
      for (size_t i = 0; i < a; ++i) ++st.accepted_per_pos[i];
    }
    const size_t end = std::min(pos + a + 1, response.size());
    add(Tokens(response.begin() + static_cast<ptrdiff_t>(pos),
               response.begin() + static_cast<ptrdiff_t>(end)));
    pos = end;
  }
  return st;
}

}  // namespace llmtap::specdec::testing
