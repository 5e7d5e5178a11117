// UpstreamPool: one event loop's idle upstream connections, kept for reuse by the next request
// of any session on that loop. A pooled connection keeps a read posted (Pipe::parked): if the
// upstream closes it or writes to it, the read completes and closes it, so Take() finds it no
// longer reading and throws it away instead of sending a request on it.
//
// Internal to src/proxy: one per Worker (session.h); touched only by that worker's thread.
#pragma once

#include <chrono>
#include <cstddef>
#include <memory>
#include <vector>

#include "proxy/pipe.h"

namespace llmtap::proxy {

class UpstreamPool {
 public:
  // The most recently parked connection that is still open and quiet and was parked less than
  // `idle_timeout` before `now`, or null. The others it passes on the way are closed.
  std::shared_ptr<Pipe> Take(Clock::time_point now, Clock::duration idle_timeout);

  // Keeps `pipe` (its response read whole, nothing buffered) with a read posted; closes it
  // instead when the pool already holds `max_idle`.
  void Park(std::shared_ptr<Pipe> pipe, size_t max_idle);

  // Shutdown: closes every pooled connection.
  void CloseAll();

  // Frees the TLS record buffers of connections parked at or before `idle_since`.
  void ReleaseTlsBuffers(Clock::time_point idle_since);

 private:
  struct Idle {
    std::shared_ptr<Pipe> pipe;
    Clock::time_point since;
  };
  std::vector<Idle> idle_;
};

}  // namespace llmtap::proxy
