// The suffix proposer's prompt-tree walks read off the request's context, without a tree
// (suffix.h, "Data structures and speed"; SuffixOptions::prompt_scan_work): the context's append
// (defined here, per token) and its walks (suffix_context.cc, per proposal). Internal: see
// suffix_internal.h.
#pragma once

#include <algorithm>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "specdec/suffix.h"
#include "specdec/suffix_internal.h"

namespace llmtap::specdec::suffix_internal {

// A prompt tree holds one sequence, the context: its positions are the context's strings of at
// most depth tokens, a position's count is the string's number of occurrences, and the children
// of a position are incremented in the order of the occurrences' positions. So the walks of a
// proposal follow from the occurrences of the pattern's suffixes, without the tree: those of the
// last two tokens (a chain through the earlier positions of each pair of tokens), narrowed one
// token to the left per longer match; a walk's first child is the one the reference's sibling
// order puts first after replaying the increments of the position's children in order (the
// same moves as Tree::Increment, on a scratch list). The one-token match needs no occurrences
// when its walk is one token long (the cap of vLLM's defaults): its probability is the most
// frequent successor's count over the token's count, both kept per token, and its token is
// looked for only when that draft is chosen. The work is the occurrences looked at: about 10
// per proposal on trace_gen's mixed capture, where building the tree visits about 2.5 nodes per
// context token.
class Context {
 public:
  // The context becomes `prompt`.
  void Start(std::span<const uint32_t> prompt) {
    seq_.clear();
    prev_.clear();
    prev2_.clear();
    // Sized for the prompt's tokens as new keys (what Append reserves), so that no table grows
    // right away.
    tokens_.Clear(prompt.size());
    pairs_.Clear(prompt.size());
    Append(prompt);
  }
  void Append(std::span<const uint32_t> tokens) {
    auto i = static_cast<uint32_t>(seq_.size());
    seq_.resize(i + tokens.size());
    prev_.resize(i + tokens.size());
    prev2_.resize(i + tokens.size());
    Chains<TokenChain>::View tv;
    Chains<PairChain>::View pv;
    if (tokens_.Reserve(tokens.size(), &tv) && i > 0) last_ = tokens_.IndexOf(seq_[i - 1]);
    pairs_.Reserve(tokens.size(), &pv);
    uint32_t* seq = seq_.data();
    uint32_t* prev = prev_.data();
    uint32_t* prev2 = prev2_.data();
    TokenChain* last = i > 0 ? &tv.slots[last_] : nullptr;
    for (uint32_t t : tokens) {
      TokenChain& c = tv.Find(t);
      prev[i] = c.pos;
      c.pos = i;
      ++c.count;
      if (last != nullptr) {
        PairChain& p = pv.Find((uint64_t{seq[i - 1]} << 32) | t);
        prev2[i] = p.pos;
        p.pos = i;
        ++p.count;
        last->top = std::max(last->top, p.count);
      } else {
        prev2[i] = kNone;
      }
      last = &c;
      seq[i++] = t;
    }
    tokens_.Done(tv);
    pairs_.Done(pv);
    if (last != nullptr) last_ = tokens_.IndexOf(*last);
  }
  std::span<const uint32_t> tokens() const { return seq_; }

  // What Tree::Walks(pattern, true, kmax, o, out) gives on the prompt tree of this context, the
  // pattern being its last min(size, depth) tokens, with every walk's tokens and probabilities
  // (Walks::eager) but those of one-token walks from one-token matches: their Entry::tok is
  // UINT32_MAX until Token fills it. Returns the work done: the occurrences looked at.
  uint64_t Walks(uint32_t depth, int kmax, const SuffixOptions& o, SuffixProposer::Walks* out);
  // The token (and probability) of such a walk, into out->tokens and out->probs (e->tok set).
  void Token(SuffixProposer::Walks* out, SuffixProposer::Walks::Entry* e);

 private:
  // Open-addressing tables (at most 3/4 full, Fibonacci hashing) from a token or a pair of
  // tokens to its last position, its count and (for a token) the most occurrences of a pair it
  // starts.
  struct TokenChain {
    uint32_t key = 0;
    uint32_t pos = kNone;  // kNone: an empty slot
    uint32_t count = 0, top = 0;
  };
  struct PairChain {
    uint64_t key = 0;  // the first token in the high half
    uint32_t pos = kNone;
    uint32_t count = 0;
  };
  template <class Chain>
  class Chains {
   public:
    using Key = decltype(Chain::key);
    // The entries, looked up and added through local copies (no reloads of the members).
    struct View {
      Chain* slots;
      size_t mask;
      size_t shift;
      size_t added = 0;
      // The key's entry; a new one (count 0, pos kNone: the caller sets pos) if absent.
      [[gnu::always_inline]] Chain& Find(Key key) {
        auto i = static_cast<size_t>((uint64_t{key} * 0x9E3779B97F4A7C15ull) >> shift);
        while (slots[i].pos != kNone && slots[i].key != key) i = (i + 1) & mask;
        if (slots[i].pos == kNone) {
          slots[i].key = key;
          ++added;
        }
        return slots[i];
      }
    };
    void Clear(size_t keys) {
      const size_t size = std::bit_ceil(keys + keys / 2 + 64);
      if (slots_.size() == size) {
        std::fill(slots_.begin(), slots_.end(), Chain{});
      } else {
        slots_.assign(size, Chain{});
      }
      used_ = 0;
    }
    // A view with room for n more keys (the table grows first if needed: earlier indices are
    // void then, and the return is true). Done(view) after the additions.
    bool Reserve(size_t n, View* view) {
      bool grew = false;
      while (4 * (used_ + n) > 3 * slots_.size()) {
        std::vector<Chain> old(slots_.size() * 2);
        old.swap(slots_);
        View v = MakeView();
        for (const Chain& c : old) {
          if (c.pos != kNone) v.Find(c.key) = c;
        }
        grew = true;
      }
      *view = MakeView();
      return grew;
    }
    void Done(const View& view) { used_ += view.added; }
    Chain& at(size_t i) { return slots_[i]; }
    const Chain& at(size_t i) const { return slots_[i]; }
    size_t IndexOf(const Chain& c) const { return static_cast<size_t>(&c - slots_.data()); }
    // An existing key's entry.
    size_t IndexOf(Key key) { return IndexOf(MakeView().Find(key)); }

   private:
    View MakeView() {
      return View{slots_.data(), slots_.size() - 1,
                  static_cast<size_t>(64 - std::countr_zero(slots_.size()))};
    }
    std::vector<Chain> slots_;
    size_t used_ = 0;
  };

  // The ends of the occurrences of the last one or two tokens (a chain), ascending, into `out`.
  void Occurrences(const std::vector<uint32_t>& chain, std::vector<uint32_t>* out) const {
    out->clear();
    for (uint32_t i = static_cast<uint32_t>(seq_.size()) - 1; i != kNone; i = chain[i]) {
      out->push_back(i + 1);
    }
    std::reverse(out->begin(), out->end());
  }
  // The first child of the position whose occurrences end at `ends` (ascending; the next token of
  // an occurrence is at its end): its token and count. False when none.
  bool FirstChild(std::span<const uint32_t> ends, uint32_t* token, uint32_t* count);

  std::vector<uint32_t> seq_;
  std::vector<uint32_t> prev_;   // prev_[i]: the last position before i holding seq_[i], or kNone
  std::vector<uint32_t> prev2_;  // the same for the pair seq_[i - 1], seq_[i]
  Chains<TokenChain> tokens_;
  Chains<PairChain> pairs_;
  size_t last_ = 0;                           // tokens_'s entry of the last token
  std::vector<uint32_t> ones_, ends_, walk_;  // scratch: occurrences' ends
  // FirstChild's scratch: the children (a list by the reference's order), a table from token to
  // child (slots stamped with the call), and the first and last child of each count's run.
  struct Kid {
    uint32_t token, count, prev, next;
  };
  std::vector<Kid> kids_;
  struct KidSlot {
    uint32_t stamp = 0, kid = 0;
  };
  std::vector<KidSlot> kid_slots_;
  uint32_t stamp_ = 0;
  std::vector<uint32_t> run_head_, run_tail_;
};

}  // namespace llmtap::specdec::suffix_internal
