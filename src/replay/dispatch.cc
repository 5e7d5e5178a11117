// The Runner's scheduling (runner_internal.h): each worker paces the plan and starts requests
// at their due time, --max-concurrency holds requests back, causal session turns wait in the
// SessionGate, closed-loop lanes send one row after another, and Cancel ends it all.
#include <sys/prctl.h>

#include <algorithm>
#include <functional>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/redirect_error.hpp>

#include "replay/runner_internal.h"

namespace llmtap::replay::internal {

// The result record of a planned request, before it is sent.
RequestResult ResultOf(const DueRequest& due) {
  RequestResult r;
  r.index = due.request.index;
  r.endpoint = due.request.endpoint;
  r.chain = due.request.chain;
  r.stream = due.request.stream;
  r.warmup = due.warmup;
  r.scheduled_ms = due.scheduled_ms;
  r.session_turn = !due.request.session_id.empty();
  r.causal_shift_ms = due.causal_shift_ms;
  r.captured_latency = due.captured_end_ms.has_value();
  r.line = due.request.line;
  r.timestamp_ms = due.request.timestamp_ms;
  r.captured_side = due.request.captured_side;
  if (!r.captured_side.empty()) {
    r.model = due.request.model;
    r.temperature = due.request.temperature;
    r.turn = due.request.turn;
  }
  return r;
}

void Runner::StartNow(Worker& w, Job job) {
  if (paired()) {
    Start primary, twin;
    std::string body;
    std::shared_ptr<PairState> pair = StartPair(w, job, &primary, &twin, &body);
    asio::co_spawn(w.ioc, PairedExchange(w, pair, std::move(body), std::move(twin)),
                   asio::detached);
    asio::co_spawn(w.ioc, Exchange(w, std::move(job), std::move(primary), std::move(pair)),
                   asio::detached);
    return;
  }
  Compose(&job);
  Start start = Prepare(w, kPrimary, job.due.request, job.due.request.body);
  asio::co_spawn(w.ioc, Exchange(w, std::move(job), std::move(start)), asio::detached);
}

// On the worker's thread at the request's due time.
// `counted`: already in outstanding_ (a session turn that waited).
void Runner::Launch(Worker& w, Job job, bool counted) {
  const uint32_t limit = options_.max_concurrency.value_or(0);
  {
    std::lock_guard lock(mu_);
    if (!counted) ++outstanding_;
    if (limit > 0) {
      if (in_flight_ >= limit) {
        const Clock::time_point due = t0_ + FromMs(job.due.scheduled_ms);
        held_.push_back({std::move(job), due});
        ++out_->violations;
        return;
      }
      ++in_flight_;
    }
  }
  StartNow(w, std::move(job));
}

// On the worker's thread at the row's plan time: a session turn goes through the gate (it may
// wait for its predecessor, or for its think time), any other row out at once.
void Runner::Admit(Worker& w, Job job) {
  const std::string& session = job.due.request.session_id;
  if (!causal_ || session.empty()) return Launch(w, std::move(job));
  double due_ms = 0;
  {
    std::lock_guard lock(mu_);
    // Cancelled since the check before: Cancel has emptied the gate (or will, after this), and a
    // turn waiting there for a ticket of the emptied gate would wait for ever.
    if (cancel_.load(std::memory_order_relaxed)) {
      unsent_.emplace_back(job.due.slot, ResultOf(job.due));
      return;
    }
    ++outstanding_;  // until it ended, whether it goes now or waits in the gate
    if (!sessions_.Arrive(session, job.turn_ticket, job.due.scheduled_ms, &job, &due_ms)) return;
  }
  SendAt(w, std::move(job), due_ms);
}

// A session turn (counted in outstanding_) at its causal due time: at once when that has come,
// else on a timer of this worker, whose event loop the pacing loop keeps running.
void Runner::SendAt(Worker& w, Job job, double due_ms) {
  job.due.causal_shift_ms = std::max(0.0, due_ms - job.due.scheduled_ms);
  job.due.scheduled_ms = std::max(job.due.scheduled_ms, due_ms);
  const Clock::time_point at = t0_ + FromMs(job.due.scheduled_ms);
  if (Clock::now() >= at) return Launch(w, std::move(job), true);
  auto timer = std::make_shared<Timer>(w.ioc.get_executor(), at);
  w.turn_timers.insert(timer.get());
  timer->async_wait([this, &w, timer, job = std::move(job)](error_code ec) mutable {
    w.turn_timers.erase(timer.get());
    if (ec || cancel_.load(std::memory_order_relaxed)) {
      Unsent(job.due);
      std::lock_guard lock(mu_);
      if (--outstanding_ == 0 && scheduling_done_) cv_.notify_all();
      return;
    }
    Launch(w, std::move(job), true);
  });
}

// A session turn's response ended (whatever its outcome): the turn waiting behind it goes.
void Runner::TurnEnded(Worker& w, const std::string& session_id,
                       const std::optional<double>& captured_end_ms, double ended_ms) {
  std::optional<SessionGate<Job>::Next> next;
  {
    std::lock_guard lock(mu_);
    next = sessions_.Ended(session_id, ended_ms, captured_end_ms);
  }
  if (next) SendAt(w, std::move(next->turn), next->due_ms);
}

void Runner::Finished(Worker& w) {
  std::unique_lock lock(mu_);
  if (!held_.empty() && !cancel_.load(std::memory_order_relaxed)) {
    Job job = std::move(held_.front().first);
    const Clock::time_point since = held_.front().second;
    held_.pop_front();
    job.held_ms = Ms(Clock::now() - since);
    out_->held_ms_total += job.held_ms;
    --outstanding_;  // this one; the held one was counted when it was held
    lock.unlock();
    StartNow(w, std::move(job));  // takes over this one's slot
    return;
  }
  if (in_flight_ > 0) --in_flight_;
  if (--outstanding_ == 0 && scheduling_done_) cv_.notify_all();
}

bool Runner::Done() { return scheduling_done_ && outstanding_ == 0; }

void Runner::Publish(RequestResult r) {
  std::lock_guard lock(results_mu_);
  results_.push_back(std::move(r));
}

// An open loop's planned request that the run ended before (Ctrl-C): listed, never sent.
void Runner::Unsent(const DueRequest& due) {
  std::lock_guard lock(mu_);
  unsent_.emplace_back(due.slot, ResultOf(due));
}

// Hands the results that ended so far to on_results (on the thread running the replay).
void Runner::Deliver() {
  std::vector<RequestResult> ended;
  std::vector<PairRecord> pairs;
  {
    std::lock_guard lock(results_mu_);
    ended.swap(results_);
    pairs.swap(pairs_);
  }
  if (!ended.empty() && options_.on_results) options_.on_results(ended);
  if (!pairs.empty() && options_.on_pairs) options_.on_pairs(pairs);
}

awaitable<void> Runner::Lane(Worker& w) {
  // Woken by the Lookahead when it has a row again (a posted cancel of this timer runs only once
  // the lane waits on it: both are on this worker's thread).
  auto rows = std::make_shared<Timer>(w.ioc.get_executor());
  const std::function<void()> wake = [&w, rows] { asio::post(w.ioc, [rows] { rows->cancel(); }); };
  for (;;) {
    // Closed loop: a request is due when its lane is free; waiting for the input counts as lag.
    const Clock::time_point ready = Clock::now();
    DueRequest due;
    Lookahead::Pop got = Lookahead::Pop::kEmpty;
    while (!cancel_.load(std::memory_order_relaxed) && !(end_ && Clock::now() >= *end_)) {
      got = input_.TryPop(&due, wake);
      if (got != Lookahead::Pop::kEmpty) break;
      error_code ec;
      rows->expires_after(std::chrono::milliseconds(200));
      co_await rows->async_wait(asio::redirect_error(use_awaitable, ec));
    }
    if (got != Lookahead::Pop::kRow) break;
    due.scheduled_ms = Ms(ready - t0_);
    // Named, not a braced temporary in the co_await expression: g++ 12 destroys such
    // temporaries twice when they own memory.
    Job job{std::move(due), 0};
    if (paired()) {
      // The lane is free again once both sides of the pair ended.
      Start primary, twin;
      std::string body;
      std::shared_ptr<PairState> pair = StartPair(w, job, &primary, &twin, &body);
      pair->joined = std::make_shared<Timer>(w.ioc.get_executor(), Clock::time_point::max());
      const std::shared_ptr<Timer> joined = pair->joined;
      asio::co_spawn(w.ioc, PairedExchange(w, pair, std::move(body), std::move(twin)),
                     asio::detached);
      co_await Exchange(w, std::move(job), std::move(primary), pair);
      if (pair->sides_left > 0) {
        error_code ec;
        co_await joined->async_wait(asio::redirect_error(use_awaitable, ec));
      }
      continue;
    }
    Compose(&job);
    Start start = Prepare(w, kPrimary, job.due.request, job.due.request.body);
    co_await Exchange(w, std::move(job), std::move(start));
  }
  std::lock_guard lock(mu_);
  if (--lanes_left_ == 0) {
    scheduling_done_ = true;
    cv_.notify_all();
  }
}

// A worker's thread. Open loop: the worker takes the next row from the Lookahead (rows come out
// in due order, so the workers between them send in due order), serves its connections until
// `spin` before the row's due time (a timer wakes it), spins to the instant while still serving
// ready I/O, and starts the request right there. Then, and in a closed loop, it just runs its
// event loop.
void Runner::WorkerMain(Worker& w) {
  prctl(PR_SET_TIMERSLACK, 1UL, 0, 0, 0);  // timers wake as close to their deadline as they can
  if (!closed_loop_) {
    const Clock::duration spin = FromMs(options_.spin_us / 1000.0);
    Timer wake(w.ioc.get_executor());
    const std::function<void()> rows_ready = [&w] {
      w.rows_wanted.store(false, std::memory_order_release);
      asio::post(w.ioc, [] {});
    };
    while (!cancel_.load(std::memory_order_relaxed)) {
      DueRequest due;
      uint64_t ticket = 0;
      // Set before asking, so that a wake-up between the answer and the wait is not lost.
      w.rows_wanted.store(true, std::memory_order_release);
      Lookahead::Pop got;
      {
        // A session turn takes its ticket as it leaves the plan, in plan order: the workers wait
        // for their rows' times apart, and a turn may reach the gate before the one before it.
        std::lock_guard pop_lock(pop_mu_);
        got = input_.TryPop(&due, rows_ready);
        if (got == Lookahead::Pop::kRow && causal_ && !due.request.session_id.empty()) {
          std::lock_guard lock(mu_);
          ticket = sessions_.Reserve(due.request.session_id);
        }
      }
      if (got == Lookahead::Pop::kEnd) break;
      if (got == Lookahead::Pop::kEmpty) {
        // The input is behind: serve I/O until it has a row (it may already be late: lag).
        while (w.rows_wanted.load(std::memory_order_acquire) &&
               !cancel_.load(std::memory_order_relaxed)) {
          w.ioc.run_one();
        }
        continue;
      }
      w.rows_wanted.store(false, std::memory_order_relaxed);
      const Clock::time_point at = t0_ + FromMs(due.scheduled_ms);
      // The clock, not the timer's handler, ends the wait: the handler would run only after
      // every completion queued before it, the clock is read after each one.
      if (Clock::now() < at - spin) {
        wake.expires_at(at - spin);
        wake.async_wait([](error_code) {});
        while (Clock::now() < at - spin && !cancel_.load(std::memory_order_relaxed)) {
          w.ioc.run_one();
        }
      }
      // Serve ready I/O every 20 us at most while spinning (each poll is a syscall).
      Clock::time_point next_poll{};
      for (Clock::time_point t = Clock::now(); t < at; t = Clock::now()) {
        if (cancel_.load(std::memory_order_relaxed)) break;
        if (t >= next_poll) {
          w.ioc.poll_one();
          next_poll = t + std::chrono::microseconds(20);
        }
#if defined(__x86_64__) || defined(__i386__)
        __builtin_ia32_pause();
#endif
      }
      if (cancel_.load(std::memory_order_relaxed)) {
        Unsent(due);
        break;
      }
      Admit(w, {std::move(due), 0, ticket});
    }
    std::lock_guard lock(mu_);
    if (--schedulers_left_ == 0) {
      scheduling_done_ = true;
      cv_.notify_all();
    }
  }
  w.ioc.run();
}

void Runner::Cancel() {
  cancel_.store(true);
  {
    std::lock_guard lock(mu_);
    outstanding_ -= held_.size();
    for (auto& [job, since] : held_) unsent_.emplace_back(job.due.slot, ResultOf(job.due));
    held_.clear();
    std::deque<Job> waiting = sessions_.TakeWaiting();
    outstanding_ -= waiting.size();
    for (Job& job : waiting) unsent_.emplace_back(job.due.slot, ResultOf(job.due));
    cv_.notify_all();
  }
  // Wakes workers that wait for their next due time, or for rows; turns on timers go unsent.
  for (auto& w : workers_) {
    asio::post(w->ioc, [wp = w.get()] {
      for (Timer* t : wp->turn_timers) t->cancel();
    });
  }
  input_.Cancel();
}

}  // namespace llmtap::replay::internal
