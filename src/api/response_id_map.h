// Responses API chains across two servers: a request naming `previous_response_id: X`
// continues the response X, and X is an id one server gave (the captured server, or the proxy's
// primary); another server (the replay target, a shadow candidate) answered the same request
// with an id of its own, Y. ResponseIdMap records X -> Y as the requests end, so that a later
// request's X can be sent to that server as Y.
//
// Entries expire once unused for `idle_ms` (a conversation idle that long is over), so the map
// holds the live chains only. Threads: thread-safe.
#pragma once

#include <cstdint>
#include <deque>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>

namespace llmtap::api {

class ResponseIdMap {
 public:
  explicit ResponseIdMap(double idle_ms = 600000) : idle_ms_(idle_ms) {}

  enum class Lookup : uint8_t {
    kFound,    // *to is the other server's id
    kFailed,   // the other server's answer failed or named no id
    kPending,  // its answer has not ended yet (Pending was called)
    kUnknown,  // never seen, or expired
  };

  // The request answered by `from` is still running on the other server.
  void Pending(std::string_view from, double now_ms);
  // It ended there with id `to` ("" when it failed or named none).
  void Answered(std::string_view from, std::string_view to, double now_ms);
  Lookup Find(std::string_view from, double now_ms, std::string* to);

  size_t size() const {
    std::lock_guard lock(mu_);
    return ids_.size();
  }

 private:
  struct Entry {
    std::string to;  // "" = failed
    bool pending = false;
    double last_ms = 0;
  };
  void Touch(const std::string& key, Entry* e, double now_ms);
  void Expire(double now_ms);

  const double idle_ms_;
  mutable std::mutex mu_;
  std::unordered_map<std::string, Entry> ids_;
  std::deque<std::pair<double, std::string>> touched_;
};

}  // namespace llmtap::api
