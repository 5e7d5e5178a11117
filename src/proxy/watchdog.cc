#include "proxy/watchdog.h"

namespace llmtap::proxy {

Watchdog::Watchdog(const Executor& executor, const ProxyOptions& o) : timer_(executor) {
  auto limit = [&](Wait w, std::chrono::milliseconds ms) {
    // A year stands for "never" without overflowing the time point.
    limits_[static_cast<size_t>(w)] = std::min<Clock::duration>(ms, std::chrono::hours(24 * 365));
  };
  limit(Wait::kNone, std::chrono::milliseconds(0));
  limit(Wait::kIdle, o.idle_timeout);
  limit(Wait::kClientRead, o.read_timeout);
  limit(Wait::kUpstreamRead, o.read_timeout);
  limit(Wait::kClientWrite, o.write_timeout);
  limit(Wait::kUpstreamWrite, o.write_timeout);
  limit(Wait::kDrain, std::min(o.read_timeout, kDrainMax));
  limit(Wait::kConnect, o.connect_timeout);
  const std::chrono::milliseconds min_limit =
      std::min({o.connect_timeout, o.read_timeout, o.write_timeout, o.idle_timeout, kDrainMax});
  min_limit_ = std::max(min_limit, std::chrono::milliseconds(1));
}

}  // namespace llmtap::proxy
