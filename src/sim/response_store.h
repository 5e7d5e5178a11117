// The Responses API's stored responses (`store`, the default): each response's conversation as
// rendered prompt text, so a later request's `previous_response_id` continues it. Bounded: the
// last `capacity` responses stored or continued (LRU: continuing a response refreshes it). A
// response keeps only its own turns (its input and its answer) and a link to the one it
// continued, so a chain of n turns costs its text once, not n times; a response evicted from
// the index stays readable through the responses that continue it.
//
// Thread-safe: the sim's I/O threads share one store.
#pragma once

#include <cstddef>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>

namespace llmtap::sim {

inline constexpr size_t kResponseStoreCapacity = 10000;

struct StoredResponse {
  StoredResponse(std::string t, std::shared_ptr<const StoredResponse> p)
      : turns(std::move(t)), previous(std::move(p)) {}
  // Unlinks a long chain iteratively (a recursive release would overflow the stack).
  ~StoredResponse();
  StoredResponse(const StoredResponse&) = delete;
  StoredResponse& operator=(const StoredResponse&) = delete;

  std::string turns;  // this response's input turns and its answer's turn
  std::shared_ptr<const StoredResponse> previous;
};

class ResponseStore {
 public:
  using Handle = std::shared_ptr<const StoredResponse>;

  explicit ResponseStore(size_t capacity = kResponseStoreCapacity) : capacity_(capacity) {}

  // The response stored as `id` (refreshed as most recent), or null when unknown or evicted.
  Handle Find(std::string_view id);
  // Keeps `turns` as response `id`, continuing `previous` (null: a conversation's start).
  // Evicts the least recently used response beyond the capacity.
  void Put(std::string_view id, Handle previous, std::string turns);
  // Appends the whole conversation ending with `response`, oldest turn first.
  static void AppendConversation(const Handle& response, std::string* out);

  size_t size() const;
  size_t capacity() const { return capacity_; }

 private:
  struct Entry {
    Handle response;
    std::list<std::string>::iterator order;
  };
  const size_t capacity_;
  mutable std::mutex mu_;
  std::list<std::string> order_;                       // ids, most recently used first
  std::unordered_map<std::string_view, Entry> index_;  // keys view the ids in order_
};

}  // namespace llmtap::sim
