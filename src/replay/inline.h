// --responses-chain inline: Responses chains replayed to a server that keeps no responses
// (llama-server answers previous_response_id with HTTP 400). A row continuing a response of the
// trace (ChainLink::kLinked, chains.h) is sent without previous_response_id, its `input` being
// the conversation so far, as a client of a stateless server sends it:
//
//   input = the predecessor's conversation so far (its own inlined input, and so on back to the
//           chain's root) + the predecessor's output items + this row's own input items
//
// A string `input` is one user message item ({"type":"message","role":"user","content":"..."});
// an item with a `role` and no `type` gets "type":"message" (llama-server cannot tell its type
// otherwise). The predecessor's output items are the captured response's text (the outcomes
// sidecar's `response` member, `llmtap proxy --capture-responses`) when the sidecar holds it
// whole, else what the target answered the predecessor in this run; the row's ChainLink says
// which (kInlinedCaptured, kInlinedReplayed). Output becomes input items as OpenAI's docs allow:
// the text one assistant message item with an output_text part; each tool call a function_call
// item, whose call_id is taken from this row's function_call_output items in order (the
// sidecar keeps no call ids), else "call_<n>". Reasoning is not sent back. `instructions` are the
// row's own (previous_response_id does not carry them either).
//
// A linked row whose predecessor has no output to inline (it failed in this run and the sidecar
// holds no text of it, or it was itself sent as captured) goes as captured, counted
// kPredecessorFailed; one whose predecessor had not ended (a closed loop, --schedule timestamps)
// and has no captured text, kPredecessorUnanswered.
//
// Memory: an entry per Responses row with a captured id that was sent: its own input items and
// its output (text and tool calls), not the whole conversation (a chain of n turns holds each
// turn once; a turn's body is assembled when it is sent). An entry is dropped once neither it nor
// a row continuing its chain has been sent or answered for `idle_ms` (RunOptions::
// session_idle_s), as ResponseIdMap keeps its ids.
//
// Threads: ChainInliner is thread-safe (the runner's workers); the functions are plain.
#pragma once

#include <cstdint>
#include <deque>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "capture/outcome.h"
#include "replay/chains.h"

namespace llmtap::replay {

struct TraceRequest;

// The outcomes sidecar's `response` member ({"text":..,"reasoning":..,"tool_calls":[..],
// "truncated":..}) as a ResponseText. False when it is not such an object, or truncated.
bool ParseCapturedResponse(std::string_view json, ResponseText* out);

// Appends the input items of a Responses body's `input` to *items, comma-separated, without
// brackets (a string: one user message item). False when `input` is neither a string nor an
// array (nothing appended).
bool AppendInputItems(std::string_view body, std::string* items);

// The call_ids of the function_call_output items of a Responses body's `input`, in order.
std::vector<std::string> FunctionCallOutputIds(std::string_view body);

// Appends `output` as input items (comma-separated, no brackets): the text as an assistant
// message item, each tool call as a function_call item named by `call_ids` in order, else
// "call_<n>". Nothing for an output without text and tool calls.
void AppendOutputItems(const ResponseText& output, const std::vector<std::string>& call_ids,
                       std::string* items);

// The body sent: previous_response_id removed and `input` set to [conversation].
void InlineBody(std::string_view conversation, std::string* body);

class ChainInliner {
 public:
  explicit ChainInliner(double idle_ms = 600000) : idle_ms_(idle_ms) {}

  // A Responses row about to be sent to one target, `*body` what would go (the row's body as
  // captured, rewritten). A row continuing a response of the trace gets the conversation so far
  // in *body; the returned ChainLink says how it went (req.chain unchanged for any other row).
  // A row with a captured id is recorded, for the rows continuing it.
  ChainLink Compose(const TraceRequest& req, std::string* body, double now_ms);

  // The row whose captured id is `captured_id` ended; `replayed` is the target's output (null
  // when the request failed, or its output was cut).
  void Answered(std::string_view captured_id, const ResponseText* replayed, double now_ms);

  size_t size() const {
    std::lock_guard lock(mu_);
    return entries_.size();
  }

 private:
  struct Entry {
    std::string parent;   // the captured id it continues ("" for a chain's root)
    std::string items;    // its own input items (JSON, comma-separated)
    bool inlined = true;  // false: sent as captured; its conversation is not known here
    // The output, once known: the captured text from the start, else the target's answer.
    std::optional<ResponseText> output;
    bool captured = false;  // `output` is the captured text
    bool answered = false;
    std::string output_items;  // `output` as items, made when a row continuing it is sent
    bool made = false;
    double last_ms = 0;
  };
  static void Touch(Entry* e, double now_ms);
  void Expire(double now_ms);

  const double idle_ms_;
  mutable std::mutex mu_;
  std::unordered_map<std::string, Entry> entries_;      // by captured response id
  std::deque<std::pair<double, std::string>> touched_;  // an element per entry
};

}  // namespace llmtap::replay
