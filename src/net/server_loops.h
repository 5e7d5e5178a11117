// ServerLoops: the event loops, listening socket and accept loop of an HTTP server, shared by
// `llmtap sim` (sim/server.cc) and `llmtap proxy` (proxy/server.cc). What differs between them
// (the protocol, per-loop state, how a stop drains) stays with the caller.
//
// `threads` loops, each an io_context run by a thread of its own. One acceptor, on loop 0,
// hands each accepted connection to the next loop in turn (TCP_NODELAY set), where it lives
// for its whole life: its handlers never run concurrently (the loop is the connection's strand).
// Failures are logged through the Logger, never thrown: a failed accept (out of descriptors and
// the like) backs off instead of spinning, with a rate-limited warning; an exception out of a
// connection's coroutine is logged and ends that connection; an exception out of a handler is
// logged and the loop runs on.
//
// Life: Listen() -> Start() -> [StopAccepting(), Post()...] -> JoinWhenDone() or StopAndJoin()
// -> DestroyLoops(). The destructor does what is left of that. Listen() may follow again.
//
// Threads: Listen(), Start(), JoinWhenDone(), StopAndJoin() and DestroyLoops() from one
// controlling thread, never from a loop. StopAccepting(), Post(), stopping() and logger() from
// any thread; port(), size() and loop() from any thread after Listen() succeeded and before
// DestroyLoops(). Include from .cc files only (it brings Asio).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <boost/asio/io_context.hpp>

#include "common/asio_types.h"
#include "common/log.h"

namespace llmtap::net {

struct ServerLoopsOptions {
  uint32_t threads = 1;  // 0 counts as 1
  // Passed to each io_context. BOOST_ASIO_CONCURRENCY_HINT_UNSAFE_IO drops the per-socket
  // reactor locks, right when every socket is only used from its own loop's thread (posting
  // from other threads stays safe); 1 keeps them.
  int concurrency_hint = BOOST_ASIO_CONCURRENCY_HINT_UNSAFE_IO;
  // Each loop thread's name (NameThisThread) when not null; else it keeps its creator's name.
  const char* thread_name = nullptr;
  // Not owned; nullptr means Logger::Stderr(). Must outlive the loops.
  Logger* logger = nullptr;
  // Starts every log line, e.g. "llmtap sim" -> "llmtap sim: accept failed: ...".
  std::string log_prefix = "llmtap";
  // After a failed accept, the acceptor waits this long before it accepts again.
  std::chrono::milliseconds accept_backoff{50};
  // At most one "accept failed" warning per interval (later ones are counted into the next);
  // 0 logs every one.
  std::chrono::milliseconds accept_warning_interval{1000};
};

// Which step of Listen() failed.
enum class ListenStep { kOpen, kBind, kListen };

// Runs one connection, on loop `loop` (the socket's executor): ServerLoops spawns the returned
// coroutine there. Called on loop 0's thread.
using ConnectionHandler =
    std::function<asio_types::awaitable<void>(asio_types::Socket socket, size_t loop)>;

class ServerLoops {
 public:
  explicit ServerLoops(ServerLoopsOptions options);
  ~ServerLoops();  // StopAndJoin(), DestroyLoops()
  ServerLoops(const ServerLoops&) = delete;
  ServerLoops& operator=(const ServerLoops&) = delete;

  // Makes the loops (threads not started yet) and binds and listens on `endpoint` (with
  // SO_REUSEADDR) on loop 0. On failure returns false with the step and the error, and holds
  // no loops.
  bool Listen(const asio_types::tcp::endpoint& endpoint, ListenStep* failed_step,
              asio_types::error_code* error);
  // Starts the accept loop and the threads. `on_connection` must stay valid until the loops are
  // joined.
  void Start(ConnectionHandler on_connection);

  // Closes the listening socket (on its loop): no connection is accepted after this. stopping()
  // is true from this call on. Idempotent.
  void StopAccepting();
  bool stopping() const { return stopping_.load(std::memory_order_relaxed); }

  // Runs fn(i) on every loop i, from that loop's thread.
  void Post(std::function<void(size_t loop)> fn);

  // Lets every loop run until it has nothing left to do (every connection ended: the caller has
  // closed them or lets them finish), then joins the threads. Call StopAccepting() first.
  void JoinWhenDone();
  // Stops every loop now (handlers not yet run stay queued, coroutines stay suspended) and joins
  // the threads.
  void StopAndJoin();
  // After a join: destroys the acceptor and the loops, and with them every handler and suspended
  // coroutine still on them (the connections they own close). Per-loop state of the caller that
  // holds sockets or timers of a loop must go before this.
  void DestroyLoops();

  uint16_t port() const { return port_; }
  size_t size() const { return loops_.size(); }
  boost::asio::io_context& loop(size_t i);
  Logger* logger() const { return logger_; }

  // Logs an exception that ended a coroutine ("<prefix>: connection failed: <what>"); nothing
  // when `e` is null. The completion handler of a co_spawn.
  void LogException(std::exception_ptr e) const;

 private:
  struct Loop;
  asio_types::awaitable<void> Accept();

  const ServerLoopsOptions options_;
  Logger* const logger_;
  RateLimitedWarning accept_warning_;
  std::vector<std::unique_ptr<Loop>> loops_;
  std::unique_ptr<asio_types::Acceptor> acceptor_;  // on loops_[0]
  ConnectionHandler on_connection_;
  uint16_t port_ = 0;
  bool threads_running_ = false;
  std::atomic<bool> stopping_{false};
};

}  // namespace llmtap::net
