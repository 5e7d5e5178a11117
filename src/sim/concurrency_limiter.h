// ConcurrencyLimiter: the FIFO queue behind `llmtap sim --max-concurrency`, a counting semaphore
// for coroutines on several event loops. A waiter parks on a timer that never expires;
// Release() hands the slot over and cancels that timer on the waiter's own loop, so the
// waiter's timer is only ever touched by its own thread.
//
// Threads: any loop's thread may Acquire() (from a coroutine on that loop) and Release(); the
// server's controlling thread calls Close() before the loops go away. Include from .cc files
// only (it brings Asio).
#pragma once

#include <algorithm>
#include <cstdint>
#include <deque>
#include <mutex>

#include <boost/asio/post.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/this_coro.hpp>

#include "common/asio_types.h"

namespace llmtap::sim {

using namespace llmtap::asio_types;

class ConcurrencyLimiter {
 public:
  explicit ConcurrencyLimiter(uint32_t limit) : limit_(limit) {}

  // True once a slot is held (release it with Release()); false if Close() was called.
  awaitable<bool> Acquire() {
    if (limit_ == 0) co_return true;
    Executor ex = co_await asio::this_coro::executor;
    Timer timer(ex, Clock::time_point::max());
    Waiter w{&timer, ex, false};
    bool queued = false;
    {
      std::lock_guard lock(mu_);
      if (!closed_) {
        if (in_use_ < limit_) {
          ++in_use_;
        } else {
          waiters_.push_back(&w);
          queued = true;
        }
      }
    }
    if (!queued) co_return !closed();
    error_code ec;
    co_await timer.async_wait(asio::redirect_error(use_awaitable, ec));
    std::lock_guard lock(mu_);
    if (w.granted) co_return true;
    std::erase(waiters_, &w);
    co_return false;
  }

  bool unlimited() const { return limit_ == 0; }

  void Release() {
    if (limit_ == 0) return;
    std::lock_guard lock(mu_);
    if (!closed_ && !waiters_.empty()) {
      Waiter* w = waiters_.front();
      waiters_.pop_front();
      w->granted = true;  // the slot passes to w; in_use_ is unchanged
      asio::post(w->ex, [t = w->timer] { t->cancel(); });
      return;
    }
    --in_use_;
  }

  // After Close(), nothing is woken any more: the event loops are about to go away.
  void Close() {
    std::lock_guard lock(mu_);
    closed_ = true;
    waiters_.clear();
  }

 private:
  struct Waiter {
    Timer* timer;
    Executor ex;
    bool granted;
  };
  bool closed() {
    std::lock_guard lock(mu_);
    return closed_;
  }
  const uint32_t limit_;
  std::mutex mu_;
  uint32_t in_use_ = 0;
  bool closed_ = false;
  std::deque<Waiter*> waiters_;
};

}  // namespace llmtap::sim
