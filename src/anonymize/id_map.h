// Dense block ids: keyed ids (block_hash.h) renamed 0, 1, 2, ... in the order they are first
// seen, as the public Mooncake traces number their blocks. Optionally carried across runs in
// an id map file, so that several captures anonymized one after another with the same key
// file share one numbering (a block common to two files gets the same id in both).
//
// Id map file (text, 0600): a header line
//   llmtap-anonymize-id-map v1 block_size=<B> key=<32 hex digits: the key's fingerprint>
// then one keyed id per line (32 hex digits); the id on line k+2 has dense id k. It holds
// only keyed ids: without the key they reveal nothing beyond which blocks are equal.
//
// Threads: one thread (the in-order stage of AnonymizeTrace).
#pragma once

#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "anonymize/block_hash.h"
#include "common/status.h"

namespace llmtap::anonymize {

class DenseIds {
 public:
  // The dense id of `id`, numbering it when new. *hit: `id` was already seen since Load
  // (ids loaded from the map do not count as seen: the hit rate is this file's).
  uint64_t Get(const KeyedId& id, bool* hit) {
    auto [it, inserted] = map_.try_emplace(id, Entry{kNoNumber, false});
    *hit = it->second.seen;
    if (!*hit) {
      it->second.seen = true;
      ++unique_in_file_;
    }
    if (it->second.dense == kNoNumber) {
      it->second.dense = order_.size();
      order_.push_back(id);
    }
    return it->second.dense;
  }

  // Marks `id` seen without numbering it (a block of a prompt whose ids are not all written:
  // a session turn written as its new content, anonymize.h). True: it was seen before.
  bool See(const KeyedId& id) {
    auto [it, inserted] = map_.try_emplace(id, Entry{kNoNumber, true});
    const bool hit = !inserted && it->second.seen;
    it->second.seen = true;
    if (!hit) ++unique_in_file_;
    return hit;
  }

  // The dense id of `id`, numbering it when it has none; seen or not, it stays so.
  uint64_t Number(const KeyedId& id) {
    auto [it, inserted] = map_.try_emplace(id, Entry{kNoNumber, false});
    if (it->second.dense == kNoNumber) {
      it->second.dense = order_.size();
      order_.push_back(id);
    }
    return it->second.dense;
  }

  // Reads an id map. A missing file is not an error (*loaded stays false); a map made with
  // another key or block size is refused.
  Status Load(const std::string& path, uint32_t block_size, const KeyedId& fingerprint,
              bool* loaded);
  // Writes every id (the loaded ones first) to `path`, replacing it atomically.
  Status Save(const std::string& path, uint32_t block_size, const KeyedId& fingerprint) const;

  // Numbered ids (those loaded and those numbered since).
  size_t size() const { return order_.size(); }
  // Distinct ids seen since Load.
  uint64_t unique_in_file() const { return unique_in_file_; }

 private:
  static constexpr uint64_t kNoNumber = UINT64_MAX;
  struct Entry {
    uint64_t dense;  // kNoNumber: seen, never numbered
    bool seen;       // since Load
  };
  std::unordered_map<KeyedId, Entry, KeyedIdHash> map_;
  std::vector<KeyedId> order_;
  uint64_t unique_in_file_ = 0;
};

}  // namespace llmtap::anonymize
