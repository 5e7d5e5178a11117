// Responses chains in `llmtap replay`: a Responses API request whose body names
// `previous_response_id: X` continues the conversation of the response X. In a capture, X is the
// id the captured server gave an earlier request (the outcomes sidecar's `response_id` of its
// row: its predecessor); the replay target never issued it (a fresh server answers 404), so a
// replay must send the row after its predecessor's replayed request ended, and with X replaced
// by the id the target gave that request.
//
//   ChainLinker (the reader thread, around planning): a chain is a session (sessions.h): every
//     Responses row with a captured id or a previous_response_id gets the session of its chain
//     (its root's captured id; a row's own session_id, when it has one, is kept), so that the
//     chain's rows go to one shard and the SessionGate sends each after the one before it ended,
//     with its captured think time. A chain that branches (two rows continuing one response)
//     is sent one row after another, in file order.
//   ResponseIdMap (the runner's workers): the replayed id of each captured id, recorded as each
//     request ends, and put into the next row's body when it is sent (Relink).
//   ChainInliner (inline.h, --responses-chain inline): instead of the id, the conversation so
//     far goes into the row's `input`, for servers that keep no responses (llama-server).
//
// A row whose predecessor cannot be found or has no replayed id is sent as captured (with the
// captured X: against the server that made the capture it may still be stored) and counted by
// why (ChainLink): no outcomes sidecar, X not a response of the rows replayed (a row outside
// --start-offset/--end-offset is not), the predecessor failed in this run (the row is still sent,
// so the load keeps its shape; its own error, if the target rejects X, is then counted as well), or
// it had not ended yet when the row was sent (a closed loop, or --schedule timestamps, send
// without waiting).
//
// Memory: ChainLinker holds one entry per captured Responses id (as the outcomes table does);
// ResponseIdMap an entry per id until it has been unused for `idle_ms` (RunOptions::
// session_idle_s), as the SessionGate keeps a session.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>

#include "api/response_id_map.h"

namespace llmtap::replay {

enum class ChainLink : uint8_t {
  kNone,        // not a Responses row continuing another response
  kLinked,      // its predecessor is a row of the trace (before sending; then one of the below)
  kRemapped,    // sent with the id the target gave its predecessor
  kNoOutcomes,  // no outcomes sidecar: the trace does not say which row X is
  kNotInTrace,  // no row of the trace was answered with X
  kPredecessorFailed,      // the predecessor's replayed request failed (or named no id)
  kPredecessorUnanswered,  // the predecessor had not ended when this row was sent
  // --responses-chain inline (inline.h): sent with the conversation so far as `input`, the
  // predecessor's output taken from the capture's response text, or from the target's answer.
  kInlinedCaptured,
  kInlinedReplayed,
};
constexpr int kChainLinkCount = 9;

// "remapped", "no_outcomes", "predecessor_not_in_trace", "predecessor_failed",
// "predecessor_unanswered", "inlined_captured_output", "inlined_replayed_output" ("" for kNone,
// "linked" for kLinked).
inline bool Inlined(ChainLink link) {
  return link == ChainLink::kInlinedCaptured || link == ChainLink::kInlinedReplayed;
}
std::string_view ChainLinkName(ChainLink link);

// Threads: the one reading the trace.
class ChainLinker {
 public:
  explicit ChainLinker(bool have_outcomes) : have_outcomes_(have_outcomes) {}

  // A Responses row: `previous_id` its body's previous_response_id ("" for none), `own_id` the
  // response_id its outcome names ("" for none). Sets *session to its chain's session when it
  // has none, and says how the row links to its predecessor.
  ChainLink Link(std::string_view previous_id, std::string_view own_id, std::string* session);
  // The row Link() was last asked about is in the plan (of any shard): later rows may continue
  // its response. (A row outside the window is never sent: a row continuing it is not linked.)
  void Planned(std::string_view own_id, const std::string& session);

  uint64_t chains() const { return chains_; }  // planned rows starting a chain

 private:
  const bool have_outcomes_;
  std::unordered_map<std::string, std::string> session_of_;  // captured id -> its session
  uint64_t chains_ = 0;
};

// Threads: thread-safe.
class ResponseIdMap {
 public:
  explicit ResponseIdMap(double idle_ms = 600000) : ids_(idle_ms) {}

  // The request whose captured response was `captured_id` ended at `now_ms`; `replayed_id` is
  // the id the target gave it ("" when it failed or named none).
  void Answered(std::string_view captured_id, std::string_view replayed_id, double now_ms) {
    ids_.Answered(captured_id, replayed_id, now_ms);
  }

  // A row linked to its predecessor (ChainLink::kLinked), about to be sent: its body's
  // previous_response_id set to the replayed id of `previous_id` (kRemapped), or left as
  // captured (kPredecessorFailed, kPredecessorUnanswered).
  ChainLink Relink(std::string_view previous_id, std::string* body, double now_ms);

  size_t size() const { return ids_.size(); }

 private:
  api::ResponseIdMap ids_;
};

}  // namespace llmtap::replay
