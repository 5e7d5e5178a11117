#include "proxy/upstream_pool.h"

#include <utility>

namespace llmtap::proxy {

std::shared_ptr<Pipe> UpstreamPool::Take(Clock::time_point now, Clock::duration idle_timeout) {
  while (!idle_.empty()) {
    Idle idle = std::move(idle_.back());
    idle_.pop_back();
    if (!idle.pipe->reading || now - idle.since >= idle_timeout) {
      idle.pipe->Close();
      continue;
    }
    idle.pipe->parked = false;
    return std::move(idle.pipe);
  }
  return nullptr;
}

void UpstreamPool::Park(std::shared_ptr<Pipe> pipe, size_t max_idle) {
  if (idle_.size() >= max_idle) {
    pipe->Close();
    return;
  }
  pipe->parked = true;
  pipe->StartRead();
  idle_.push_back({std::move(pipe), CoarseNow()});
}

void UpstreamPool::ReleaseTlsBuffers(Clock::time_point idle_since) {
  for (Idle& idle : idle_) {
    if (idle.pipe->tls != nullptr && idle.since <= idle_since) idle.pipe->tls->ReleaseBuffers();
  }
}

void UpstreamPool::CloseAll() {
  for (Idle& idle : idle_) idle.pipe->Close();
  idle_.clear();
}

}  // namespace llmtap::proxy
