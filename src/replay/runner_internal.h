// The inside of the replay's load generator (runner.h): the Runner and the state its parts
// share. Private to src/replay, and included only by the Runner's own files:
//   runner.cc    the run: worker threads, time 0, the monitoring loop (results, progress,
//                Ctrl-C, server-metrics hook), the end of the run; RunPlan
//   dispatch.cc  scheduling: pacing the plan on each worker, --max-concurrency, causal session
//                turns, closed-loop lanes, cancellation, handing results over
//   exchange.cc  one request and its response on a keep-alive connection, and the timeout sweep
//   paired.cc    --paired-url: each row's twin to the paired target, and the pair's line
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
#include "replay/inline.h"
#include "replay/response.h"
#include "replay/runner.h"
#include "replay/sessions.h"
#include "shadow/pair.h"

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

// The servers a run sends to: the --url target, and with --paired-url the paired one, which gets
// the same rows at the same instants (paired.cc).
enum Side { kPrimary = 0, kPaired = 1 };

// One server, as the Runner reaches it.
struct Peer {
  tcp::endpoint endpoint;
  std::shared_ptr<const net::TlsClientContext> tls;  // null for http://
  std::string tls_host;                              // the name the certificate must carry, and SNI
  std::array<std::string, 8> head;  // [api::Endpoint], the request head up to "Content-Length: "
  std::atomic<bool> tls_failure_told{false};
  std::atomic<bool> connect_failure_told{false};  // the paired target's first failed connect
};

// A worker's connections to one server.
struct Pool {
  std::vector<std::unique_ptr<Conn>> idle;
  // https: the session of this worker's last connection, resumed by its next one.
  net::TlsSessionSlot tls_session;
};

struct Worker {
  // One thread runs this loop and only it touches the sockets, so the reactor's per-socket locks
  // can go (UNSAFE_IO); posting from other threads stays safe.
  asio::io_context ioc{BOOST_ASIO_CONCURRENCY_HINT_UNSAFE_IO};
  asio::executor_work_guard<Executor> work = asio::make_work_guard(ioc.get_executor());
  std::thread thread;
  std::array<Pool, 2> pools;  // [Side]
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

// A row sent to both targets (--paired-url): its two sides' outcomes and timing, from the one
// instant both requests went out, and what the row's pair line and the end of the pair need.
// Shared by the row's two exchanges, which run on one worker's event loop (no lock); the last of
// them to end finishes the pair (Runner::SideEnded).
struct PairState {
  PairState(const DueRequest& due, Clock::time_point at, int64_t at_unix_ms);
  Clock::time_point at;
  int64_t at_unix_ms = 0;
  shadow::ShadowSide primary, candidate;
  int sides_left = 2;
  // The row.
  uint64_t index = 0, line = 0;
  std::optional<double> timestamp_ms;
  api::Endpoint endpoint = api::Endpoint::kChat;
  shadow::RequestTraits traits;
  bool warmup = false;
  std::string response_id;  // the captured response's id (a Responses chain), or ""
  // A causal session turn: released when both sides ended (`primary_ended_ms` is when the
  // primary's did; the think time counts from there).
  std::string session_id;
  std::optional<double> captured_end_ms;
  double primary_ended_ms = 0;
  // A closed loop's lane waits on it until both sides ended (cancelled by the last one).
  std::shared_ptr<Timer> joined;
};

// The pair's record: its line for the pairs file ({"line":L,"timestamp":T,<shadow::
// AppendPairMembers>}, `candidate_url` the --paired-url) and its counts.
PairRecord PairOf(const PairState& pair, std::string_view candidate_url,
                  const tokenizer::Tokenizer* tok);

// How a side of a pair failed, in the pair line's words ("connect", "tls", "timeout", "reset",
// "protocol", "cancelled"); null when it did not (an HTTP error status is in "status").
const char* PairErrorName(ErrorKind kind, const error_code& transport);

class Runner {
 public:
  // `paired`: the --paired-url target, or null.
  Runner(Lookahead& input, const RunOptions& options, std::unique_ptr<Peer> primary,
         std::unique_ptr<Peer> paired, const tokenizer::Tokenizer* tok, RunOutcome* out)
      : input_(input),
        closed_loop_(input.closed_loop()),
        causal_(options.causal_sessions && !closed_loop_),
        options_(options),
        peers_{std::move(primary), std::move(paired)},
        tok_(tok),
        out_(out),
        timeout_(FromMs(options.request_timeout_s * 1000)) {}

  void Run();

 private:
  awaitable<void> Exchange(Worker& w, Job job, Start start,
                           std::shared_ptr<PairState> pair = nullptr);
  // One request's bytes out and its response in, on `side`'s keep-alive connection (or a new
  // one; once more on a new one when a kept-alive one turns out closed). Feeds `meter` (and
  // `timing`, per read, when not null). The Transfer says whether the response arrived whole,
  // else how it failed.
  struct Transfer {
    bool complete = false;
    ErrorKind transport = ErrorKind::kProtocol;
    error_code ec;
  };
  awaitable<Transfer> Send(Worker& w, Side side, Start& start, const std::string& head,
                           std::string_view body, api::Endpoint endpoint, bool keep_answer,
                           bool keep_output, ResponseMeter& meter, shadow::BodyTiming* timing,
                           Active& act);
  // Whether a row's output is kept for the rows continuing its chain (--responses-chain
  // inline: a row with a captured id whose captured text the sidecar does not hold), and that
  // output once the request ended (null when it failed or was cut).
  bool KeepsOutput(const TraceRequest& req) const {
    return inline_chains_ && !req.response_id.empty() && !req.captured_output;
  }
  static const ResponseText* OutputOf(const RequestResult& r, const ResponseMeter& meter) {
    return r.ok() && !meter.output().truncated ? &meter.output() : nullptr;
  }
  // A row naming a previous_response_id that the target refused (HTTP 400 naming it): marked,
  // and without --responses-chain inline the flag that replays such a chain is named once.
  void NoteRefusal(const TraceRequest& req, const ResponseMeter& meter, RequestResult* r);
  // The paired target's twin of a row (paired.cc).
  awaitable<void> PairedExchange(Worker& w, std::shared_ptr<PairState> pair, std::string body,
                                 Start start);
  // A side of a pair ended; the second one finishes the pair: its line, the session's next turn,
  // the row's slot (paired.cc).
  void SideEnded(Worker& w, const std::shared_ptr<PairState>& pair);
  // StartNow for a pair: both requests composed and written at one instant (paired.cc).
  std::shared_ptr<PairState> StartPair(Worker& w, Job& job, Start* primary, Start* paired,
                                       std::string* paired_body);
  bool paired() const { return peers_[kPaired] != nullptr; }
  awaitable<void> Lane(Worker& w);
  awaitable<void> Sweep(Worker& w);
  void WorkerMain(Worker& w);
  void Launch(Worker& w, Job job, bool counted = false);
  void Admit(Worker& w, Job job);
  void SendAt(Worker& w, Job job, double due_ms);
  void TurnEnded(Worker& w, const std::string& session_id,
                 const std::optional<double>& captured_end_ms, double ended_ms);
  Start Prepare(Worker& w, Side side, const TraceRequest& req, std::string_view body);
  awaitable<error_code> Connect(Worker& w, Side side, Conn& conn, ErrorKind* kind);
  void StartNow(Worker& w, Job job);
  // The body's last changes as it is sent: a hashed session turn gets the conversation so far
  // in front of its own prompt (history.h); a Responses row continuing a response of the trace
  // gets the id the target gave that response (chains.h), or with --responses-chain inline the
  // conversation so far (inline.h).
  void Compose(Job* job) {
    TraceRequest& req = job->due.request;
    if (inline_chains_) {
      req.chain = inliner_.Compose(req, &req.body, Ms(Clock::now() - t0_));
    } else if (req.chain == ChainLink::kLinked) {
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
  std::string Head(Side side, api::Endpoint endpoint, size_t body_size) const;
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
  const std::array<std::unique_ptr<Peer>, 2> peers_;  // [Side]; [kPaired] null without one
  const tokenizer::Tokenizer* tok_;
  RunOutcome* out_;
  const Clock::duration timeout_;
  std::vector<std::unique_ptr<Worker>> workers_;
  Clock::time_point t0_;
  std::optional<Clock::time_point> end_;  // --duration

  std::atomic<bool> cancel_{false};
  std::atomic<uint64_t> sent_{0}, ok_{0}, failed_{0};

  std::mutex results_mu_;  // guards results_
  // Ended since the thread running the replay last took them (bounded by ~50 ms of requests).
  std::vector<RequestResult> results_;
  std::vector<PairRecord> pairs_;  // the same, of pairs (--paired-url)

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
  // The same for the paired target: the ids it gave (its own chain of each conversation).
  ResponseIdMap paired_ids_{options_.session_idle_s * 1000};
  // --responses-chain inline: each chain's conversation, for the target and the paired one.
  const bool inline_chains_ = options_.responses_chain == ResponsesChain::kInline;
  ChainInliner inliner_{options_.session_idle_s * 1000};
  ChainInliner paired_inliner_{options_.session_idle_s * 1000};
  std::atomic<bool> refusal_told_{false};  // the hint for a previous_response_id refused

  int progress_width_ = 0;  // of the last progress line (the calling thread's)
};

}  // namespace llmtap::replay::internal
