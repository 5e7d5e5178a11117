// The listener and the event loops of ProxyServer: Start() resolves the upstream, binds and
// starts one thread per worker loop; Accept() hands each client connection to a worker's loop
// as a Session (session.h); Stop() drains them. A session's requests are served in session.cc
// and relay.cc.
#include "proxy/server.h"

#include <algorithm>
#include <chrono>
#include <exception>
#include <memory>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/redirect_error.hpp>

#include "common/log.h"
#include "common/thread_name.h"
#include "net/resolve.h"
#include "net/url.h"
#include "proxy/session.h"

namespace llmtap::proxy {

namespace {

// The upstream URL, "http://HOST[:PORT][/]", with the proxy's own messages.
bool ParseUpstream(const std::string& url, net::HttpUrl* out, std::string* error) {
  const net::UrlError e = net::ParseHttpUrl(
      url, out, {.empty_port_is_error = true, .lenient_authority = false, .origin_only = true});
  switch (e) {
    case net::UrlError::kNone:
      return true;
    case net::UrlError::kTls:
    case net::UrlError::kNotHttp:
      *error = "upstream '" + url + "' must start with http:// (TLS upstreams are not supported)";
      return false;
    case net::UrlError::kNotOrigin:
    case net::UrlError::kCredentials:
      *error = "upstream '" + url + "' must be http://HOST:PORT (no path, query or user)";
      return false;
    case net::UrlError::kUnterminatedIpv6:
      *error = "upstream '" + url + "': unterminated IPv6 address";
      return false;
    case net::UrlError::kJunkAfterIpv6:
      *error = "upstream '" + url + "': junk after the IPv6 address";
      return false;
    case net::UrlError::kBadPort:
      *error = "upstream '" + url + "': bad port";
      return false;
    case net::UrlError::kNoHost:
      break;
  }
  *error = "upstream '" + url + "': no host";
  return false;
}

void LogException(Logger* logger, std::exception_ptr e) {
  if (!e) return;
  try {
    std::rethrow_exception(e);
  } catch (const std::exception& ex) {
    logger->Log(LogLevel::kError, std::string("llmtap proxy: connection failed: ") + ex.what());
  } catch (...) {
    logger->Log(LogLevel::kError, "llmtap proxy: connection failed");
  }
}

}  // namespace

struct ProxyServer::Impl {
  ServerShared shared;

  std::vector<std::unique_ptr<Worker>> workers;
  std::unique_ptr<Acceptor> acceptor;  // lives on workers[0]
  size_t next_worker = 0;              // the acceptor's thread only
  uint16_t port = 0;
  bool running = false;

  awaitable<void> Accept();
  void Log(LogLevel level, const std::string& message) const { shared.logger->Log(level, message); }
};

awaitable<void> ProxyServer::Impl::Accept() {
  for (;;) {
    Worker& w = *workers[next_worker++ % workers.size()];
    error_code ec;
    Socket socket = co_await acceptor->async_accept(w.ioc.get_executor(),
                                                    asio::redirect_error(use_awaitable, ec));
    if (ec) {
      if (shared.stopping.load() || !acceptor->is_open() || ec == asio::error::operation_aborted) {
        co_return;
      }
      // Out of file descriptors or similar: back off instead of spinning.
      Log(LogLevel::kWarning, "llmtap proxy: accept failed: " + ec.message());
      Timer t(co_await asio::this_coro::executor, std::chrono::milliseconds(50));
      co_await t.async_wait(asio::redirect_error(use_awaitable, ec));
      continue;
    }
    socket.set_option(tcp::no_delay(true), ec);
    asio::co_spawn(w.ioc, Session::Run(&shared, &w, std::move(socket)),
                   [logger = shared.logger](std::exception_ptr e) { LogException(logger, e); });
  }
}

ProxyServer::ProxyServer(ProxyOptions options, std::vector<RequestObserver*> observers,
                         std::vector<const MetricsSource*> metrics_sources)
    : impl_(std::make_unique<Impl>()) {
  ServerShared& s = impl_->shared;
  s.options = std::move(options);
  s.limits = WaitLimits(s.options);
  s.logger = s.options.logger ? s.options.logger : Logger::Stderr();
  s.observers.push_back(&s.metrics);
  for (RequestObserver* o : observers) s.observers.push_back(o);
  s.metrics_sources = std::move(metrics_sources);
}

ProxyServer::~ProxyServer() {
  impl_->shared.options.grace = std::chrono::milliseconds(0);
  Stop();
}

bool ProxyServer::Start(std::string* error) {
  Impl& s = *impl_;
  if (s.running) return true;
  const ProxyOptions& options = s.shared.options;
  if (s.shared.observers.size() > kMaxObservers) {
    *error = "at most " + std::to_string(kMaxObservers - 1) + " request observers";
    return false;
  }
  net::HttpUrl upstream;
  if (!ParseUpstream(options.upstream, &upstream, error)) return false;
  s.shared.upstream_authority = upstream.authority;
  try {
    std::string why;
    if (!net::ResolveAll(upstream.host, upstream.port, &s.shared.upstream_endpoints, &why)) {
      *error = "cannot resolve upstream host '" + upstream.host + "': " + why;
      return false;
    }
    uint32_t threads = options.threads;
    if (threads == 0) threads = std::max(1u, std::thread::hardware_concurrency());
    s.workers.clear();
    for (uint32_t i = 0; i < threads; ++i) s.workers.push_back(std::make_unique<Worker>());
    error_code ec;
    const auto address = asio::ip::make_address(options.host, ec);
    if (ec) {
      *error = "bad listen address '" + options.host + "': " + ec.message();
      return false;
    }
    const tcp::endpoint endpoint(address, options.port);
    s.acceptor = std::make_unique<Acceptor>(s.workers[0]->ioc);
    s.acceptor->open(endpoint.protocol(), ec);
    if (!ec) s.acceptor->set_option(asio::socket_base::reuse_address(true), ec);
    if (!ec) s.acceptor->bind(endpoint, ec);
    if (!ec) s.acceptor->listen(asio::socket_base::max_listen_connections, ec);
    if (ec) {
      *error = "cannot listen on " + options.host + ":" + std::to_string(options.port) + ": " +
               ec.message();
      s.acceptor.reset();
      s.workers.clear();
      return false;
    }
    s.port = s.acceptor->local_endpoint().port();
  } catch (const std::exception& e) {
    *error = e.what();
    s.acceptor.reset();
    s.workers.clear();
    return false;
  }
  s.shared.stopping = false;
  asio::co_spawn(s.workers[0]->ioc, s.Accept(),
                 [logger = s.shared.logger](std::exception_ptr e) { LogException(logger, e); });
  for (auto& w : s.workers) {
    w->guard.emplace(w->ioc.get_executor());
    w->thread = std::thread([w = w.get(), logger = s.shared.logger] {
      NameThisThread("llmtap-proxy");
      for (;;) {
        try {
          w->ioc.run();
          return;
        } catch (const std::exception& e) {
          logger->Log(LogLevel::kError, std::string("llmtap proxy: event loop: ") + e.what());
        }
      }
    });
  }
  s.running = true;
  return true;
}

void ProxyServer::Stop() {
  Impl& s = *impl_;
  if (!s.running) return;
  s.shared.stopping = true;
  asio::post(s.workers[0]->ioc, [&s] {
    error_code ignored;
    s.acceptor->close(ignored);
  });
  for (auto& w : s.workers) {
    asio::post(w->ioc, [w = w.get()] {
      for (Session* session : w->sessions) session->CloseIfIdle();
      w->upstreams.CloseAll();
    });
  }
  // Requests in flight finish (their connections then close) within the grace period.
  const Clock::time_point deadline = Clock::now() + s.shared.options.grace;
  while (s.shared.counters().client_connections.load() > 0 && Clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  for (auto& w : s.workers) {
    asio::post(w->ioc, [w = w.get()] {
      for (Session* session : w->sessions) session->Close();
      w->upstreams.CloseAll();
    });
    w->guard.reset();
  }
  for (auto& w : s.workers) w->thread.join();
  s.acceptor.reset();
  s.workers.clear();
  s.running = false;
}

uint16_t ProxyServer::port() const { return impl_->port; }

std::string ProxyServer::MetricsText() const { return impl_->shared.MetricsText(); }

int64_t ProxyServer::active_requests() const {
  return impl_->shared.counters().active_requests.load(std::memory_order_acquire);
}

}  // namespace llmtap::proxy
