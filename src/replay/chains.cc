#include "replay/chains.h"

#include "common/json_escape.h"
#include "replay/input.h"

namespace llmtap::replay {

std::string_view ChainLinkName(ChainLink link) {
  switch (link) {
    case ChainLink::kNone:
      return "";
    case ChainLink::kLinked:
      return "linked";
    case ChainLink::kRemapped:
      return "remapped";
    case ChainLink::kNoOutcomes:
      return "no_outcomes";
    case ChainLink::kNotInTrace:
      return "predecessor_not_in_trace";
    case ChainLink::kPredecessorFailed:
      return "predecessor_failed";
    case ChainLink::kPredecessorUnanswered:
      return "predecessor_unanswered";
    case ChainLink::kInlinedCaptured:
      return "inlined_captured_output";
    case ChainLink::kInlinedReplayed:
      return "inlined_replayed_output";
  }
  return "";
}

ChainLink ChainLinker::Link(std::string_view previous_id, std::string_view own_id,
                            std::string* session) {
  ChainLink link = ChainLink::kNone;
  if (!previous_id.empty()) {
    auto it = have_outcomes_ ? session_of_.find(std::string(previous_id)) : session_of_.end();
    if (it != session_of_.end()) {
      link = ChainLink::kLinked;
      if (session->empty()) *session = it->second;
    } else {
      link = have_outcomes_ ? ChainLink::kNotInTrace : ChainLink::kNoOutcomes;
    }
  }
  // The root of a chain (or of what is left of one).
  if (!own_id.empty() && session->empty()) *session = own_id;
  return link;
}

void ChainLinker::Planned(std::string_view own_id, const std::string& session) {
  if (own_id.empty()) return;
  if (session == own_id) ++chains_;
  session_of_.emplace(own_id, session);
}

ChainLink ResponseIdMap::Relink(std::string_view previous_id, std::string* body, double now_ms) {
  std::string replayed;
  switch (ids_.Find(previous_id, now_ms, &replayed)) {
    case api::ResponseIdMap::Lookup::kFound:
      break;
    case api::ResponseIdMap::Lookup::kFailed:
      return ChainLink::kPredecessorFailed;
    case api::ResponseIdMap::Lookup::kPending:
    case api::ResponseIdMap::Lookup::kUnknown:
      return ChainLink::kPredecessorUnanswered;
  }
  std::string quoted;
  AppendJsonString(&quoted, replayed);
  SetTopLevel(body, "previous_response_id", quoted);
  return ChainLink::kRemapped;
}

}  // namespace llmtap::replay
