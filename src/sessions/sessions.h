// `llmtap sessions`: conversations inferred from content. A chat request continues an earlier
// one when that request's whole `messages` list, followed by an assistant message (the answer
// it got, which the capture itself never holds; the outcomes sidecar does with
// capture_responses, which tells look-alike conversations apart), is a prefix of its own
// `messages`; tool calls and tool results are messages like any other, so agent loops link the
// same way. A Responses API row naming a previous_response_id continues, exactly, the
// conversation of the row whose outcome has that response_id. Every row of
// a conversation gets one `session_id`, appended after the payload exactly as the capture
// writer appends one (capture/session.h); every other byte and the order of the rows stay.
//
// Two parts: SessionLinker, the linking rule over message-prefix hashes (no JSON, no I/O; unit
// tested on its own), and InferSessions, the streaming pass over a capture (LineReader,
// simdjson on-demand over `payload.messages`, the outcomes sidecar via trace::OutcomeJoin).
//
// Memory is bounded by the conversations open at once (~120 bytes each): a conversation idle
// for longer than the window (trace time) is closed and forgotten. Note that a request nobody
// continues (single-turn traffic) stays open for a whole window too. The outcomes sidecar,
// when used, is held whole (trace/outcomes.h: 72 bytes per outcome).
//
// Threads: one SessionLinker, and one InferSessions call, per thread; nothing is shared.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "trace/outcomes.h"
#include "trace/stats.h"
#include "trace/tool_common.h"

namespace llmtap::sessions {

// 64-bit hash of one message's JSON bytes, chained onto the hash of the messages before it:
// ChainMessage(ChainMessage(kChainSeed, m0), m1) stands for the prefix [m0, m1]. Collisions
// (2^-64 per pair) could link two unrelated requests; nothing else depends on it.
inline constexpr uint64_t kChainSeed = 0x243f6a8885a308d3ull;
uint64_t ChainMessage(uint64_t prefix_hash, std::string_view message_json);

struct LinkerOptions {
  // A conversation whose last turn started (or, when known, whose response ended) more than
  // this long before a request is closed: the request cannot continue it.
  double window_ms = 30 * 60 * 1000.0;
  // A turn can only continue a conversation whose last response had ended when the turn was
  // sent. Capture timestamps are whole milliseconds (floored) and latency is measured from
  // the request head, so a true successor may appear to start up to ~1 ms early.
  double clock_slack_ms = 2.0;
  // When no conversation that had ended by then qualifies at a join point, one whose recorded
  // end is at most this long after the request still continues (TurnResult::late): the request
  // holds its answer, so the client had it; a loaded host reads its clock late (the proxy's end
  // after the last bytes were written, a record's timestamp when it was queued, not when its
  // head arrived), by several milliseconds under load. The earliest such end wins.
  double late_ms = 100.0;
};

// One chat request as the linker sees it.
struct TurnInput {
  uint64_t line = 0;        // capture line (for the generated id and tie-breaking)
  double timestamp_ms = 0;  // non-decreasing across calls, ideally
  // timestamp + latency from the outcomes sidecar; nullopt when unknown.
  std::optional<double> response_end_ms;
  // prefix[i]: hash of messages[0..i] (ChainMessage over the first i+1 messages).
  std::span<const uint64_t> prefix;
  // What the outcomes sidecar holds of this turn's response text (capture_responses), and,
  // when it holds all of it, the answer's trace::AnswerKeyHasher key.
  trace::AnswerText answer = trace::AnswerText::kNone;
  uint64_t answer_key = 0;
};

// How a turn that continues a conversation was told from the other open conversations that
// end with the same turn (look-alikes: same messages so far).
enum class PickKind : uint8_t {
  kOnly,      // one conversation qualified: certain
  kByAnswer,  // several; the response text of exactly one is the assistant message at the join
  // Several, and the rule of SessionLinker::Add guessed (TurnResult::ambiguous), because:
  kGuessNoText,      // their response texts are not in the sidecar (capture_responses off)
  kGuessTruncated,   // some texts were cut at max_response_bytes, and no whole one matched
  kGuessNoMatch,     // every text was whole and none matched (or the message was unreadable)
  kGuessSameAnswer,  // several got the same answer (a deterministic server)
};

// What Add decided for one request.
struct TurnResult {
  uint64_t conversation = 0;        // the line of the conversation's first turn (its id)
  uint32_t turn = 0;                // 0 for a first turn
  bool linked = false;              // continues an earlier turn
  bool ambiguous = false;           // a guess among several (rule: see Add)
  bool late = false;  // its predecessor's recorded end was after it (within late_ms)
  PickKind pick = PickKind::kOnly;  // how it was told from its look-alikes (when linked)
  std::optional<double> think_ms;   // start - previous turn's response end (when known)
  double gap_ms = 0;                // start - previous turn's start
};

// A conversation as it is closed.
struct ClosedConversation {
  uint64_t first_line = 0;
  uint32_t turns = 0;
  bool first_turn_had_history = false;  // its first row already held an assistant message
};

// 64-bit key -> 32-bit value, open addressing with linear probing and backward-shift
// deletion: one flat array, no allocation per entry (a node-based map was the hot spot on
// single-turn traffic, where every request opens a conversation). Keys are hashes already.
class KeyIndex {
 public:
  const uint32_t* Find(uint64_t key) const;
  uint32_t* Find(uint64_t key) {
    return const_cast<uint32_t*>(static_cast<const KeyIndex*>(this)->Find(key));
  }
  // The value slot of `key`, inserted (value unset) when absent; *inserted tells which.
  uint32_t* Insert(uint64_t key, bool* inserted);
  void Erase(uint64_t key);
  size_t size() const { return size_; }

 private:
  struct Slot {
    uint64_t key = 0;
    uint32_t value = 0;
    bool used = false;
  };
  void Grow();
  std::vector<Slot> slots_;
  size_t size_ = 0;
};

// The linking rule. For a request with messages m[0..n), every i in [1, n) where m[i] is an
// assistant message is a possible join point: the turn continues a conversation whose last
// turn's messages were exactly m[0..i). The longest such prefix that an eligible open
// conversation ends with wins. Eligible: not closed by the window, last response ended by the
// request's timestamp (+ clock slack; unknown ends never exclude), and not continued since
// (a conversation is keyed by its last turn only, so a turn continued once is no longer a
// join point: two identical requests never continue the same conversation). Among several
// eligible conversations with the same last turn (two conversations that began with the same
// system prompt and user message and got the same answer -- the content cannot tell them
// apart by their messages), the response text tells them apart when the outcomes sidecar holds
// it (capture_responses): the assistant message at the join point is what a client puts back
// of its predecessor's answer, so the one conversation whose last answer has the same key
// (trace::AnswerKeyHasher: content text, tool calls' names and arguments) is certainly it
// (PickKind::kByAnswer). Otherwise it is a guess (TurnResult::ambiguous): among those whose
// answer matched when several did, else among those whose text is unknown (not captured, or
// cut at max_response_bytes) when there are any, else among all, the one whose last response
// ended latest before the request (its last turn's timestamp when the end is unknown) wins,
// then the one with the later line: clients send the next turn as soon as they can, so the
// shortest think time is the likeliest predecessor. When no eligible conversation ends with the
// prefix, one whose response ended at most late_ms after the request does (the earliest end;
// TurnResult::late) before any shorter prefix is tried: the request holds that answer, a
// stronger fact than a busy host's clock. Only the kMaxCandidates most recently active
// look-alikes are examined. A request that continues nothing starts a conversation.
class SessionLinker {
 public:
  explicit SessionLinker(LinkerOptions options = {}) : options_(options) {}

  // `is_assistant(i)` tells whether message i is an assistant message; it is only asked about
  // positions where an open conversation ends, so callers may decide it lazily.
  // `answer_key_at(i)` (std::optional<uint64_t>) is the AnswerKeyHasher key of assistant
  // message i, nullopt when it cannot be read; it is only asked at a join point where several
  // eligible conversations qualify and one of them has its response text.
  template <typename IsAssistant, typename AnswerKeyAt>
  TurnResult Add(const TurnInput& turn, IsAssistant&& is_assistant, AnswerKeyAt&& answer_key_at) {
    MaybeSweep(turn.timestamp_ms);
    for (size_t i = turn.prefix.size(); i-- > 1;) {
      const uint32_t* head = by_last_turn_.Find(turn.prefix[i - 1]);
      if (head == nullptr || !is_assistant(i)) continue;
      uint32_t best = Pick(*head, turn.timestamp_ms);
      if (best == kNone) continue;
      if (needs_answer_) {
        best = PickByAnswer(*head, turn.timestamp_ms, answer_key_at(i), best);
      }
      return Continue(best, turn);
    }
    return Start(turn, HasAssistant(turn.prefix.size(), is_assistant));
  }
  // Without response text (no answer keys for the messages).
  template <typename IsAssistant>
  TurnResult Add(const TurnInput& turn, IsAssistant&& is_assistant) {
    return Add(turn, is_assistant, [](size_t) { return std::optional<uint64_t>(); });
  }

  // Closes every conversation idle since before `now_ms - window`; Add calls it as time goes.
  void Sweep(double now_ms);
  // Closes every open conversation (end of input).
  void CloseAll();

  // Hands each conversation closed since the last call to `f(const ClosedConversation&)`,
  // in closing order, and forgets them (the caller aggregates).
  template <typename F>
  void DrainClosed(F&& f) {
    for (const ClosedConversation& c : closed_) f(c);
    closed_.clear();
  }
  size_t open() const { return conversations_.size() - free_.size(); }
  size_t peak_open() const { return peak_open_; }

 private:
  static constexpr uint32_t kNone = UINT32_MAX;
  // Look-alikes (open conversations with the same last turn) examined per join point, the
  // most recently active first.
  static constexpr uint32_t kMaxCandidates = 256;
  struct Conversation {
    uint64_t key = 0;  // hash of its last turn's messages
    uint64_t first_line = 0;
    uint64_t last_line = 0;
    double last_start_ms = 0;
    std::optional<double> last_end_ms;
    uint64_t answer_key = 0;  // its last turn's answer, when answer is kWhole
    uint32_t turns = 0;
    uint32_t next = kNone;  // next conversation with the same key
    bool live = false;
    bool first_turn_had_history = false;
    trace::AnswerText answer = trace::AnswerText::kNone;
    double idle_since() const { return last_end_ms ? *last_end_ms : last_start_ms; }
  };

  template <typename IsAssistant>
  static bool HasAssistant(size_t n, IsAssistant& is_assistant) {
    for (size_t i = 1; i < n; ++i) {
      if (is_assistant(i)) return true;
    }
    return false;
  }
  bool Open(const Conversation& c, double start_ms) const {  // not closed by the window
    return c.idle_since() >= start_ms - options_.window_ms;
  }
  bool Eligible(const Conversation& c, double start_ms) const {
    return Open(c, start_ms) &&
           !(c.last_end_ms && *c.last_end_ms > start_ms + options_.clock_slack_ms);
  }
  // Not eligible only because its end was recorded after start, by at most late_ms.
  bool Late(const Conversation& c, double start_ms) const {
    return Open(c, start_ms) && c.last_end_ms &&
           *c.last_end_ms > start_ms + options_.clock_slack_ms &&
           *c.last_end_ms <= start_ms + options_.late_ms;
  }
  // The likelier predecessor of two look-alikes: c over b (rule: see Add).
  static bool Likelier(const Conversation& c, const Conversation& b) {
    return c.idle_since() > b.idle_since() ||
           (c.idle_since() == b.idle_since() && c.last_line > b.last_line);
  }
  // The likeliest eligible conversation on `head`'s list by time alone, else the late one that
  // ended first; sets pick_, late_ and needs_answer_ (several eligible, and one has its response
  // text).
  uint32_t Pick(uint32_t head, double start_ms);
  // Among the same candidates, the one whose answer is `key` (see Add); sets pick_.
  uint32_t PickByAnswer(uint32_t head, double start_ms, std::optional<uint64_t> key,
                        uint32_t by_time);
  TurnResult Continue(uint32_t index, const TurnInput& turn);
  TurnResult Start(const TurnInput& turn, bool had_history);
  void Link(uint32_t index);    // onto its key's list
  void Unlink(uint32_t index);  // off its key's list
  void Close(uint32_t index);
  void MaybeSweep(double now_ms);

  LinkerOptions options_;
  std::vector<Conversation> conversations_;
  std::vector<uint32_t> free_;
  KeyIndex by_last_turn_;  // key -> first conversation with that key
  std::vector<ClosedConversation> closed_;
  size_t peak_open_ = 0;
  double next_sweep_ms_ = 0;
  bool swept_once_ = false;
  PickKind pick_ = PickKind::kOnly;  // how the last Pick (and PickByAnswer) decided
  bool needs_answer_ = false;
  bool late_ = false;  // the last Pick took a late conversation
};

struct SessionsOptions {
  std::string path;
  std::string out;
  // The outcomes sidecar: empty = `<path>.outcomes.ndjson` when that local file exists.
  std::string outcomes;
  bool no_outcomes = false;
  std::string id_prefix = "conv-";  // generated ids: prefix + line of the first turn
  LinkerOptions linker;
  bool force = false;
  size_t max_failures = 20;
  bool progress = false;
};

struct SessionsReport {
  std::string path;
  std::string out;
  Status io;  // usage, open, read or write error (exit 2)
  uint64_t lines = 0;
  uint64_t blank = 0;
  bool torn_tail = false;
  trace::FailureList bad;  // rows passed through without an id (not JSON, ...)

  uint64_t chat_rows = 0;   // rows with a messages list, given an inferred id
  uint64_t named_rows = 0;  // rows that already had a session_id (kept, not linked)
  uint64_t other_rows = 0;  // rows without messages (completions, embeddings ...): unchanged
  // Responses API rows (endpoint_type "responses", or a previous_response_id): a row naming a
  // previous_response_id continues the conversation of the row whose outcome has that
  // response_id (exact; the outcomes sidecar records the ids); the others start one.
  uint64_t responses_rows = 0;
  uint64_t responses_sessions = 0;
  uint64_t responses_linked = 0;   // continued a conversation by previous_response_id
  uint64_t responses_missing = 0;  // named a response not in the capture (new session each)
  uint64_t linked = 0;             // chat rows that continue an earlier turn
  uint64_t by_answer = 0;          // of those, told from look-alikes by the response text
  uint64_t ambiguous = 0;          // of those, guessed among look-alikes (the rest, by reason:)
  uint64_t guessed_no_text = 0, guessed_truncated = 0, guessed_no_match = 0,
           guessed_same_answer = 0;
  // Of the linked, those whose predecessor's recorded end was after them (within
  // LinkerOptions::late_ms): a loaded host's clock, linked because they hold its answer.
  uint64_t late = 0;
  // Chat rows that already held an assistant message (a conversation's later turn) but
  // continued nothing open: their earlier turns were not captured (before the capture,
  // sampled out, outside the window) or the client edited its history.
  uint64_t unlinked = 0;
  uint64_t sessions = 0;  // conversations (ids written)
  uint64_t single_turn_sessions = 0;
  trace::Histogram turns;       // turns per conversation
  trace::Histogram think_ms;    // previous response end -> next turn start (outcomes known)
  trace::Histogram gap_ms;      // previous turn start -> next turn start
  uint64_t negative_think = 0;  // successors inside the clock slack, counted as 0 ms
  size_t peak_open = 0;
  uint64_t generated_id_clashes = 0;  // named rows whose id looks like a generated one

  std::string outcomes_path;  // empty when none was used
  uint64_t outcomes_matched = 0, outcomes_mismatched = 0;
  std::string outcomes_note;  // mismatch summary
  std::vector<std::string> warnings;
  double window_ms = 0;
  double late_ms = 0;

  // 0 every row read; 1 some rows bad (passed through without an id); 2 usage/IO error.
  int exit_code() const { return !io.ok() ? 2 : (bad.total == 0 ? 0 : 1); }
};

SessionsReport InferSessions(const SessionsOptions& options);
std::string RenderSessionsText(const SessionsReport& report);
std::string RenderSessionsJson(const SessionsReport& report);

// "30m", "90s", "1500ms", "2h", or a plain number of seconds. False on anything else or <= 0.
bool ParseWindow(std::string_view text, double* ms);

}  // namespace llmtap::sessions
