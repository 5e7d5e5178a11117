// Lookahead: the streaming input of `llmtap replay`. A reader thread reads the trace row by row
// (TraceReader: local files, standard input, s3:// objects, .jsonl.zst), plans each row
// (Planner, in file order) and builds the bodies of this shard's planned rows into a queue
// bounded in rows and in body bytes; the runner's event loops take the rows from it as they come
// due. The reader stays as far ahead as the bounds allow, so the next requests are parsed long
// before their send time, and memory holds the queue, never the trace.
//
// Everything that needs the trace as a whole is learned as it is read: counts by kind, rows
// skipped (listed by line as they are found), rows out of order, the plan's total, and where the
// input ends (known once the reader reached it: finished()).
//
// Threads: Start, WaitPrimed, TakeNotes, Stop and the accessors on the thread running the replay;
// TryPop and Cancel from any thread (the event loops); the reader thread is internal.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "replay/input.h"
#include "replay/options.h"
#include "replay/schedule.h"

namespace llmtap::replay {

// A planned row of this shard, ready to send.
struct DueRequest {
  TraceRequest request;
  uint64_t slot = 0;        // position among this shard's planned requests
  double scheduled_ms = 0;  // after the run's start (0 in a closed loop)
  bool warmup = false;
  // A turn of a session on the trace's timestamps: when its response ended in the capture, on
  // the run's clock (scheduled_ms + captured latency_ms / speedup), when the outcomes sidecar
  // gives its latency. The next turn's think time is measured from there (sessions.h).
  std::optional<double> captured_end_ms;
  // How far the causal schedule moved it past its plan time (the runner sets it, and then
  // scheduled_ms to the causal due time).
  double causal_shift_ms = 0;
};

class Lookahead {
 public:
  struct Options {
    LoadOptions load;
    ScheduleOptions schedule;
    double duration_s = 0;  // RunOptions::duration_s: the plan ends there (open loop)
    // The queue's bounds. A row larger than max_bytes still goes in, alone.
    size_t max_rows = 16384;
    size_t max_bytes = size_t{64} << 20;
    // Notes (skipped rows, rows out of order) start with this ("PATH:").
    std::string note_prefix;
    // What the outcomes sidecar says of the row at (line, timestamp): its captured latency_ms,
    // response_id and the server's cache report (nullopt: no outcome for it). Called on the
    // reader thread, once per row. Unset: no sidecar.
    struct Captured {
      std::optional<double> latency_ms;
      std::string_view response_id;  // valid while the sidecar's table is
      // The sidecar's `response` member as JSON text, for --responses-chain inline ("" none).
      std::string_view response;
      std::optional<uint32_t> prompt_tokens, cached_tokens;  // both or neither
      // The outcome as a fidelity pair's captured side (OutcomeTable::Side), "" for none.
      std::string_view side;
    };
    std::function<std::optional<Captured>(uint64_t line, std::optional<double> timestamp_ms)>
        captured;
    // Session turns get their captured end (DueRequest::captured_end_ms) from the captured
    // latency: a causal replay on the trace's timestamps.
    bool think_times = false;
  };

  explicit Lookahead(Options options);
  ~Lookahead();  // Stop()
  Lookahead(const Lookahead&) = delete;
  Lookahead& operator=(const Lookahead&) = delete;

  // Checks the schedule options, opens the input and starts the reader thread. False with
  // *error (nothing started) when either fails.
  bool Start(std::string* error);

  // Blocks until the first row is queued (or the input ended), then until the queue holds rows
  // due over the next `horizon_ms` (a closed loop: a row per lane), or is full, or the input
  // ended, or `max_wait_ms` passed: the run then starts with its first requests parsed.
  void WaitPrimed(double horizon_ms, double max_wait_ms);

  enum class Pop { kRow, kEmpty, kEnd };
  // The next row in plan order. kEmpty: none yet; `wake` is then called once (on the reader
  // thread, or on the one calling Cancel) when one may be there, or the input ended. kEnd: the
  // input ended (or was cancelled) and every row was taken.
  Pop TryPop(DueRequest* out, const std::function<void()>& wake);

  // Stops reading (the run ended early: Ctrl-C, --duration). Rows still queued stay for
  // TakeQueued.
  void Cancel();
  // Cancel() and joins the reader thread. Idempotent.
  void Stop();
  // After Stop(): the rows planned but never taken, in plan order.
  std::vector<DueRequest> TakeQueued();

  // New notes since the last call, one line each: "PATH:line N: reason (skipped)" and
  // "PATH:line N: timestamp ... (sent at once)".
  std::vector<std::string> TakeNotes();

  // The input ended (or failed): planned() is then this shard's final count.
  bool finished() const { return finished_.load(std::memory_order_acquire); }
  // After finished(): the input or plan error that ended it early ("" when none).
  std::string error() const;
  bool closed_loop() const { return closed_loop_; }
  uint32_t concurrency() const { return options_.schedule.concurrency.value_or(0); }
  const std::string& mode() const { return mode_; }

  // Live figures, any thread. planned: this shard's rows planned so far.
  uint64_t rows_read() const { return rows_read_.load(std::memory_order_relaxed); }
  uint64_t planned() const { return planned_.load(std::memory_order_relaxed); }
  // Stored bytes read and the input's stored size (0 when unknown: standard input, a pipe).
  uint64_t stored_position() const { return stored_position_.load(std::memory_order_relaxed); }
  uint64_t file_size() const { return file_size_; }

  // After Stop() (or finished()): what was read and planned.
  struct Totals {
    InputCounts counts;
    uint64_t planned_total = 0;  // over all shards
    uint64_t out_of_order = 0;
    std::string hashed_model;
    // What the capture's server reported of its cache, over this shard's planned rows whose
    // outcome has prompt_tokens and cached_tokens: the capture side of the replay's hit rate.
    struct Cache {
      uint64_t requests = 0, prompt_tokens = 0, cached_tokens = 0;
    } captured_cache;
  };
  Totals totals() const;

  // Test hook: the most rows and body bytes the queue ever held.
  size_t max_rows_held() const;
  size_t max_bytes_held() const;

 private:
  void ReaderMain();
  // Queues a row; blocks while the queue is full. False when cancelled.
  bool Push(DueRequest row);
  void Finish(std::string error);
  void Note(std::string note);
  bool BelowLowWater() const;  // with mu_ held
  static size_t Bytes(const DueRequest& row) { return row.request.body.capacity(); }

  const Options options_;
  const bool closed_loop_;
  const bool timestamps_;  // the plan follows the trace's timestamps
  std::string mode_;
  TraceReader reader_;  // the reader thread's, once started
  ChainLinker chains_;  // the reader thread's
  // Rows seen per session (the reader thread's): a fidelity pair's turn index. One entry per
  // session of a trace with an outcomes sidecar.
  std::unordered_map<std::string, int64_t> turns_;
  Planner planner_;  // the reader thread's
  std::thread thread_;
  uint64_t file_size_ = 0;

  std::atomic<bool> finished_{false};
  std::atomic<bool> cancelled_{false};
  std::atomic<uint64_t> rows_read_{0}, planned_{0}, stored_position_{0};

  mutable std::mutex mu_;           // guards what follows
  std::condition_variable space_;   // the reader waits for room
  std::condition_variable primed_;  // WaitPrimed waits for rows
  std::deque<DueRequest> queue_;
  size_t bytes_ = 0;
  size_t max_rows_held_ = 0, max_bytes_held_ = 0;
  bool reader_waiting_ = false;  // the reader waits for room: the queue is full
  bool primer_waiting_ = false;  // WaitPrimed is waiting
  std::vector<std::function<void()>> wakers_;
  std::vector<std::string> notes_;
  std::string error_;
  Totals totals_;                 // published by the reader thread when it ends
  Totals::Cache captured_cache_;  // the reader thread's, until then
};

}  // namespace llmtap::replay
