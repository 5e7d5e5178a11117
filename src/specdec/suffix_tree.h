// The suffix tree of the suffix proposer (suffix.h, "The tree" and "Data structures and speed"):
// appends (defined here, the hot path), the oldest sequence's removal, walks (suffix_tree.cc).
// Internal: see suffix_internal.h.
#pragma once

#include <algorithm>
#include <bit>
#include <cassert>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <memory>
#include <new>
#include <span>
#include <string>
#include <vector>

#include "common/mix64.h"
#include "specdec/suffix.h"
#include "specdec/suffix_internal.h"

#ifdef __linux__
#include <sys/mman.h>
#endif

namespace llmtap::specdec::suffix_internal {

constexpr uint32_t kFree = kRoot;       // a child-table slot's child when the slot is empty
constexpr uint32_t kOpen = UINT32_MAX;  // Node::length of a leaf that grows with the sequence

// The allocator of a tree's arrays: those of 2 MB and more in transparent huge pages where the
// system has them on request (madvise): a global tree of 100+ MB is read at random, and with 4 KB
// pages nearly every node visited was a TLB miss too (an append to the global tree cost about
// 550 cycles per suffix visited).
template <class T>
struct TreeAlloc {
  using value_type = T;
  static constexpr size_t kHuge = size_t{2} << 20;
  TreeAlloc() = default;
  template <class U>
  TreeAlloc(const TreeAlloc<U>&) {}  // NOLINT(google-explicit-constructor)
  T* allocate(size_t n) {
    const size_t bytes = n * sizeof(T);
    if (bytes < kHuge) return std::allocator<T>().allocate(n);
    const size_t rounded = (bytes + kHuge - 1) & ~(kHuge - 1);
    void* p = std::aligned_alloc(kHuge, rounded);
    if (p == nullptr) throw std::bad_alloc();
#ifdef MADV_HUGEPAGE
    madvise(p, rounded, MADV_HUGEPAGE);
#endif
    return static_cast<T*>(p);
  }
  void deallocate(T* p, size_t n) {
    if (n * sizeof(T) < kHuge) {
      std::allocator<T>().deallocate(p, n);
    } else {
      std::free(p);
    }
  }
  template <class U>
  bool operator==(const TreeAlloc<U>&) const {
    return true;
  }
};
template <class T>
using TreeVector = std::vector<T, TreeAlloc<T>>;

// A compressed suffix tree of its sequences' suffixes cut at `depth` tokens (see suffix.h, "The
// tree" and "Data structures and speed"). Sequences form a FIFO: tokens are appended to the
// newest one only, and only the oldest one is removed.
class Tree {
 public:
  // With `removable`, sequences can be removed (RemoveOldest): the tree then records where each
  // suffix's path ends.
  explicit Tree(uint32_t depth, bool removable = false)
      : depth_(depth),
        removable_(removable),
        act_(std::bit_ceil(depth), kRoot),
        act_mask_(std::bit_ceil(depth) - 1) {
    Clear();
  }

  // Empty, with room for about `tokens` tokens in the child table (its array is reused, not
  // given back: a prompt tree is cleared for every request).
  void Clear(size_t tokens = 0) {
    nodes_.clear();
    nodes_.push_back(Node{});  // the root
    free_nodes_.clear();
    groups_.clear();
    free_groups_.clear();
    tokens_.clear();
    ends_.clear();
    base_ = 0;
    seqs_.clear();
    act_begin_ = act_size_ = leaves_ = 0;
    EmptySlots(SlotsFor(tokens));
    used_ = 0;
  }
  // n empty slots (an empty slot is all zero bytes: cleared with memset when the size stays).
  void EmptySlots(size_t n) {
    if (slots_.size() == n) {
      std::memset(static_cast<void*>(slots_.data()), 0, n * sizeof(Slot));
    } else {
      slots_.assign(n, Slot{});
    }
  }

  // Becomes a copy of `o` (the same nodes, numbers included), with a child table sized for
  // about `tokens` tokens in all (the entries of o's, placed anew).
  void CopyFrom(const Tree& o, size_t tokens) {
    depth_ = o.depth_;
    removable_ = o.removable_;
    nodes_ = o.nodes_;
    free_nodes_ = o.free_nodes_;
    groups_ = o.groups_;
    free_groups_ = o.free_groups_;
    tokens_ = o.tokens_;
    ends_ = o.ends_;
    base_ = o.base_;
    seqs_ = o.seqs_;
    act_ = o.act_;
    act_mask_ = o.act_mask_;
    act_begin_ = o.act_begin_;
    act_size_ = o.act_size_;
    leaves_ = o.leaves_;
    EmptySlots(std::max(SlotsFor(tokens), std::bit_ceil(2 * o.used_ + 2)));
    used_ = o.used_;
    const size_t mask = slots_.size() - 1;
    for (const Slot& e : o.slots_) {
      if (e.child == kFree) continue;
      size_t i = Home(nodes_[e.child].parent, e.token);
      while (slots_[i].child != kFree) i = (i + 1) & mask;
      slots_[i] = e;
    }
  }

  // Room for about this many more tokens without regrowth.
  void Reserve(size_t tokens) {
    const size_t nodes = nodes_.size() + 2 * tokens;
    nodes_.reserve(nodes);
    tokens_.reserve(tokens_.size() + tokens);
    const size_t want = SlotsFor(used_ / 2 + tokens);
    if (want > slots_.size()) Rehash(want);
  }
  // The table's size for about this many tokens (about 1.5 entries per token: half full).
  static size_t SlotsFor(size_t tokens) {
    return std::bit_ceil(std::max<size_t>(1024, tokens * 3));
  }

  uint32_t depth() const { return depth_; }
  size_t sequences() const { return seqs_.size(); }
  // The newest sequence's tokens (valid until the next append or removal).
  std::span<const uint32_t> Newest() const {
    if (seqs_.empty()) return {};
    const Seq& s = seqs_.back();
    return {tokens_.data() + (s.start - base_), s.length};
  }
  uint32_t NewestLength() const { return seqs_.empty() ? 0 : seqs_.back().length; }

  // A new (newest) sequence; the previous newest stops growing.
  void BeginSequence() {
    for (uint32_t i = 0; i < leaves_; ++i) Close(Act(i));
    if (removable_) {
      // The previous sequence's last suffixes end where they are.
      for (uint32_t i = 0; i < act_size_; ++i) ends_[End() - (act_size_ - i) - base_] = Act(i);
    }
    seqs_.push_back(Seq{base_ + tokens_.size(), 0});
    act_begin_ = act_size_ = leaves_ = 0;
  }

  void Append(uint32_t t) {
    if (removable_) {
      AppendTo<true>(t);
    } else {
      AppendTo<false>(t);
    }
  }
  void RemoveOldest();

  // The walks of the reference's speculate() on this tree for `pattern`, one per match length,
  // scored for every cap up to `kmax` (num_speculative_tokens). With `own_suffixes`, the newest
  // sequence is the pattern's tail (its suffix positions are used instead of matching).
  void Walks(std::span<const uint32_t> pattern, bool own_suffixes, int kmax, const SuffixOptions& o,
             SuffixProposer::Walks* out) const;
  // The draft tokens of a walk (see Walks::Pick).
  void Walk(uint32_t node, uint32_t idx, int cap, float min_prob, SuffixDraft* d) const;
  // The first n tokens of that walk (n <= its length), appended to `out`.
  void WalkTokens(uint32_t node, uint32_t idx, uint32_t n, std::vector<uint32_t>* out) const {
    const Node* x = &nodes_[node];
    uint32_t len = Len(*x);
    while (n > 0) {
      if (idx < len) {
        out->push_back(Tok(x->ref + idx));
        ++idx;
        --n;
      } else {
        x = &nodes_[x->head];
        len = Len(*x);
        idx = 0;
      }
    }
  }

  std::string Check() const;
  // The nodes from the root in child-list order: "(tokens:count children)".
  std::string Dump() const {
    std::string out;
    auto node = [&](auto&& self, uint32_t x) -> void {
      const Node& X = nodes_[x];
      out += '(';
      if (x != kRoot) {
        for (uint32_t i = 0; i < Len(X); ++i) out += std::to_string(Tok(X.ref + i)) + ' ';
        out += ':' + std::to_string(X.count);
      }
      for (uint32_t ch = X.head; ch != kNone; ch = nodes_[ch].next) self(self, ch);
      out += ')';
    };
    node(node, kRoot);
    return out;
  }

  // Bytes held by the live nodes, the table, the groups and the tokens (capacity not counted).
  size_t MemoryBytes() const {
    return (nodes_.size() - free_nodes_.size()) * sizeof(Node) + slots_.size() * sizeof(Slot) +
           (groups_.size() - free_groups_.size()) * sizeof(Group) +
           (tokens_.size() + ends_.size()) * sizeof(uint32_t);
  }
  size_t nodes() const { return nodes_.size() - free_nodes_.size(); }
  // Bytes allocated (capacities).
  size_t CapacityBytes() const {
    return nodes_.capacity() * sizeof(Node) + slots_.capacity() * sizeof(Slot) +
           groups_.capacity() * sizeof(Group) + tokens_.capacity() * sizeof(uint32_t) +
           (free_nodes_.capacity() + free_groups_.capacity() + act_.capacity() + stack_.capacity() +
            ends_.capacity()) *
               sizeof(uint32_t) +
           sizeof(*this);
  }
  // Tokens of the sequences held (the store's live part).
  size_t tokens() const {
    return seqs_.empty() ? 0 : static_cast<size_t>(End() - seqs_.front().start);
  }

 private:
  struct Node {
    uint64_t ref = 0;  // logical store offset of the edge's first token (newest sequence)
    uint32_t count = 0;
    uint32_t length = 0;  // kOpen: to the end of the store (see leaves_); read it with Len()
    uint32_t parent = kNone;
    uint32_t first = 0;                   // the edge's first token: the key under the parent
    uint32_t head = kNone, tail = kNone;  // children, by decreasing count
    uint32_t prev = kNone, next = kNone;  // siblings
    uint32_t group = kNone;               // the run of equal counts among the siblings
    uint32_t nchild = 0;
  };
  struct Group {
    uint32_t head, tail;
  };
  struct Slot {
    uint32_t token = 0;
    uint32_t child = kFree;  // kFree (the root, never a child): an empty slot; all-zero bytes
  };
  struct Seq {
    uint64_t start;
    uint32_t length;
  };

  uint32_t Tok(uint64_t pos) const {
    assert(pos >= base_ && pos - base_ < tokens_.size());
    return tokens_[pos - base_];
  }
  uint32_t& Act(uint32_t i) { return act_[(act_begin_ + i) & act_mask_]; }
  uint32_t ActAt(uint32_t i) const { return act_[(act_begin_ + i) & act_mask_]; }
  uint64_t End() const { return base_ + tokens_.size(); }
  uint32_t Len(const Node& n) const {
    return n.length != kOpen ? n.length : static_cast<uint32_t>(End() - n.ref);
  }
  void Close(uint32_t x) { nodes_[x].length = Len(nodes_[x]); }

  [[gnu::always_inline]] uint32_t NewNode() {
    if (!free_nodes_.empty()) {
      const uint32_t x = free_nodes_.back();
      free_nodes_.pop_back();
      nodes_[x] = Node{};
      return x;
    }
    nodes_.push_back(Node{});
    return static_cast<uint32_t>(nodes_.size() - 1);
  }
  void FreeNode(uint32_t x) { free_nodes_.push_back(x); }
  uint32_t NewGroup(uint32_t x) {
    if (!free_groups_.empty()) {
      const uint32_t g = free_groups_.back();
      free_groups_.pop_back();
      groups_[g] = Group{x, x};
      return g;
    }
    groups_.push_back(Group{x, x});
    return static_cast<uint32_t>(groups_.size() - 1);
  }
  void FreeGroup(uint32_t g) { free_groups_.push_back(g); }

  // --- the child table ---
  // A slot holds a child and its first token; the parent is the child's (a key is thus
  // (nodes_[child].parent, token): every entry's child is live and keeps that parent while in
  // the table). 8 bytes a slot, at most 3/4 full (linear probing: a probe of 8 slots reads one
  // cache line): the global tree's table is its largest array.
  static uint64_t Key(uint32_t parent, uint32_t token) { return (uint64_t{parent} << 32) | token; }
  size_t Home(uint32_t parent, uint32_t token) const {
    return Mix64(Key(parent, token)) & (slots_.size() - 1);
  }
  bool Holds(const Slot& s, uint32_t parent, uint32_t token) const {
    return s.token == token && nodes_[s.child].parent == parent;
  }
  // The child of `parent` whose edge starts with `token`, or kNone. Only the children of nodes
  // with two or more are in the table; an only child is the list's head.
  uint32_t Find(uint32_t parent, uint32_t token) const {
    const Node& P = nodes_[parent];
    if (P.nchild <= 1) {
      return P.nchild == 1 && nodes_[P.head].first == token ? P.head : kNone;
    }
    return FindInTable(parent, token);
  }
  // Also leaves in probe_ the slot where the search ended (the entry, or the free slot where it
  // would go), for an insertion or overwrite that follows with no other change to the table.
  uint32_t FindInTable(uint32_t parent, uint32_t token) const {
    const size_t mask = slots_.size() - 1;
    for (size_t i = Home(parent, token);; i = (i + 1) & mask) {
      if (slots_[i].child == kFree) {
        probe_ = i;
        return kNone;
      }
      if (Holds(slots_[i], parent, token)) {
        probe_ = i;
        return slots_[i].child;
      }
    }
  }
  // Inserts, or overwrites the entry for (parent, token) (whose child still has that parent).
  void Put(uint32_t parent, uint32_t token, uint32_t child) {
    if ((used_ + 1) * 4 > slots_.size() * 3) Rehash(slots_.size() * 2);  // at most 3/4 full
    const size_t mask = slots_.size() - 1;
    for (size_t i = Home(parent, token);; i = (i + 1) & mask) {
      if (slots_[i].child == kFree) {
        slots_[i] = Slot{token, child};
        ++used_;
        return;
      }
      if (Holds(slots_[i], parent, token)) {
        slots_[i].child = child;
        return;
      }
    }
  }
  void Erase(uint32_t parent, uint32_t token) {  // backward-shift deletion
    const size_t mask = slots_.size() - 1;
    size_t i = Home(parent, token);
    while (!Holds(slots_[i], parent, token)) {
      if (slots_[i].child == kFree) return;
      i = (i + 1) & mask;
    }
    size_t j = i;
    while (true) {
      j = (j + 1) & mask;
      if (slots_[j].child == kFree) break;
      const size_t h = Home(nodes_[slots_[j].child].parent, slots_[j].token);
      // Move slot j into the hole at i unless its home lies cyclically in (i, j].
      if (((j - h) & mask) >= ((j - i) & mask)) {
        slots_[i] = slots_[j];
        i = j;
      }
    }
    slots_[i] = Slot{};
    --used_;
  }
  void Rehash(size_t capacity) {
    TreeVector<Slot> old;
    old.swap(slots_);
    slots_.assign(capacity, Slot{});
    const size_t mask = capacity - 1;
    for (const Slot& s : old) {
      if (s.child == kFree) continue;
      size_t i = Home(nodes_[s.child].parent, s.token);
      while (slots_[i].child != kFree) i = (i + 1) & mask;
      slots_[i] = s;
    }
  }

  // --- the ordered child lists ---
  // x before y, in y's parent's list
  [[gnu::always_inline]] void LinkBefore(uint32_t x, uint32_t y) { LinkBeside(x, y, true); }
  [[gnu::always_inline]] void LinkAfter(uint32_t x, uint32_t y) { LinkBeside(x, y, false); }
  // x just before y (`before`) or just after it, in y's parent's list.
  [[gnu::always_inline]] void LinkBeside(uint32_t x, uint32_t y, bool before) {
    Node& X = nodes_[x];
    Node& Y = nodes_[y];
    const uint32_t out = before ? Y.prev : Y.next;  // x's other neighbour
    (before ? X.prev : X.next) = out;
    (before ? X.next : X.prev) = y;
    if (out != kNone) {
      (before ? nodes_[out].next : nodes_[out].prev) = x;
    } else {
      (before ? nodes_[Y.parent].head : nodes_[Y.parent].tail) = x;
    }
    (before ? Y.prev : Y.next) = x;
  }
  [[gnu::always_inline]] void Unlink(uint32_t x) {
    Node& X = nodes_[x];
    if (X.prev != kNone) {
      nodes_[X.prev].next = X.next;
    } else {
      nodes_[X.parent].head = X.next;
    }
    if (X.next != kNone) {
      nodes_[X.next].prev = X.prev;
    } else {
      nodes_[X.parent].tail = X.prev;
    }
    X.prev = X.next = kNone;
  }
  // Takes x out of its run of equal counts (the run's group survives x unless x was alone).
  [[gnu::always_inline]] void LeaveGroup(uint32_t x) {
    const uint32_t g = nodes_[x].group;
    Group& G = groups_[g];
    if (G.head == x && G.tail == x) {
      FreeGroup(g);
    } else if (G.head == x) {
      G.head = nodes_[x].next;
    } else if (G.tail == x) {
      G.tail = nodes_[x].prev;
    }
    nodes_[x].group = kNone;
  }
  // x, just placed with its new count, joins the run of a neighbour with that count or starts
  // one. It is placed only at a run's front or end, never inside one.
  [[gnu::always_inline]] void JoinGroup(uint32_t x) {
    Node& X = nodes_[x];
    if (X.prev != kNone && nodes_[X.prev].count == X.count) {
      X.group = nodes_[X.prev].group;
      groups_[X.group].tail = x;
    } else if (X.next != kNone && nodes_[X.next].count == X.count) {
      X.group = nodes_[X.next].group;
      groups_[X.group].head = x;
    } else {
      X.group = NewGroup(x);
    }
  }
  // The table entry of x under its parent, after x replaced the child with the same first token
  // or changed its first token from `old_first`.
  void Rekey(uint32_t x, uint32_t old_first) {
    const Node& X = nodes_[x];
    if (nodes_[X.parent].nchild < 2) return;
    if (old_first != X.first) Erase(X.parent, old_first);
    Put(X.parent, X.first, x);
  }
  // A new child with count 1 at the end of the parent's list.
  [[gnu::always_inline]] void AddChild(uint32_t parent, uint32_t x) {
    Node& P = nodes_[parent];
    if (P.nchild == 1) Put(parent, nodes_[P.head].first, P.head);
    if (P.nchild >= 1) Put(parent, nodes_[x].first, x);
    ++P.nchild;
    if (P.tail == kNone) {
      P.head = P.tail = x;
      nodes_[x].prev = nodes_[x].next = kNone;
    } else {
      LinkAfter(x, P.tail);
    }
    JoinGroup(x);
  }
  void RemoveChild(uint32_t x) {
    const uint32_t parent = nodes_[x].parent;
    LeaveGroup(x);
    Unlink(x);
    Node& P = nodes_[parent];
    if (P.nchild >= 2) Erase(parent, nodes_[x].first);
    if (P.nchild == 2) Erase(parent, nodes_[P.head].first);  // the other one is now alone
    --P.nchild;
  }
  // y (not in any list) takes x's place in x's list; equal counts.
  [[gnu::always_inline]] void ReplaceChild(uint32_t x, uint32_t y) {
    Node& X = nodes_[x];
    Node& Y = nodes_[y];
    Y.prev = X.prev;
    Y.next = X.next;
    Y.group = X.group;
    if (X.prev != kNone) {
      nodes_[X.prev].next = y;
    } else {
      nodes_[X.parent].head = y;
    }
    if (X.next != kNone) {
      nodes_[X.next].prev = y;
    } else {
      nodes_[X.parent].tail = y;
    }
    Group& G = groups_[X.group];
    if (G.head == x) G.head = y;
    if (G.tail == x) G.tail = y;
    X.prev = X.next = X.group = kNone;
  }
  // count c -> c + 1: to the front of the run of c + 1 if x led the run of c, else to its end.
  [[gnu::always_inline]] void Increment(uint32_t x) {
    Node& X = nodes_[x];
    const uint32_t c = X.count;
    const uint32_t g = X.group;
    if (groups_[g].head == x) {
      const uint32_t p = X.prev;
      if (p != kNone && nodes_[p].count == c + 1) {
        const uint32_t h = groups_[nodes_[p].group].head;
        LeaveGroup(x);
        Unlink(x);
        LinkBefore(x, h);
        ++nodes_[x].count;
        JoinGroup(x);
      } else {
        // Stays: the run of c + 1 would be just before x, and there is none.
        if (groups_[g].tail != x) {
          groups_[g].head = X.next;
          X.group = NewGroup(x);
        }
        ++X.count;
      }
    } else {
      const uint32_t h = groups_[g].head;
      LeaveGroup(x);
      Unlink(x);
      LinkBefore(x, h);
      ++nodes_[x].count;
      JoinGroup(x);
    }
  }
  // count c -> c - 1 (> 0): to the front of the run of c - 1.
  void Decrement(uint32_t x) {
    const uint32_t g = nodes_[x].group;
    const uint32_t t = groups_[g].tail;
    if (t == x) {
      LeaveGroup(x);
      --nodes_[x].count;
      JoinGroup(x);
    } else {
      LeaveGroup(x);
      Unlink(x);
      LinkAfter(x, t);
      --nodes_[x].count;
      JoinGroup(x);
    }
  }

  template <bool kRemovable>
  void AppendTo(uint32_t t);
  void DeleteSubtree(uint32_t x);
  void MergeIntoChild(uint32_t p);
  // The position of `pattern` matched from the root: node and tokens of its edge matched.
  bool Match(std::span<const uint32_t> pattern, uint32_t* node, uint32_t* idx) const;
  // The walk's score after each of its first tokens, up to `cap`: out[j] after j tokens
  // (out[0] = 0); returns the walk's length (<= cap). out has room for cap + 1.
  uint32_t Scores(uint32_t node, uint32_t idx, int cap, float min_prob, float* out) const;
  // A walk (Walk, Scores) at the end of the edge of *n, *idx tokens in (*len = Len(**n)), its
  // probability *prob: goes on into the first child, the probability times the child's share of
  // *n's count (the reference's float operations); false when *n has no child.
  [[gnu::always_inline]] bool ToFirstChild(const Node** n, uint32_t* len, uint32_t* idx,
                                           float* prob) const {
    if ((*n)->head == kNone) return false;
    const Node* ch = &nodes_[(*n)->head];
    *prob *= static_cast<float>(ch->count) / static_cast<float>((*n)->count);
    *n = ch;
    *len = Len(*ch);
    *idx = 0;
    return true;
  }

  uint32_t depth_;
  TreeVector<Node> nodes_;
  std::vector<uint32_t> free_nodes_;
  TreeVector<Group> groups_;
  std::vector<uint32_t> free_groups_;
  TreeVector<Slot> slots_;
  size_t used_ = 0;
  mutable size_t probe_ = 0;  // see FindInTable
  bool removable_;
  TreeVector<uint32_t> tokens_;  // the sequences' tokens; tokens_[0] is at logical offset base_
  // With removable_, ends_[i]: the node where the path of the suffix starting at tokens_[i] ends
  // (kNone while the suffix still grows). It stays that node: later splits keep the lower part's
  // node, and no merge or deletion removes a node where another sequence's suffix ends.
  TreeVector<uint32_t> ends_;
  uint64_t base_ = 0;
  std::deque<Seq> seqs_;
  // The newest sequence's last min(length, depth) suffixes, longest first: each ends at the end
  // of its node (the root for the empty one). A ring of a power-of-two size.
  // The first leaves_ of them occur once (count 1; a string that contains a unique one is unique
  // too, so they are the longest ones): each ends a leaf that only this suffix reaches, which
  // grows by every token appended (the reference extends it one token at a time). Their leaves
  // are "open" (length kOpen: up to the store's end), so an append does not visit them; a leaf is
  // closed when its suffix reaches the depth or the sequence stops growing.
  std::vector<uint32_t> act_;
  uint32_t act_mask_;
  uint32_t act_begin_ = 0, act_size_ = 0, leaves_ = 0;
  std::vector<uint32_t> stack_;  // scratch
};

template <bool kRemovable>
void Tree::AppendTo(uint32_t t) {
  assert(!seqs_.empty());
  const uint64_t pos = End();
  // The longest suffix stops at `depth` tokens, before t.
  if (act_size_ == depth_) {
    if (leaves_ > 0) {
      Close(Act(0));
      --leaves_;
    }
    if (kRemovable) ends_[pos - depth_ - base_] = Act(0);
    act_begin_ = (act_begin_ + 1) & act_mask_;
    --act_size_;
  }
  tokens_.push_back(t);  // the open leaves grow by t
  if (kRemovable) ends_.push_back(kNone);
  ++seqs_.back().length;
  Act(act_size_++) = kRoot;  // one more suffix, empty
  for (uint32_t i = leaves_; i < act_size_; ++i) {
    uint32_t& a = Act(i);
    if (a != kRoot && nodes_[a].count == 1) {
      // Only this suffix reaches a: a is a closed leaf whose edge ends just before t. (Not
      // expected: such suffixes are the open ones.)
      ++nodes_[a].length;
      continue;
    }
    const uint32_t c = Find(a, t);
    // With two children or more, the search went through the table and ended at probe_.
    const bool in_table = nodes_[a].nchild >= 2;
    const size_t slot = probe_;
    if (c == kNone) {
      const uint32_t x = NewNode();
      Node& X = nodes_[x];
      X.ref = pos;
      X.count = 1;
      X.parent = a;
      X.first = t;
      if (i == leaves_) {
        X.length = kOpen;
        ++leaves_;
      } else {
        X.length = 1;
      }
      if (in_table && (used_ + 1) * 4 <= slots_.size() * 3) {
        // The free slot the search ended at is x's (AddChild without a second search).
        slots_[slot] = Slot{t, x};
        ++used_;
        Node& P = nodes_[a];
        ++P.nchild;
        LinkAfter(x, P.tail);
        JoinGroup(x);
      } else {
        AddChild(a, x);
      }
      a = x;
      continue;
    }
    if (a != kRoot && nodes_[a].count == nodes_[c].count + 1) {
      // This suffix ends at a and every other one through a goes on into c (a's only child):
      // with t, a's count and the count after it are equal. Absorb into one node.
      Node& A = nodes_[a];
      Node& C = nodes_[c];
      if (Len(C) == 1) {
        // c takes a's place with a's tokens and its own.
        RemoveChild(c);
        C.count += 1;
        C.first = A.first;
        if (C.length != kOpen) C.length = A.length + 1;
        C.ref = pos - A.length;
        C.parent = A.parent;
        ReplaceChild(a, c);
        Rekey(c, C.first);
        FreeNode(a);
        a = c;
      } else {
        // a grows by t, taken from the front of c.
        A.length += 1;
        A.ref = pos + 1 - A.length;
        C.ref += 1;
        if (C.length != kOpen) C.length -= 1;
        C.first = Tok(C.ref);  // c is a's only child: not in the table
      }
      continue;
    }
    if (Len(nodes_[c]) == 1) {
      Increment(c);
      nodes_[c].ref = pos;
      a = c;
      continue;
    }
    // Split c after its first token: m (t) above the rest of c.
    const uint32_t m = NewNode();
    Node& M = nodes_[m];
    Node& C = nodes_[c];
    M.ref = pos;
    M.count = C.count;
    M.length = 1;
    M.parent = a;
    M.first = t;
    ReplaceChild(c, m);
    if (in_table) slots_[slot].child = m;  // Rekey(m, t): c's entry, found by the search
    C.ref += 1;
    if (C.length != kOpen) C.length -= 1;
    C.first = Tok(C.ref);
    C.parent = m;
    M.head = M.tail = c;
    M.nchild = 1;  // c is m's only child: not in the table
    C.group = NewGroup(c);
    Increment(m);
    a = m;
  }
}

}  // namespace llmtap::specdec::suffix_internal
