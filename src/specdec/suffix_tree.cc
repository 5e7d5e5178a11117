#include "specdec/suffix_tree.h"

#include <algorithm>
#include <cassert>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace llmtap::specdec::suffix_internal {

void Tree::DeleteSubtree(uint32_t x) {
  RemoveChild(x);
  stack_.clear();
  stack_.push_back(x);
  while (!stack_.empty()) {
    const uint32_t y = stack_.back();
    stack_.pop_back();
    const bool in_table = nodes_[y].nchild >= 2;
    for (uint32_t ch = nodes_[y].head; ch != kNone; ch = nodes_[ch].next) {
      if (in_table) Erase(y, nodes_[ch].first);
      const uint32_t g = nodes_[ch].group;
      if (groups_[g].head == ch) FreeGroup(g);
      stack_.push_back(ch);
    }
    FreeNode(y);
  }
}

// p's only child has p's count: the child takes p's place with p's tokens and its own.
void Tree::MergeIntoChild(uint32_t p) {
  const uint32_t ch = nodes_[p].head;
  Node& P = nodes_[p];
  Node& C = nodes_[ch];
  RemoveChild(ch);
  C.first = P.first;
  if (C.length != kOpen) C.length += P.length;
  C.ref -= P.length;
  C.parent = P.parent;
  ReplaceChild(p, ch);
  Rekey(ch, C.first);
  FreeNode(p);
}

void Tree::RemoveOldest() {
  assert(!seqs_.empty());
  assert(removable_ && seqs_.size() > 1);  // the newest one is still growing
  const Seq s = seqs_.front();
  for (uint32_t start = 0; start < s.length; ++start) {
    // The suffix's path, from where it ends up: the nodes only it reaches (count 1) are the
    // lowest ones and go with their subtree; the others lose one.
    uint32_t node = ends_[s.start + start - base_];
    uint32_t only = kNone;
    while (node != kRoot && nodes_[node].count == 1) {
      only = node;
      node = nodes_[node].parent;
    }
    if (only != kNone) DeleteSubtree(only);
    for (uint32_t x = node; x != kRoot; x = nodes_[x].parent) Decrement(x);
    if (node != kRoot && nodes_[node].nchild == 1 &&
        nodes_[nodes_[node].head].count == nodes_[node].count) {
      MergeIntoChild(node);
    }
  }
  seqs_.pop_front();
  // The store is a FIFO too: drop the dead front once it outweighs the live tokens.
  const uint64_t live_start = seqs_.empty() ? base_ + tokens_.size() : seqs_.front().start;
  const size_t dead = static_cast<size_t>(live_start - base_);
  if (dead > 0 && dead >= tokens_.size() - dead) {
    tokens_.erase(tokens_.begin(), tokens_.begin() + static_cast<ptrdiff_t>(dead));
    ends_.erase(ends_.begin(), ends_.begin() + static_cast<ptrdiff_t>(dead));
    base_ = live_start;
  }
}

bool Tree::Match(std::span<const uint32_t> pattern, uint32_t* node, uint32_t* idx) const {
  uint32_t n = kRoot, i = 0;
  for (uint32_t t : pattern) {
    if (i >= Len(nodes_[n])) {
      n = Find(n, t);
      if (n == kNone) return false;
      i = 0;
    }
    if (Tok(nodes_[n].ref + i) != t) return false;
    ++i;
  }
  *node = n;
  *idx = i;
  return true;
}

// The scores of the walk below, without its tokens: the same loop, a node's tokens at once.
uint32_t Tree::Scores(uint32_t node, uint32_t idx, int cap, float min_prob, float* out) const {
  float score = 0;
  float prob = 1.0f;
  int size = 0;
  out[0] = 0;
  const Node* n = &nodes_[node];
  uint32_t len = Len(*n);
  while (size < cap && prob >= min_prob) {
    if (idx < len) {
      const int k =
          static_cast<int>(std::min<uint32_t>(static_cast<uint32_t>(cap - size), len - idx));
      for (int i = 0; i < k; ++i) {
        score += prob;  // one addition per token, as the reference
        out[++size] = score;
      }
      idx += static_cast<uint32_t>(k);
    } else if (!ToFirstChild(&n, &len, &idx, &prob)) {
      break;
    }
  }
  return static_cast<uint32_t>(size);
}

void Tree::Walk(uint32_t node, uint32_t idx, int cap, float min_prob, SuffixDraft* d) const {
  d->tokens.clear();
  d->probs.clear();
  d->score = 0;
  float prob = 1.0f;
  const Node* n = &nodes_[node];
  uint32_t len = Len(*n);
  while (static_cast<int>(d->tokens.size()) < cap && prob >= min_prob) {
    if (idx < len) {
      d->tokens.push_back(Tok(n->ref + idx));
      d->probs.push_back(prob);
      d->score += prob;
      ++idx;
    } else if (!ToFirstChild(&n, &len, &idx, &prob)) {
      break;
    }
  }
}

void Tree::Walks(std::span<const uint32_t> pattern, bool own_suffixes, int kmax,
                 const SuffixOptions& o, SuffixProposer::Walks* out) const {
  out->Clear();
  for (size_t m = 1; m < pattern.size(); ++m) {
    uint32_t node, idx;
    if (own_suffixes && m <= act_size_) {
      const uint32_t i = static_cast<uint32_t>(act_size_ - m);
      if (i < leaves_) {
        // This suffix and the longer ones occur once, here, at the end: nothing follows them
        // (empty drafts, which win only over empty ones, the last match length then), and a
        // longer pattern spanning into the prompt is not in this tree at all.
        out->walks.emplace_back(
            static_cast<uint32_t>(std::min<size_t>(pattern.size() - 1, act_size_)), kRoot, 0,
            INT32_MIN, 0, static_cast<uint32_t>(out->scores.size()), UINT32_MAX);
        out->scores.push_back(0.0f);
        break;
      }
      node = ActAt(i);
      idx = Len(nodes_[node]);
    } else if (!Match(pattern.last(m), &node, &idx)) {
      break;
    }
    const int cap = ReferenceCap(m, o);
    const int walk_cap = std::max(std::min(kmax, cap), 0);
    const size_t off = out->scores.size();
    out->scores.resize(off + static_cast<size_t>(walk_cap) + 1);
    const uint32_t len =
        walk_cap > 0 ? Scores(node, idx, walk_cap, o.min_token_prob, &out->scores[off]) : 0;
    if (walk_cap == 0) out->scores[off] = 0;
    out->scores.resize(off + len + 1);
    if (walk_cap > 0 && len > 0) out->drafting.push_back(static_cast<uint32_t>(out->walks.size()));
    out->walks.emplace_back(static_cast<uint32_t>(m), node, idx, cap, len,
                            static_cast<uint32_t>(off), UINT32_MAX);
  }
}

std::string Tree::Check() const {
  // Every live node: in its parent's table slot and list; counts ordered with runs matching the
  // groups; a child's count below its node's; tokens readable.
  std::vector<char> dead(nodes_.size(), 0);
  for (uint32_t x : free_nodes_) dead[x] = 1;
  size_t in_table = 0;
  for (uint32_t x = 0; x < nodes_.size(); ++x) {
    if (!dead[x] && nodes_[x].nchild >= 2) in_table += nodes_[x].nchild;
  }
  if (in_table != used_) return "table entries " + std::to_string(used_);
  for (uint32_t i = 0; i < act_size_; ++i) {
    const Node& A = nodes_[ActAt(i)];
    if ((i < leaves_) != (A.length == kOpen) || (i < leaves_ && A.count != 1)) {
      return "open leaf of suffix " + std::to_string(i);
    }
  }
  for (uint32_t x = 0; x < nodes_.size(); ++x) {
    if (dead[x]) continue;
    const Node& X = nodes_[x];
    if (x != kRoot) {
      if (Len(X) == 0 || X.count == 0) return "empty node " + std::to_string(x);
      if (X.ref < base_ || X.ref + Len(X) > End()) {
        return "stale reference at node " + std::to_string(x);
      }
      if (Tok(X.ref) != X.first) return "first token of node " + std::to_string(x);
      if (Find(X.parent, X.first) != x) return "table misses node " + std::to_string(x);
    }
    uint32_t n = 0;
    uint64_t sum = 0;
    uint32_t prev = kNone;
    for (uint32_t ch = X.head; ch != kNone; prev = ch, ch = nodes_[ch].next) {
      const Node& C = nodes_[ch];
      ++n;
      sum += C.count;
      if (C.parent != x || C.prev != prev) return "links at node " + std::to_string(ch);
      if (x != kRoot && C.count >= X.count) {
        return "child count at node " + std::to_string(ch);
      }
      const bool starts = prev == kNone || nodes_[prev].count != C.count;
      if (prev != kNone && nodes_[prev].count < C.count) return "order at " + std::to_string(ch);
      if (starts != (groups_[C.group].head == ch)) return "group head at " + std::to_string(ch);
      if (!starts && C.group != nodes_[prev].group) return "group at " + std::to_string(ch);
      const bool ends = C.next == kNone || nodes_[C.next].count != C.count;
      if (ends != (groups_[C.group].tail == ch)) return "group tail at " + std::to_string(ch);
    }
    if (n != X.nchild || (n ? X.tail != prev : X.tail != kNone)) {
      return "children of node " + std::to_string(x);
    }
    if (x != kRoot && sum > X.count) return "counts under node " + std::to_string(x);
  }
  return "";
}

}  // namespace llmtap::specdec::suffix_internal
