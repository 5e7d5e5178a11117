// Watchdog: one timer per connection that enforces the deadline of whatever the connection is
// waiting on (a read, a write, a connect), instead of a timer armed around every operation (each
// arming is a timerfd_settime system call). The sim's and the proxy's connections use it.
//
// An operation that may wait calls Begin() before it and End() after it. The watchdog wakes at
// least every `period` and, once the wait in progress is past its deadline, ends it and calls
// the owner's on_expired(), which closes the socket the wait is on (so the operation fails). A
// wait whose deadline is no earlier than the next wake (every wait, when `period` is the
// shortest limit in use) never moves the timer: beginning a wait costs one coarse clock read.
// Only a deadline earlier than the planned wake cancels the timer, which then re-arms for it.
//
// Threads: the owner's event loop only. Every member is called there and on_expired runs there
// (the owner's strand). Include from .cc files only (it brings Asio).
#pragma once

#include <algorithm>
#include <chrono>
#include <memory>
#include <utility>

#include "common/asio_types.h"
#include "common/coarse_clock.h"

namespace llmtap::net {

class Watchdog {
 public:
  using Clock = asio_types::Clock;

  // `period`: the longest the watchdog sleeps (at least 1 ms).
  Watchdog(const asio_types::Executor& executor, Clock::duration period)
      : timer_(executor),
        period_(std::max<Clock::duration>(period, std::chrono::milliseconds(1))) {}

  // Arms the timer. `owner` keeps what on_expired() touches (and this watchdog, a member of it)
  // alive while the timer is armed; it is released once Stop() was called and the timer's
  // handler ran. Call once.
  template <class Owner, class OnExpired>
  void Start(std::shared_ptr<Owner> owner, OnExpired on_expired) {
    Arm(std::move(owner), std::move(on_expired));
  }

  // A wait begins that must end by `deadline` (from CoarseNow(), normally).
  void Begin(Clock::time_point deadline) {
    deadline_ = deadline;
    if (deadline < expiry_) timer_.cancel();  // the handler re-arms for the earlier deadline
  }
  // A wait begins that may last `limit`.
  void BeginFor(Clock::duration limit) { Begin(CoarseNow() + limit); }
  void End() { deadline_ = Clock::time_point::max(); }
  bool waiting() const { return deadline_ != Clock::time_point::max(); }

  // No more wakes: on_expired() is not called again and the owner is released.
  void Stop() {
    stopped_ = true;
    timer_.cancel();
  }

 private:
  template <class Owner, class OnExpired>
  void Arm(std::shared_ptr<Owner> owner, OnExpired on_expired) {
    // From the coarse clock, like every wait's deadline: so a wait that begins later never has
    // an earlier deadline than this wake (when its limit is at least the period).
    Clock::time_point next = CoarseNow() + period_;
    if (deadline_ < next) next = deadline_;
    expiry_ = next;
    timer_.expires_at(next);
    timer_.async_wait([this, owner = std::move(owner),
                       on_expired = std::move(on_expired)](asio_types::error_code) mutable {
      if (stopped_) return;
      // The precise clock here: the timer fired at or after its (coarse) expiry, and the coarse
      // clock may not show that yet, which would re-arm for a time already past, again and
      // again, until the next tick.
      if (waiting() && Clock::now() >= deadline_) {
        End();
        on_expired();
      }
      Arm(std::move(owner), std::move(on_expired));
    });
  }

  asio_types::Timer timer_;
  const Clock::duration period_;
  Clock::time_point deadline_ = Clock::time_point::max();  // of the wait in progress
  Clock::time_point expiry_ = Clock::time_point::max();    // the timer's
  bool stopped_ = false;
};

}  // namespace llmtap::net
