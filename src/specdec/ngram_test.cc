#include "specdec/ngram.h"

#include <algorithm>
#include <cstdint>
#include <ostream>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "specdec/testing/ref_replay.h"

namespace llmtap::specdec {

void PrintTo(const SimStep& s, std::ostream* os) {
  *os << "{draft [";
  for (size_t i = 0; i < s.draft.size(); ++i) *os << (i ? " " : "") << s.draft[i];
  *os << "], accepted " << s.accepted << "}";
}

namespace {

using Tokens = std::vector<uint32_t>;

NgramOptions Opts(uint32_t min_n, uint32_t max_n, uint32_t k, uint64_t max_model_len = 0) {
  NgramOptions o;
  o.min_n = min_n;
  o.max_n = max_n;
  o.k = k;
  o.max_model_len = max_model_len;
  return o;
}

// --- The reference: vLLM's rules written as plainly as possible (brute force). ---

Tokens RefPropose(const NgramOptions& o, const Tokens& ctx) {
  const size_t n_tokens = ctx.size();
  if (n_tokens < o.min_n) return {};
  size_t k = o.k;
  if (o.max_model_len > 0) {
    if (n_tokens >= o.max_model_len) return {};
    k = std::min<size_t>(k, o.max_model_len - n_tokens);
  }
  // The longest n first; for each n the earliest start s that is not the suffix itself.
  for (size_t n = o.max_n; n >= o.min_n; --n) {
    if (n >= n_tokens) continue;
    for (size_t s = 0; s + n < n_tokens; ++s) {
      if (std::equal(ctx.begin() + s, ctx.begin() + s + n, ctx.end() - n)) {
        const size_t from = s + n;
        const size_t len = std::min(k, n_tokens - from);
        return Tokens(ctx.begin() + from, ctx.begin() + from + len);
      }
    }
  }
  return {};
}

SpecStats RefSimulate(const NgramOptions& o, const Tokens& prompt, const Tokens& response,
                      std::vector<SimStep>* trace) {
  return testing::RefReplay(o.k, o.max_model_len, prompt, response, trace,
                            [&](const Tokens& ctx) { return RefPropose(o, ctx); });
}

// The draft from all three paths: the one-shot KMP pass, the incremental index, the reference.
Tokens Draft(const NgramOptions& o, const Tokens& ctx) {
  NgramProposer p(o);
  Tokens kmp, incremental;
  p.Propose(ctx, &kmp);
  p.Append(ctx);
  p.ProposeNext(&incremental);
  EXPECT_EQ(kmp, incremental) << "incremental index differs from the one-shot pass";
  EXPECT_EQ(kmp, RefPropose(o, ctx)) << "one-shot pass differs from the reference";
  return kmp;
}

void ExpectStats(const SpecStats& st, uint64_t tokens, uint64_t steps, uint64_t no_draft,
                 uint64_t drafts, uint64_t draft_tokens, uint64_t accepted,
                 const std::vector<uint64_t>& per_pos) {
  EXPECT_EQ(st.tokens, tokens);
  EXPECT_EQ(st.steps, steps);
  EXPECT_EQ(st.steps_without_draft, no_draft);
  EXPECT_EQ(st.drafts, drafts);
  EXPECT_EQ(st.draft_tokens, draft_tokens);
  EXPECT_EQ(st.accepted_tokens, accepted);
  EXPECT_EQ(st.accepted_per_pos, per_pos);
}

// Simulate, checked against the reference replay as well.
SpecStats Sim(const NgramOptions& o, const Tokens& prompt, const Tokens& response,
              std::vector<SimStep>* trace) {
  std::vector<SimStep> ref_trace;
  const SpecStats ref = RefSimulate(o, prompt, response, &ref_trace);
  const SpecStats st = Simulate(o, prompt, response, trace);
  EXPECT_EQ(*trace, ref_trace);
  EXPECT_EQ(st.accepted_per_pos, ref.accepted_per_pos);
  EXPECT_EQ(st.accepted_tokens, ref.accepted_tokens);
  EXPECT_EQ(st.steps, ref.steps);
  return st;
}

// --- Hand-worked drafts. ---

TEST(NgramPropose, VllmDocstringExampleTruncatesAtTheEnd) {
  // min 2, max 3, k 4. [4 2 3] does not occur earlier; [2 3] occurs at 1; only three tokens
  // follow it, so the draft is three tokens long (k past the end of the context: truncated).
  EXPECT_EQ(Draft(Opts(2, 3, 4), {1, 2, 3, 4, 2, 3}), (Tokens{4, 2, 3}));
  // k past the end with a one-token context match: [9] at 0, one token follows.
  EXPECT_EQ(Draft(Opts(1, 1, 5), {9, 9}), (Tokens{9}));
}

TEST(NgramPropose, SeveralMatchesTheEarliestWins) {
  // [7 8] occurs at 0 and at 3 (and is the suffix at 6): the draft follows the one at 0.
  EXPECT_EQ(Draft(Opts(2, 2, 2), {7, 8, 1, 7, 8, 2, 7, 8}), (Tokens{1, 7}));
}

TEST(NgramPropose, TheLongestWinsOverAnEarlierShorterOne) {
  const Tokens ctx = {2, 3, 5, 1, 2, 3, 6, 1, 2, 3};
  // max 3: [1 2 3] occurs at 3, so the draft starts at 6, although [2 3] occurs at 0.
  EXPECT_EQ(Draft(Opts(2, 3, 3), ctx), (Tokens{6, 1, 2}));
  // max 2 bounds the n-gram: [2 3] at 0 (its earliest occurrence) gives the tokens from 2.
  EXPECT_EQ(Draft(Opts(2, 2, 3), ctx), (Tokens{5, 1, 2}));
  EXPECT_EQ(Draft(Opts(1, 2, 2), ctx), (Tokens{5, 1}));
}

TEST(NgramPropose, OverlappingOccurrencesCount) {
  // [4 4] is the suffix at 1 and occurs at 0, overlapping it: one token follows.
  EXPECT_EQ(Draft(Opts(2, 2, 3), {4, 4, 4}), (Tokens{4}));
  // [4 4] at 0 (earliest of 0, 1); the tokens from 2 are [4 4].
  EXPECT_EQ(Draft(Opts(2, 2, 3), {4, 4, 4, 4}), (Tokens{4, 4}));
  // [1 2 1] is the suffix at 2 and occurs at 0: the tokens from 3 are [2 1].
  EXPECT_EQ(Draft(Opts(3, 3, 4), {1, 2, 1, 2, 1}), (Tokens{2, 1}));
}

TEST(NgramPropose, MinimumBound) {
  const Tokens ctx = {1, 2, 5, 9, 1, 2};
  // Only [1 2] recurs; with min 3 that is too short.
  EXPECT_EQ(Draft(Opts(3, 4, 4), ctx), Tokens{});
  // With min 2: [1 2] at 0, the four tokens from 2.
  EXPECT_EQ(Draft(Opts(2, 4, 4), ctx), (Tokens{5, 9, 1, 2}));
  // Nothing recurs at all.
  EXPECT_EQ(Draft(Opts(1, 3, 4), {1, 2, 3, 4}), Tokens{});
}

TEST(NgramPropose, ContextShorterThanTheMinimum) {
  EXPECT_EQ(Draft(Opts(2, 3, 4), {}), Tokens{});
  EXPECT_EQ(Draft(Opts(2, 3, 4), {1}), Tokens{});
  EXPECT_EQ(Draft(Opts(1, 1, 4), {3}), Tokens{});  // one token: nothing earlier to match
  EXPECT_EQ(Draft(Opts(1, 1, 4), {3, 3}), (Tokens{3}));
  EXPECT_EQ(Draft(Opts(2, 2, 4), {3, 3}), Tokens{});  // [3 3] is only the suffix itself
}

TEST(NgramPropose, MaxModelLenCutsTheDraft) {
  // [1 2] at 0; the tokens from 2 are [3 1 2]. N = 5; k' = min(k, max_model_len - N).
  const Tokens ctx = {1, 2, 3, 1, 2};
  EXPECT_EQ(Draft(Opts(2, 2, 3, 0), ctx), (Tokens{3, 1, 2}));
  EXPECT_EQ(Draft(Opts(2, 2, 3, 100), ctx), (Tokens{3, 1, 2}));
  EXPECT_EQ(Draft(Opts(2, 2, 3, 7), ctx), (Tokens{3, 1}));
  EXPECT_EQ(Draft(Opts(2, 2, 3, 6), ctx), (Tokens{3}));
  EXPECT_EQ(Draft(Opts(2, 2, 3, 5), ctx), Tokens{});
  EXPECT_EQ(Draft(Opts(2, 2, 3, 4), ctx), Tokens{});
}

TEST(NgramOptions, Validate) {
  EXPECT_TRUE(NgramOptions().Validate().ok());
  EXPECT_EQ(NgramOptions().min_n, 5u);  // vLLM's prompt_lookup_min/max defaults
  EXPECT_EQ(NgramOptions().max_n, 5u);
  EXPECT_FALSE(Opts(0, 3, 4).Validate().ok());
  EXPECT_FALSE(Opts(3, 2, 4).Validate().ok());
  EXPECT_FALSE(Opts(1, 2, 0).Validate().ok());
  EXPECT_TRUE(Opts(2, 2, 1).Validate().ok());
}

// --- Hand-worked replays. response[0] comes from prefill; each later step is listed. ---

TEST(NgramSimulate, DraftsAcceptedAndRejected) {
  // min = max = 2, k = 3. prompt 1 2 3 4 5 6, response 1 2 3 4 9 5 6 7.
  //   prefill: 1
  //   step 1: suffix [6 1] not earlier            -> no draft, emits 2
  //   step 2: suffix [1 2] at 0, draft [3 4 5]    -> 3 4 accepted, 5 != 9: emits 3 4 9
  //   step 3: suffix [4 9] not earlier            -> no draft, emits 5
  //   step 4: suffix [9 5] not earlier            -> no draft, emits 6
  //   step 5: suffix [5 6] at 4, draft [1 2 3]    -> 1 != 7: emits 7
  std::vector<SimStep> trace;
  const SpecStats st = Sim(Opts(2, 2, 3), {1, 2, 3, 4, 5, 6}, {1, 2, 3, 4, 9, 5, 6, 7}, &trace);
  EXPECT_EQ(trace,
            (std::vector<SimStep>{{{}, 0}, {{3, 4, 5}, 2}, {{}, 0}, {{}, 0}, {{1, 2, 3}, 0}}));
  ExpectStats(st, 8, 5, 3, 2, 6, 2, {1, 1, 0});
  EXPECT_DOUBLE_EQ(st.AcceptanceLength(), 2.0);  // 1 + 2 / 2
  EXPECT_DOUBLE_EQ(st.TokensPerStep(), 7.0 / 5);
}

TEST(NgramSimulate, ResponseShorterThanTheDraft) {
  // min = max = 2, k = 4. prompt 1 2 3 4 5, response 1 2 3.
  //   prefill: 1
  //   step 1: suffix [5 1] not earlier                 -> no draft, emits 2
  //   step 2: suffix [1 2] at 0, draft [3 4 5 1]       -> 3 accepted; the response ends there,
  //           so positions 1-3 count as drafted, not accepted; the bonus token is past the end.
  std::vector<SimStep> trace;
  const SpecStats st = Sim(Opts(2, 2, 4), {1, 2, 3, 4, 5}, {1, 2, 3}, &trace);
  EXPECT_EQ(trace, (std::vector<SimStep>{{{}, 0}, {{3, 4, 5, 1}, 1}}));
  ExpectStats(st, 3, 2, 1, 1, 4, 1, {1, 0, 0, 0});
}

TEST(NgramSimulate, OverlappingRepeats) {
  // min = max = 1, k = 3. prompt 7, response 7 7 7 7 7 7.
  //   prefill: 7                           (context 7 7)
  //   step 1: [7] at 0, draft [7]           -> accepted, emits 7 7      (context 7 7 7 7)
  //   step 2: [7] at 0, draft [7 7 7]       -> all accepted, emits the last three; done
  std::vector<SimStep> trace;
  const SpecStats st = Sim(Opts(1, 1, 3), {7}, {7, 7, 7, 7, 7, 7}, &trace);
  EXPECT_EQ(trace, (std::vector<SimStep>{{{7}, 1}, {{7, 7, 7}, 3}}));
  ExpectStats(st, 6, 2, 0, 2, 4, 4, {2, 1, 1});
}

TEST(NgramSimulate, MaxModelLen) {
  const Tokens prompt = {1, 2, 3, 4, 1};
  const Tokens response = {2, 3, 4, 1, 2, 3};
  std::vector<SimStep> trace;
  // No limit. min = max = 2, k = 3.
  //   prefill: 2                                  (context 1 2 3 4 1 2)
  //   step 1: [1 2] at 0, draft [3 4 1]            -> all accepted, emits 3 4 1 2
  //   step 2: [1 2] at 0, draft [3 4 1]            -> 3 accepted, response ends
  SpecStats st = Sim(Opts(2, 2, 3), prompt, response, &trace);
  EXPECT_EQ(trace, (std::vector<SimStep>{{{3, 4, 1}, 3}, {{3, 4, 1}, 1}}));
  ExpectStats(st, 6, 2, 0, 2, 6, 4, {2, 1, 1});
  // max_model_len 9: at most 9 - 5 = 4 response tokens (2 ignored). At step 1 N = 6: the
  // proposer allows min(3, 9 - 6) = 3 tokens, the scheduler 9 - 1 - 6 = 2: draft [3 4], both
  // accepted, emits 3 4 1 and the request is at max_model_len.
  st = Sim(Opts(2, 2, 3, 9), prompt, response, &trace);
  EXPECT_EQ(trace, (std::vector<SimStep>{{{3, 4}, 2}}));
  ExpectStats(st, 4, 1, 0, 1, 2, 2, {1, 1, 0});
  EXPECT_EQ(st.ignored_tokens, 2u);
}

TEST(NgramSimulate, DraftTrimmedToNothingIsNoDraft) {
  // min = max = 1, k = 2, max_model_len 5, prompt 5 5 5: 2 response tokens fit.
  //   prefill: 5                           (context 5 5 5 5, N = 4)
  //   step 1: the proposer gives [5] (k' = min(2, 5 - 4) = 1), the scheduler trims it to
  //           5 - 1 - 4 = 0 tokens: a plain decode step, no draft counted.
  std::vector<SimStep> trace;
  const SpecStats st = Sim(Opts(1, 1, 2, 5), {5, 5, 5}, {5, 5, 5}, &trace);
  EXPECT_EQ(trace, (std::vector<SimStep>{{{}, 0}}));
  ExpectStats(st, 2, 1, 1, 0, 0, 0, {0, 0});
  EXPECT_EQ(st.ignored_tokens, 1u);
  Tokens draft;
  NgramProposer(Opts(1, 1, 2, 5)).Propose(Tokens{5, 5, 5, 5}, &draft);
  EXPECT_EQ(draft, (Tokens{5}));  // the proposer's own cut is one token looser
}

TEST(NgramSimulate, EmptyAndOneTokenResponses) {
  std::vector<SimStep> trace;
  ExpectStats(Sim(Opts(2, 2, 3), {1, 2, 1, 2}, {}, &trace), 0, 0, 0, 0, 0, 0, {0, 0, 0});
  ExpectStats(Sim(Opts(2, 2, 3), {1, 2, 1, 2}, {1}, &trace), 1, 0, 0, 0, 0, 0, {0, 0, 0});
  EXPECT_TRUE(trace.empty());
}

TEST(SpecStats, Add) {
  SpecStats a, b;
  a.tokens = 3;
  a.drafts = 1;
  a.accepted_per_pos = {1};
  b.tokens = 4;
  b.steps = 2;
  b.accepted_per_pos = {2, 1};
  a.Add(b);
  EXPECT_EQ(a.tokens, 7u);
  EXPECT_EQ(a.steps, 2u);
  EXPECT_EQ(a.drafts, 1u);
  EXPECT_EQ(a.accepted_per_pos, (std::vector<uint64_t>{3, 1}));
}

// --- Differential tests against the reference on random token streams. ---

NgramOptions RandomOptions(std::mt19937_64& rng, size_t len) {
  const uint32_t min_n = 1 + rng() % 4;
  const uint32_t max_n = min_n + rng() % 5;
  const uint32_t k = 1 + rng() % 7;
  uint64_t mml = 0;
  if (rng() % 3 == 0) mml = 1 + rng() % (len + 12);
  return Opts(min_n, max_n, k, mml);
}

Tokens RandomStream(std::mt19937_64& rng, size_t len, uint32_t alphabet) {
  Tokens t(len);
  for (auto& x : t) x = static_cast<uint32_t>(rng() % alphabet);
  return t;
}

// Every prefix of random streams: one-shot pass, incremental index (with full and with 2-bit
// hashes, which collide all the time and exercise the fallback) and the reference agree.
TEST(NgramDifferential, EveryPrefixOfRandomStreams) {
  std::mt19937_64 rng(21);
  const uint32_t alphabets[] = {1, 2, 3, 4, 8, 64, 1u << 31};
  size_t nonempty = 0, total = 0;
  for (int trial = 0; trial < 400; ++trial) {
    const size_t len = rng() % 160;
    const Tokens stream = RandomStream(rng, len, alphabets[trial % 7]);
    const NgramOptions o = RandomOptions(rng, len);
    NgramProposer full(o), weak(o);
    weak.SetHashBitsForTesting(2);
    Tokens prefix, one_shot, from_full, from_weak;
    for (size_t i = 0; i <= len; ++i) {
      const Tokens want = RefPropose(o, prefix);
      full.Propose(prefix, &one_shot);
      full.ProposeNext(&from_full);
      weak.ProposeNext(&from_weak);
      ASSERT_EQ(one_shot, want) << "trial " << trial << " prefix " << i;
      ASSERT_EQ(from_full, want) << "trial " << trial << " prefix " << i;
      ASSERT_EQ(from_weak, want) << "trial " << trial << " prefix " << i;
      nonempty += !want.empty();
      ++total;
      if (i == len) break;
      prefix.push_back(stream[i]);
      full.Append(stream[i]);
      weak.Append(stream[i]);
    }
  }
  // The streams must exercise both outcomes.
  EXPECT_GT(nonempty, total / 4);
  EXPECT_LT(nonempty, total);
}

// Whole replays: a response that copies spans of its prompt (and of itself) with edits, so
// drafts are partly accepted; Simulate's trace and counters equal the reference replay's.
TEST(NgramDifferential, ReplaysOfCopyingResponses) {
  std::mt19937_64 rng(2121);
  uint64_t accepted = 0, drafted = 0;
  for (int trial = 0; trial < 300; ++trial) {
    const uint32_t alphabet = trial % 3 == 0 ? 5 : 1000;
    const Tokens prompt = RandomStream(rng, rng() % 120, alphabet);
    Tokens response;
    const size_t want = rng() % 120;
    while (response.size() < want) {
      if (!prompt.empty() && rng() % 3 != 0) {
        const size_t from = rng() % prompt.size();
        const size_t len = std::min<size_t>(1 + rng() % 12, prompt.size() - from);
        response.insert(response.end(), prompt.begin() + from, prompt.begin() + from + len);
      } else {
        response.push_back(static_cast<uint32_t>(rng() % alphabet));
      }
    }
    const NgramOptions o = RandomOptions(rng, prompt.size() + response.size());
    std::vector<SimStep> ref_trace, trace;
    const SpecStats ref = RefSimulate(o, prompt, response, &ref_trace);
    NgramProposer p(o);
    if (trial % 2) p.SetHashBitsForTesting(3);
    const SpecStats st = p.Simulate(prompt, response, &trace);
    ASSERT_EQ(trace, ref_trace) << "trial " << trial;
    ExpectStats(st, ref.tokens, ref.steps, ref.steps_without_draft, ref.drafts, ref.draft_tokens,
                ref.accepted_tokens, ref.accepted_per_pos);
    EXPECT_EQ(st.ignored_tokens, ref.ignored_tokens);
    // Invariants: every step emits accepted + 1 tokens, the last one possibly past the end.
    if (st.tokens > 0) {
      EXPECT_GE(st.accepted_tokens + st.steps, st.tokens - 1);
      EXPECT_LE(st.accepted_tokens + st.steps, st.tokens);
    }
    EXPECT_EQ(st.steps, st.drafts + st.steps_without_draft);
    accepted += st.accepted_tokens;
    drafted += st.draft_tokens;
  }
  EXPECT_GT(accepted, 0u);
  EXPECT_LT(accepted, drafted);
}

// The proposer is reusable: a second replay on the same object gives the same answer as a
// fresh one (Simulate resets the index), including after a bigger request grew the table.
TEST(NgramSimulate, ReuseAcrossRequests) {
  std::mt19937_64 rng(7);
  const NgramOptions o = Opts(2, 4, 5);
  NgramProposer p(o);
  for (int i = 0; i < 20; ++i) {
    const Tokens prompt = RandomStream(rng, i % 2 ? 2000 : 30, 6);
    const Tokens response = RandomStream(rng, 200, 6);
    std::vector<SimStep> a, b;
    p.Simulate(prompt, response, &a);
    Simulate(o, prompt, response, &b);
    ASSERT_EQ(a, b) << i;
  }
}

}  // namespace
}  // namespace llmtap::specdec
