// The prefix-cache model: an LRU of block hashes. Thread-safe (one mutex; the critical section
// is a few hash-map operations per block).
#pragma once

#include <atomic>
#include <cstdint>
#include <list>
#include <mutex>
#include <span>
#include <unordered_map>
#include <vector>

namespace llmtap::sim {

// Chained block hashes of a token sequence: block i covers tokens [i*B, (i+1)*B) and its hash
// depends on every token before it. Only full blocks are hashed (a partial block is never cached).
std::vector<uint64_t> ChainedBlockHashes(std::span<const uint64_t> token_hashes,
                                         uint32_t block_tokens);

class PrefixCache {
 public:
  // capacity_blocks == 0: the cache is off (every lookup misses, nothing is stored).
  explicit PrefixCache(uint64_t capacity_blocks) : capacity_(capacity_blocks) {}

  // Counts how many leading blocks of `blocks` are cached (stopping at the first miss, and
  // considering at most `max_hit_blocks`), then stores all of them as most recently used,
  // evicting the least recently used blocks beyond capacity. Returns the number of hit blocks.
  uint64_t LookupAndInsert(std::span<const uint64_t> blocks, uint64_t max_hit_blocks);

  uint64_t size() const;
  uint64_t capacity() const { return capacity_; }
  uint64_t hit_blocks() const { return hit_blocks_.load(std::memory_order_relaxed); }
  uint64_t miss_blocks() const { return miss_blocks_.load(std::memory_order_relaxed); }
  uint64_t evicted_blocks() const { return evicted_blocks_.load(std::memory_order_relaxed); }

 private:
  const uint64_t capacity_;
  mutable std::mutex mu_;
  std::list<uint64_t> lru_;  // front = most recently used
  std::unordered_map<uint64_t, std::list<uint64_t>::iterator> index_;
  std::atomic<uint64_t> hit_blocks_{0}, miss_blocks_{0}, evicted_blocks_{0};
};

}  // namespace llmtap::sim
