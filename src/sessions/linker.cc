// The linking half of `llmtap sessions` (sessions.h): prefix hashes of message lists, the
// open-addressing index from a prefix to the conversations ending in it, and SessionLinker,
// which continues, starts and closes conversations. One thread (the reader) uses a linker.
#include <cstring>

#include "sessions/sessions.h"

namespace llmtap::sessions {

namespace {

// 64x64 -> 128-bit multiply folded to 64 bits (the wyhash/komihash step): one multiply mixes 16
// bytes, so hashing runs far faster than the JSON can be read.
__extension__ typedef unsigned __int128 U128;
inline uint64_t Fold(uint64_t a, uint64_t b) {
  U128 r = static_cast<U128>(a) * b;
  return static_cast<uint64_t>(r) ^ static_cast<uint64_t>(r >> 64);
}

inline uint64_t Load64(const char* p) {
  uint64_t w;
  std::memcpy(&w, p, 8);
  return w;
}

constexpr uint64_t kK0 = 0xa0761d6478bd642full, kK1 = 0xe7037ed1a0b428dbull,
                   kK2 = 0x8ebc6af09c88c6e3ull, kK3 = 0x589965cc75374cc3ull;

uint64_t HashBytes(std::string_view s) {
  const char* p = s.data();
  size_t n = s.size();
  uint64_t a = kK0 ^ n, b = kK1 + n;
  while (n >= 32) {
    a = Fold(Load64(p) ^ kK2, Load64(p + 8) ^ a);
    b = Fold(Load64(p + 16) ^ kK3, Load64(p + 24) ^ b);
    p += 32;
    n -= 32;
  }
  if (n >= 16) {
    a = Fold(Load64(p) ^ kK2, Load64(p + 8) ^ a);
    p += 16;
    n -= 16;
  }
  uint64_t t[2] = {0, 0};
  std::memcpy(t, p, n);
  b = Fold(t[0] ^ kK3, t[1] ^ b);
  return Fold(a ^ kK1, b ^ kK2);
}

}  // namespace

uint64_t ChainMessage(uint64_t prefix_hash, std::string_view message_json) {
  return Fold(prefix_hash ^ kK3, HashBytes(message_json) ^ kK0);
}

// ---- KeyIndex ----

const uint32_t* KeyIndex::Find(uint64_t key) const {
  if (slots_.empty()) return nullptr;
  const size_t mask = slots_.size() - 1;
  for (size_t i = key & mask;; i = (i + 1) & mask) {
    const Slot& s = slots_[i];
    if (!s.used) return nullptr;
    if (s.key == key) return &s.value;
  }
}

uint32_t* KeyIndex::Insert(uint64_t key, bool* inserted) {
  if ((size_ + 1) * 2 > slots_.size()) Grow();
  const size_t mask = slots_.size() - 1;
  for (size_t i = key & mask;; i = (i + 1) & mask) {
    Slot& s = slots_[i];
    if (s.used && s.key == key) {
      if (inserted) *inserted = false;
      return &s.value;
    }
    if (!s.used) {
      s.used = true;
      s.key = key;
      ++size_;
      if (inserted) *inserted = true;
      return &s.value;
    }
  }
}

void KeyIndex::Erase(uint64_t key) {
  if (slots_.empty()) return;
  const size_t mask = slots_.size() - 1;
  size_t i = key & mask;
  while (slots_[i].used && slots_[i].key != key) i = (i + 1) & mask;
  if (!slots_[i].used) return;
  // Backward shift: pull later entries of the probe run into the hole, so lookups never need
  // tombstones.
  for (size_t j = (i + 1) & mask; slots_[j].used; j = (j + 1) & mask) {
    size_t home = slots_[j].key & mask;
    // Move j into the hole at i unless its home lies cyclically in (i, j].
    bool stays = i <= j ? (home > i && home <= j) : (home > i || home <= j);
    if (stays) continue;
    slots_[i] = slots_[j];
    i = j;
  }
  slots_[i] = Slot{};
  --size_;
}

void KeyIndex::Grow() {
  std::vector<Slot> old;
  old.swap(slots_);
  slots_.resize(old.empty() ? 1024 : old.size() * 2);
  const size_t mask = slots_.size() - 1;
  for (const Slot& s : old) {
    if (!s.used) continue;
    size_t i = s.key & mask;
    while (slots_[i].used) i = (i + 1) & mask;
    slots_[i] = s;
  }
}

// ---- SessionLinker ----

uint32_t SessionLinker::Pick(uint32_t head, double start_ms) {
  uint32_t best = kNone, late = kNone;
  uint32_t eligible = 0, whole = 0, truncated = 0;
  uint32_t scanned = 0;
  // Lists are newest first. The cap keeps a capture of one conversation replayed many times
  // over (a load test: thousands of open look-alikes) linear instead of quadratic.
  for (uint32_t i = head; i != kNone && scanned < kMaxCandidates; i = conversations_[i].next) {
    ++scanned;
    const Conversation& c = conversations_[i];
    if (!Eligible(c, start_ms)) {
      if (Late(c, start_ms) &&
          (late == kNone || *c.last_end_ms < *conversations_[late].last_end_ms)) {
        late = i;
      }
      continue;
    }
    ++eligible;
    whole += c.answer == trace::AnswerText::kWhole;
    truncated += c.answer == trace::AnswerText::kTruncated;
    if (best == kNone || Likelier(c, conversations_[best])) best = i;
  }
  needs_answer_ = eligible > 1 && whole > 0;
  pick_ = eligible <= 1  ? PickKind::kOnly
          : truncated    ? PickKind::kGuessTruncated
                         : PickKind::kGuessNoText;  // when !needs_answer_
  late_ = best == kNone && late != kNone;
  return late_ ? late : best;
}

uint32_t SessionLinker::PickByAnswer(uint32_t head, double start_ms, std::optional<uint64_t> key,
                                     uint32_t by_time) {
  if (!key) {
    pick_ = PickKind::kGuessNoMatch;
    return by_time;
  }
  uint32_t match = kNone, unknown = kNone;
  uint32_t matches = 0, truncated = 0, scanned = 0;
  for (uint32_t i = head; i != kNone && scanned < kMaxCandidates; i = conversations_[i].next) {
    ++scanned;
    const Conversation& c = conversations_[i];
    if (!Eligible(c, start_ms)) continue;
    if (c.answer == trace::AnswerText::kWhole) {
      if (c.answer_key != *key) continue;  // answered something else: not the predecessor
      ++matches;
      if (match == kNone || Likelier(c, conversations_[match])) match = i;
    } else {
      truncated += c.answer == trace::AnswerText::kTruncated;
      if (unknown == kNone || Likelier(c, conversations_[unknown])) unknown = i;
    }
  }
  if (matches > 0) {
    pick_ = matches == 1 ? PickKind::kByAnswer : PickKind::kGuessSameAnswer;
    return match;
  }
  if (unknown != kNone) {
    pick_ = truncated ? PickKind::kGuessTruncated : PickKind::kGuessNoText;
    return unknown;
  }
  pick_ = PickKind::kGuessNoMatch;
  return by_time;
}

TurnResult SessionLinker::Continue(uint32_t index, const TurnInput& turn) {
  TurnResult r;
  r.linked = true;
  r.pick = pick_;
  r.ambiguous = pick_ != PickKind::kOnly && pick_ != PickKind::kByAnswer;
  r.late = late_;
  Unlink(index);
  Conversation& c = conversations_[index];
  r.conversation = c.first_line;
  r.turn = c.turns;
  r.gap_ms = turn.timestamp_ms - c.last_start_ms;
  if (c.last_end_ms) r.think_ms = turn.timestamp_ms - *c.last_end_ms;
  c.key = turn.prefix.back();
  c.last_line = turn.line;
  c.last_start_ms = turn.timestamp_ms;
  c.last_end_ms = turn.response_end_ms;
  c.answer = turn.answer;
  c.answer_key = turn.answer_key;
  ++c.turns;
  Link(index);
  return r;
}

TurnResult SessionLinker::Start(const TurnInput& turn, bool had_history) {
  uint32_t index;
  if (!free_.empty()) {
    index = free_.back();
    free_.pop_back();
  } else {
    index = static_cast<uint32_t>(conversations_.size());
    conversations_.emplace_back();
  }
  Conversation& c = conversations_[index];
  c = Conversation{};
  c.key = turn.prefix.empty() ? kChainSeed : turn.prefix.back();
  c.first_line = c.last_line = turn.line;
  c.last_start_ms = turn.timestamp_ms;
  c.last_end_ms = turn.response_end_ms;
  c.answer = turn.answer;
  c.answer_key = turn.answer_key;
  c.turns = 1;
  c.live = true;
  c.first_turn_had_history = had_history;
  Link(index);
  peak_open_ = std::max(peak_open_, open());
  TurnResult r;
  r.conversation = turn.line;
  return r;
}

void SessionLinker::Link(uint32_t index) {
  bool inserted = false;
  uint32_t* head = by_last_turn_.Insert(conversations_[index].key, &inserted);
  conversations_[index].next = inserted ? kNone : *head;
  *head = index;
}

void SessionLinker::Unlink(uint32_t index) {
  uint32_t* head = by_last_turn_.Find(conversations_[index].key);
  uint32_t next = conversations_[index].next;
  if (*head == index) {
    if (next == kNone) {
      by_last_turn_.Erase(conversations_[index].key);
    } else {
      *head = next;
    }
    return;
  }
  uint32_t i = *head;
  while (conversations_[i].next != index) i = conversations_[i].next;
  conversations_[i].next = next;
}

void SessionLinker::Close(uint32_t index) {
  Unlink(index);
  Conversation& c = conversations_[index];
  closed_.push_back({c.first_line, c.turns, c.first_turn_had_history});
  c.live = false;
  free_.push_back(index);
}

void SessionLinker::Sweep(double now_ms) {
  for (uint32_t i = 0; i < conversations_.size(); ++i) {
    if (conversations_[i].live && conversations_[i].idle_since() < now_ms - options_.window_ms) {
      Close(i);
    }
  }
}

void SessionLinker::MaybeSweep(double now_ms) {
  // A quarter window between sweeps: each sweep is O(open conversations), and a conversation
  // outlives its window by at most a quarter before its memory is reused (Pick already treats
  // it as closed).
  if (swept_once_ && now_ms < next_sweep_ms_) return;
  swept_once_ = true;
  Sweep(now_ms);
  next_sweep_ms_ = now_ms + options_.window_ms / 4;
}

void SessionLinker::CloseAll() {
  for (uint32_t i = 0; i < conversations_.size(); ++i) {
    if (conversations_[i].live) Close(i);
  }
}

// ---- reading rows ----

}  // namespace llmtap::sessions
