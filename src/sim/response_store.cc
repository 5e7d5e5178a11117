#include "sim/response_store.h"

#include <vector>

namespace llmtap::sim {

StoredResponse::~StoredResponse() {
  // Release the chain one link at a time while this was its only owner.
  std::shared_ptr<const StoredResponse> p = std::move(previous);
  while (p && p.use_count() == 1) {
    std::shared_ptr<const StoredResponse> next =
        std::move(const_cast<StoredResponse&>(*p).previous);
    p = std::move(next);
  }
}

ResponseStore::Handle ResponseStore::Find(std::string_view id) {
  std::lock_guard lock(mu_);
  auto it = index_.find(id);
  if (it == index_.end()) return nullptr;
  order_.splice(order_.begin(), order_, it->second.order);
  return it->second.response;
}

void ResponseStore::Put(std::string_view id, Handle previous, std::string turns) {
  if (capacity_ == 0) return;
  auto response = std::make_shared<const StoredResponse>(std::move(turns), std::move(previous));
  Handle evicted;  // released after the lock
  std::lock_guard lock(mu_);
  if (auto it = index_.find(id); it != index_.end()) {
    it->second.response = std::move(response);
    order_.splice(order_.begin(), order_, it->second.order);
    return;
  }
  order_.emplace_front(id);
  index_.emplace(order_.front(), Entry{std::move(response), order_.begin()});
  if (index_.size() > capacity_) {
    auto last = index_.find(order_.back());
    evicted = std::move(last->second.response);
    index_.erase(last);
    order_.pop_back();
  }
}

void ResponseStore::AppendConversation(const Handle& response, std::string* out) {
  std::vector<const StoredResponse*> chain;
  for (const StoredResponse* r = response.get(); r != nullptr; r = r->previous.get()) {
    chain.push_back(r);
  }
  for (auto it = chain.rbegin(); it != chain.rend(); ++it) out->append((*it)->turns);
}

size_t ResponseStore::size() const {
  std::lock_guard lock(mu_);
  return index_.size();
}

}  // namespace llmtap::sim
