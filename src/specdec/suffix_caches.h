// Prompt trees kept between requests by the suffix proposer (suffix.h, SuffixOptions::reuse_bytes
// and shared_prefix_min): they save building trees, and change no draft (a prompt tree is a
// function of its one sequence). Used once per request, not per token. Internal: see
// suffix_internal.h.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <list>
#include <memory>
#include <span>
#include <vector>

#include "specdec/suffix_tree.h"

namespace llmtap::specdec::suffix_internal {

// Finished requests' prompt trees, whole, least recently kept out first within a byte budget.
// A prompt tree is a function of its one sequence (prompt + response as appended): appending the
// rest of a longer prompt to a kept tree gives the very tree that prompt would build.
class SavedTrees {
 public:
  explicit SavedTrees(uint64_t budget) : budget_(budget) {}

  // Keeps `tree`; returns a tree object that is not kept (`tree` itself, or one pushed out), or
  // null.
  std::unique_ptr<Tree> Keep(std::unique_ptr<Tree> tree);

  // Takes out the kept tree whose sequence is the longest prefix of `prompt`; null if none.
  // Keeping pauses after kPauseAfter requests in a row (and at least as many as trees kept) that
  // continued none: a capture without conversations would otherwise hold the whole budget of
  // trees never used, each request building its tree in the cold memory of the oldest one (17%
  // more time on trace_gen's mixed capture). While paused, only the finished requests' keys are
  // kept; the first prompt that continues one of them resumes keeping. The drafts are the same
  // either way (a continued tree is the tree built from scratch).
  std::unique_ptr<Tree> TakeLongestPrefix(std::span<const uint32_t> prompt);

  void Clear();

  // Back to keeping trees, nothing kept.
  void Reset();

 private:
  static constexpr uint64_t kPauseAfter = 1024;
  static constexpr size_t kGhosts = 4096;

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

  std::unique_ptr<Tree> TakeKept(std::span<const uint32_t> prompt);
  std::unique_ptr<Tree> Drop(std::list<Entry>::iterator e);

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
class PrefixTrees {
 public:
  static constexpr size_t kMaxPrefix = 4096;  // tokens compared and saved at most

  // The saved tree whose sequence is the longest prefix of `prompt`, or null.
  const Tree* Longest(std::span<const uint32_t> prompt);

  // The most tokens `prompt` starts with in common with one of the last kRecent prompts (at most
  // kMaxPrefix); then `prompt` is one of them.
  size_t SharedWithRecent(std::span<const uint32_t> prompt);

  // Keeps a copy of `tree` (one sequence), pushing out the least recently used when full.
  void Save(const Tree& tree);

  void Clear();

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

}  // namespace llmtap::specdec::suffix_internal
