#include "specdec/suffix.h"

#include <algorithm>
#include <bit>
#include <cassert>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <list>
#include <new>
#include <string>
#include <utility>

#include "common/mix64.h"

#ifdef __linux__
#include <sys/mman.h>
#endif

namespace llmtap::specdec {
namespace {

constexpr uint32_t kNone = UINT32_MAX;
constexpr uint32_t kRoot = 0;
constexpr uint32_t kFree = kRoot;  // a child-table slot's child when the slot is empty
constexpr uint32_t kMaxDepth = 1u << 16;
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

}  // namespace

Status SuffixOptions::Validate() const {
  if (max_tree_depth < 1) return Status::InvalidArgument("suffix tree depth must be >= 1");
  if (max_tree_depth > kMaxDepth) {
    return Status::InvalidArgument("suffix tree depth must be <= " + std::to_string(kMaxDepth) +
                                   " (llmtap's limit)");
  }
  if (!(max_spec_factor >= 0) || !std::isfinite(max_spec_factor)) {
    return Status::InvalidArgument("suffix max_spec_factor must be a finite number >= 0");
  }
  if (!(min_token_prob >= 0 && min_token_prob <= 1)) {
    return Status::InvalidArgument("suffix min_token_prob must be in [0, 1]");
  }
  if (!std::isfinite(max_spec_offset)) {
    return Status::InvalidArgument("suffix max_spec_offset must be finite");
  }
  return Status::Ok();
}

// A compressed suffix tree of its sequences' suffixes cut at `depth` tokens (see suffix.h, "The
// tree" and "Data structures and speed"). Sequences form a FIFO: tokens are appended to the
// newest one only, and only the oldest one is removed.
namespace {

// The reference's cap on a walk from a match of length m: float product and sum, 1e-6 added in
// double, truncated (may be negative).
int ReferenceCap(size_t m, const SuffixOptions& o) {
  const float spec = static_cast<float>(static_cast<int>(m)) * o.max_spec_factor;
  const float with_offset = spec + o.max_spec_offset;
  const double limit = static_cast<double>(with_offset) + 1e-6;
  return limit >= 2147483647.0 ? INT32_MAX : static_cast<int>(limit);
}

}  // namespace

class SuffixProposer::Tree {
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
  [[gnu::always_inline]] void LinkBefore(uint32_t x, uint32_t y) {
    Node& X = nodes_[x];
    Node& Y = nodes_[y];
    X.prev = Y.prev;
    X.next = y;
    if (Y.prev != kNone) {
      nodes_[Y.prev].next = x;
    } else {
      nodes_[Y.parent].head = x;
    }
    Y.prev = x;
  }
  [[gnu::always_inline]] void LinkAfter(uint32_t x, uint32_t y) {
    Node& X = nodes_[x];
    Node& Y = nodes_[y];
    X.next = Y.next;
    X.prev = y;
    if (Y.next != kNone) {
      nodes_[Y.next].prev = x;
    } else {
      nodes_[Y.parent].tail = x;
    }
    Y.next = x;
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
void SuffixProposer::Tree::AppendTo(uint32_t t) {
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

void SuffixProposer::Tree::DeleteSubtree(uint32_t x) {
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
void SuffixProposer::Tree::MergeIntoChild(uint32_t p) {
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

void SuffixProposer::Tree::RemoveOldest() {
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

bool SuffixProposer::Tree::Match(std::span<const uint32_t> pattern, uint32_t* node,
                                 uint32_t* idx) const {
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
uint32_t SuffixProposer::Tree::Scores(uint32_t node, uint32_t idx, int cap, float min_prob,
                                      float* out) const {
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
    } else {
      if (n->head == kNone) break;
      const Node* ch = &nodes_[n->head];
      prob *= static_cast<float>(ch->count) / static_cast<float>(n->count);
      n = ch;
      len = Len(*n);
      idx = 0;
    }
  }
  return static_cast<uint32_t>(size);
}

void SuffixProposer::Tree::Walk(uint32_t node, uint32_t idx, int cap, float min_prob,
                                SuffixDraft* d) const {
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
    } else {
      if (n->head == kNone) break;
      const Node* ch = &nodes_[n->head];
      prob *= static_cast<float>(ch->count) / static_cast<float>(n->count);
      n = ch;
      len = Len(*n);
      idx = 0;
    }
  }
}

void SuffixProposer::Tree::Walks(std::span<const uint32_t> pattern, bool own_suffixes, int kmax,
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

std::string SuffixProposer::Tree::Check() const {
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

// --- Kept prompt trees ---

namespace {

// A polynomial hash of a token sequence mod 2^64, extended one token at a time, and the key of a
// sequence: that hash with its length.
constexpr uint64_t kSeqBase = 0x100000001B3ULL;
uint64_t SeqKey(uint64_t hash, size_t length) {
  return Mix64(hash ^ (length * 0x9E3779B97F4A7C15ULL));
}

}  // namespace

// Finished requests' prompt trees, whole, least recently kept out first within a byte budget.
// A prompt tree is a function of its one sequence (prompt + response as appended): appending the
// rest of a longer prompt to a kept tree gives the very tree that prompt would build.
class SuffixProposer::SavedTrees {
 public:
  explicit SavedTrees(uint64_t budget) : budget_(budget) {}

  // Keeps `tree`; returns a tree object that is not kept (`tree` itself, or one pushed out), or
  // null.
  std::unique_ptr<Tree> Keep(std::unique_ptr<Tree> tree) {
    const std::span<const uint32_t> seq = tree->Newest();
    const size_t bytes = tree->CapacityBytes();
    if (seq.empty() || seq.size() > UINT32_MAX || bytes > budget_) return tree;
    uint64_t h = 0;
    for (uint32_t t : seq) h = h * kSeqBase + (uint64_t{t} + 1);
    const uint64_t key = SeqKey(h, seq.size());
    const uint32_t length = static_cast<uint32_t>(seq.size());
    if (paused_) {
      // Only its key is kept (see TakeLongestPrefix), and the tree object is used again.
      const Ghost g{length, key};
      ghosts_.insert(std::upper_bound(ghosts_.begin(), ghosts_.end(), g), g);
      ghost_fifo_.push_back(g);
      if (ghost_fifo_.size() > kGhosts) {
        const Ghost old = ghost_fifo_.front();
        ghost_fifo_.pop_front();
        ghosts_.erase(std::lower_bound(ghosts_.begin(), ghosts_.end(), old));
      }
      return tree;
    }
    lru_.push_front(Entry{std::move(tree), key, length, bytes});
    const Item item{length, key, lru_.begin()};
    index_.insert(std::upper_bound(index_.begin(), index_.end(), item), item);
    bytes_ += bytes;
    std::unique_ptr<Tree> out;
    while (bytes_ > budget_) out = Drop(std::prev(lru_.end()));
    return out;
  }

  // Takes out the kept tree whose sequence is the longest prefix of `prompt`; null if none.
  // Keeping pauses after kPauseAfter requests in a row (and at least as many as trees kept) that
  // continued none: a capture without conversations would otherwise hold the whole budget of
  // trees never used, each request building its tree in the cold memory of the oldest one (17%
  // more time on trace_gen's mixed capture). While paused, only the finished requests' keys are
  // kept; the first prompt that continues one of them resumes keeping. The drafts are the same
  // either way (a continued tree is the tree built from scratch).
  std::unique_ptr<Tree> TakeLongestPrefix(std::span<const uint32_t> prompt) {
    if (paused_) {
      uint64_t h = 0;
      size_t done = 0;
      for (const Ghost& g : ghosts_) {  // by increasing length
        if (g.length > prompt.size()) break;
        for (; done < g.length; ++done) h = h * kSeqBase + (uint64_t{prompt[done]} + 1);
        if (g.key == SeqKey(h, g.length)) {
          paused_ = false;
          misses_ = 0;
          ghosts_.clear();
          ghost_fifo_.clear();
          break;
        }
      }
      return nullptr;
    }
    std::unique_ptr<Tree> found = TakeKept(prompt);
    if (found) {
      misses_ = 0;
    } else if (++misses_ >= std::max<uint64_t>(kPauseAfter, lru_.size())) {
      paused_ = true;
      Clear();
    }
    return found;
  }

  void Clear() {
    lru_.clear();
    index_.clear();
    bytes_ = 0;
  }

  // Back to keeping trees, nothing kept.
  void Reset() {
    Clear();
    paused_ = false;
    misses_ = 0;
    ghosts_.clear();
    ghost_fifo_.clear();
  }

 private:
  static constexpr uint64_t kPauseAfter = 1024;
  static constexpr size_t kGhosts = 4096;

  std::unique_ptr<Tree> TakeKept(std::span<const uint32_t> prompt) {
    std::list<Entry>::iterator best = lru_.end();
    uint32_t best_length = 0;
    uint64_t h = 0, key = 0;
    size_t done = 0;
    for (const Item& item : index_) {  // by increasing length
      if (item.length > prompt.size()) break;
      if (done < item.length) {
        for (; done < item.length; ++done) h = h * kSeqBase + (uint64_t{prompt[done]} + 1);
        key = SeqKey(h, item.length);
      }
      if (item.key != key) continue;
      if (item.length == best_length) continue;  // the same sequence kept twice
      const std::span<const uint32_t> seq = item.entry->tree->Newest();
      if (seq.size() == item.length && std::equal(seq.begin(), seq.end(), prompt.begin())) {
        best = item.entry;
        best_length = item.length;
      }
    }
    if (best == lru_.end()) return nullptr;
    return Drop(best);
  }

  struct Entry {
    std::unique_ptr<Tree> tree;
    uint64_t key;
    uint32_t length;
    size_t bytes;
  };
  struct Item {
    uint32_t length;
    uint64_t key;
    std::list<Entry>::iterator entry;
    bool operator<(const Item& o) const {
      return length != o.length ? length < o.length : key < o.key;
    }
  };

  std::unique_ptr<Tree> Drop(std::list<Entry>::iterator e) {
    const Item item{e->length, e->key, e};
    for (auto it = std::lower_bound(index_.begin(), index_.end(), item);
         it != index_.end() && it->length == e->length && it->key == e->key; ++it) {
      if (it->entry == e) {
        index_.erase(it);
        break;
      }
    }
    bytes_ -= e->bytes;
    std::unique_ptr<Tree> tree = std::move(e->tree);
    lru_.erase(e);
    return tree;
  }

  uint64_t budget_;
  uint64_t bytes_ = 0;
  std::list<Entry> lru_;     // most recently kept first
  std::vector<Item> index_;  // the kept sequences by length and key
  struct Ghost {
    uint32_t length;
    uint64_t key;
    bool operator<(const Ghost& o) const {
      return length != o.length ? length < o.length : key < o.key;
    }
  };
  bool paused_ = false;
  uint64_t misses_ = 0;           // requests in a row that continued no kept tree
  std::vector<Ghost> ghosts_;     // while paused: the last kGhosts requests' keys, sorted
  std::deque<Ghost> ghost_fifo_;  // the same, oldest first
};

// Prompt trees over prefixes that several prompts share, and the starts of the last prompts (to
// find such prefixes). A tree here holds one sequence, a prefix of the prompt it was built for,
// and equals the tree any prompt starting with it has after that many appends.
class SuffixProposer::PrefixTrees {
 public:
  static constexpr size_t kMaxPrefix = 4096;  // tokens compared and saved at most

  // The saved tree whose sequence is the longest prefix of `prompt`, or null.
  const Tree* Longest(std::span<const uint32_t> prompt) {
    Entry* best = nullptr;
    size_t best_length = 0;
    for (Entry& e : entries_) {
      const std::span<const uint32_t> seq = e.tree->Newest();
      if (seq.size() <= prompt.size() && seq.size() > best_length &&
          std::equal(seq.begin(), seq.end(), prompt.begin())) {
        best = &e;
        best_length = seq.size();
      }
    }
    if (best == nullptr) return nullptr;
    best->used = ++clock_;
    return best->tree.get();
  }

  // The most tokens `prompt` starts with in common with one of the last kRecent prompts (at most
  // kMaxPrefix); then `prompt` is one of them.
  size_t SharedWithRecent(std::span<const uint32_t> prompt) {
    const std::span<const uint32_t> head = prompt.first(std::min(prompt.size(), kMaxPrefix));
    size_t shared = 0;
    for (const std::vector<uint32_t>& r : recent_) {
      const size_t n = std::min(r.size(), head.size());
      const size_t same = static_cast<size_t>(
          std::mismatch(r.begin(), r.begin() + static_cast<ptrdiff_t>(n), head.begin()).first -
          r.begin());
      shared = std::max(shared, same);
    }
    if (recent_.size() < kRecent) recent_.emplace_back();
    std::vector<uint32_t>& slot = recent_[next_recent_];
    next_recent_ = (next_recent_ + 1) % kRecent;
    slot.assign(head.begin(), head.end());
    return shared;
  }

  // Keeps a copy of `tree` (one sequence), pushing out the least recently used when full.
  void Save(const Tree& tree) {
    Entry* e;
    if (entries_.size() < kTrees) {
      e = &entries_.emplace_back();
    } else {
      e = &*std::min_element(entries_.begin(), entries_.end(),
                             [](const Entry& a, const Entry& b) { return a.used < b.used; });
    }
    if (!e->tree) e->tree = std::make_unique<Tree>(tree.depth());
    e->tree->CopyFrom(tree, tree.NewestLength());
    e->used = ++clock_;
  }

  void Clear() {
    entries_.clear();
    recent_.clear();
    next_recent_ = 0;
  }

 private:
  static constexpr size_t kTrees = 16, kRecent = 8;
  struct Entry {
    std::unique_ptr<Tree> tree;
    uint64_t used = 0;
  };
  std::vector<Entry> entries_;
  std::vector<std::vector<uint32_t>> recent_;
  size_t next_recent_ = 0;
  uint64_t clock_ = 0;
};

// --- The prompt tree's walks, read off the context ---
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
class SuffixProposer::Context {
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

bool SuffixProposer::Context::FirstChild(std::span<const uint32_t> ends, uint32_t* token,
                                         uint32_t* count) {
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

uint64_t SuffixProposer::Context::Walks(uint32_t depth, int kmax, const SuffixOptions& o,
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

void SuffixProposer::Context::Token(SuffixProposer::Walks* out, SuffixProposer::Walks::Entry* e) {
  assert(e->m == 1 && e->len == 1 && e->tok == UINT32_MAX);
  Occurrences(prev_, &ones_);
  uint32_t child = 0, child_count = 0;
  FirstChild(ones_, &child, &child_count);
  e->tok = static_cast<uint32_t>(out->tokens.size());
  out->tokens.push_back(child);
  out->probs.push_back(out->scores[e->off + 1]);  // one token: its score is its probability
}

// --- The proposer ---

SuffixProposer::SuffixProposer(const SuffixOptions& options)
    : options_(options),
      context_(std::make_unique<Context>()),
      prompt_tree_(std::make_unique<Tree>(options.max_tree_depth)),
      global_tree_(std::make_unique<Tree>(options.max_tree_depth, true)) {
  assert(options_.Validate().ok());
  if (options_.reuse_bytes > 0) saved_ = std::make_unique<SavedTrees>(options_.reuse_bytes);
  if (options_.shared_prefix_min > 0) prefixes_ = std::make_unique<PrefixTrees>();
}

SuffixProposer::~SuffixProposer() = default;

void SuffixProposer::Reset() {
  ++version_;
  prompt_tree_->Clear();
  context_->Start({});
  tree_built_ = false;
  global_tree_->Clear();
  if (saved_) saved_->Reset();
  if (prefixes_) prefixes_->Clear();
  active_ = in_global_ = false;
}

size_t SuffixProposer::cached_requests() const { return global_tree_->sequences(); }
size_t SuffixProposer::GlobalMemoryBytes() const { return global_tree_->MemoryBytes(); }
size_t SuffixProposer::GlobalNodes() const { return global_tree_->nodes(); }
size_t SuffixProposer::GlobalTokens() const { return global_tree_->tokens(); }

std::span<const uint32_t> SuffixProposer::context() const {
  return active_ ? context_->tokens() : std::span<const uint32_t>{};
}

void SuffixProposer::StartRequest(std::span<const uint32_t> prompt) {
  ++version_;
  context_->Start(prompt);
  scan_work_ = 0;
  tree_built_ = false;
  if (options_.prompt_scan_work == 0) BuildPromptTree();
  active_ = true;
  in_global_ = options_.max_cached_requests > 0;
  if (in_global_) {
    global_tree_->BeginSequence();
    // FIFO: the oldest other request leaves while there are too many.
    while (global_tree_->sequences() > options_.max_cached_requests) {
      global_tree_->RemoveOldest();
    }
  }
}

void SuffixProposer::BuildPromptTree() {
  const std::span<const uint32_t> prompt = context_->tokens();
  tree_built_ = true;
  ++built_;
  std::unique_ptr<Tree> kept = saved_ ? saved_->TakeLongestPrefix(prompt) : nullptr;
  size_t from = 0;
  if (kept) {
    // The prompt continues a finished request's whole context: go on from its tree.
    spare_tree_ = std::move(prompt_tree_);
    prompt_tree_ = std::move(kept);
    from = prompt_tree_->NewestLength();
    ++reused_;
  } else if (const Tree* prefix = prefixes_ ? prefixes_->Longest(prompt) : nullptr) {
    // The prompt starts with a prefix that earlier ones shared: go on from a copy of its tree.
    prompt_tree_->CopyFrom(*prefix, prompt.size() + 256);
    from = prompt_tree_->NewestLength();
    ++prefix_copies_;
  } else {
    prompt_tree_->Clear(prompt.size() + 256);
    prompt_tree_->BeginSequence();
  }
  prompt_tree_->Reserve(prompt.size() - from + 256);
  if (prefixes_) {
    // A prefix shared with a recent prompt, not yet saved: its tree is copied aside on the way.
    const size_t shared = prefixes_->SharedWithRecent(prompt);
    if (shared >= from + options_.shared_prefix_min) {
      for (uint32_t t : prompt.subspan(from, shared - from)) prompt_tree_->Append(t);
      prefixes_->Save(*prompt_tree_);
      from = shared;
    }
  }
  for (uint32_t t : prompt.subspan(from)) prompt_tree_->Append(t);
}

void SuffixProposer::AddResponse(std::span<const uint32_t> tokens) {
  assert(active_);
  ++version_;
  context_->Append(tokens);
  if (tree_built_) {
    for (uint32_t t : tokens) prompt_tree_->Append(t);
  }
  if (in_global_) {
    for (uint32_t t : tokens) global_tree_->Append(t);
  }
}

void SuffixProposer::StopRequest() {
  ++version_;
  if (active_ && tree_built_ && saved_) {
    std::unique_ptr<Tree> back = saved_->Keep(std::move(prompt_tree_));
    if (!back) back = std::move(spare_tree_);
    prompt_tree_ = back ? std::move(back) : std::make_unique<Tree>(options_.max_tree_depth);
  }
  active_ = false;
}

void SuffixProposer::UpdateWalks(int kmax) {
  if (walks_version_ == version_ && walks_kmax_ == kmax) return;
  const std::span<const uint32_t> ctx = context_->tokens();
  const std::span<const uint32_t> pattern =
      ctx.last(std::min<size_t>(ctx.size(), options_.max_tree_depth));
  PromptWalks(kmax);
  global_tree_->Walks(pattern, in_global_, kmax, options_, &global_walks_);
  walks_version_ = version_;
  walks_kmax_ = kmax;
  // At every k from the longest drafting walk's length on, the draft is the same.
  saturated_k_ = 0;
  for (const Walks* w : {&prompt_walks_, &global_walks_}) {
    for (uint32_t i : w->drafting) {
      const Walks::Entry& e = w->walks[i];
      saturated_k_ = std::max(saturated_k_, std::min(static_cast<uint32_t>(e.cap), e.len));
    }
  }
  saturated_draft_.clear();
  have_saturated_ = false;
}

void SuffixProposer::PromptWalks(int kmax) {
  if (!tree_built_) {
    scan_work_ += context_->Walks(options_.max_tree_depth, kmax, options_, &prompt_walks_);
    // Past the budget, the tree (for the next proposals; these walks are the tree's already).
    if (scan_work_ > uint64_t{options_.prompt_scan_work} * context_->tokens().size()) {
      BuildPromptTree();
    }
    return;
  }
  const std::span<const uint32_t> ctx = context_->tokens();
  prompt_tree_->Walks(ctx.last(std::min<size_t>(ctx.size(), options_.max_tree_depth)), true, kmax,
                      options_, &prompt_walks_);
}

namespace {

// The reference's choice among a tree's walks at num_speculative_tokens k (at most the walks'
// kmax): the best score, ties to the longer match.
struct Picked {
  uint32_t m = 0, node = kRoot, idx = 0;
  int cap = 0;
  float score = 0;
  size_t entry = SIZE_MAX;  // in Walks::walks (none: no walk, an empty draft)
};
template <class W>
Picked Pick(const W& w, int k) {
  Picked best;
  for (size_t i = 0; i < w.walks.size(); ++i) {
    const auto& e = w.walks[i];
    const int cap = std::max(std::min(k, e.cap), 0);
    const float score =
        cap > 0 ? w.scores[e.off + std::min<uint32_t>(static_cast<uint32_t>(cap), e.len)] : 0.0f;
    if (score >= best.score) best = Picked{e.m, e.node, e.idx, cap, score, i};
  }
  return best;
}

// Pick for the draft's tokens only: the same choice among the walks with tokens (the others
// can win only when no walk has tokens, and then the draft is empty either way).
struct Drafted {
  float score = 0;
  size_t entry = SIZE_MAX;
  uint32_t n = 0;  // draft tokens
};
template <class W>
Drafted PickDrafting(const W& w, uint32_t k) {
  Drafted best;
  for (uint32_t i : w.drafting) {
    const auto& e = w.walks[i];
    const uint32_t n = std::min({k, static_cast<uint32_t>(e.cap), e.len});
    const float score = w.scores[e.off + n];
    if (score >= best.score) best = Drafted{score, i, n};
  }
  return best;
}

}  // namespace

void SuffixProposer::Propose(SuffixDraft* draft, uint32_t k) { ProposeFrom(draft, k, k); }

void SuffixProposer::ProposeFrom(SuffixDraft* draft, uint32_t k, uint32_t kmax) {
  draft->tokens.clear();
  draft->probs.clear();
  draft->score = 0;
  draft->match_len = 0;
  draft->from_prompt_tree = true;
  if (!active_) return;
  const uint64_t n_tokens = context_->tokens().size();
  int max_spec = static_cast<int>(k);
  int max_all = static_cast<int>(kmax);
  if (options_.max_model_len > 0) {
    if (n_tokens >= options_.max_model_len) return;
    const uint64_t room = options_.max_model_len - n_tokens - 1;
    max_spec = static_cast<int>(std::min<uint64_t>(static_cast<uint64_t>(max_spec), room));
    max_all = static_cast<int>(std::min<uint64_t>(static_cast<uint64_t>(max_all), room));
  }
  UpdateWalks(max_all);
  const Picked a = Pick(prompt_walks_, max_spec);
  const Picked b = Pick(global_walks_, max_spec);
  if (a.score >= b.score && prompt_walks_.eager) {
    if (a.entry != SIZE_MAX) {
      Walks::Entry& e = prompt_walks_.walks[a.entry];
      const uint32_t n = std::min(static_cast<uint32_t>(a.cap), e.len);
      if (n > 0 && e.tok == UINT32_MAX) context_->Token(&prompt_walks_, &e);
      draft->tokens.assign(prompt_walks_.tokens.begin() + e.tok,
                           prompt_walks_.tokens.begin() + e.tok + n);
      draft->probs.assign(prompt_walks_.probs.begin() + e.tok,
                          prompt_walks_.probs.begin() + e.tok + n);
      draft->score = prompt_walks_.scores[e.off + n];
    }
    draft->match_len = a.m;
  } else if (a.score >= b.score) {
    prompt_tree_->Walk(a.node, a.idx, a.cap, options_.min_token_prob, draft);
    draft->match_len = a.m;
  } else {
    global_tree_->Walk(b.node, b.idx, b.cap, options_.min_token_prob, draft);
    draft->match_len = b.m;
    draft->from_prompt_tree = false;
  }
}

void SuffixProposer::ProposeTokens(std::vector<uint32_t>* draft, uint32_t k, uint32_t kmax) {
  draft->clear();
  if (!active_) return;
  assert(options_.max_model_len == 0);
  UpdateWalks(static_cast<int>(kmax));
  if (k >= saturated_k_ && have_saturated_) {
    draft->assign(saturated_draft_.begin(), saturated_draft_.end());
    return;
  }
  DraftTokens(draft, k);
  if (k >= saturated_k_) {
    saturated_draft_.assign(draft->begin(), draft->end());
    have_saturated_ = true;
  }
}

void SuffixProposer::DraftTokens(std::vector<uint32_t>* draft, uint32_t k) {
  const Drafted a = PickDrafting(prompt_walks_, k);
  const Drafted b = PickDrafting(global_walks_, k);
  const bool prompt = a.score >= b.score;
  const Drafted& p = prompt ? a : b;
  if (p.n == 0) return;
  Walks& w = prompt ? prompt_walks_ : global_walks_;
  Walks::Entry& e = w.walks[p.entry];
  if (e.tok == UINT32_MAX && w.eager) {
    context_->Token(&w, &e);
  } else if (e.tok == UINT32_MAX) {  // the walk's tokens, once per context
    e.tok = static_cast<uint32_t>(w.tokens.size());
    (prompt ? prompt_tree_ : global_tree_)->WalkTokens(e.node, e.idx, e.len, &w.tokens);
  }
  draft->assign(w.tokens.begin() + e.tok, w.tokens.begin() + e.tok + p.n);
}

void SuffixProposer::Propose(std::vector<uint32_t>* draft) {
  SuffixDraft d;
  std::swap(d.tokens, *draft);
  Propose(&d);
  std::swap(d.tokens, *draft);
}

std::string SuffixProposer::DumpPromptTreeForTesting() const { return prompt_tree_->Dump(); }

std::string SuffixProposer::CheckForTesting() const {
  std::string s = tree_built_ ? prompt_tree_->Check() : "";
  if (!s.empty()) return "prompt tree: " + s;
  s = global_tree_->Check();
  if (!s.empty()) return "global tree: " + s;
  return "";
}

SpecStats SuffixProposer::Simulate(std::span<const uint32_t> prompt,
                                   std::span<const uint32_t> response,
                                   std::vector<SimStep>* trace) {
  const uint64_t mml = options_.max_model_len;
  bool started = false;
  SpecStats st = ReplayGreedy(
      options_.SpecTokens(), mml, prompt, response, draft_, trace,
      [&](size_t n) {
        // vLLM starts the request at its first proposal, after the prefill step, unless the
        // context has reached max_model_len by then.
        if (n == 0 || (mml > 0 && prompt.size() + 1 >= mml)) return;
        StartRequest(prompt);
        started = true;
      },
      [&](std::span<const uint32_t> tokens, size_t context) {
        // Appended by the next proposal, which vLLM skips at max_model_len.
        if (started && (mml == 0 || context < mml)) AddResponse(tokens);
      },
      [&](std::vector<uint32_t>* draft) {
        if (mml == 0) {  // the sweep's path: the same draft, its tokens only
          ProposeTokens(draft, options_.SpecTokens(), options_.SpecTokens());
          return;
        }
        Propose(&result_);
        draft->assign(result_.tokens.begin(), result_.tokens.end());
      });
  if (started) StopRequest();
  return st;
}

void SuffixProposer::SimulateSweep(std::span<const uint32_t> prompt,
                                   std::span<const uint32_t> response, std::span<const uint32_t> ks,
                                   std::vector<SpecStats>* out) {
  bool started = false;
  ReplayGreedySweep(
      ks, prompt, response, draft_, out,
      [&](size_t n) {
        if (n == 0) return;
        StartRequest(prompt);
        started = true;
      },
      [&](std::span<const uint32_t> tokens, size_t) {
        if (started) AddResponse(tokens);
      },
      [&, kmax = ks.empty() ? 0u : *std::max_element(ks.begin(), ks.end())](
          size_t i, std::vector<uint32_t>* draft) { ProposeTokens(draft, ks[i], kmax); });
  if (started) StopRequest();
}

}  // namespace llmtap::specdec
