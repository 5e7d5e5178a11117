#include "specdec/suffix.h"

#include <algorithm>
#include <array>
#include <cstdint>
#include <deque>
#include <map>
#include <random>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "specdec/testing/ref_replay.h"

namespace llmtap::specdec::suffix_test {
namespace {

using Tokens = std::vector<uint32_t>;

SuffixOptions Opts(uint32_t depth = 24, uint64_t cached = 10000, float factor = 1.0f,
                   float min_prob = 0.1f, uint32_t k = 0, uint64_t max_model_len = 0) {
  SuffixOptions o;
  o.max_tree_depth = depth;
  o.max_cached_requests = cached;
  o.max_spec_factor = factor;
  o.min_token_prob = min_prob;
  o.k = k;
  o.max_model_len = max_model_len;
  return o;
}

// The draft for `context` as the prompt of a fresh request (no global tree).
// Options that build every prompt tree (the tests of the trees' reuse and copies).
SuffixOptions TreeOpts() {
  SuffixOptions o = Opts();
  o.prompt_scan_work = 0;
  return o;
}

SuffixDraft PromptDraft(SuffixOptions o, const Tokens& context) {
  o.max_cached_requests = 0;
  SuffixProposer p(o);
  p.StartRequest(context);
  SuffixDraft d;
  p.Propose(&d);
  EXPECT_EQ(p.CheckForTesting(), "");
  return d;
}

// --- Hand-worked vectors (suffix.h, "The draft"). ---

TEST(SuffixDraftTest, LongerMatchWinsOnScore) {
  // Context 1 2 3 1 2. m = 1, "2": count 2, its child 3 has count 1: [3] at 0.5 (cap 1).
  // m = 2, "1 2": count 2: 3 at 0.5, then "1 2 3" goes on to 1 at ratio 1: [3 1], score 1.0.
  // m = 3 and 4 occur once, at the end: nothing follows.
  const SuffixDraft d = PromptDraft(Opts(), {1, 2, 3, 1, 2});
  EXPECT_EQ(d.tokens, (Tokens{3, 1}));
  EXPECT_EQ(d.probs, (std::vector<float>{0.5f, 0.5f}));
  EXPECT_EQ(d.score, 1.0f);
  EXPECT_EQ(d.match_len, 2u);
  EXPECT_TRUE(d.from_prompt_tree);
}

TEST(SuffixDraftTest, ProbabilityThresholdCutsTheDraft) {
  // "5 6" occurs 3 times, twice followed by 7 (2/3); "5 6 7" is followed once by 8 and once by
  // 9 (8 came first, so it leads the tie): 8 at 2/3 * 1/2 = 1/3.
  const Tokens ctx = {5, 6, 7, 8, 5, 6, 7, 9, 5, 6};
  SuffixDraft d = PromptDraft(Opts(), ctx);
  EXPECT_EQ(d.tokens, (Tokens{7, 8}));
  EXPECT_EQ(d.probs, (std::vector<float>{2.0f / 3.0f, 2.0f / 3.0f * 0.5f}));
  EXPECT_EQ(d.match_len, 2u);
  d = PromptDraft(Opts(24, 0, 1.0f, 0.4f), ctx);  // 1/3 < 0.4
  EXPECT_EQ(d.tokens, (Tokens{7}));
  d = PromptDraft(Opts(24, 0, 1.0f, 0.7f), ctx);  // even 2/3 < 0.7
  EXPECT_TRUE(d.tokens.empty());
}

TEST(SuffixDraftTest, TieOrderFollowsTheReference) {
  // After "1": 5, then 6, 6, then 5. 6 reached count 2 first (going ahead of 5), but 5, leading
  // the children with count 1, then moves to the FRONT of those with 2: 5 is drafted, at 2/5.
  // "9 1" occurs once, so only m = 1 drafts.
  SuffixDraft d = PromptDraft(Opts(), {1, 5, 1, 6, 1, 6, 1, 5, 9, 1});
  EXPECT_EQ(d.tokens, (Tokens{5}));
  EXPECT_EQ(d.probs, (std::vector<float>{0.4f}));
  EXPECT_EQ(d.match_len, 1u);
  // With 6 once more, 6 leads with 3.
  d = PromptDraft(Opts(), {1, 5, 1, 6, 1, 6, 1, 6, 1, 5, 9, 1});
  EXPECT_EQ(d.tokens, (Tokens{6}));
  d = PromptDraft(Opts(), {1, 7, 1, 6, 1, 6, 1, 7, 1, 5, 1, 5, 9, 1});
  // After "1": 7, 6 (count 1 each); 6 -> 2 goes ahead: [6 7]; 7 -> 2 leads the ones, goes to the
  // front: [7 6]; 5 new: [7 6 5]; 5 -> 2, the first (only) one with 1, to the front: [5 7 6].
  EXPECT_EQ(d.tokens, (Tokens{5}));
}

TEST(SuffixDraftTest, DepthCapAndSpecFactor) {
  const Tokens ctx = {1, 2, 3, 4, 1, 2, 3};
  // Depth 24: m = 3, "1 2 3" (count 2): 4 1 2 at 0.5 each (cap 3).
  SuffixDraft d = PromptDraft(Opts(), ctx);
  EXPECT_EQ(d.tokens, (Tokens{4, 1, 2}));
  EXPECT_EQ(d.score, 1.5f);
  // Depth 3: the pattern is "1 2 3", m <= 2; from "2 3", 4 is at depth 3, the last.
  d = PromptDraft(Opts(3), ctx);
  EXPECT_EQ(d.tokens, (Tokens{4}));
  EXPECT_EQ(d.match_len, 2u);
  // Factor 0.5: caps 0, 1, 1 for m = 1, 2, 3: [4] from m = 3 (ties go to the longer match).
  d = PromptDraft(Opts(24, 0, 0.5f), ctx);
  EXPECT_EQ(d.tokens, (Tokens{4}));
  EXPECT_EQ(d.match_len, 3u);
  // Factor 2: m = 2 (cap 4) gives 4 1 2 3, score 2; m = 3 (cap 6) the same, as nothing follows.
  d = PromptDraft(Opts(24, 0, 2.0f), ctx);
  EXPECT_EQ(d.tokens, (Tokens{4, 1, 2, 3}));
  EXPECT_EQ(d.match_len, 3u);
  // num_speculative_tokens 2 caps every walk.
  d = PromptDraft(Opts(24, 0, 2.0f, 0.1f, 2), ctx);
  EXPECT_EQ(d.tokens, (Tokens{4, 1}));
}

TEST(SuffixSimulateTest, RepeatedResponseAcrossRequests) {
  SuffixProposer p(Opts());
  std::vector<SimStep> trace;
  // The first request has nothing to draft from: all unique.
  SpecStats st = p.Simulate(Tokens{100}, Tokens{1, 2, 3, 4, 5, 6}, &trace);
  EXPECT_EQ(st.steps, 5u);
  EXPECT_EQ(st.drafts, 0u);
  EXPECT_EQ(p.cached_requests(), 1u);
  // The second: after 1, the global tree has "1" twice (the first response and its own output),
  // once followed by 2: [2] at 0.5, accepted; 2 and 3 emitted. Then "1 2 3" (m = 3) twice, once
  // followed by 4 5 6: [4 5 6], all accepted.
  st = p.Simulate(Tokens{200}, Tokens{1, 2, 3, 4, 5, 6}, &trace);
  EXPECT_EQ(trace, (std::vector<SimStep>{{{2}, 1}, {{4, 5, 6}, 3}}));
  EXPECT_EQ(st.drafts, 2u);
  EXPECT_EQ(st.draft_tokens, 4u);
  EXPECT_EQ(st.accepted_tokens, 4u);
  EXPECT_EQ(st.accepted_per_pos[0], 2u);
  EXPECT_EQ(st.accepted_per_pos[2], 1u);
  EXPECT_EQ(p.cached_requests(), 2u);
  EXPECT_EQ(p.CheckForTesting(), "");
}

TEST(SuffixSimulateTest, FifoEviction) {
  const Tokens a = {1, 2, 3, 4, 5, 6}, b = {7, 8, 9, 10, 11};
  // One cached request: the current one. The second request has lost the first's response.
  SuffixProposer one(Opts(24, 1));
  one.Simulate(Tokens{100}, a);
  EXPECT_EQ(one.Simulate(Tokens{200}, a).drafts, 0u);
  EXPECT_EQ(one.cached_requests(), 1u);
  // Two: a third request sees the second's response, not the first's.
  SuffixProposer two(Opts(24, 2));
  two.Simulate(Tokens{100}, a);
  two.Simulate(Tokens{100}, b);
  EXPECT_EQ(two.Simulate(Tokens{100}, a).drafts, 0u);  // `a` was evicted when this request started
  EXPECT_GT(two.Simulate(Tokens{100}, a).drafts, 0u);  // the previous one is cached
  EXPECT_EQ(two.cached_requests(), 2u);
  EXPECT_EQ(two.CheckForTesting(), "");
  // Zero: no global tree at all.
  SuffixProposer none(Opts(24, 0));
  none.Simulate(Tokens{100}, a);
  EXPECT_EQ(none.Simulate(Tokens{200}, a).drafts, 0u);
  EXPECT_EQ(none.cached_requests(), 0u);
}

TEST(SuffixSimulateTest, PromptTreeWinsTies) {
  // Prompt tree of 7 8 9 7 8: "7 8" -> [9 7], score 1.0. Global tree (7 8 9 and the output 8):
  // "7 8" (matched from the root) -> [9] at 1.0, then 7 8 9 ends: score 1.0. A tie: the prompt's.
  SuffixProposer p(Opts());
  p.Simulate(Tokens{100}, Tokens{7, 8, 9});
  p.StartRequest(Tokens{7, 8, 9, 7});
  p.AddResponse(Tokens{8});
  SuffixDraft d;
  p.Propose(&d);
  EXPECT_EQ(d.tokens, (Tokens{9, 7}));
  EXPECT_TRUE(d.from_prompt_tree);
  EXPECT_EQ(d.score, 1.0f);
  p.StopRequest();
  // Without the prompt's repeat, the global tree's draft wins.
  p.StartRequest(Tokens{7});
  p.AddResponse(Tokens{8});
  p.Propose(&d);
  EXPECT_EQ(d.tokens, (Tokens{9}));
  EXPECT_FALSE(d.from_prompt_tree);
  EXPECT_EQ(d.match_len, 1u);
}

TEST(SuffixSimulateTest, NextTurnContinuesTheKeptPromptTree) {
  // Turn 2's prompt is turn 1's prompt and response and a new message; turn 3 extends turn 2.
  const Tokens p1 = {1, 2, 3, 4, 1, 2, 5}, r1 = {1, 2, 3, 6, 1, 2};
  Tokens p2 = p1;
  p2.insert(p2.end(), r1.begin(), r1.end());
  p2.insert(p2.end(), {9, 1, 2});
  const Tokens r2 = {3, 4, 1, 2, 3, 6};
  Tokens p3 = p2;
  p3.insert(p3.end(), r2.begin(), r2.end());
  p3.push_back(7);
  SuffixOptions no_reuse = TreeOpts();
  no_reuse.reuse_bytes = 0;
  SuffixProposer a(TreeOpts()), b(no_reuse), c(Opts());  // c: prompt trees read off the context
  for (const auto& [p, r] : {std::pair{p1, r1}, std::pair{p2, r2}, std::pair{p3, r1}}) {
    std::vector<SimStep> ta, tb, tc;
    a.Simulate(p, r, &ta);
    b.Simulate(p, r, &tb);
    c.Simulate(p, r, &tc);
    EXPECT_EQ(ta, tb);
    EXPECT_EQ(ta, tc);
    EXPECT_EQ(a.CheckForTesting(), "");
  }
  EXPECT_EQ(a.prompt_trees_reused(), 2u);
  EXPECT_EQ(b.prompt_trees_reused(), 0u);
}

// After 1,024 requests in a row that continue no kept prompt tree, keeping pauses (only keys are
// kept); the first request that continues one resumes it. The drafts do not change.
TEST(SuffixSimulateTest, KeepingPausesWithoutConversationsAndResumes) {
  SuffixProposer p(TreeOpts());
  SuffixOptions plain_options = TreeOpts();
  plain_options.reuse_bytes = 0;
  SuffixProposer plain(plain_options);
  std::mt19937_64 rng(5);
  auto both = [&](const Tokens& prompt, const Tokens& response) {
    std::vector<SimStep> got, want;
    p.Simulate(prompt, response, &got);
    plain.Simulate(prompt, response, &want);
    EXPECT_EQ(got, want);
  };
  for (uint32_t i = 0; i < 1100; ++i) {  // single requests: none continues another
    Tokens prompt = {100000 + i}, response;
    for (int j = 0; j < 6; ++j) prompt.push_back(static_cast<uint32_t>(rng() % 4));
    for (int j = 0; j < 4; ++j) response.push_back(static_cast<uint32_t>(rng() % 4));
    both(prompt, response);
  }
  EXPECT_EQ(p.prompt_trees_reused(), 0u);
  // A conversation: its second turn finds only the first one's key (keeping resumes), the third
  // continues the second's tree.
  Tokens context = {7, 1, 2, 3, 1, 2};
  const Tokens answer = {3, 1, 2, 3};
  for (int turn = 0; turn < 3; ++turn) {
    both(context, answer);
    context.insert(context.end(), answer.begin(), answer.end());
    context.push_back(static_cast<uint32_t>(turn));
  }
  EXPECT_EQ(p.prompt_trees_reused(), 1u);
  EXPECT_EQ(p.CheckForTesting(), "");
}

// Prompt-tree walks are read off the context (SuffixOptions::prompt_scan_work) until that has
// cost more than the budget per context token: repetitive text (one token 3,000 times, where
// every match length occurs everywhere) builds the tree after a few proposals, varied text
// never does. The drafts are those of trees built for every request.
TEST(SuffixSimulateTest, ContextReadUntilTheBudgetThenTheTree) {
  SuffixProposer read(Opts()), built(TreeOpts());
  std::mt19937_64 rng(3);
  Tokens varied, varied_response;
  for (int i = 0; i < 3000; ++i) varied.push_back(static_cast<uint32_t>(rng() % 500));
  for (int i = 0; i < 200; ++i) varied_response.push_back(varied[1000 + i]);
  const Tokens same(3000, 7), same_response(200, 7);
  for (const auto& [prompt, response] :
       {std::pair{varied, varied_response}, std::pair{same, same_response}}) {
    std::vector<SimStep> a, b;
    read.Simulate(prompt, response, &a);
    built.Simulate(prompt, response, &b);
    EXPECT_EQ(a, b);
  }
  EXPECT_EQ(read.prompt_trees_built(), 1u);  // the repetitive one only
  EXPECT_EQ(built.prompt_trees_built(), 2u);
  EXPECT_EQ(read.CheckForTesting(), "");
}

TEST(SuffixSimulateTest, MaxModelLen) {
  // max_model_len 8, prompt 4: 4 tokens replayed, a draft trimmed to 8 - 1 - context.
  SuffixProposer p(Opts(24, 10000, 1.0f, 0.1f, 0, 8));
  std::vector<SimStep> trace;
  const SpecStats st = p.Simulate(Tokens{1, 2, 1, 2}, Tokens{1, 2, 1, 2, 1, 2}, &trace);
  EXPECT_EQ(st.tokens, 4u);
  EXPECT_EQ(st.ignored_tokens, 2u);
  for (const SimStep& s : trace) EXPECT_LE(s.draft.size(), 2u);
}

TEST(SuffixOptionsTest, Validate) {
  EXPECT_TRUE(Opts().Validate().ok());
  EXPECT_FALSE(Opts(0).Validate().ok());
  EXPECT_TRUE(Opts(65536).Validate().ok());
  EXPECT_FALSE(Opts(65537).Validate().ok());
  EXPECT_FALSE(Opts(24, 0, -1.0f).Validate().ok());
  EXPECT_FALSE(Opts(24, 0, 1.0f, 1.5f).Validate().ok());
  EXPECT_FALSE(Opts(24, 0, 1.0f, -0.1f).Validate().ok());
  EXPECT_EQ(Opts().SpecTokens(), 24u);
  EXPECT_EQ(Opts(24, 0, 1.0f, 0.1f, 5).SpecTokens(), 5u);
}

// --- The brute-force reference: positions as token strings, counts by scanning. ---

class RefTree {
 public:
  explicit RefTree(uint32_t depth) : depth_(depth) {}

  void Begin() { seqs_.emplace_back(); }
  size_t size() const { return seqs_.size(); }
  void Append(uint32_t t) {
    Tokens& s = seqs_.back();
    s.push_back(t);
    for (size_t l = 1; l <= std::min<size_t>(depth_, s.size()); ++l) {
      Inc(kids_[Tokens(s.end() - static_cast<ptrdiff_t>(l), s.end() - 1)], t);
    }
  }
  void RemoveOldest() {
    const Tokens s = seqs_.front();
    for (size_t start = 0; start < s.size(); ++start) {
      for (size_t l = 1; l <= std::min<size_t>(depth_, s.size() - start); ++l) {
        const auto b = s.begin() + static_cast<ptrdiff_t>(start);
        Dec(kids_[Tokens(b, b + static_cast<ptrdiff_t>(l) - 1)], s[start + l - 1]);
      }
    }
    seqs_.pop_front();
  }
  uint64_t Count(const Tokens& u) const {
    uint64_t n = 0;
    for (const Tokens& s : seqs_) {
      for (size_t i = 0; i + u.size() <= s.size(); ++i) {
        n += std::equal(u.begin(), u.end(), s.begin() + static_cast<ptrdiff_t>(i));
      }
    }
    return n;
  }
  // The reference's speculate(), walking token by token (the ratio is 1 inside a node).
  SuffixDraft Speculate(const Tokens& pattern, int max_spec, const SuffixOptions& o) const {
    SuffixDraft best;
    for (size_t m = 1; m < pattern.size(); ++m) {
      Tokens u(pattern.end() - static_cast<ptrdiff_t>(m), pattern.end());
      if (Count(u) == 0) break;
      const float spec = static_cast<float>(m) * o.max_spec_factor + o.max_spec_offset;
      const int cap = std::max(std::min(max_spec, static_cast<int>(spec + 1e-6)), 0);
      SuffixDraft d;
      float prob = 1.0f;
      while (static_cast<int>(d.tokens.size()) < cap && prob >= o.min_token_prob) {
        const auto it = kids_.find(u);
        if (it == kids_.end() || it->second.empty()) break;
        const auto [tok, cnt] = it->second.front();
        prob *= static_cast<float>(cnt) / static_cast<float>(Count(u));
        if (!(prob >= o.min_token_prob)) break;
        d.tokens.push_back(tok);
        d.probs.push_back(prob);
        d.score += prob;
        u.push_back(tok);
      }
      if (d.score >= best.score) {
        best = d;
        best.match_len = static_cast<uint32_t>(m);
      }
    }
    return best;
  }

 private:
  using Kids = std::vector<std::pair<uint32_t, uint64_t>>;  // (token, count), the list order

  static void Inc(Kids& kids, uint32_t t) {
    size_t i = 0;
    while (i < kids.size() && kids[i].first != t) ++i;
    if (i == kids.size()) {
      kids.emplace_back(t, 1);
      return;
    }
    const uint64_t c = kids[i].second;
    size_t to = i;
    if (i == 0 || kids[i - 1].second != c) {
      while (to > 0 && kids[to - 1].second == c + 1) --to;  // front of those with c + 1
    } else {
      while (to > 0 && kids[to - 1].second == c) --to;  // end of those with c + 1
    }
    auto e = kids[i];
    ++e.second;
    kids.erase(kids.begin() + static_cast<ptrdiff_t>(i));
    kids.insert(kids.begin() + static_cast<ptrdiff_t>(to), e);
  }
  static void Dec(Kids& kids, uint32_t t) {
    size_t i = 0;
    while (kids[i].first != t) ++i;
    const uint64_t c = kids[i].second;
    size_t last = i;
    while (last + 1 < kids.size() && kids[last + 1].second == c) ++last;
    auto e = kids[i];
    --e.second;
    kids.erase(kids.begin() + static_cast<ptrdiff_t>(i));
    if (e.second > 0) kids.insert(kids.begin() + static_cast<ptrdiff_t>(last), e);
  }

  uint32_t depth_;
  std::deque<Tokens> seqs_;
  std::map<Tokens, Kids> kids_;
};

// vLLM's flow (suffix_decoding.py with the cache) and the scheduler, written independently of
// ReplayGreedy.
class RefProposer {
 public:
  explicit RefProposer(const SuffixOptions& o) : o_(o), global_(o.max_tree_depth) {}

  SpecStats Simulate(const Tokens& prompt, const Tokens& response, std::vector<SimStep>* trace) {
    const uint64_t mml = o_.max_model_len;
    RefTree local(o_.max_tree_depth);
    bool started = false, in_global = false;
    return testing::RefReplay(
        o_.SpecTokens(), mml, prompt, response, trace,
        [&](const Tokens& ctx) {
          if (mml > 0 && ctx.size() >= mml) return Tokens{};
          int max_spec = static_cast<int>(o_.SpecTokens());
          if (mml > 0) max_spec = std::min<int>(max_spec, static_cast<int>(mml - ctx.size() - 1));
          const Tokens pattern(
              ctx.end() - static_cast<ptrdiff_t>(std::min<size_t>(ctx.size(), o_.max_tree_depth)),
              ctx.end());
          const SuffixDraft d1 = local.Speculate(pattern, max_spec, o_);
          const SuffixDraft d2 = global_.Speculate(pattern, max_spec, o_);
          return d1.score >= d2.score ? d1.tokens : d2.tokens;
        },
        [&] {
          // The first proposal (after the prefill step) starts the request.
          local.Begin();
          started = !(mml > 0 && prompt.size() + 1 >= mml);
          if (!started) return;
          for (uint32_t t : prompt) local.Append(t);
          if (o_.max_cached_requests > 0) {
            in_global = true;
            global_.Begin();
            while (global_.size() > o_.max_cached_requests) global_.RemoveOldest();
          }
        },
        [&](const Tokens& ctx, const Tokens& toks) {
          // Appended by the next proposal, which vLLM skips at max_model_len.
          if (!started || (mml > 0 && ctx.size() + toks.size() >= mml)) return;
          for (uint32_t t : toks) {
            local.Append(t);
            if (in_global) global_.Append(t);
          }
        });
  }

 private:
  SuffixOptions o_;
  RefTree global_;
};

void ExpectSameStats(const SpecStats& a, const SpecStats& b) {
  EXPECT_EQ(a.tokens, b.tokens);
  EXPECT_EQ(a.ignored_tokens, b.ignored_tokens);
  EXPECT_EQ(a.steps, b.steps);
  EXPECT_EQ(a.steps_without_draft, b.steps_without_draft);
  EXPECT_EQ(a.drafts, b.drafts);
  EXPECT_EQ(a.draft_tokens, b.draft_tokens);
  EXPECT_EQ(a.accepted_tokens, b.accepted_tokens);
  EXPECT_EQ(a.accepted_per_pos, b.accepted_per_pos);
}

// Random token streams from small vocabularies (many repeats and ties), responses that partly
// copy the prompt or earlier responses, every option varied; several requests per proposer so
// that the global tree grows and evicts.
TEST(SuffixDifferentialTest, MatchesBruteForce) {
  std::mt19937_64 rng(2112);
  const uint32_t depths[] = {1, 2, 3, 4, 6, 24};
  const uint64_t cached[] = {0, 1, 2, 3, 10000};
  const float factors[] = {0.0f, 0.5f, 1.0f, 1.5f, 3.0f};
  const float probs[] = {0.0f, 0.1f, 0.2f, 0.34f, 0.5f, 1.0f};
  const uint32_t ks[] = {0, 1, 2, 5};
  size_t drafted = 0, reused = 0;
  for (int round = 0; round < 300; ++round) {
    SuffixOptions o = Opts(depths[rng() % 6], cached[rng() % 5], factors[rng() % 5],
                           probs[rng() % 6], ks[rng() % 4], rng() % 4 == 0 ? 10 + rng() % 40 : 0);
    if (rng() % 5 == 0) o.max_spec_offset = 1.0f;
    o.reuse_bytes = std::array<uint64_t, 4>{0, 1, 1 << 14, o.reuse_bytes}[rng() % 4];
    // The prompt tree built at the start, after a few proposals read off the context, or never.
    o.prompt_scan_work = std::array<uint32_t, 4>{0, 1, 4, 1000}[rng() % 4];
    const uint32_t vocab = 2 + static_cast<uint32_t>(rng() % 4);
    // Sometimes ids around 2^20 (the root's direct index ends there) or near 2^32.
    const uint32_t offset =
        std::array<uint32_t, 4>{0, 0, (1u << 20) - 2, UINT32_MAX - 8}[rng() % 4];
    SuffixProposer p(o);
    RefProposer ref(o);
    std::vector<Tokens> earlier, contexts;
    for (int req = 0; req < 6; ++req) {
      Tokens prompt, response;
      const size_t np = rng() % 25, nr = rng() % 30;
      if (!contexts.empty() && rng() % 3 == 0) {
        // The next turn of an earlier request's conversation: its whole context and more.
        prompt = contexts[rng() % contexts.size()];
      }
      for (size_t i = 0; i < np; ++i)
        prompt.push_back(offset + static_cast<uint32_t>(rng() % vocab));
      while (response.size() < nr) {
        if (!earlier.empty() && rng() % 3 == 0) {
          const Tokens& e = earlier[rng() % earlier.size()];
          const size_t from = e.empty() ? 0 : rng() % e.size();
          response.insert(response.end(), e.begin() + static_cast<ptrdiff_t>(from), e.end());
        } else {
          response.push_back(offset + static_cast<uint32_t>(rng() % vocab));
        }
      }
      response.resize(nr);
      earlier.push_back(response);
      contexts.push_back(prompt);
      contexts.back().insert(contexts.back().end(), response.begin(), response.end());
      std::vector<SimStep> got, want;
      const SpecStats a = p.Simulate(prompt, response, &got);
      const SpecStats b = ref.Simulate(prompt, response, &want);
      ASSERT_EQ(got, want) << "round " << round << " request " << req;
      ExpectSameStats(a, b);
      ASSERT_EQ(p.CheckForTesting(), "") << "round " << round << " request " << req;
      drafted += a.drafts;
    }
    reused += p.prompt_trees_reused();
  }
  EXPECT_GT(drafted, 1000u);
  EXPECT_GT(reused, 25u);  // in the rounds that build prompt trees
}

// SimulateSweep (one proposer state for every k; the walks of a context scored once for the
// largest k, the drafts of smaller ones read off them) against one brute-force proposer per k,
// every option varied but max_model_len (which the sweep does not take).
TEST(SuffixDifferentialTest, SweepMatchesBruteForcePerK) {
  std::mt19937_64 rng(4242);
  const uint32_t depths[] = {1, 2, 3, 4, 6, 24};
  const uint64_t cached[] = {0, 1, 2, 3, 10000};
  const float factors[] = {0.0f, 0.5f, 1.0f, 1.5f, 3.0f};
  const float probs[] = {0.0f, 0.1f, 0.2f, 0.34f, 0.5f, 1.0f};
  const std::vector<uint32_t> ks = {1, 2, 3, 5, 8};
  size_t drafted = 0;
  for (int round = 0; round < 50; ++round) {
    SuffixOptions o =
        Opts(depths[rng() % 6], cached[rng() % 5], factors[rng() % 5], probs[rng() % 6]);
    if (rng() % 5 == 0) o.max_spec_offset = rng() % 2 ? 1.0f : -1.0f;
    o.reuse_bytes = std::array<uint64_t, 3>{0, 1 << 14, o.reuse_bytes}[rng() % 3];
    o.prompt_scan_work = std::array<uint32_t, 4>{0, 1, 4, 1000}[rng() % 4];
    const uint32_t vocab = 2 + static_cast<uint32_t>(rng() % 4);
    SuffixProposer sweep(o);
    std::vector<RefProposer> refs;
    for (uint32_t k : ks) {
      SuffixOptions ok = o;
      ok.k = k;
      refs.emplace_back(ok);
    }
    std::vector<Tokens> earlier, contexts;
    for (int req = 0; req < 6; ++req) {
      Tokens prompt, response;
      const size_t np = rng() % 25, nr = rng() % 40;
      if (!contexts.empty() && rng() % 3 == 0) prompt = contexts[rng() % contexts.size()];
      for (size_t i = 0; i < np; ++i) prompt.push_back(static_cast<uint32_t>(rng() % vocab));
      while (response.size() < nr) {
        if (!earlier.empty() && rng() % 3 == 0) {
          const Tokens& e = earlier[rng() % earlier.size()];
          const size_t from = e.empty() ? 0 : rng() % e.size();
          response.insert(response.end(), e.begin() + static_cast<ptrdiff_t>(from), e.end());
        } else {
          response.push_back(static_cast<uint32_t>(rng() % vocab));
        }
      }
      response.resize(nr);
      earlier.push_back(response);
      contexts.push_back(prompt);
      contexts.back().insert(contexts.back().end(), response.begin(), response.end());
      std::vector<SpecStats> got;
      sweep.SimulateSweep(prompt, response, ks, &got);
      ASSERT_EQ(got.size(), ks.size());
      for (size_t i = 0; i < ks.size(); ++i) {
        std::vector<SimStep> trace;
        const SpecStats want = refs[i].Simulate(prompt, response, &trace);
        SCOPED_TRACE("round " + std::to_string(round) + " request " + std::to_string(req) + " k " +
                     std::to_string(ks[i]));
        ExpectSameStats(got[i], want);
        drafted += got[i].drafts;
      }
      ASSERT_EQ(sweep.CheckForTesting(), "");
    }
  }
  EXPECT_GT(drafted, 1000u);
}

// Longer streams with a bigger vocabulary: deeper compressed nodes, splits and merges.
TEST(SuffixDifferentialTest, LongerStreams) {
  std::mt19937_64 rng(7);
  for (int round = 0; round < 12; ++round) {
    SuffixOptions o = Opts(round % 2 ? 8 : 24, round % 3 + 1, 1.0f, 0.1f);
    o.prompt_scan_work = std::array<uint32_t, 4>{0, 2, 8, 1000}[round % 4];
    SuffixProposer p(o);
    RefProposer ref(o);
    Tokens base;
    for (int i = 0; i < 60; ++i) base.push_back(static_cast<uint32_t>(rng() % 12));
    for (int req = 0; req < 5; ++req) {
      Tokens prompt(base.begin(), base.begin() + 40), response;
      while (response.size() < 120) {
        const size_t from = rng() % base.size();
        const size_t len = 1 + rng() % 15;
        for (size_t i = from; i < std::min(base.size(), from + len); ++i)
          response.push_back(base[i]);
        response.push_back(static_cast<uint32_t>(rng() % 12));
      }
      std::vector<SimStep> got, want;
      const SpecStats a = p.Simulate(prompt, response, &got);
      const SpecStats b = ref.Simulate(prompt, response, &want);
      ASSERT_EQ(got, want) << "round " << round << " request " << req;
      ExpectSameStats(a, b);
      ASSERT_EQ(p.CheckForTesting(), "");
    }
  }
}

// Prompts that start with one of a few shared prefixes (system prompts) of various lengths:
// prompt trees copied from a saved prefix's tree (shared_prefix_min) are, node for node, the
// trees built from nothing, and the drafts are the brute force's.
TEST(SuffixDifferentialTest, SharedPrefixTreesEqualTreesBuiltFromNothing) {
  std::mt19937_64 rng(99);
  uint64_t copied = 0;
  for (int round = 0; round < 60; ++round) {
    SuffixOptions o = Opts(std::array<uint32_t, 4>{2, 4, 6, 24}[rng() % 4], 1 + rng() % 3, 1.0f,
                           std::array<float, 3>{0.0f, 0.1f, 0.34f}[rng() % 3]);
    o.prompt_scan_work = 0;  // the trees are compared
    o.shared_prefix_min = std::array<uint32_t, 4>{1, 2, 5, 12}[rng() % 4];
    o.reuse_bytes = rng() % 2 ? 0 : o.reuse_bytes;
    SuffixOptions plain_options = o;
    plain_options.shared_prefix_min = 0;
    const uint32_t vocab = 2 + static_cast<uint32_t>(rng() % 5);
    std::vector<Tokens> systems(1 + rng() % 4);
    for (Tokens& sys : systems) {
      const size_t n = rng() % 30;
      for (size_t i = 0; i < n; ++i) sys.push_back(static_cast<uint32_t>(rng() % vocab));
    }
    SuffixProposer p(o), plain(plain_options);
    RefProposer ref(o);
    SuffixOptions tree_options = o, plain_tree_options = plain_options;
    tree_options.max_cached_requests = plain_tree_options.max_cached_requests = 0;
    SuffixProposer tree(tree_options), plain_tree(plain_tree_options);
    std::vector<Tokens> contexts;
    for (int req = 0; req < 14; ++req) {
      Tokens prompt = systems[rng() % systems.size()], response;
      if (rng() % 4 == 0) prompt.resize(rng() % (prompt.size() + 1));  // a prefix of it
      if (!contexts.empty() && rng() % 5 == 0) prompt = contexts[rng() % contexts.size()];
      const size_t tail = rng() % 12, nr = rng() % 20;
      for (size_t i = 0; i < tail; ++i) prompt.push_back(static_cast<uint32_t>(rng() % vocab));
      for (size_t i = 0; i < nr; ++i) response.push_back(static_cast<uint32_t>(rng() % vocab));
      contexts.push_back(prompt);
      contexts.back().insert(contexts.back().end(), response.begin(), response.end());
      SCOPED_TRACE("round " + std::to_string(round) + " request " + std::to_string(req));
      // The prompt tree right after the prompt (proposers without a global tree, so that only
      // prompt trees are compared), then the whole replay against the brute force.
      tree.StartRequest(prompt);
      plain_tree.StartRequest(prompt);
      ASSERT_EQ(tree.DumpPromptTreeForTesting(), plain_tree.DumpPromptTreeForTesting());
      ASSERT_EQ(tree.CheckForTesting(), "");
      tree.StopRequest();
      plain_tree.StopRequest();
      std::vector<SimStep> got, got_plain, want;
      const SpecStats a = p.Simulate(prompt, response, &got);
      plain.Simulate(prompt, response, &got_plain);
      const SpecStats b = ref.Simulate(prompt, response, &want);
      ASSERT_EQ(got, want);
      ASSERT_EQ(got, got_plain);
      ExpectSameStats(a, b);
      ASSERT_EQ(p.CheckForTesting(), "");
    }
    copied += p.prefix_trees_copied() + tree.prefix_trees_copied();
    EXPECT_EQ(plain.prefix_trees_copied(), 0u);
  }
  EXPECT_GT(copied, 100u);
}

}  // namespace
}  // namespace llmtap::specdec::suffix_test
