#include "sim/prefix_cache.h"

#include "sim/text.h"

namespace llmtap::sim {

std::vector<uint64_t> ChainedBlockHashes(std::span<const uint64_t> token_hashes,
                                         uint32_t block_tokens) {
  std::vector<uint64_t> out;
  if (block_tokens == 0) return out;
  const size_t full = token_hashes.size() / block_tokens;
  out.reserve(full);
  uint64_t parent = 0x6c6c6d746170ULL;  // "llmtap"
  for (size_t b = 0; b < full; ++b) {
    uint64_t h = parent;
    for (size_t t = b * block_tokens; t < (b + 1) * block_tokens; ++t) h = Fold(h, token_hashes[t]);
    h = Mix64(h);
    out.push_back(h);
    parent = h;
  }
  return out;
}

uint64_t PrefixCache::LookupAndInsert(std::span<const uint64_t> blocks, uint64_t max_hit_blocks) {
  if (capacity_ == 0) {
    miss_blocks_.fetch_add(blocks.size(), std::memory_order_relaxed);
    return 0;
  }
  uint64_t hits = 0;
  uint64_t evicted = 0;
  {
    std::lock_guard lock(mu_);
    bool prefix_alive = true;
    for (size_t i = 0; i < blocks.size(); ++i) {
      auto it = index_.find(blocks[i]);
      const bool present = it != index_.end();
      if (present) {
        lru_.splice(lru_.begin(), lru_, it->second);
      } else {
        lru_.push_front(blocks[i]);
        index_.emplace(blocks[i], lru_.begin());
      }
      if (prefix_alive && present && i < max_hit_blocks) {
        ++hits;
      } else {
        prefix_alive = false;
      }
    }
    while (lru_.size() > capacity_) {
      index_.erase(lru_.back());
      lru_.pop_back();
      ++evicted;
    }
  }
  hit_blocks_.fetch_add(hits, std::memory_order_relaxed);
  miss_blocks_.fetch_add(blocks.size() - hits, std::memory_order_relaxed);
  evicted_blocks_.fetch_add(evicted, std::memory_order_relaxed);
  return hits;
}

uint64_t PrefixCache::size() const {
  std::lock_guard lock(mu_);
  return lru_.size();
}

}  // namespace llmtap::sim
