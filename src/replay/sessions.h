// SessionGate: the causal part of `llmtap replay`'s open-loop schedule. Rows with a session_id
// are turns of one conversation, in file order. A real client sends turn k+1 only after turn k's
// answer came back, plus the time its user (or agent) took to think; a replay against a slower
// server than the captured one must do the same, or it sends turns no client would send.
//
// The rule: turn k+1 is due at
//     max(scheduled(k+1), end(k) + think(k+1))
// where scheduled is the plan's time (schedule.h), end(k) the time turn k's response ended in
// this run (whatever its outcome: an error or a timeout releases the next turn too), and
// think(k+1) = scheduled(k+1) - captured_end(k), the captured think time on the run's clock
// (captured_end(k) = scheduled(k) + turn k's captured latency_ms / speedup, from the outcomes
// sidecar), or 0 when turn k has no captured latency (or it is negative: overlapping turns).
// So a turn is never sent before its predecessor ended, and never before its schedule; when
// the server keeps up (end(k) <= captured_end(k)) every turn goes out on its schedule. How far
// the rule moved a turn (due - scheduled) is its causal shift.
//
// Order: the runner's workers take rows from the plan in order, but each waits for its row's
// time on its own thread, so a turn can reach Arrive before the turn before it (a worker held up
// for longer than the gap between them). Each turn therefore takes a ticket when it is taken
// from the plan (Reserve, in plan order), and Arrive lets a session's turns go in ticket order
// only: one that comes before its predecessor waits for it, and for its end.
//
// Memory: state is held for a session only while a turn of it is reserved, in flight or waiting,
// or, once idle, while its last turn ended later than captured (the shift its next turn
// inherits) and less than `idle_ms` ago on the run's clock. A turn arriving after that is due on
// its schedule (still after its predecessor's end, which lies in the past).
//
// Threads: not thread-safe; the runner calls it under its own mutex. Turn is any movable type
// the runner carries with a turn (the request, its body, its result record).
#pragma once

#include <algorithm>
#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>

namespace llmtap::replay {

template <typename Turn>
class SessionGate {
 public:
  explicit SessionGate(double idle_ms = 600000) : idle_ms_(idle_ms) {}

  // A turn of `session` taken from the plan, in plan order: its ticket for Arrive.
  uint64_t Reserve(const std::string& session) { return sessions_[session].next_ticket++; }

  // The turn of `session` holding `ticket` (Reserve), at its scheduled time `scheduled_ms` (the
  // run's clock). True: send `*turn` at *due_ms (>= scheduled_ms; may lie in the future). False:
  // the gate took the turn (a turn before it has not ended); Ended hands it back.
  bool Arrive(const std::string& session, uint64_t ticket, double scheduled_ms, Turn* turn,
              double* due_ms) {
    State& s = sessions_[session];
    if (s.busy || ticket != s.serving) {
      s.waiting.emplace(ticket, Waiting{scheduled_ms, std::move(*turn)});
      ++waiting_;
      return false;
    }
    *due_ms = !s.ended_ms ? scheduled_ms : Due(s, scheduled_ms);
    s.busy = true;
    s.ended_ms.reset();
    return true;
  }

  struct Next {
    Turn turn;
    double due_ms = 0;
  };
  // `session`'s turn in flight ended at `ended_ms`; `captured_end_ms`: when it ended in the
  // capture (scheduled + captured latency), if known. The next waiting turn, with its due time,
  // when there is one: the caller sends it (it is in flight from then on).
  std::optional<Next> Ended(const std::string& session, double ended_ms,
                            std::optional<double> captured_end_ms) {
    Expire(ended_ms);
    auto it = sessions_.find(session);
    if (it == sessions_.end()) return std::nullopt;  // TakeWaiting emptied the gate
    State& s = it->second;
    s.ended_ms = ended_ms;
    s.captured_end_ms = captured_end_ms;
    ++s.serving;
    if (!s.waiting.empty() && s.waiting.begin()->first == s.serving) {
      Waiting w = std::move(s.waiting.begin()->second);
      s.waiting.erase(s.waiting.begin());
      --waiting_;
      Next next{std::move(w.turn), Due(s, w.scheduled_ms)};
      s.ended_ms.reset();
      return next;
    }
    s.busy = false;
    // The next turn was reserved but has not arrived: it finds this end when it does.
    if (s.serving != s.next_ticket) return std::nullopt;
    // Ended no later than captured: the next turn's due time is its schedule, nothing to keep.
    if (!captured_end_ms || ended_ms <= *captured_end_ms) {
      sessions_.erase(it);
    } else {
      idle_.push_back({ended_ms, session});
    }
    return std::nullopt;
  }

  // Every waiting turn (the run ends early), sessions forgotten.
  std::deque<Turn> TakeWaiting() {
    std::deque<Turn> out;
    for (auto& [id, s] : sessions_) {
      for (auto& [ticket, w] : s.waiting) out.push_back(std::move(w.turn));
    }
    sessions_.clear();
    idle_.clear();
    waiting_ = 0;
    return out;
  }

  size_t sessions() const { return sessions_.size(); }  // held: in flight, waiting or idle
  size_t waiting() const { return waiting_; }

 private:
  struct Waiting {
    double scheduled_ms;
    Turn turn;
  };
  struct State {
    bool busy = false;                      // a turn in flight (or on its way out)
    std::optional<double> ended_ms;         // idle: when its last turn ended
    std::optional<double> captured_end_ms;  // and when that turn ended in the capture
    uint64_t next_ticket = 0;               // Reserve's next
    uint64_t serving = 0;                   // the ticket that may go next (those before ended)
    std::map<uint64_t, Waiting> waiting;    // turns whose time came before their turn, by ticket
  };

  static double Due(const State& s, double scheduled_ms) {
    const double think = s.captured_end_ms ? std::max(0.0, scheduled_ms - *s.captured_end_ms) : 0;
    return std::max(scheduled_ms, *s.ended_ms + think);
  }

  // Forgets idle sessions whose last turn ended more than idle_ms before `now_ms`. Turns end in
  // clock order, so the oldest idle entries come first.
  void Expire(double now_ms) {
    while (!idle_.empty() && idle_.front().first < now_ms - idle_ms_) {
      auto it = sessions_.find(idle_.front().second);
      if (it != sessions_.end() && !it->second.busy && it->second.ended_ms &&
          *it->second.ended_ms == idle_.front().first &&
          it->second.serving == it->second.next_ticket) {
        sessions_.erase(it);
      }
      idle_.pop_front();
    }
  }

  const double idle_ms_;
  std::unordered_map<std::string, State> sessions_;
  std::deque<std::pair<double, std::string>> idle_;  // (ended_ms, session), oldest first
  size_t waiting_ = 0;
};

}  // namespace llmtap::replay
