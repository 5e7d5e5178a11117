#include "api/response_id_map.h"

namespace llmtap::api {

void ResponseIdMap::Touch(const std::string& key, Entry* e, double now_ms) {
  e->last_ms = now_ms;
  touched_.emplace_back(now_ms, key);
}

// Touches come in clock order, give or take the callers' races, which only delay a removal.
void ResponseIdMap::Expire(double now_ms) {
  while (!touched_.empty() && touched_.front().first < now_ms - idle_ms_) {
    auto it = ids_.find(touched_.front().second);
    if (it != ids_.end() && it->second.last_ms < now_ms - idle_ms_) ids_.erase(it);
    touched_.pop_front();
  }
}

void ResponseIdMap::Pending(std::string_view from, double now_ms) {
  if (from.empty()) return;
  std::lock_guard lock(mu_);
  Expire(now_ms);
  std::string key(from);
  Entry& e = ids_[key];
  e.to.clear();
  e.pending = true;
  Touch(key, &e, now_ms);
}

void ResponseIdMap::Answered(std::string_view from, std::string_view to, double now_ms) {
  if (from.empty()) return;
  std::lock_guard lock(mu_);
  Expire(now_ms);
  std::string key(from);
  Entry& e = ids_[key];
  e.to.assign(to);
  e.pending = false;
  Touch(key, &e, now_ms);
}

ResponseIdMap::Lookup ResponseIdMap::Find(std::string_view from, double now_ms, std::string* to) {
  std::lock_guard lock(mu_);
  Expire(now_ms);
  auto it = ids_.find(std::string(from));
  if (it == ids_.end()) return Lookup::kUnknown;
  Touch(it->first, &it->second, now_ms);
  if (it->second.pending) return Lookup::kPending;
  if (it->second.to.empty()) return Lookup::kFailed;
  *to = it->second.to;
  return Lookup::kFound;
}

}  // namespace llmtap::api
