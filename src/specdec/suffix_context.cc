#include "specdec/suffix_context.h"

#include <algorithm>
#include <cassert>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "common/mix64.h"

namespace llmtap::specdec::suffix_internal {

bool Context::FirstChild(std::span<const uint32_t> ends, uint32_t* token, uint32_t* count) {
  size_t n = ends.size();
  if (n > 0 && ends[n - 1] == seq_.size()) --n;  // the occurrence at the end: no next token
  if (n == 0) return false;
  // One child (all the next tokens the same: the inside of the tree's compressed node), or two
  // different ones with a count of 1 each (the earlier one first).
  const uint32_t first = seq_[ends[0]];
  size_t same = 1;
  while (same < n && seq_[ends[same]] == first) ++same;
  if (same == n || n == 2) {
    *token = first;
    *count = static_cast<uint32_t>(same);
    return true;
  }
  // Few children are looked up by a scan, more in a table stamped with the call.
  const bool small = n <= 16;
  size_t mask = 0;
  if (!small) {
    const size_t slots = std::bit_ceil(2 * n);
    if (kid_slots_.size() < slots) {
      kid_slots_.assign(slots, KidSlot{});
      stamp_ = 0;
    }
    if (++stamp_ == 0) {
      std::fill(kid_slots_.begin(), kid_slots_.end(), KidSlot{});
      stamp_ = 1;
    }
    mask = kid_slots_.size() - 1;
  }
  if (run_head_.size() < n + 2) {
    run_head_.resize(n + 2, kNone);
    run_tail_.resize(n + 2, kNone);
  }
  kids_.clear();
  uint32_t head = kNone, tail = kNone;  // the list
  auto unlink = [&](uint32_t x) {
    Kid& X = kids_[x];
    (X.prev != kNone ? kids_[X.prev].next : head) = X.next;
    (X.next != kNone ? kids_[X.next].prev : tail) = X.prev;
  };
  auto link_before = [&](uint32_t x, uint32_t y) {
    Kid& X = kids_[x];
    X.prev = kids_[y].prev;
    X.next = y;
    (X.prev != kNone ? kids_[X.prev].next : head) = x;
    kids_[y].prev = x;
  };
  for (size_t i = 0; i < n; ++i) {
    const uint32_t t = seq_[ends[i]];
    uint32_t x = kNone;
    KidSlot* slot = nullptr;
    if (small) {
      for (uint32_t j = 0; j < kids_.size(); ++j) {
        if (kids_[j].token == t) {
          x = j;
          break;
        }
      }
    } else {
      size_t s = static_cast<size_t>(Mix64(t)) & mask;
      while (kid_slots_[s].stamp == stamp_ && kids_[kid_slots_[s].kid].token != t) {
        s = (s + 1) & mask;
      }
      slot = &kid_slots_[s];
      if (slot->stamp == stamp_) x = slot->kid;
    }
    if (x == kNone) {
      // A new child: count 1, at the end of the list (the end of the run of 1).
      x = static_cast<uint32_t>(kids_.size());
      if (slot != nullptr) *slot = KidSlot{stamp_, x};
      kids_.push_back(Kid{t, 1, tail, kNone});
      (tail != kNone ? kids_[tail].next : head) = x;
      tail = x;
      if (run_head_[1] == kNone) run_head_[1] = x;
      run_tail_[1] = x;
      continue;
    }
    // count c -> c + 1 (Tree::Increment): to the front of the run of c + 1 if x led the run of
    // c (where it already is when there is no such run), else to the run of c + 1's end.
    const uint32_t c = kids_[x].count;
    if (run_head_[c] == x) {
      if (run_tail_[c] == x) {
        run_head_[c] = run_tail_[c] = kNone;
      } else {
        run_head_[c] = kids_[x].next;
      }
      if (run_head_[c + 1] != kNone) {
        unlink(x);
        link_before(x, run_head_[c + 1]);
      } else {
        run_tail_[c + 1] = x;
      }
      run_head_[c + 1] = x;
    } else {
      const uint32_t h = run_head_[c];
      if (run_tail_[c] == x) run_tail_[c] = kids_[x].prev;
      unlink(x);
      link_before(x, h);
      if (run_head_[c + 1] == kNone) run_head_[c + 1] = x;
      run_tail_[c + 1] = x;
    }
    kids_[x].count = c + 1;
  }
  *token = kids_[head].token;
  *count = kids_[head].count;
  for (const Kid& k : kids_) run_head_[k.count] = run_tail_[k.count] = kNone;  // for the next call
  return true;
}

uint64_t Context::Walks(uint32_t depth, int kmax, const SuffixOptions& o,
                        SuffixProposer::Walks* out) {
  out->Clear();
  out->eager = true;
  const auto size = static_cast<uint32_t>(seq_.size());
  const uint32_t pattern = std::min(size, depth);
  if (pattern < 2) return 0;
  uint64_t work = 1;
  for (uint32_t m = 1; m < pattern; ++m) {
    // The occurrences of the last m tokens (for m = 1 only counted, unless walked).
    uint32_t count;
    if (m == 1) {
      count = tokens_.at(last_).count;
    } else if (m == 2) {
      Occurrences(prev2_, &ends_);
      count = static_cast<uint32_t>(ends_.size());
      work += count;
    } else {  // those of the last m - 1 preceded by the m-th token from the end
      const uint32_t before = seq_[size - m];
      size_t kept = 0;
      for (uint32_t e : ends_) {
        if (e >= m && seq_[e - m] == before) ends_[kept++] = e;
      }
      work += ends_.size();
      ends_.resize(kept);
      count = static_cast<uint32_t>(kept);
    }
    if (count == 1) {
      // Only at the end (see Tree::Walks): empty drafts from here on.
      out->walks.emplace_back(pattern - 1, kRoot, 0, INT32_MIN, 0,
                              static_cast<uint32_t>(out->scores.size()),
                              static_cast<uint32_t>(out->tokens.size()));
      out->scores.push_back(0.0f);
      break;
    }
    const int cap = ReferenceCap(m, o);
    const int walk_cap = std::max(std::min(kmax, cap), 0);
    const auto off = static_cast<uint32_t>(out->scores.size());
    auto tok = static_cast<uint32_t>(out->tokens.size());
    out->scores.push_back(0.0f);
    uint32_t len = 0;
    if (m == 1 && walk_cap == 1) {
      // The first child has the most occurrences (the list is by decreasing count).
      const TokenChain& c = tokens_.at(last_);
      const float prob = 1.0f * (static_cast<float>(c.top) / static_cast<float>(c.count));
      if (prob >= o.min_token_prob) {
        out->scores.push_back(0.0f + prob);
        len = 1;
        tok = UINT32_MAX;  // Token() finds it
      }
    } else if (walk_cap > 0) {
      if (m == 1) {
        Occurrences(prev_, &ones_);
        work += ones_.size();
      }
      std::span<const uint32_t> at = m == 1 ? ones_ : ends_;  // the walk's position's occurrences
      float prob = 1.0f, score = 0.0f;
      uint32_t child, child_count;
      while (static_cast<int>(len) < walk_cap && prob >= o.min_token_prob && m + len < depth &&
             FirstChild(at, &child, &child_count)) {
        work += at.size();
        prob *= static_cast<float>(child_count) / static_cast<float>(at.size());
        if (!(prob >= o.min_token_prob)) break;
        score += prob;  // one addition per token, as the reference
        out->scores.push_back(score);
        out->tokens.push_back(child);
        out->probs.push_back(prob);
        ++len;
        if (static_cast<int>(len) == walk_cap) break;
        // The next position's occurrences (in place once `at` is walk_ itself).
        if (at.data() != walk_.data()) walk_.resize(child_count);
        uint32_t* next = walk_.data();
        size_t kept = 0;
        for (uint32_t e : at) {
          if (e < size && seq_[e] == child) next[kept++] = e + 1;
        }
        walk_.resize(kept);
        at = walk_;
      }
    }
    if (len > 0) out->drafting.push_back(static_cast<uint32_t>(out->walks.size()));
    out->walks.emplace_back(m, kRoot, 0, cap, len, off, tok);
  }
  return work;
}

void Context::Token(SuffixProposer::Walks* out, SuffixProposer::Walks::Entry* e) {
  assert(e->m == 1 && e->len == 1 && e->tok == UINT32_MAX);
  Occurrences(prev_, &ones_);
  uint32_t child = 0, child_count = 0;
  FirstChild(ones_, &child, &child_count);
  e->tok = static_cast<uint32_t>(out->tokens.size());
  out->tokens.push_back(child);
  out->probs.push_back(out->scores[e->off + 1]);  // one token: its score is its probability
}

}  // namespace llmtap::specdec::suffix_internal
