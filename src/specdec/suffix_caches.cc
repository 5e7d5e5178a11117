#include "specdec/suffix_caches.h"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <iterator>
#include <list>
#include <memory>
#include <span>
#include <utility>
#include <vector>

#include "common/mix64.h"

namespace llmtap::specdec::suffix_internal {
namespace {

// A polynomial hash of a token sequence mod 2^64, extended one token at a time, and the key of a
// sequence: that hash with its length.
constexpr uint64_t kSeqBase = 0x100000001B3ULL;
uint64_t SeqKey(uint64_t hash, size_t length) {
  return Mix64(hash ^ (length * 0x9E3779B97F4A7C15ULL));
}

}  // namespace

// --- SavedTrees ---

std::unique_ptr<Tree> SavedTrees::Keep(std::unique_ptr<Tree> tree) {
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

std::unique_ptr<Tree> SavedTrees::TakeLongestPrefix(std::span<const uint32_t> prompt) {
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

void SavedTrees::Clear() {
  lru_.clear();
  index_.clear();
  bytes_ = 0;
}

void SavedTrees::Reset() {
  Clear();
  paused_ = false;
  misses_ = 0;
  ghosts_.clear();
  ghost_fifo_.clear();
}

std::unique_ptr<Tree> SavedTrees::TakeKept(std::span<const uint32_t> prompt) {
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

std::unique_ptr<Tree> SavedTrees::Drop(std::list<Entry>::iterator e) {
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

// --- PrefixTrees ---

const Tree* PrefixTrees::Longest(std::span<const uint32_t> prompt) {
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

size_t PrefixTrees::SharedWithRecent(std::span<const uint32_t> prompt) {
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

void PrefixTrees::Save(const Tree& tree) {
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

void PrefixTrees::Clear() {
  entries_.clear();
  recent_.clear();
  next_recent_ = 0;
}

}  // namespace llmtap::specdec::suffix_internal
