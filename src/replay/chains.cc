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

void ResponseIdMap::Touch(const std::string& key, Entry* e, double now_ms) {
  e->last_ms = now_ms;
  touched_.emplace_back(now_ms, key);
}

// Touches come in clock order, give or take the workers' races, which only delay a removal.
void ResponseIdMap::Expire(double now_ms) {
  while (!touched_.empty() && touched_.front().first < now_ms - idle_ms_) {
    auto it = ids_.find(touched_.front().second);
    if (it != ids_.end() && it->second.last_ms < now_ms - idle_ms_) ids_.erase(it);
    touched_.pop_front();
  }
}

void ResponseIdMap::Answered(std::string_view captured_id, std::string_view replayed_id,
                             double now_ms) {
  if (captured_id.empty()) return;
  std::lock_guard lock(mu_);
  Expire(now_ms);
  std::string key(captured_id);
  Entry& e = ids_[key];
  e.replayed.assign(replayed_id);
  Touch(key, &e, now_ms);
}

ChainLink ResponseIdMap::Relink(std::string_view previous_id, std::string* body, double now_ms) {
  std::string quoted;
  {
    std::lock_guard lock(mu_);
    Expire(now_ms);
    auto it = ids_.find(std::string(previous_id));
    if (it == ids_.end()) return ChainLink::kPredecessorUnanswered;
    Touch(it->first, &it->second, now_ms);
    if (it->second.replayed.empty()) return ChainLink::kPredecessorFailed;
    AppendJsonString(&quoted, it->second.replayed);
  }
  SetTopLevel(body, "previous_response_id", quoted);
  return ChainLink::kRemapped;
}

}  // namespace llmtap::replay
