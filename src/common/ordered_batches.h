// OrderedBatches: work on batches in parallel, results in input order. The calling thread reads
// batches and consumes them strictly in the order it read them; in between, worker threads
// process them, in any order. Enough batches stay in flight (`window`) to keep every worker busy
// while the oldest is consumed. With no workers, each batch is read, processed and consumed on
// the calling thread, one at a time: the same results from one code path.
//
// Used by `llmtap anonymize` (workers tokenize and hash; the calling thread numbers blocks and
// writes) and `llmtap specdec` (workers tokenize; the calling thread replays decoding).
//
// Threads: a batch belongs to the calling thread except between its read and its consume, when
// exactly one worker owns it. Each worker has its own Work (made on that thread by make_work),
// so per-thread state (parsers, buffers) needs no locks.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace llmtap {

template <class Batch>
class OrderedBatches {
 public:
  using Work = std::function<void(Batch*)>;

  // `workers` threads, each running the Work that make_work returns (called on that thread);
  // 0: none, make_work is called once on the calling thread. At most `window` (at least 1)
  // batches are in flight.
  OrderedBatches(unsigned workers, size_t window, std::function<Work()> make_work)
      : window_(window == 0 ? 1 : window) {
    if (workers == 0) {
      inline_work_ = make_work();
      return;
    }
    for (unsigned i = 0; i < workers; ++i) {
      threads_.emplace_back([this, make_work] {
        const Work work = make_work();
        for (;;) {
          Slot* slot;
          {
            std::unique_lock lock(mu_);
            work_cv_.wait(lock, [this] { return closing_ || !queue_.empty(); });
            if (queue_.empty()) return;
            slot = queue_.front();
            queue_.pop_front();
          }
          work(&slot->batch);
          {
            std::lock_guard lock(mu_);
            slot->done = true;
          }
          done_cv_.notify_all();
        }
      });
    }
  }

  ~OrderedBatches() {
    {
      std::lock_guard lock(mu_);
      closing_ = true;
    }
    work_cv_.notify_all();
    for (std::thread& t : threads_) t.join();
  }

  OrderedBatches(const OrderedBatches&) = delete;
  OrderedBatches& operator=(const OrderedBatches&) = delete;

  // Until `read` returns false (the batch it was given is then unused) or `consume` does (read
  // no further; the batches in flight are still processed and consumed), on the calling thread:
  // read(Batch*) fills a batch (a reused one: read clears what it needs to); consume(Batch&)
  // takes each processed batch in read order.
  void Run(const std::function<bool(Batch*)>& read, const std::function<bool(Batch&)>& consume) {
    std::deque<std::unique_ptr<Slot>> in_flight, spare;
    bool more = true;
    for (;;) {
      while (more && in_flight.size() < window_) {
        std::unique_ptr<Slot> slot;
        if (spare.empty()) {
          slot = std::make_unique<Slot>();
        } else {
          slot = std::move(spare.front());
          spare.pop_front();
        }
        if (!read(&slot->batch)) {
          more = false;
          spare.push_back(std::move(slot));
          break;
        }
        if (inline_work_) {
          inline_work_(&slot->batch);
          slot->done = true;
        } else {
          {
            std::lock_guard lock(mu_);
            slot->done = false;
            queue_.push_back(slot.get());
          }
          work_cv_.notify_one();
        }
        in_flight.push_back(std::move(slot));
        if (inline_work_) break;  // consume it before reading the next
      }
      if (in_flight.empty()) return;
      Slot& oldest = *in_flight.front();
      if (!inline_work_) {
        std::unique_lock lock(mu_);
        done_cv_.wait(lock, [&oldest] { return oldest.done; });
      }
      if (!consume(oldest.batch)) more = false;
      spare.push_back(std::move(in_flight.front()));
      in_flight.pop_front();
    }
  }

 private:
  struct Slot {
    Batch batch;
    bool done = false;  // guarded by mu_ while workers run
  };

  size_t window_;
  Work inline_work_;  // set when there are no workers
  std::mutex mu_;
  std::condition_variable work_cv_, done_cv_;
  std::deque<Slot*> queue_;
  bool closing_ = false;
  std::vector<std::thread> threads_;
};

}  // namespace llmtap
