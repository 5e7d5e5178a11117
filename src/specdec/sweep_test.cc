// ReplayGreedySweep (greedy.h) through both proposers: one state for every k gives, request by
// request, exactly what one proposer per k gives (for suffix decoding, over a stream of
// requests sharing the global tree).
#include <gtest/gtest.h>

#include <memory>
#include <random>
#include <utility>
#include <vector>

#include "specdec/ngram.h"
#include "specdec/suffix.h"

namespace llmtap::specdec {
namespace {

// Tokens from a small alphabet with copied spans, so that drafts are frequent and often right.
std::vector<uint32_t> Stream(std::mt19937_64& rng, size_t n, uint32_t alphabet,
                             const std::vector<uint32_t>& copy_from) {
  std::vector<uint32_t> out;
  while (out.size() < n) {
    if (!copy_from.empty() && rng() % 3 == 0) {
      const size_t at = rng() % copy_from.size();
      for (size_t i = at; i < copy_from.size() && i < at + 4 + rng() % 12 && out.size() < n; ++i) {
        out.push_back(copy_from[i]);
      }
    } else {
      out.push_back(static_cast<uint32_t>(rng() % alphabet));
    }
  }
  return out;
}

void ExpectEqual(const SpecStats& a, const SpecStats& b, const std::string& what) {
  EXPECT_EQ(a.tokens, b.tokens) << what;
  EXPECT_EQ(a.steps, b.steps) << what;
  EXPECT_EQ(a.steps_without_draft, b.steps_without_draft) << what;
  EXPECT_EQ(a.drafts, b.drafts) << what;
  EXPECT_EQ(a.draft_tokens, b.draft_tokens) << what;
  EXPECT_EQ(a.accepted_tokens, b.accepted_tokens) << what;
  EXPECT_EQ(a.accepted_per_pos, b.accepted_per_pos) << what;
}

const std::vector<uint32_t> kKs = {1, 2, 3, 5, 8, 16};

TEST(SimulateSweep, NgramEqualsOneProposerPerK) {
  std::mt19937_64 rng(11);
  for (uint32_t min_n : {1u, 2u, 3u}) {
    NgramOptions o;
    o.min_n = min_n;
    o.max_n = min_n + 2;
    NgramProposer sweep(o);
    std::vector<std::unique_ptr<NgramProposer>> single;
    for (uint32_t k : kKs) {
      o.k = k;
      single.push_back(std::make_unique<NgramProposer>(o));
    }
    uint64_t accepted = 0;
    for (int r = 0; r < 30; ++r) {
      const std::vector<uint32_t> prompt = Stream(rng, 20 + rng() % 300, 6 + r % 20, {});
      const std::vector<uint32_t> response = Stream(rng, rng() % 200, 6 + r % 20, prompt);
      std::vector<SpecStats> got;
      sweep.SimulateSweep(prompt, response, kKs, &got);
      ASSERT_EQ(got.size(), kKs.size());
      for (size_t i = 0; i < kKs.size(); ++i) {
        ExpectEqual(got[i], single[i]->Simulate(prompt, response),
                    "ngram min " + std::to_string(min_n) + ", request " + std::to_string(r) +
                        ", k " + std::to_string(kKs[i]));
        accepted += got[i].accepted_tokens;
      }
    }
    EXPECT_GT(accepted, 1000u);
  }
}

// Points of several n-gram ranges and k over one index (its range their union): each equals a
// proposer with that range and k.
TEST(SimulateSweep, NgramRangesShareOneIndex) {
  std::mt19937_64 rng(12);
  const std::vector<std::pair<uint32_t, uint32_t>> ranges = {
      {1, 1}, {1, 3}, {2, 5}, {3, 5}, {5, 5}};
  std::vector<uint32_t> ks;
  std::vector<std::pair<uint32_t, uint32_t>> point_ranges;
  std::vector<std::unique_ptr<NgramProposer>> single;
  for (const auto& [lo, hi] : ranges) {
    for (uint32_t k : {1u, 4u, 8u}) {
      NgramOptions o;
      o.min_n = lo;
      o.max_n = hi;
      o.k = k;
      single.push_back(std::make_unique<NgramProposer>(o));
      ks.push_back(k);
      point_ranges.emplace_back(lo, hi);
    }
  }
  NgramOptions all;
  all.min_n = 1;
  all.max_n = 5;
  NgramProposer sweep(all);
  uint64_t accepted = 0;
  for (int r = 0; r < 40; ++r) {
    const std::vector<uint32_t> prompt = Stream(rng, 20 + rng() % 300, 6 + r % 20, {});
    const std::vector<uint32_t> response = Stream(rng, rng() % 200, 6 + r % 20, prompt);
    std::vector<SpecStats> got;
    sweep.SimulateSweep(prompt, response, ks, point_ranges, &got);
    ASSERT_EQ(got.size(), ks.size());
    for (size_t i = 0; i < ks.size(); ++i) {
      ExpectEqual(got[i], single[i]->Simulate(prompt, response),
                  "request " + std::to_string(r) + ", point " + std::to_string(i));
      accepted += got[i].accepted_tokens;
    }
  }
  EXPECT_GT(accepted, 1000u);
}

TEST(SimulateSweep, SuffixEqualsOneProposerPerKOverAStreamOfRequests) {
  std::mt19937_64 rng(12);
  for (uint64_t cached : {uint64_t{0}, uint64_t{4}, uint64_t{10000}}) {
    SuffixOptions o;
    o.max_cached_requests = cached;
    o.max_tree_depth = 12;
    SuffixProposer sweep(o);
    std::vector<std::unique_ptr<SuffixProposer>> single;
    for (uint32_t k : kKs) {
      o.k = k;
      single.push_back(std::make_unique<SuffixProposer>(o));
    }
    std::vector<uint32_t> earlier;  // responses repeat across requests
    uint64_t accepted = 0;
    for (int r = 0; r < 40; ++r) {
      const std::vector<uint32_t> prompt = Stream(rng, 10 + rng() % 200, 8 + r % 10, earlier);
      const std::vector<uint32_t> response = Stream(rng, rng() % 150, 8 + r % 10, earlier);
      earlier = response;
      std::vector<SpecStats> got;
      sweep.SimulateSweep(prompt, response, kKs, &got);
      ASSERT_EQ(got.size(), kKs.size());
      for (size_t i = 0; i < kKs.size(); ++i) {
        ExpectEqual(got[i], single[i]->Simulate(prompt, response),
                    "cached " + std::to_string(cached) + ", request " + std::to_string(r) + ", k " +
                        std::to_string(kKs[i]));
        accepted += got[i].accepted_tokens;
      }
      ASSERT_EQ(sweep.cached_requests(), single[0]->cached_requests());
    }
    EXPECT_GT(accepted, 500u);
  }
}

}  // namespace
}  // namespace llmtap::specdec
