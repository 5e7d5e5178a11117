// The rules (S1-S4, B1-B3, D1-D6, L1-L5) are in llamacpp.h.
#include "specdec/llamacpp.h"

#include <algorithm>
#include <limits>

namespace llmtap::specdec {
namespace {

constexpr size_t kHashSlots = size_t{1} << 18;  // COMMON_NGRAM_HASH_MAP_SIZE
constexpr uint32_t kHashFactor = 2654435761u;   // the LCG factor of [NM]
constexpr uint32_t kMaxCount = 16380;           // COMMON_NGRAM_MAX_VALUE_COUNT

// h[a, a+len) == h[b, b+len); a range reaching past h's end is a mismatch.
bool SameAt(std::span<const uint32_t> h, size_t a, size_t b, size_t len) {
  if (a + len > h.size() || b + len > h.size()) return false;
  return std::equal(h.begin() + a, h.begin() + a + len, h.begin() + b);
}

// h[a, a+key.size()) == key; past h's end is a mismatch.
bool KeyAt(std::span<const uint32_t> h, size_t a, std::span<const uint32_t> key) {
  if (a + key.size() > h.size()) return false;
  return std::equal(key.begin(), key.end(), h.begin() + a);
}

}  // namespace

std::string_view LlamacppModeName(LlamacppMode mode) {
  switch (mode) {
    case LlamacppMode::kNgramSimple:
      return "ngram-simple";
    case LlamacppMode::kNgramMapK:
      return "ngram-map-k";
    case LlamacppMode::kNgramMapK4v:
      return "ngram-map-k4v";
  }
  return "?";
}

Status LlamacppOptions::Validate() const {
  if (size_n < 1 || size_n > 1024) {
    return Status::InvalidArgument("size_n must be in 1..1024 (llama-server's range)");
  }
  if (size_m < 1 || size_m > 1024) {
    return Status::InvalidArgument("size_m must be in 1..1024 (llama-server's range)");
  }
  if (min_hits < 1) return Status::InvalidArgument("min_hits must be >= 1");
  return Status::Ok();
}

LlamacppProposer::LlamacppProposer(const LlamacppOptions& options) : options_(options) { Reset(); }

void LlamacppProposer::Reset() {
  keys_.clear();
  key_map_.assign(options_.mode == LlamacppMode::kNgramSimple ? 0 : kHashSlots, 0);
  key_map_last_idx_ = 0;
  size_last_begin_ = 0;
  idx_last_check_ = 0;
  last_draft_created_ = false;
  last_draft_key_ = 0;
  last_draft_value_ = 0;
}

uint32_t LlamacppProposer::HashAt(std::span<const uint32_t> tokens, size_t start) const {
  uint32_t h = 0;
  for (size_t i = 0; i < options_.size_n; ++i) h = h * kHashFactor + tokens[start + i];
  return h;
}

void LlamacppProposer::Begin(std::span<const uint32_t> prompt) {
  if (options_.mode == LlamacppMode::kNgramSimple) return;
  const size_t n = options_.size_n, m = options_.size_m;
  const size_t size_begin = prompt.size();
  size_t cleanup = size_last_begin_;  // B1
  if (cleanup > size_begin) cleanup = size_begin > n + m ? size_begin - n - m : 0;
  if (size_begin < idx_last_check_) {  // B2
    for (uint32_t& p : key_map_) {
      if (p != 0 && p >= cleanup) p = 0;
    }
    key_map_last_idx_ = cleanup > 0 ? cleanup - 1 : 0;
    const bool key_only = options_.mode == LlamacppMode::kNgramMapK;
    for (size_t i = keys_.size(); i-- > 0;) {
      Key& key = keys_[i];
      if (key.idx >= cleanup) {
        keys_.erase(keys_.begin() + static_cast<ptrdiff_t>(i));
        continue;
      }
      if (key_only) continue;
      for (int j = kValues - 1; j >= 0; --j) {
        if (key.values[j].idx != 0 && key.values[j].idx >= cleanup) {
          for (int k = j; k < kValues - 1; ++k) key.values[k] = key.values[k + 1];
          key.values[kValues - 1].idx = 0;  // its n_accepted stays, as in [NM]
          key.values[kValues - 1].num = 0;
        }
      }
      if (key.values[0].idx == 0) keys_.erase(keys_.begin() + static_cast<ptrdiff_t>(i));
    }
  }
  idx_last_check_ = size_begin;  // B3
  size_last_begin_ = size_begin;
}

void LlamacppProposer::Draft(std::span<const uint32_t> h, uint32_t s,
                             std::vector<uint32_t>* draft) {
  draft->clear();
  if (options_.mode == LlamacppMode::kNgramSimple) {
    DraftSimple(h, s, draft);
  } else {
    DraftMap(h, s, draft);
  }
}

void LlamacppProposer::DraftSimple(std::span<const uint32_t> h, uint32_t s,
                                   std::vector<uint32_t>* draft) const {
  const size_t n = options_.size_n, m = options_.size_m, len = h.size();
  if (len <= n + m + 1) return;  // S1
  // S2: the key is h[len-n+1, len) then s; S3: the most recent match at j >= 1.
  for (size_t j = len - n - 1; j > 0; --j) {
    if (h[j + n - 1] != s || !SameAt(h, j, len - n + 1, n - 1)) continue;
    const size_t copy = std::min(m, len - (j + n));  // S4
    if (copy < n) return;
    draft->assign(h.begin() + static_cast<ptrdiff_t>(j + n),
                  h.begin() + static_cast<ptrdiff_t>(j + n + copy));
    return;
  }
}

void LlamacppProposer::DraftMap(std::span<const uint32_t> h, uint32_t s,
                                std::vector<uint32_t>* draft) {
  last_draft_created_ = false;
  last_draft_key_ = 0;
  last_draft_value_ = 0;
  const size_t n = options_.size_n, m = options_.size_m, len = h.size();
  if (len < 2 * n + m) return;  // D1
  idx_last_check_ = len;
  key_.assign(h.end() - static_cast<ptrdiff_t>(n - 1), h.end());
  key_.push_back(s);
  const size_t last = len - n - m - 1;  // the latest start that leaves m tokens after the key

  // D2
  size_t match = 0;
  uint32_t hk = 0;
  for (uint32_t t : key_) hk = hk * kHashFactor + t;
  const size_t stored = key_map_[hk % kHashSlots];
  if (stored != 0 && stored < last && KeyAt(h, stored, key_)) match = stored;
  const size_t prompt_last = size_last_begin_ > n + m + 1 ? size_last_begin_ - n - m - 1 : 0;
  if (match == 0 && size_last_begin_ > n + m + 1) {
    for (size_t j = prompt_last; j > key_map_last_idx_; --j) {
      if (KeyAt(h, j, key_)) {
        match = j;
        break;
      }
    }
  }
  if (match == 0) {
    for (size_t j = last; j > size_last_begin_ && j > key_map_last_idx_; --j) {
      if (KeyAt(h, j, key_)) {
        match = j;
        break;
      }
    }
  }
  // D3
  auto insert = [&](size_t j) {
    uint32_t& slot = key_map_[HashAt(h, j) % kHashSlots];
    if (slot == 0) slot = static_cast<uint32_t>(j);
  };
  if (size_last_begin_ > n + m + 1) {
    for (size_t j = prompt_last; j > key_map_last_idx_; --j) insert(j);
  }
  for (size_t j = last; j > size_last_begin_ && j > key_map_last_idx_; --j) insert(j);
  key_map_last_idx_ = std::max(key_map_last_idx_, last);
  if (match == 0) return;

  // D4
  size_t offset = keys_.size();
  for (size_t i = 0; i < keys_.size(); ++i) {
    if (KeyAt(h, keys_[i].idx, key_)) {
      offset = i;
      break;
    }
  }
  if (offset == keys_.size()) {
    Key& k = keys_.emplace_back();
    k.idx = match;
    for (Value& v : k.values) v.n_accepted = static_cast<uint32_t>(m);
  }
  Key& key = keys_[offset];
  key.num = std::min(key.num + 1, kMaxCount);

  auto emit = [&](int value) {
    const size_t count = std::min<size_t>(m, key.values[value].n_accepted);
    draft->assign(h.begin() + static_cast<ptrdiff_t>(match + n),
                  h.begin() + static_cast<ptrdiff_t>(match + n + count));
    last_draft_created_ = true;
    last_draft_key_ = offset;
    last_draft_value_ = value;
  };
  if (options_.mode == LlamacppMode::kNgramMapK) return emit(0);  // D5

  // D6
  if (key.num < options_.min_hits) return;
  for (size_t i = key.stat_idx; i <= match; ++i) {
    if (!KeyAt(h, i, key_)) continue;
    const size_t begin = i + n;
    for (Value& v : key.values) {
      if (v.idx == 0) {
        v = Value{begin, 1, static_cast<uint32_t>(m)};
        break;
      }
      if (SameAt(h, begin, v.idx, m)) {
        v.num = std::min(v.num + 1, kMaxCount);
        break;
      }
    }
  }
  key.stat_idx = match;
  uint32_t max_count = 0;
  int best = 0;
  for (int v = 0; v < kValues; ++v) {
    if (key.values[v].num > max_count) {
      max_count = key.values[v].num;
      best = v;
    }
  }
  uint32_t others = 0;
  for (int v = 0; v < kValues; ++v) {
    if (v != best) others += key.values[v].num;
  }
  if (others > 0 && max_count < 2 * others) return;
  emit(best);
}

void LlamacppProposer::Accept(uint32_t accepted) {
  if (!last_draft_created_) return;
  // [NM] takes it as a uint16_t; a draft is at most size_m <= 1024 tokens.
  keys_[last_draft_key_].values[last_draft_value_].n_accepted = accepted;
}

SpecStats LlamacppProposer::Simulate(std::span<const uint32_t> prompt,
                                     std::span<const uint32_t> response,
                                     std::optional<uint64_t> n_predict,
                                     std::vector<SimStep>* trace) {
  if (trace) trace->clear();
  SpecStats st;
  st.accepted_per_pos.assign(options_.size_m, 0);
  const size_t n = response.size();
  st.tokens = n;
  Begin(prompt);  // L1
  if (n == 0) return st;
  history_.assign(prompt.begin(), prompt.end());
  uint32_t sampled = response[0];
  size_t pos = 1;  // n_decoded: the tokens sampled so far, `sampled` included
  while (pos < n) {
    ++st.steps;
    // L2, in signed arithmetic as the server's ints.
    int64_t n_max = std::numeric_limits<int64_t>::max();
    if (options_.n_ctx > 0) {
      n_max = static_cast<int64_t>(options_.n_ctx) - static_cast<int64_t>(history_.size()) - 2;
    }
    if (n_predict) {
      const int64_t remaining = static_cast<int64_t>(*n_predict) - static_cast<int64_t>(pos);
      if (remaining > 0) n_max = std::min(n_max, remaining - 1);
    }
    draft_.clear();
    if (n_max > 0) {
      Draft(history_, sampled, &draft_);  // L3
      if (static_cast<int64_t>(draft_.size()) > n_max) draft_.resize(static_cast<size_t>(n_max));
    }
    if (trace) trace->push_back(SimStep{draft_, 0});
    size_t accepted = 0;
    if (draft_.empty()) {
      ++st.steps_without_draft;
    } else {
      accepted = VerifyDraft(draft_, response, pos, n, &st);  // L4
      if (trace) trace->back().accepted = static_cast<uint32_t>(accepted);
      if (options_.mode != LlamacppMode::kNgramSimple) Accept(static_cast<uint32_t>(accepted));
    }
    // L5
    history_.push_back(sampled);
    history_.insert(history_.end(), response.begin() + static_cast<ptrdiff_t>(pos),
                    response.begin() + static_cast<ptrdiff_t>(pos + accepted));
    pos += accepted;
    if (pos >= n) break;
    sampled = response[pos++];
  }
  return st;
}

}  // namespace llmtap::specdec
