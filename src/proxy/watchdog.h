// Watchdog: the deadlines of one client connection's waits, kept by one timer instead of a timer
// armed before every operation (each arming was a timerfd_settime). An operation that may wait
// notes when it began (Begin); the timer wakes at least every min_limit (the shortest of the
// configured limits) and, once the operation is older than its limit, the session closes the
// socket it waits on (TakeOverdue). So a wait never moves the timer in steady state: its
// deadline is never earlier than the next wake.
//
// Internal to src/proxy: each Session owns one; used only on the session's thread.
#pragma once

#include <algorithm>
#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <utility>

#include "proxy/options.h"
#include "proxy/pipe.h"

namespace llmtap::proxy {

class Watchdog {
 public:
  enum class Wait : uint8_t {
    kNone,
    kIdle,        // for the next request on a keep-alive connection
    kClientRead,  // for the rest of a request
    kClientWrite,
    kDrain,  // reading what a rejected client still sends
    kConnect,
    kUpstreamWrite,
    kUpstreamRead,
  };

  Watchdog(const Executor& executor, const ProxyOptions& options);

  // How long a wait of this kind may take.
  Clock::duration Limit(Wait w) const { return limits_[static_cast<size_t>(w)]; }

  void Begin(Wait w) {
    wait_ = w;
    deadline_ = CoarseNow() + Limit(w);
    // Only a limit shorter than min_limit (none with valid options) needs an earlier wake; the
    // session's wake handler re-arms.
    if (deadline_ < expiry_) timer_.cancel();
  }
  // A wait that must end by `deadline` (or sooner by its own limit): reading one request is
  // bounded as a whole, so a client sending a byte at a time (slowloris) cannot stretch it.
  void BeginUntil(Wait w, Clock::time_point deadline) {
    Begin(w);
    if (deadline < deadline_) {
      deadline_ = deadline;
      if (deadline_ < expiry_) timer_.cancel();
    }
  }
  void End() { wait_ = Wait::kNone; }

  // Sets the next wake (from the coarse clock, like every wait's deadline: so a wait that begins
  // later never has an earlier deadline than this wake when its limit is at least min_limit)
  // and calls `handler(error_code)` then, or when a Begin() cancels it for an earlier wake.
  template <class Handler>
  void Arm(Handler&& handler) {
    Clock::time_point next = CoarseNow() + min_limit_;
    if (wait_ != Wait::kNone && deadline_ < next) next = deadline_;
    expiry_ = next;
    timer_.expires_at(next);
    timer_.async_wait(std::forward<Handler>(handler));
  }

  // At a wake: the wait whose deadline has passed, which is then over; kNone if none has.
  Wait TakeOverdue() {
    // The precise clock here: the timer fired at or after its (coarse) expiry, and the coarse
    // clock may not show that yet, which would re-arm for a time already past, again and again.
    if (wait_ == Wait::kNone || Clock::now() < deadline_) return Wait::kNone;
    return std::exchange(wait_, Wait::kNone);
  }

  void Cancel() { timer_.cancel(); }

 private:
  static constexpr std::chrono::milliseconds kDrainMax{5000};

  Timer timer_;
  std::array<Clock::duration, 8> limits_;  // by Wait
  Clock::duration min_limit_;
  Clock::time_point expiry_ = Clock::time_point::max();
  Clock::time_point deadline_;
  Wait wait_ = Wait::kNone;
};

}  // namespace llmtap::proxy
