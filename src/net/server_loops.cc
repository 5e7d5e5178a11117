#include "net/server_loops.h"

#include <algorithm>
#include <optional>
#include <thread>
#include <utility>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/this_coro.hpp>

#include "common/coarse_clock.h"
#include "common/thread_name.h"

namespace llmtap::net {

using namespace llmtap::asio_types;

struct ServerLoops::Loop {
  explicit Loop(int concurrency_hint) : ioc(concurrency_hint) {}
  asio::io_context ioc;
  // Keeps run() going while the loop has no connection; reset to let it run out of work.
  std::optional<asio::executor_work_guard<asio::io_context::executor_type>> guard{
      ioc.get_executor()};
  std::thread thread;
};

ServerLoops::ServerLoops(ServerLoopsOptions options)
    : options_(std::move(options)),
      logger_(options_.logger ? options_.logger : Logger::Stderr()),
      accept_warning_(logger_, options_.accept_warning_interval) {}

ServerLoops::~ServerLoops() {
  StopAndJoin();
  DestroyLoops();
}

bool ServerLoops::Listen(const tcp::endpoint& endpoint, ListenStep* failed_step,
                         error_code* error) {
  StopAndJoin();
  DestroyLoops();
  stopping_ = false;
  const uint32_t n = std::max<uint32_t>(1, options_.threads);
  for (uint32_t i = 0; i < n; ++i)
    loops_.push_back(std::make_unique<Loop>(options_.concurrency_hint));
  acceptor_ = std::make_unique<Acceptor>(loops_[0]->ioc);
  auto fail = [&](ListenStep step, const error_code& ec) {
    *failed_step = step;
    *error = ec;
    DestroyLoops();
    return false;
  };
  error_code ec;
  if (acceptor_->open(endpoint.protocol(), ec)) return fail(ListenStep::kOpen, ec);
  // Lets a restarted server bind while old connections linger in TIME_WAIT; binding may work
  // without it, so its failure is not one.
  error_code ignored;
  acceptor_->set_option(asio::socket_base::reuse_address(true), ignored);
  if (acceptor_->bind(endpoint, ec)) return fail(ListenStep::kBind, ec);
  if (acceptor_->listen(asio::socket_base::max_listen_connections, ec)) {
    return fail(ListenStep::kListen, ec);
  }
  port_ = acceptor_->local_endpoint(ec).port();
  return true;
}

void ServerLoops::Start(ConnectionHandler on_connection) {
  on_connection_ = std::move(on_connection);
  asio::co_spawn(loops_[0]->ioc, Accept(), [this](std::exception_ptr e) { LogException(e); });
  for (auto& l : loops_) {
    l->thread = std::thread([this, loop = l.get()] {
      if (options_.thread_name != nullptr) NameThisThread(options_.thread_name);
      for (;;) {
        try {
          loop->ioc.run();
          return;
        } catch (const std::exception& e) {
          logger_->Log(LogLevel::kError, options_.log_prefix + ": event loop: " + e.what());
        } catch (...) {
          logger_->Log(LogLevel::kError, options_.log_prefix + ": event loop: unknown exception");
        }
      }
    });
  }
  threads_running_ = true;
}

awaitable<void> ServerLoops::Accept() {
  size_t next = 0;
  for (;;) {
    const size_t i = next;
    next = (next + 1) % loops_.size();
    error_code ec;
    Socket socket = co_await acceptor_->async_accept(loops_[i]->ioc.get_executor(),
                                                     asio::redirect_error(use_awaitable, ec));
    if (ec) {
      if (stopping() || ec == asio::error::operation_aborted || !acceptor_->is_open()) co_return;
      // Out of file descriptors or similar: back off instead of spinning.
      accept_warning_.Hit(CoarseNow().time_since_epoch().count(),
                          [&] { return options_.log_prefix + ": accept failed: " + ec.message(); });
      Timer t(co_await asio::this_coro::executor, options_.accept_backoff);
      co_await t.async_wait(asio::redirect_error(use_awaitable, ec));
      continue;
    }
    socket.set_option(tcp::no_delay(true), ec);
    asio::co_spawn(loops_[i]->ioc, on_connection_(std::move(socket), i),
                   [this](std::exception_ptr e) { LogException(e); });
  }
}

void ServerLoops::StopAccepting() {
  if (stopping_.exchange(true) || acceptor_ == nullptr) return;
  asio::post(loops_[0]->ioc, [this] {
    error_code ignored;
    acceptor_->close(ignored);
  });
}

void ServerLoops::Post(std::function<void(size_t loop)> fn) {
  for (size_t i = 0; i < loops_.size(); ++i) asio::post(loops_[i]->ioc, [fn, i] { fn(i); });
}

void ServerLoops::JoinWhenDone() {
  if (!threads_running_) return;
  for (auto& l : loops_) l->guard.reset();
  for (auto& l : loops_) l->thread.join();
  threads_running_ = false;
}

void ServerLoops::StopAndJoin() {
  if (!threads_running_) return;
  for (auto& l : loops_) l->ioc.stop();
  for (auto& l : loops_) l->thread.join();
  threads_running_ = false;
}

void ServerLoops::DestroyLoops() {
  acceptor_.reset();
  loops_.clear();
}

asio::io_context& ServerLoops::loop(size_t i) { return loops_[i]->ioc; }

void ServerLoops::LogException(std::exception_ptr e) const {
  if (!e) return;
  try {
    std::rethrow_exception(e);
  } catch (const std::exception& ex) {
    logger_->Log(LogLevel::kError, options_.log_prefix + ": connection failed: " + ex.what());
  } catch (...) {
    logger_->Log(LogLevel::kError, options_.log_prefix + ": connection failed");
  }
}

}  // namespace llmtap::net
