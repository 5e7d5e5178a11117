#include "specdec/ngram.h"

#include <algorithm>
#include <bit>
#include <cassert>
#include <string>

#include "common/mix64.h"

namespace llmtap::specdec {
namespace {

constexpr uint64_t kPolyBase = 0x100000001B3ULL;  // odd: the polynomial hash is mod 2^64
constexpr uint64_t kLengthSalt = 0x9E3779B97F4A7C15ULL;

}  // namespace

Status NgramOptions::Validate() const {
  if (min_n < 1) return Status::InvalidArgument("n-gram minimum must be >= 1");
  if (max_n < min_n) {
    return Status::InvalidArgument("n-gram maximum " + std::to_string(max_n) +
                                   " is below the minimum " + std::to_string(min_n));
  }
  if (k < 1) return Status::InvalidArgument("the number of speculative tokens must be >= 1");
  return Status::Ok();
}

NgramProposer::NgramProposer(const NgramOptions& options) : options_(options) {
  assert(options_.Validate().ok());
  suffix_hash_.assign(options_.max_n, 0);
  earliest_.assign(options_.max_n + 1, Earliest{});
  Prepare(0);
}

// --- The one-shot proposer: one KMP pass over the context read backwards. ---
//
// Reading the context backwards turns "a suffix of the context occurs earlier" into "a prefix
// of the reversed context occurs again further on". The pattern is the reversed context's first
// m = min(max_n, N - 1) tokens; the text is the reversed context from index 1. At text index i
// the KMP state q is the longest pattern prefix ending there, i.e. the longest suffix (<= m) of
// the context that also occurs ending at forward index N - 1 - i + q - 1. The longest q seen
// wins, and among equal ones the largest i, which is the earliest forward start.
void NgramProposer::Propose(std::span<const uint32_t> ctx, std::vector<uint32_t>* draft) const {
  draft->clear();
  const size_t n_tokens = ctx.size();
  if (n_tokens < options_.min_n) return;
  size_t k = options_.k;
  if (options_.max_model_len > 0) {
    if (n_tokens >= options_.max_model_len) return;
    k = std::min<uint64_t>(k, options_.max_model_len - n_tokens);
  }
  if (n_tokens < 2) return;
  const size_t m = std::min<size_t>(options_.max_n, n_tokens - 1);
  if (m < options_.min_n) return;
  auto pat = [&](size_t j) { return ctx[n_tokens - 1 - j]; };
  std::vector<uint32_t> fail(m, 0);  // fail[j]: longest proper border of pat[0..j]
  for (size_t j = 1, q = 0; j < m; ++j) {
    while (q > 0 && pat(j) != pat(q)) q = fail[q - 1];
    if (pat(j) == pat(q)) ++q;
    fail[j] = static_cast<uint32_t>(q);
  }
  size_t best = 0, best_i = 0;
  for (size_t i = 1, q = 0; i < n_tokens; ++i) {
    const uint32_t c = ctx[n_tokens - 1 - i];
    while (q > 0 && pat(q) != c) q = fail[q - 1];
    if (pat(q) == c) ++q;
    if (q > 0 && q >= best) {
      best = q;
      best_i = i;
    }
    if (q == m) q = fail[m - 1];
  }
  if (best < options_.min_n) return;
  const size_t start = n_tokens - 1 - best_i + best;
  const size_t len = std::min(k, n_tokens - start);
  draft->assign(ctx.begin() + static_cast<ptrdiff_t>(start),
                ctx.begin() + static_cast<ptrdiff_t>(start + len));
}

// --- The incremental index. ---

size_t NgramProposer::CapacityFor(size_t tokens) const {
  const size_t inserts = tokens * (options_.max_n - options_.min_n + 1);
  return std::bit_ceil(std::max<size_t>(64, inserts + inserts / 2 + 1));
}

void NgramProposer::Prepare(size_t tokens) {
  ++version_;
  context_.clear();
  context_.reserve(tokens);
  std::fill(suffix_hash_.begin(), suffix_hash_.end(), 0);
  slots_.assign(CapacityFor(tokens), Slot{});  // reuses the allocation when it is big enough
  used_ = 0;
}

void NgramProposer::Reset() { Prepare(0); }

void NgramProposer::Reserve(size_t tokens) {
  context_.reserve(tokens);
  const size_t cap = CapacityFor(tokens);
  if (cap > slots_.size()) Rehash(cap);
}

void NgramProposer::SetHashBitsForTesting(int bits) {
  key_mask_ = bits >= 64 ? ~uint64_t{0} : (uint64_t{1} << std::max(bits, 1)) - 1;
  Reset();
}

void NgramProposer::Rehash(size_t capacity) {
  std::vector<Slot> old;
  old.swap(slots_);
  slots_.assign(capacity, Slot{});
  const size_t mask = capacity - 1;
  for (const Slot& s : old) {
    if (s.key == 0) continue;
    size_t i = s.key & mask;
    while (slots_[i].key != 0) i = (i + 1) & mask;
    slots_[i] = s;
  }
}

uint64_t NgramProposer::Key(uint32_t n) const {
  const uint64_t key = Mix64(suffix_hash_[n - 1] ^ (n * kLengthSalt)) & key_mask_;
  return key == 0 ? 1 : key;
}

// An entry is identified by (key, n): windows of one length are inserted in the order of their
// starts, so the entry keeps the earliest window of that length with that key. Keeping lengths
// apart only saves fallback scans (a window of another length stored first under the same key
// would send lookups of this length to the scan); exactness does not need it.
void NgramProposer::Insert(uint64_t key, uint32_t n, uint32_t start) {
  if ((used_ + 1) * 10 > slots_.size() * 7) Rehash(slots_.size() * 2);
  const size_t mask = slots_.size() - 1;
  size_t i = key & mask;
  while (true) {
    Slot& s = slots_[i];
    if (s.key == key && s.n == n) return;  // keep the first (earliest) start
    if (s.key == 0) {
      s.key = key;
      s.n = n;
      s.start = start;
      ++used_;
      return;
    }
    i = (i + 1) & mask;
  }
}

uint32_t NgramProposer::Find(uint64_t key, uint32_t n) const {
  const size_t mask = slots_.size() - 1;
  for (size_t i = key & mask;; i = (i + 1) & mask) {
    const Slot& s = slots_[i];
    if (s.key == key && s.n == n) return s.start;
    if (s.key == 0) return kNone;
  }
}

void NgramProposer::Append(uint32_t token) {
  ++version_;
  context_.push_back(token);
  const size_t n_tokens = context_.size();
  const uint32_t top = static_cast<uint32_t>(std::min<size_t>(options_.max_n, n_tokens));
  const uint64_t t = uint64_t{token} + 1;
  for (uint32_t n = top; n >= 2; --n) suffix_hash_[n - 1] = suffix_hash_[n - 2] * kPolyBase + t;
  suffix_hash_[0] = t;
  for (uint32_t n = options_.min_n; n <= top; ++n) {
    Insert(Key(n), n, static_cast<uint32_t>(n_tokens - n));
  }
}

void NgramProposer::Append(std::span<const uint32_t> tokens) {
  Reserve(context_.size() + tokens.size());
  for (uint32_t t : tokens) Append(t);
}

uint32_t NgramProposer::ScanEarliestEarlier(uint32_t n) const {
  const size_t n_tokens = context_.size();
  const uint32_t* suffix = context_.data() + (n_tokens - n);
  for (size_t s = 0; s + n < n_tokens; ++s) {
    if (std::equal(suffix, suffix + n, context_.data() + s)) return static_cast<uint32_t>(s);
  }
  return kNone;
}

uint32_t NgramProposer::EarliestEarlier(uint32_t n) const {
  const size_t n_tokens = context_.size();
  const uint32_t s = Find(Key(n), n);
  if (s == kNone) return ScanEarliestEarlier(n);  // cannot happen: the suffix itself is stored
  // The table holds the first n-token window with this key. If that is the suffix itself, no
  // earlier n-token window has the key, so none has the suffix's tokens.
  if (s + n >= n_tokens) return kNone;
  const uint32_t* suffix = context_.data() + (n_tokens - n);
  if (std::equal(suffix, suffix + n, context_.data() + s)) return s;
  return ScanEarliestEarlier(n);  // a hash collision: the stored window is another n-gram
}

void NgramProposer::ProposeNext(std::vector<uint32_t>* draft, uint32_t num_spec_tokens) {
  ProposeNext(draft, num_spec_tokens, options_.min_n, options_.max_n);
}

void NgramProposer::ProposeNext(std::vector<uint32_t>* draft, uint32_t num_spec_tokens,
                                uint32_t min_n, uint32_t max_n) {
  assert(options_.min_n <= min_n && min_n <= max_n && max_n <= options_.max_n);
  draft->clear();
  const size_t n_tokens = context_.size();
  if (n_tokens < min_n || n_tokens < 2) return;
  size_t k = num_spec_tokens;
  if (options_.max_model_len > 0) {
    if (n_tokens >= options_.max_model_len) return;
    k = std::min<uint64_t>(k, options_.max_model_len - n_tokens);
  }
  const uint32_t hi = static_cast<uint32_t>(std::min<size_t>(max_n, n_tokens - 1));
  for (uint32_t n = hi; n >= min_n; --n) {
    // Points of a sweep at one position ask for the same n: looked up once per context.
    Earliest& e = earliest_[n];
    if (e.version != version_) e = Earliest{version_, EarliestEarlier(n)};
    const uint32_t s = e.start;
    if (s == kNone) continue;
    const size_t start = s + n;
    const size_t len = std::min(k, n_tokens - start);
    draft->assign(context_.begin() + static_cast<ptrdiff_t>(start),
                  context_.begin() + static_cast<ptrdiff_t>(start + len));
    return;
  }
}

// --- Replay of one request. ---

SpecStats NgramProposer::Simulate(std::span<const uint32_t> prompt,
                                  std::span<const uint32_t> response, std::vector<SimStep>* trace) {
  return ReplayGreedy(
      options_.k, options_.max_model_len, prompt, response, draft_, trace,
      [&](size_t n) {
        Prepare(prompt.size() + n);
        for (uint32_t t : prompt) Append(t);
      },
      [&](std::span<const uint32_t> tokens, size_t) {
        for (uint32_t t : tokens) Append(t);
      },
      [&](std::vector<uint32_t>* draft) { ProposeNext(draft); });
}

void NgramProposer::SimulateSweep(std::span<const uint32_t> prompt,
                                  std::span<const uint32_t> response, std::span<const uint32_t> ks,
                                  std::vector<SpecStats>* out) {
  SimulateSweep(prompt, response, ks, {}, out);
}

void NgramProposer::SimulateSweep(std::span<const uint32_t> prompt,
                                  std::span<const uint32_t> response, std::span<const uint32_t> ks,
                                  std::span<const std::pair<uint32_t, uint32_t>> ranges,
                                  std::vector<SpecStats>* out) {
  assert(ranges.empty() || ranges.size() == ks.size());
  ReplayGreedySweep(
      ks, prompt, response, draft_, out,
      [&](size_t n) {
        Prepare(prompt.size() + n);
        for (uint32_t t : prompt) Append(t);
      },
      [&](std::span<const uint32_t> tokens, size_t) {
        for (uint32_t t : tokens) Append(t);
      },
      [&](size_t i, std::vector<uint32_t>* draft) {
        if (ranges.empty()) {
          ProposeNext(draft, ks[i]);
        } else {
          ProposeNext(draft, ks[i], ranges[i].first, ranges[i].second);
        }
      });
}

SpecStats Simulate(const NgramOptions& options, std::span<const uint32_t> prompt,
                   std::span<const uint32_t> response, std::vector<SimStep>* trace) {
  NgramProposer proposer(options);
  return proposer.Simulate(prompt, response, trace);
}

}  // namespace llmtap::specdec
