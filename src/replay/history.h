// ConversationHistory: the conversation so far of each session of hashed rows, as AIPerf keeps
// it. AIPerf reads a mooncake_trace session's rows as the turns of one conversation whose later
// turns carry their NEW content only (input_length / hash_ids: the new user message), and sends
// turn k as every earlier turn's prompt, each followed by the answer the server gave it in this
// run, then turn k's own prompt (its session manager, DELTAS_WITHOUT_RESPONSES). `llmtap
// anonymize` writes sessions that way; `llmtap replay` sends them the same way:
//   chat:        "messages": [user P0, assistant A0, user P1, assistant A1, ..., user Pk]
//   completions: "prompt": P0 A0 P1 A1 ... Pk (concatenated; AIPerf 0.11's completions endpoint
//                takes one turn only and fails a session's second turn)
// A turn's body (input.h: TraceRequest::turn_begin/turn_end) holds its own piece only; Compose
// puts the history in front of it just before it is sent and records the piece; Answered adds
// the answer (AIPerf: the content, else the reasoning; nothing when the request failed) when no
// later turn of the session went out in between (an open loop on trace timestamps, or a closed
// loop, may send a turn before its predecessor ended: it goes without that answer, and the
// answer is then left out rather than put after it).
//
// Memory: a session's history (its conversation's text, JSON-escaped) is held until it has been
// idle for `idle_ms` (RunOptions::session_idle_s), as the SessionGate holds its state.
//
// Threads: thread-safe (the runner's workers call it).
#pragma once

#include <cstdint>
#include <deque>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>

#include "common/json_escape.h"
#include "replay/input.h"

namespace llmtap::replay {

class ConversationHistory {
 public:
  explicit ConversationHistory(double idle_ms = 600000) : idle_ms_(idle_ms) {}

  // Puts `req`'s session's conversation so far in front of its own piece (a no-op for a request
  // that is not a hashed session turn) and records the piece as sent. Returns the turn's number
  // in its session, for Answered.
  uint64_t Compose(TraceRequest* req, double now_ms) {
    if (req->turn_begin == std::string::npos) return 0;
    std::string piece = req->body.substr(req->turn_begin, req->turn_end - req->turn_begin) +
                        (req->chat() ? "," : "");
    std::lock_guard lock(mu_);
    Expire(now_ms);
    State& s = sessions_[req->session_id];
    req->body.insert(req->turn_begin, s.text);
    s.text += piece;
    Touch(req->session_id, &s, now_ms);
    return s.sent++;
  }

  // Turn `turn` (Compose's number) of `req`'s session ended with `answer` (empty when the
  // request failed or the server said nothing).
  void Answered(const TraceRequest& req, uint64_t turn, std::string_view answer, double now_ms) {
    if (req.turn_begin == std::string::npos || answer.empty()) return;
    std::lock_guard lock(mu_);
    auto it = sessions_.find(req.session_id);
    if (it == sessions_.end() || it->second.sent != turn + 1) return;
    State& s = it->second;
    if (req.chat()) {
      s.text += "{\"role\":\"assistant\",\"content\":\"";
      AppendJsonEscaped(&s.text, answer);
      s.text += "\"},";
    } else {
      AppendJsonEscaped(&s.text, answer);
    }
    Touch(req.session_id, &s, now_ms);
  }

  size_t sessions() const {
    std::lock_guard lock(mu_);
    return sessions_.size();
  }

 private:
  struct State {
    std::string text;  // the earlier pieces and answers, ready to insert
    uint64_t sent = 0;
    double last_ms = 0;
  };

  void Touch(const std::string& session, State* s, double now_ms) {
    s->last_ms = now_ms;
    touched_.emplace_back(now_ms, session);
  }

  // Forgets sessions untouched for more than idle_ms (touches come in clock order, give or
  // take the workers' races, which only delay a removal).
  void Expire(double now_ms) {
    while (!touched_.empty() && touched_.front().first < now_ms - idle_ms_) {
      auto it = sessions_.find(touched_.front().second);
      if (it != sessions_.end() && it->second.last_ms < now_ms - idle_ms_) sessions_.erase(it);
      touched_.pop_front();
    }
  }

  const double idle_ms_;
  mutable std::mutex mu_;
  std::unordered_map<std::string, State> sessions_;
  std::deque<std::pair<double, std::string>> touched_;
};

}  // namespace llmtap::replay
