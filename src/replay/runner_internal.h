// The inside of the replay's load generator (runner.h): the Runner and the state its parts
// share. Private to src/replay, and included only by the Runner's own files:
//   runner.cc    the run: worker threads, time 0, the monitoring loop (results, progress,
//                Ctrl-C, server-metrics hook), the end of the run; RunPlan
//   dispatch.cc  scheduling: pacing the plan on each worker, --max-concurrency, causal session
//                turns, closed-loop lanes, cancellation, handing results over
//   exchange.cc  one request and its response on a keep-alive connection, and the timeout sweep
//
// Threads: as runner.h says. A Worker's members belong to its own thread (its event loop),
// except where marked; the Runner's mu_ and results_mu_ guard what the threads share.
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <unordered_set>
#include <utility>
#include <vector>

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/beast/core/flat_buffer.hpp>

#include "api/response_document.h"
#include "common/asio_types.h"
#include "common/version.h"
#include "net/tls.h"
#include "replay/chains.h"
#include "replay/history.h"
#include "replay/response.h"
#include "replay/runner.h"
#include "replay/sessions.h"

namespace llmtap::replay::internal {

using namespace llmtap::asio_types;
namespace beast = boost::beast;

inline double Ms(Clock::duration d) { return std::chrono::duration<double, std::milli>(d).count(); }

inline Clock::duration FromMs(double ms) {
  return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double, std::milli>(ms));
}

// A connection to the target, kept alive across requests; `tls` is null for http://.
struct Conn {
  explicit Conn(const Executor& ex) : socket(ex) {}
  Socket socket;
  std::unique_ptr<net::TlsSocket> tls;  // after socket: it holds a reference to it
  beast::flat_buffer buffer;
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
  // https: the session of this worker's last connection, resumed by its next one.
  net::TlsSessionSlot tls_session;
  std::unordered_set<Active*> active;
  api::DocumentReader reader;
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
  uint64_t turn_ticket = 0;   // a causal session turn's place in its session (SessionGate::Reserve)
  uint64_t history_turn = 0;  // a hashed session turn's number (ConversationHistory::Compose)
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
RequestResult ResultOf(const DueRequest& due);

class Runner {
 public:
  // `tls`: the https context (null for http://), shared with RunPlan's pre-flight check.
  Runner(Lookahead& input, const RunOptions& options, const Target& target,
         const tcp::endpoint& endpoint, std::shared_ptr<const net::TlsClientContext> tls,
         std::string headers, const tokenizer::Tokenizer* tok, RunOutcome* out)
      : input_(input),
        closed_loop_(input.closed_loop()),
        causal_(options.causal_sessions && !closed_loop_),
        options_(options),
        endpoint_(endpoint),
        tls_(std::move(tls)),
        tls_host_(target.host),
        tok_(tok),
        out_(out),
        timeout_(FromMs(options.request_timeout_s * 1000)) {
    for (size_t e = 0; e < head_.size(); ++e) {
      const std::string_view path = api::EndpointPath(static_cast<api::Endpoint>(e));
      if (path.empty()) continue;  // no row is of kOther or kAny (input.cc)
      head_[e] = "POST " + target.base_path + std::string(path) +
                 " HTTP/1.1\r\nHost: " + target.host_header + "\r\nUser-Agent: llmtap-replay/" +
                 kVersion + "\r\nContent-Type: application/json\r\nAccept: */*\r\n" + headers +
                 "Content-Length: ";
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
  awaitable<error_code> Connect(Worker& w, Conn& conn, ErrorKind* kind);
  void StartNow(Worker& w, Job job);
  // The body's last changes as it is sent: a hashed session turn gets the conversation so far
  // in front of its own prompt (history.h); a Responses row continuing a response of the trace
  // gets the id the target gave that response (chains.h).
  void Compose(Job* job) {
    TraceRequest& req = job->due.request;
    if (req.chain == ChainLink::kLinked) {
      req.chain = response_ids_.Relink(req.previous_response_id, &req.body, Ms(Clock::now() - t0_));
    }
    if (req.turn_begin == std::string::npos) return;
    job->history_turn = history_.Compose(&req, Ms(Clock::now() - t0_));
  }
  void Finished(Worker& w);
  void Publish(RequestResult r);
  void Unsent(const DueRequest& due);
  void Deliver();
  void Cancel();
  bool Done();
  void Progress(bool final);
  std::string Head(const TraceRequest& req) const;
  // The parts of Run(), on the thread running the replay.
  void StartWorkers();
  void SetTimeZero();
  void Monitor();
  void StopWorkers();
  void DeliverUnsent();

  Lookahead& input_;
  const bool closed_loop_;
  const bool causal_;  // session turns follow SessionGate
  const RunOptions& options_;
  const tcp::endpoint endpoint_;
  const std::shared_ptr<const net::TlsClientContext> tls_;
  const std::string tls_host_;  // the name the certificate must carry, and SNI
  std::atomic<bool> tls_failure_told_{false};
  const tokenizer::Tokenizer* tok_;
  RunOutcome* out_;
  const Clock::duration timeout_;
  std::array<std::string, 8> head_;  // [api::Endpoint], up to "Content-Length: "
  std::vector<std::unique_ptr<Worker>> workers_;
  Clock::time_point t0_;
  std::optional<Clock::time_point> end_;  // --duration

  std::atomic<bool> cancel_{false};
  std::atomic<uint64_t> sent_{0}, ok_{0}, failed_{0};

  std::mutex results_mu_;  // guards results_
  // Ended since the thread running the replay last took them (bounded by ~50 ms of requests).
  std::vector<RequestResult> results_;

  // Open loop: a row is taken from the plan and, a session turn, reserved in the gate as one
  // step, so that turns reserve in plan order (taken before mu_, never while holding it).
  std::mutex pop_mu_;

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
  // Hashed session turns: each session's conversation so far (its own lock).
  ConversationHistory history_{options_.session_idle_s * 1000};
  // Responses chains: the id the target gave each captured response (its own lock).
  ResponseIdMap response_ids_{options_.session_idle_s * 1000};
  int progress_width_ = 0;  // of the last progress line (the calling thread's)
};

}  // namespace llmtap::replay::internal
