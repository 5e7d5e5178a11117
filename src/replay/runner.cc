#include "replay/runner.h"

#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <charconv>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <deque>
#include <functional>
#include <limits>
#include <memory>
#include <mutex>
#include <thread>
#include <unordered_set>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/connect.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/string.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http/basic_parser.hpp>
#include <boost/beast/http/read.hpp>

#include <simdjson.h>
#include "common/asio_types.h"
#include "common/version.h"
#include "net/http_get.h"
#include "net/resolve.h"
#include "net/url.h"
#include "replay/response.h"
#include "replay/sessions.h"

namespace llmtap::replay {

using namespace llmtap::asio_types;
namespace beast = boost::beast;
namespace http = beast::http;

namespace {

double Ms(Clock::duration d) { return std::chrono::duration<double, std::milli>(d).count(); }

Clock::duration FromMs(double ms) {
  return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double, std::milli>(ms));
}

std::atomic<int> g_signal{0};
extern "C" void OnSignal(int sig) { g_signal.store(sig, std::memory_order_relaxed); }

// A connection to the target, kept alive across requests.
struct Conn {
  explicit Conn(const Executor& ex) : socket(ex) {}
  Socket socket;
  beast::flat_buffer buffer;
};

// Parses a response head and hands every piece of body, timed, to the request's meter.
class ResponseParser final : public http::basic_parser<false> {
 public:
  ResponseParser(ResponseMeter* meter, ChunkReader* reader) : meter_(meter), reader_(reader) {}

 private:
  using string_view = beast::string_view;
  void on_request_impl(http::verb, string_view, string_view, int, error_code&) override {}
  void on_response_impl(int code, string_view, int, error_code&) override { status_ = code; }
  void on_field_impl(http::field name, string_view, string_view value, error_code&) override {
    if (name == http::field::content_type) {
      sse_ = value.size() >= 17 && beast::iequals(value.substr(0, 17), "text/event-stream");
    }
  }
  void on_header_impl(error_code&) override { meter_->OnHead(status_, sse_); }
  void on_body_init_impl(const boost::optional<std::uint64_t>&, error_code&) override {}
  size_t on_body_impl(string_view body, error_code&) override {
    meter_->OnBody({body.data(), body.size()}, Clock::now(), reader_);
    return body.size();
  }
  void on_chunk_header_impl(std::uint64_t, string_view, error_code&) override {}
  size_t on_chunk_body_impl(std::uint64_t, string_view body, error_code&) override {
    meter_->OnBody({body.data(), body.size()}, Clock::now(), reader_);
    return body.size();
  }
  void on_finish_impl(error_code&) override {}

  ResponseMeter* meter_;
  ChunkReader* reader_;
  int status_ = 0;
  bool sse_ = false;
};

// An exchange in flight, as the timeout sweep and cancellation see it.
struct Active {
  Clock::time_point deadline;
  Conn* conn = nullptr;
  bool timed_out = false;
  bool cancelled = false;
  void Abort() {
    if (conn) {
      error_code ignored;
      conn->socket.close(ignored);
    }
  }
};

struct Worker {
  // One thread runs this loop and only it touches the sockets, so the reactor's per-socket locks
  // can go (UNSAFE_IO); posting from other threads stays safe.
  asio::io_context ioc{BOOST_ASIO_CONCURRENCY_HINT_UNSAFE_IO};
  asio::executor_work_guard<Executor> work = asio::make_work_guard(ioc.get_executor());
  std::thread thread;
  std::vector<std::unique_ptr<Conn>> idle;
  std::unordered_set<Active*> active;
  ChunkReader reader;
  std::unique_ptr<Timer> sweep;
  bool stopping = false;
  // Open loop: the worker found the Lookahead empty and serves I/O until it has a row again.
  std::atomic<bool> rows_wanted{false};
  // Session turns waiting on this worker's timers for their causal due time (this thread's).
  std::unordered_set<Timer*> turn_timers;
};

// A planned request on its way: the row (with its body) and how long --max-concurrency held it.
struct Job {
  DueRequest due;
  double held_ms = 0;
};

// A request as started at its due time: written at once on an idle keep-alive connection when
// there is one (the write happens right there, not after whatever the event loop has queued),
// else left for the exchange coroutine to send on a new connection.
struct Start {
  Clock::time_point sent;
  std::string head;            // request line and headers
  std::unique_ptr<Conn> conn;  // the idle connection it went out on, or null
  size_t written = 0;          // bytes of head + body written on it so far
  error_code write_error;      // of that first write (a connection the server closed)
};

// The result record of a planned request, before it is sent.
RequestResult ResultOf(const DueRequest& due) {
  RequestResult r;
  r.index = due.request.index;
  r.chat = due.request.chat;
  r.stream = due.request.stream;
  r.warmup = due.warmup;
  r.scheduled_ms = due.scheduled_ms;
  r.session_turn = !due.request.session_id.empty();
  r.causal_shift_ms = due.causal_shift_ms;
  r.captured_latency = due.captured_end_ms.has_value();
  return r;
}

class Runner {
 public:
  Runner(Lookahead& input, const RunOptions& options, const Target& target,
         const tcp::endpoint& endpoint, std::string headers, const tokenizer::Tokenizer* tok,
         RunOutcome* out)
      : input_(input),
        closed_loop_(input.closed_loop()),
        causal_(options.causal_sessions && !closed_loop_),
        options_(options),
        endpoint_(endpoint),
        tok_(tok),
        out_(out),
        timeout_(FromMs(options.request_timeout_s * 1000)) {
    for (int chat = 0; chat < 2; ++chat) {
      std::string& h = head_[chat];
      h = "POST " + target.base_path + (chat ? "/v1/chat/completions" : "/v1/completions") +
          " HTTP/1.1\r\nHost: " + target.host_header + "\r\nUser-Agent: llmtap-replay/" + kVersion +
          "\r\nContent-Type: application/json\r\nAccept: */*\r\n" + headers + "Content-Length: ";
    }
  }

  void Run();

 private:
  awaitable<void> Exchange(Worker& w, Job job, Start start);
  awaitable<void> Lane(Worker& w);
  awaitable<void> Sweep(Worker& w);
  void WorkerMain(Worker& w);
  void Launch(Worker& w, Job job, bool counted = false);
  void Admit(Worker& w, Job job);
  void SendAt(Worker& w, Job job, double due_ms);
  void TurnEnded(Worker& w, const DueRequest& due, double ended_ms);
  Start Prepare(Worker& w, const TraceRequest& req);
  void StartNow(Worker& w, Job job);
  void Finished(Worker& w);
  void Publish(RequestResult r);
  void Unsent(const DueRequest& due);
  void Deliver();
  void Cancel();
  bool Done();
  void Progress(bool final);
  std::string Head(const TraceRequest& req) const;

  Lookahead& input_;
  const bool closed_loop_;
  const bool causal_;  // session turns follow SessionGate
  const RunOptions& options_;
  const tcp::endpoint endpoint_;
  const tokenizer::Tokenizer* tok_;
  RunOutcome* out_;
  const Clock::duration timeout_;
  std::array<std::string, 2> head_;  // [chat], up to "Content-Length: "
  std::vector<std::unique_ptr<Worker>> workers_;
  Clock::time_point t0_;
  std::optional<Clock::time_point> end_;  // --duration

  std::atomic<bool> cancel_{false};
  std::atomic<uint64_t> sent_{0}, ok_{0}, failed_{0};

  std::mutex results_mu_;  // guards results_
  // Ended since the thread running the replay last took them (bounded by ~50 ms of requests).
  std::vector<RequestResult> results_;

  std::mutex mu_;  // guards what follows
  std::condition_variable cv_;
  bool scheduling_done_ = false;
  uint32_t schedulers_left_ = 0;  // open loop: workers still pacing the plan
  uint64_t outstanding_ = 0;      // launched or held, not finished
  uint32_t in_flight_ = 0;        // for --max-concurrency
  std::deque<std::pair<Job, Clock::time_point>> held_;
  uint32_t lanes_left_ = 0;
  std::vector<std::pair<uint64_t, RequestResult>> unsent_;  // open loop, by plan slot
  // Turns waiting for their predecessor (counted in outstanding_).
  SessionGate<Job> sessions_{options_.session_idle_s * 1000};
  int progress_width_ = 0;  // of the last progress line (the calling thread's)
};

std::string Runner::Head(const TraceRequest& req) const {
  std::string head = head_[req.chat ? 1 : 0];
  head.append(std::to_string(req.body.size())).append("\r\n\r\n");
  return head;
}

Start Runner::Prepare(Worker& w, const TraceRequest& req) {
  Start start;
  start.sent = Clock::now();
  start.head = Head(req);
  if (w.idle.empty()) return start;
  start.conn = std::move(w.idle.back());
  w.idle.pop_back();
  Socket& socket = start.conn->socket;
  socket.non_blocking(true, start.write_error);
  if (!start.write_error) {
    start.written = socket.write_some(
        std::array<asio::const_buffer, 2>{asio::buffer(start.head), asio::buffer(req.body)},
        start.write_error);
  }
  if (start.write_error == asio::error::would_block) start.write_error = {};
  return start;
}

void Runner::StartNow(Worker& w, Job job) {
  Start start = Prepare(w, job.due.request);
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
    ++outstanding_;  // until it ended, whether it goes now or waits in the gate
    if (!sessions_.Arrive(session, job.due.scheduled_ms, &job, &due_ms)) return;
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
void Runner::TurnEnded(Worker& w, const DueRequest& due, double ended_ms) {
  std::optional<SessionGate<Job>::Next> next;
  {
    std::lock_guard lock(mu_);
    next = sessions_.Ended(due.request.session_id, ended_ms, due.captured_end_ms);
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
  {
    std::lock_guard lock(results_mu_);
    ended.swap(results_);
  }
  if (!ended.empty() && options_.on_results) options_.on_results(ended);
}

awaitable<void> Runner::Exchange(Worker& w, Job job, Start start) {
  const TraceRequest& req = job.due.request;
  RequestResult r = ResultOf(job.due);
  r.held_ms = job.held_ms;
  const Clock::time_point sent = start.sent;
  r.sent = true;
  r.sent_ms = Ms(sent - t0_);
  sent_.fetch_add(1, std::memory_order_relaxed);

  Active act;
  act.deadline = sent + timeout_;
  act.cancelled = cancel_.load(std::memory_order_relaxed);
  w.active.insert(&act);
  const std::string head = std::move(start.head);
  const size_t total = head.size() + req.body.size();
  ResponseMeter meter;
  bool complete = false;
  ErrorKind transport = ErrorKind::kProtocol;
  for (int attempt = 0; attempt < 2 && !act.cancelled && !act.timed_out; ++attempt) {
    meter.Begin(sent);
    std::unique_ptr<Conn> conn = std::move(start.conn);
    const bool reused = conn != nullptr;
    size_t written = 0;
    error_code ec;
    if (reused) {
      act.conn = conn.get();
      written = start.written;
      ec = start.write_error;
    } else {
      conn = std::make_unique<Conn>(w.ioc.get_executor());
      act.conn = conn.get();
      co_await conn->socket.async_connect(endpoint_, asio::redirect_error(use_awaitable, ec));
      if (ec) {
        transport = ErrorKind::kConnect;
        act.conn = nullptr;
        break;
      }
      conn->socket.set_option(tcp::no_delay(true), ec);
    }
    if (!ec && written < total) {
      std::array<asio::const_buffer, 2> rest{asio::buffer(head), asio::buffer(req.body)};
      if (written < head.size()) {
        rest[0] += written;
      } else {
        rest[0] = asio::const_buffer();
        rest[1] += written - head.size();
      }
      co_await asio::async_write(conn->socket, rest, asio::redirect_error(use_awaitable, ec));
    }
    ResponseParser parser(&meter, &w.reader);
    parser.body_limit(std::numeric_limits<std::uint64_t>::max());
    parser.header_limit(64 * 1024);
    if (!ec) {
      co_await http::async_read(conn->socket, conn->buffer, parser,
                                asio::redirect_error(use_awaitable, ec));
    }
    act.conn = nullptr;
    if (!ec) {
      complete = true;
      if (parser.keep_alive() && !cancel_.load(std::memory_order_relaxed)) {
        w.idle.push_back(std::move(conn));
      }
      break;
    }
    // A kept-alive connection the server closed while idle fails before any response byte:
    // send again on a new one.
    if (reused && !parser.got_some() && conn->buffer.size() == 0) continue;
    break;
  }
  const Clock::time_point done = Clock::now();
  w.active.erase(&act);
  r.done_ms = Ms(done - t0_);
  if (complete) {
    meter.Finish(true, done, req.body, tok_, &w.reader, &r);
  } else {
    r.status = meter.status();
    r.error = act.cancelled   ? ErrorKind::kCancelled
              : act.timed_out ? ErrorKind::kTimeout
                              : transport;
  }
  (r.ok() ? ok_ : failed_).fetch_add(1, std::memory_order_relaxed);
  const double ended_ms = r.done_ms;
  // Published before Finished, so that every result is there once the run is seen done.
  Publish(std::move(r));
  // The next turn is counted in outstanding_ before this one leaves it.
  if (causal_ && !req.session_id.empty()) TurnEnded(w, job.due, ended_ms);
  if (!closed_loop_) Finished(w);
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
    Start start = Prepare(w, due.request);
    // Named, not a braced temporary in the co_await expression: g++ 12 destroys such
    // temporaries twice when they own memory.
    Job job{std::move(due), 0};
    co_await Exchange(w, std::move(job), std::move(start));
  }
  std::lock_guard lock(mu_);
  if (--lanes_left_ == 0) {
    scheduling_done_ = true;
    cv_.notify_all();
  }
}

awaitable<void> Runner::Sweep(Worker& w) {
  error_code ec;
  while (!w.stopping) {
    w.sweep->expires_after(std::chrono::milliseconds(20));
    co_await w.sweep->async_wait(asio::redirect_error(use_awaitable, ec));
    const Clock::time_point now = Clock::now();
    const bool cancel = cancel_.load(std::memory_order_relaxed);
    for (Active* a : w.active) {
      if (cancel && !a->cancelled) {
        a->cancelled = true;
        a->Abort();
      } else if (now >= a->deadline && !a->timed_out && !a->cancelled) {
        a->timed_out = true;
        a->Abort();
      }
    }
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
      // Set before asking, so that a wake-up between the answer and the wait is not lost.
      w.rows_wanted.store(true, std::memory_order_release);
      const Lookahead::Pop got = input_.TryPop(&due, rows_ready);
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
      Admit(w, {std::move(due), 0});
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

void Runner::Progress(bool final) {
  const uint64_t sent = sent_.load(), ok = ok_.load(), failed = failed_.load();
  const uint64_t done = ok + failed;
  const double elapsed = std::max(0.0, Ms(Clock::now() - t0_) / 1000);
  // The total is known once the input ended; until then the bar shows how much of it was read
  // (when its size is known: not for standard input).
  const bool known = input_.finished();
  const uint64_t total = input_.planned();
  const uint64_t size = input_.file_size();
  double fraction = 0;
  if (known) {
    fraction = total ? static_cast<double>(done) / static_cast<double>(total) : 1;
  } else if (size > 0) {
    fraction = static_cast<double>(input_.stored_position()) / static_cast<double>(size);
  }
  const int width = 30;
  std::string bar(static_cast<size_t>(width * std::clamp(fraction, 0.0, 1.0)), '#');
  bar.resize(width, '.');
  char count[96];
  if (known) {
    std::snprintf(count, sizeof(count), "%llu/%llu done", static_cast<unsigned long long>(done),
                  static_cast<unsigned long long>(total));
  } else if (size > 0) {
    std::snprintf(count, sizeof(count), "%llu done, %.0f%% of the input read",
                  static_cast<unsigned long long>(done), 100 * fraction);
  } else {
    std::snprintf(count, sizeof(count), "%llu done, %llu rows read",
                  static_cast<unsigned long long>(done),
                  static_cast<unsigned long long>(input_.rows_read()));
  }
  char line[256];
  int n = std::snprintf(line, sizeof(line), "[%s] %s, %llu in flight, %llu errors, %.1f s",
                        bar.c_str(), count, static_cast<unsigned long long>(sent - done),
                        static_cast<unsigned long long>(failed), elapsed);
  n = std::clamp(n, 0, static_cast<int>(sizeof(line)) - 1);
  // Blanks over what a longer previous line (the input's share read) left.
  const int pad = std::max(0, progress_width_ - n);
  progress_width_ = n;
  std::fprintf(stderr, "\r%s%*s%s", line, pad, "", final ? "\n" : "");
  std::fflush(stderr);
}

void Runner::Run() {
  unsigned threads = options_.threads;
  if (threads == 0) threads = std::max(1u, std::thread::hardware_concurrency());
  for (unsigned i = 0; i < threads; ++i) {
    auto w = std::make_unique<Worker>();
    w->sweep = std::make_unique<Timer>(w->ioc.get_executor());
    asio::co_spawn(w->ioc, Sweep(*w), asio::detached);
    workers_.push_back(std::move(w));
  }

  struct sigaction sa {
  }, old_int{}, old_term{};
  sa.sa_handler = OnSignal;
  sigemptyset(&sa.sa_mask);
  g_signal.store(0);
  sigaction(SIGINT, &sa, &old_int);
  sigaction(SIGTERM, &sa, &old_term);

  if (options_.server_metrics_hook) options_.server_metrics_hook(RunPhase::kBefore, -1);
  const auto sys_now = std::chrono::system_clock::now();
  const Clock::time_point now = Clock::now();
  if (options_.start_at_unix_s) {
    const double wait_ms =
        *options_.start_at_unix_s * 1000 -
        std::chrono::duration<double, std::milli>(sys_now.time_since_epoch()).count();
    // Already past: the schedule stays anchored at --start-at (so shards stay aligned), and
    // the requests already due go out at once, their lateness counted as lag.
    if (wait_ms < -1000) {
      std::fprintf(stderr, "llmtap replay: --start-at is %.1f s in the past\n", -wait_ms / 1000);
    }
    t0_ = now + FromMs(wait_ms);
  } else {
    t0_ = now + std::chrono::milliseconds(20);  // the threads are up by then
  }
  out_->started_at_unix_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                                 (sys_now + (t0_ - now)).time_since_epoch())
                                 .count();
  if (options_.duration_s > 0) end_ = t0_ + FromMs(options_.duration_s * 1000);

  if (closed_loop_) {
    const uint32_t lanes = std::max<uint32_t>(1, input_.concurrency());
    lanes_left_ = lanes;
    for (uint32_t i = 0; i < lanes; ++i) {
      Worker& w = *workers_[i % workers_.size()];
      auto timer = std::make_shared<Timer>(w.ioc.get_executor(), t0_);
      timer->async_wait(
          [this, &w, timer](error_code) { asio::co_spawn(w.ioc, Lane(w), asio::detached); });
    }
  } else {
    schedulers_left_ = static_cast<uint32_t>(workers_.size());
  }
  for (auto& w : workers_) {
    Worker* wp = w.get();
    wp->thread = std::thread([this, wp] { WorkerMain(*wp); });
  }

  const bool show = options_.progress || isatty(STDERR_FILENO);
  Clock::time_point next_progress = Clock::now(), next_hook = t0_ + std::chrono::seconds(1);
  for (;;) {
    {
      std::unique_lock lock(mu_);
      cv_.wait_for(lock, std::chrono::milliseconds(50));
      if (Done()) break;
    }
    if (g_signal.load() != 0 && !cancel_.load()) {
      out_->interrupted = true;
      std::fprintf(stderr, "\nllmtap replay: interrupted; cancelling the requests in flight\n");
      Cancel();
    }
    Deliver();
    if (options_.on_tick) options_.on_tick();
    const Clock::time_point t = Clock::now();
    if (show && t >= next_progress) {
      Progress(false);
      next_progress = t + std::chrono::milliseconds(500);
    }
    if (options_.server_metrics_hook && t >= next_hook) {
      options_.server_metrics_hook(RunPhase::kDuring, Ms(t - t0_) / 1000);
      next_hook += std::chrono::seconds(1);
    }
  }
  const Clock::time_point finished = Clock::now();
  if (show) Progress(true);
  out_->duration_s = std::max(0.0, Ms(finished - t0_) / 1000);
  if (options_.server_metrics_hook) {
    options_.server_metrics_hook(RunPhase::kAfter, out_->duration_s);
  }
  if (options_.server_metrics_json) out_->server_metrics_json = options_.server_metrics_json();

  // No row is taken from here on; the Lookahead drops its wake-ups (which name the workers)
  // before the workers go.
  input_.Cancel();
  for (auto& w : workers_) {
    asio::post(w->ioc, [wp = w.get()] {
      wp->stopping = true;
      wp->sweep->cancel();
      wp->idle.clear();
      wp->work.reset();
    });
  }
  for (auto& w : workers_) w->thread.join();
  sigaction(SIGINT, &old_int, nullptr);
  sigaction(SIGTERM, &old_term, nullptr);

  Deliver();
  if (!closed_loop_) {
    // Planned but never sent (the run was interrupted): listed last, in plan order.
    for (DueRequest& due : input_.TakeQueued()) unsent_.emplace_back(due.slot, ResultOf(due));
    std::sort(unsent_.begin(), unsent_.end(),
              [](const auto& a, const auto& b) { return a.first < b.first; });
    std::vector<RequestResult> rest;
    rest.reserve(unsent_.size());
    for (auto& [slot, r] : unsent_) rest.push_back(std::move(r));
    if (!rest.empty() && options_.on_results) options_.on_results(rest);
  }
}

}  // namespace

bool ParseUrl(std::string_view url, Target* target, std::string* error) {
  *target = Target();
  net::HttpUrl u;
  const net::UrlError e =
      net::ParseHttpUrl(url, &u, {.empty_port_is_error = true, .lenient_authority = true});
  switch (e) {
    case net::UrlError::kNone:
      break;
    case net::UrlError::kTls:
      *error =
          "https is not supported; use an http:// URL (a TLS-terminating sidecar, or the "
          "server's plain port)";
      return false;
    case net::UrlError::kUnterminatedIpv6:
      *error = "bad IPv6 address in --url";
      return false;
    case net::UrlError::kBadPort:
      *error = "bad port in --url";
      return false;
    case net::UrlError::kNoHost:
      *error = "--url has no host";
      return false;
    default:  // kNotHttp (the lenient rules give no other)
      *error = "--url must start with http://";
      return false;
  }
  std::string_view path = u.target;
  while (path.ends_with("/")) path.remove_suffix(1);
  if (path.ends_with("/v1")) path.remove_suffix(3);
  while (path.ends_with("/")) path.remove_suffix(1);
  target->base_path = std::string(path);
  target->host_header = net::HostHeader(u);
  target->host = std::move(u.host);
  target->port = u.port;
  return true;
}

bool HeaderLine(std::string_view header, std::string* line, std::string* error) {
  size_t colon = header.find(':');
  if (colon == 0 || colon == std::string_view::npos ||
      header.find_first_of("\r\n") != std::string_view::npos) {
    *error = "--header must be 'Name: value' on one line";
    return false;
  }
  std::string_view name = header.substr(0, colon);
  for (char c : name) {
    if (c <= ' ' || c >= 127) {
      *error = "--header name holds a space or a control character";
      return false;
    }
  }
  std::string_view value = header.substr(colon + 1);
  while (!value.empty() && (value.front() == ' ' || value.front() == '\t')) value.remove_prefix(1);
  line->assign(name).append(": ").append(value).append("\r\n");
  return true;
}

std::optional<std::string> FetchFirstModel(const Target& target,
                                           const std::vector<std::string>& headers,
                                           double timeout_s) {
  const net::HttpGetResult res = net::HttpGet(
      "http://" + target.host_header + target.base_path + "/v1/models",
      std::chrono::milliseconds(static_cast<int64_t>(timeout_s * 1000)), 16u << 20, headers);
  if (res.status != 200) return std::nullopt;
  simdjson::dom::parser parser;
  simdjson::dom::array data;
  std::string_view id;
  if (parser.parse(res.body).at_key("data").get(data) != simdjson::SUCCESS) return std::nullopt;
  for (simdjson::dom::element m : data) {
    if (m.at_key("id").get(id) == simdjson::SUCCESS && !id.empty()) return std::string(id);
  }
  return std::nullopt;
}

uint64_t RaiseFileLimit() {
  rlimit rl{};
  if (getrlimit(RLIMIT_NOFILE, &rl) != 0) return 0;
  if (rl.rlim_cur < rl.rlim_max) {
    rl.rlim_cur = rl.rlim_max;
    setrlimit(RLIMIT_NOFILE, &rl);
    getrlimit(RLIMIT_NOFILE, &rl);
  }
  return rl.rlim_cur;
}

bool RunPlan(Lookahead& input, const RunOptions& options, const tokenizer::Tokenizer* tok,
             RunOutcome* out, std::string* error) {
  *out = RunOutcome();
  Target target;
  auto fail = [&] {
    input.Cancel();
    return false;
  };
  if (!ParseUrl(options.url, &target, error)) return fail();
  std::string headers;
  for (const std::string& h : options.headers) {
    std::string line;
    if (!HeaderLine(h, &line, error)) return fail();
    headers += line;
  }
  if (!(options.request_timeout_s > 0)) {
    *error = "--request-timeout must be positive";
    return fail();
  }
  tcp::endpoint endpoint;
  if (std::string why; !net::ResolveReachable(target.host, target.port, &endpoint, &why)) {
    *error = "cannot resolve " + target.host + ": " + why;
    return fail();
  }
  RaiseFileLimit();
  Runner runner(input, options, target, endpoint, std::move(headers), tok, out);
  runner.Run();
  return true;
}

}  // namespace llmtap::replay
