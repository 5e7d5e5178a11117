// llama.cpp's n-gram proposers (llamacpp.h): the server's own counters replayed exactly, and
// hand-worked drafts for the rules.
#include "specdec/llamacpp.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "specdec/testing/llamacpp_server_counts.h"

namespace llmtap::specdec {
namespace {

using testing::LoadServerCounts;
using testing::ServerRequest;
using testing::ServerSetting;

using LTokens = std::vector<uint32_t>;

TEST(LlamacppServerCounts, EveryRequestOfEverySettingExact) {
  const std::vector<ServerSetting> settings = LoadServerCounts();
  ASSERT_EQ(settings.size(), 4u);
  size_t requests = 0;
  for (const ServerSetting& setting : settings) {
    SCOPED_TRACE(setting.mode + " n=" + std::to_string(setting.options.size_n) +
                 " m=" + std::to_string(setting.options.size_m));
    ASSERT_TRUE(setting.options.Validate().ok());
    // One slot, the requests in the order the server served them: the maps carry over.
    LlamacppProposer slot(setting.options);
    uint64_t drafted = 0, accepted = 0, server_drafted = 0, server_accepted = 0;
    for (size_t i = 0; i < setting.requests.size(); ++i) {
      const ServerRequest& r = setting.requests[i];
      const SpecStats st = slot.Simulate(r.prompt, r.generated, r.n_predict);
      EXPECT_EQ(st.draft_tokens, r.draft_n) << "request " << i;
      EXPECT_EQ(st.accepted_tokens, r.draft_n_accepted) << "request " << i;
      EXPECT_EQ(st.tokens, r.generated.size());
      EXPECT_LE(st.drafts, st.steps);
      drafted += st.draft_tokens;
      accepted += st.accepted_tokens;
      server_drafted += r.draft_n;
      server_accepted += r.draft_n_accepted;
      ++requests;
    }
    EXPECT_EQ(drafted, server_drafted);
    EXPECT_EQ(accepted, server_accepted);
    EXPECT_GT(server_drafted, 1000u);  // the vectors do exercise drafting
  }
  EXPECT_EQ(requests, 148u);
}

// The map modes' state across requests matters: a fresh map per request mispredicts many of
// the map-k requests (issue 47's research: 25 of 40).
TEST(LlamacppServerCounts, MapKNeedsTheSlotsHistory) {
  const std::vector<ServerSetting> settings = LoadServerCounts();
  ASSERT_EQ(settings.size(), 4u);
  const ServerSetting& mapk = settings[2];
  ASSERT_EQ(mapk.mode, "ngram-map-k");
  size_t wrong = 0;
  for (const ServerRequest& r : mapk.requests) {
    LlamacppProposer fresh(mapk.options);
    const SpecStats st = fresh.Simulate(r.prompt, r.generated, r.n_predict);
    wrong += st.draft_tokens != r.draft_n || st.accepted_tokens != r.draft_n_accepted;
  }
  EXPECT_GT(wrong, 10u);
}

LlamacppOptions LOpts(LlamacppMode mode, uint32_t n, uint32_t m, uint32_t min_hits = 1) {
  LlamacppOptions o;
  o.mode = mode;
  o.size_n = n;
  o.size_m = m;
  o.min_hits = min_hits;
  return o;
}

TEST(LlamacppSimple, MostRecentMatchAndMinimums) {
  LlamacppProposer p(LOpts(LlamacppMode::kNgramSimple, 2, 3));
  LTokens d;
  // L = 6 <= n + m + 1: nothing, however good the match.
  p.Draft(LTokens{0, 1, 2, 3, 1, 2}, 3, &d);
  EXPECT_TRUE(d.empty());
  // H = 0 1 2 7 8 9 5 1 2 6 6 4 1, s = 2: key [1 2] at 1 and at 7; the most recent (7) wins,
  // the 3 tokens after it.
  p.Draft(LTokens{0, 1, 2, 7, 8, 9, 5, 1, 2, 6, 6, 4, 1}, 2, &d);
  EXPECT_EQ(d, (LTokens{6, 6, 4}));
  // A match at position 0 never counts.
  p.Draft(LTokens{1, 2, 7, 8, 9, 5, 3, 1}, 2, &d);
  EXPECT_TRUE(d.empty());
  // The tokens after the match are cut by H's end: H = 9 9 9 9 9 1 2 4 1, s = 2: match at 5,
  // 2 tokens (4 1) follow, >= n = 2: drafted.
  p.Draft(LTokens{9, 9, 9, 9, 9, 1, 2, 4, 1}, 2, &d);
  EXPECT_EQ(d, (LTokens{4, 1}));
  LlamacppProposer p3(LOpts(LlamacppMode::kNgramSimple, 3, 3));
  // n = 3: key [4 1 2]... H = 9 9 9 9 9 9 4 1 2 5 4 1, s = 2: match at 6, 3 tokens follow: ok;
  p3.Draft(LTokens{9, 9, 9, 9, 9, 9, 4, 1, 2, 5, 4, 1}, 2, &d);
  EXPECT_EQ(d, (LTokens{5, 4, 1}));
  // ... H = 9 9 9 9 9 9 9 4 1 2 4 1, s = 2: match at 7, 2 < n tokens follow: dropped.
  p3.Draft(LTokens{9, 9, 9, 9, 9, 9, 9, 4, 1, 2, 4, 1}, 2, &d);
  EXPECT_TRUE(d.empty());
}

// The loop: the first token gets no draft, the n_predict cut keeps the last token undrafted,
// the counters are the server's.
TEST(LlamacppLoop, CycleCopyAndNPredictCut) {
  // A cycle of 5 tokens; the prompt holds it twice after a BOS; the output continues it.
  const LTokens cycle = {10, 11, 12, 13, 14};
  LTokens prompt = {1};
  for (int i = 0; i < 2; ++i) prompt.insert(prompt.end(), cycle.begin(), cycle.end());
  LTokens response;
  for (int i = 0; i < 12; ++i) response.push_back(cycle[i % 5]);
  LlamacppProposer p(LOpts(LlamacppMode::kNgramSimple, 2, 4));
  std::vector<SimStep> trace;
  const SpecStats st = p.Simulate(prompt, response, 12, &trace);
  // Steps: pos 1 (H = 11 tokens, s = 10): key [14 10] -> 4 tokens 11 12 13 14, all accepted;
  // pos 6: n_remaining = 6, cut 5: 4 drafted, accepted; pos 11: remaining 1 -> cut 0: none.
  ASSERT_EQ(trace.size(), 3u);
  EXPECT_EQ(trace[0], (SimStep{{11, 12, 13, 14}, 4}));
  EXPECT_EQ(trace[1], (SimStep{{11, 12, 13, 14}, 4}));
  EXPECT_EQ(trace[2], (SimStep{{}, 0}));
  EXPECT_EQ(st.draft_tokens, 8u);
  EXPECT_EQ(st.accepted_tokens, 8u);
  EXPECT_EQ(st.drafts, 2u);
  EXPECT_EQ(st.steps, 3u);
  EXPECT_EQ(st.steps_without_draft, 1u);
  // Without n_predict the last step drafts too: its first token is the response's last one
  // (accepted), the rest lie past the response's end (not accepted).
  const SpecStats open = p.Simulate(prompt, response, std::nullopt, &trace);
  ASSERT_EQ(trace.size(), 3u);
  EXPECT_EQ(trace[2], (SimStep{{11, 12, 13, 14}, 1}));
  EXPECT_EQ(open.draft_tokens, 12u);
  EXPECT_EQ(open.accepted_tokens, 9u);
  // The slot's context: n_ctx - |H| - 2 = 16 - 11 - 2 = 3 at the first step.
  LlamacppOptions small = LOpts(LlamacppMode::kNgramSimple, 2, 4);
  small.n_ctx = 16;
  LlamacppProposer q(small);
  q.Simulate(prompt, response, 12, &trace);
  ASSERT_FALSE(trace.empty());
  EXPECT_EQ(trace[0], (SimStep{{11, 12, 13}, 3}));
}

// map-k: the cap of a key at its last accepted count, across requests; a rejected key is mute.
TEST(LlamacppMapK, AcceptedCountCapsTheKeyAcrossRequests) {
  // n = 1, m = 2: drafts need L >= 2n + m = 4.
  LlamacppProposer p(LOpts(LlamacppMode::kNgramMapK, 1, 2));
  const LTokens prompt = {1, 5, 6, 7, 9, 9, 9};
  LTokens d;
  p.Begin(prompt);
  // s = 5: found by the prompt search (j from 7 - 1 - 2 - 1 = 3 down): at 1, draft 6 7.
  p.Draft(prompt, 5, &d);
  EXPECT_EQ(d, (LTokens{6, 7}));
  p.Accept(0);  // wholly rejected
  LTokens h = prompt;
  h.push_back(5);
  h.push_back(8);
  p.Draft(h, 5, &d);  // the key [5] again: capped at 0 tokens
  EXPECT_TRUE(d.empty());
  // A later request on the same slot: still mute.
  p.Begin(prompt);
  p.Draft(prompt, 5, &d);
  EXPECT_TRUE(d.empty());
  p.Reset();
  p.Begin(prompt);
  p.Draft(prompt, 5, &d);
  EXPECT_EQ(d, (LTokens{6, 7}));
}

// k4v: the majority rule over the continuations of a key.
TEST(LlamacppMapK4v, MajorityRule) {
  // n = 1, m = 1, s = 5. H = 0 5 6 5 7 3 3: the prompt search from 7 - 1 - 1 - 1 = 4 down finds
  // 5 at 3. Over [0, 3] the key is followed by 6 once and 7 once: 1 < 2 * 1, no draft.
  LlamacppProposer p(LOpts(LlamacppMode::kNgramMapK4v, 1, 1));
  const LTokens h = {0, 5, 6, 5, 7, 3, 3};
  LTokens d;
  p.Begin(h);
  p.Draft(h, 5, &d);
  EXPECT_TRUE(d.empty());
  // H = 0 5 6 5 6 5 7 3 3: match at 5; 6 twice, 7 once: 2 >= 2 * 1, so it drafts, and the
  // draft is the token after the MATCH (7), not the majority's (6).
  LlamacppProposer q(LOpts(LlamacppMode::kNgramMapK4v, 1, 1));
  const LTokens h2 = {0, 5, 6, 5, 6, 5, 7, 3, 3};
  q.Begin(h2);
  q.Draft(h2, 5, &d);
  EXPECT_EQ(d, (LTokens{7}));
  // min_hits 2: the first hit of a key does not draft; the second does.
  LlamacppProposer r(LOpts(LlamacppMode::kNgramMapK4v, 1, 1, 2));
  r.Begin(h2);
  r.Draft(h2, 5, &d);
  EXPECT_TRUE(d.empty());
  r.Draft(h2, 5, &d);
  EXPECT_EQ(d, (LTokens{7}));
}

}  // namespace
}  // namespace llmtap::specdec
