// ProxyServer on the shared server skeleton (net::ServerLoops): Start() resolves the upstream,
// listens and starts the loops, which hand each client connection to a Session (session.h) on
// its loop's Worker; Stop() drains the sessions. A session's requests are served in session.cc
// and relay.cc.
#include "proxy/server.h"

#include <sys/stat.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <exception>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "common/log.h"
#include "net/server_loops.h"
#include "net/tls.h"
#include "proxy/session.h"

namespace llmtap::proxy {

namespace {

// The proxy's loops: `threads` of them (0: one per CPU), with concurrency hint 1 (Asio keeps its
// per-socket locks) as the proxy always had. Every failed accept is logged, none suppressed.
net::ServerLoopsOptions LoopOptions(const ProxyOptions& options) {
  uint32_t threads = options.threads;
  if (threads == 0) threads = std::max(1u, std::thread::hardware_concurrency());
  return {.threads = threads,
          .concurrency_hint = 1,
          .thread_name = "llmtap-proxy",
          .logger = options.logger,
          .log_prefix = "llmtap proxy",
          .accept_warning_interval = std::chrono::milliseconds(0)};
}

}  // namespace

struct ProxyServer::Impl {
  explicit Impl(const ProxyOptions& options) : loops(LoopOptions(options)) {
    shared.loops = &loops;
  }

  ServerShared shared;
  std::unique_ptr<Shadow> shadow;  // --shadow
  net::ServerLoops loops;
  std::vector<std::unique_ptr<Worker>> workers;  // workers[i] lives on loops.loop(i)
  bool running = false;

  bool ResolveUpstream(std::string* error);
  // The listener's TLS context from the options (--tls-cert, --tls-key); null and no error for
  // plain HTTP. Logs a warning for a certificate outside its validity period or expiring within
  // the warning window, and for a key file others can read; fails for the latter with
  // strict_key_permissions, and on a reload for the former (clients would refuse it).
  bool LoadServerTls(std::shared_ptr<const net::TlsServerContext>* ctx, bool reload,
                     std::string* error);
  bool Listen(std::string* error);
  // With TLS on either side: starts each worker's sweep of idle TLS buffers.
  void StartTlsSweeps();
  // Runs fn(worker) on every worker's loop thread.
  template <class Fn>
  void PostToWorkers(Fn fn) {
    loops.Post([this, fn](size_t i) { fn(*workers[i]); });
  }
};

namespace {

// Every kTlsBuffersIdle: frees the TLS record buffers of the worker's connections that have been
// idle (a client's waiting for a request, a pooled upstream's) for that long.
void ArmTlsSweep(Worker& w, const ServerShared& shared) {
  w.tls_sweep->expires_after(Worker::kTlsBuffersIdle);
  w.tls_sweep->async_wait([&w, &shared](error_code ec) {
    if (ec || shared.Stopping()) return;
    const Clock::time_point idle_since = CoarseNow() - Worker::kTlsBuffersIdle;
    for (Session* session : w.sessions) session->ReleaseIdleTlsBuffers(idle_since);
    w.upstreams.ReleaseTlsBuffers(idle_since);
    ArmTlsSweep(w, shared);
  });
}

}  // namespace

void ProxyServer::Impl::StartTlsSweeps() {
  if (shared.upstream_tls == nullptr && shared.options.tls_cert_file.empty()) return;
  PostToWorkers([this](Worker& w) {
    w.tls_sweep = std::make_unique<Timer>(w.ioc.get_executor());
    ArmTlsSweep(w, shared);
  });
}

bool ProxyServer::Impl::ResolveUpstream(std::string* error) {
  UpstreamTarget upstream;
  if (!ResolveUpstreamTarget(shared.options.upstream, shared.options.upstream_tls, "upstream",
                             &upstream, error)) {
    return false;
  }
  shared.upstream_authority = std::move(upstream.authority);
  shared.upstream_host = std::move(upstream.host);
  shared.upstream_endpoints = std::move(upstream.endpoints);
  shared.upstream_tls = std::move(upstream.tls);
  return true;
}

namespace {

// What is wrong with the listener's certificate at `now` (Unix seconds): "" when it is valid
// and does not expire within the warning window. *unusable: outside its validity period (every
// client refuses it).
std::string CertificateProblem(const net::TlsServerContext& ctx, const ProxyOptions& o, int64_t now,
                               bool* unusable) {
  const std::string what = "the TLS certificate " + ctx.subject() + " (--tls-cert " +
                           o.tls_cert_file + ", valid " + net::UtcDay(ctx.not_before()) + " to " +
                           net::UtcDay(ctx.not_after()) + ")";
  *unusable = true;
  if (now >= ctx.not_after()) {
    return what + " expired on " + net::UtcDay(ctx.not_after()) + ": clients refuse it";
  }
  if (now < ctx.not_before()) {
    return what + " is not valid before " + net::UtcDay(ctx.not_before()) +
           ": clients refuse it until then";
  }
  *unusable = false;
  const int64_t left = ctx.not_after() - now;
  if (left >= o.tls_cert_warning_window.count()) return "";
  // To the nearest day (a certificate made for 3 days is "3 days" a few seconds later).
  const std::string in = left >= 2 * 86400 ? std::to_string((left + 43200) / 86400) + " days"
                                           : std::to_string(left / 3600) + " hours";
  return what + " expires in " + in + ", on " + net::UtcDay(ctx.not_after()) +
         ": renew it and send SIGHUP";
}

// A private key file its group or other users can read or write: what to say, else "".
std::string KeyPermissionProblem(const std::string& path, const char* flag) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return "";  // it was just read: gone since, say nothing
  const mode_t open = st.st_mode & (S_IRGRP | S_IWGRP | S_IROTH | S_IWOTH);
  if (open == 0) return "";
  const bool group = (open & (S_IRGRP | S_IWGRP)) != 0;
  const bool others = (open & (S_IROTH | S_IWOTH)) != 0;
  const bool read = (open & (S_IRGRP | S_IROTH)) != 0;
  char mode[8];
  std::snprintf(mode, sizeof(mode), "%04o", static_cast<unsigned>(st.st_mode & 07777));
  return std::string("the private key ") + flag + " " + path + " is " +
         (read ? "readable" : "writable") + " by " +
         (group && others ? "its group and other users"
          : group         ? "its group"
                          : "other users") +
         " (mode " + mode + "): run `chmod 600 " + path + "`";
}

}  // namespace

bool ProxyServer::Impl::LoadServerTls(std::shared_ptr<const net::TlsServerContext>* ctx,
                                      bool reload, std::string* error) {
  const ProxyOptions& o = shared.options;
  if (o.tls_cert_file.empty()) {
    if (o.tls_key_file.empty()) return true;
    *error = "--tls-key needs --tls-cert";
    return false;
  }
  *ctx = net::TlsServerContext::Make(o.tls_cert_file, o.tls_key_file, error);
  if (*ctx == nullptr) return false;
  const bool key_given = !o.tls_key_file.empty();
  if (const std::string problem = KeyPermissionProblem(key_given ? o.tls_key_file : o.tls_cert_file,
                                                       key_given ? "--tls-key" : "--tls-cert");
      !problem.empty()) {
    if (o.strict_key_permissions) {
      *error = problem + " (refused: --strict-key-permissions)";
      ctx->reset();
      return false;
    }
    shared.logger->Log(LogLevel::kWarning, "llmtap proxy: " + problem);
  }
  bool unusable = false;
  const int64_t now = std::chrono::duration_cast<std::chrono::seconds>(
                          std::chrono::system_clock::now().time_since_epoch())
                          .count();
  if (const std::string problem = CertificateProblem(**ctx, o, now, &unusable); !problem.empty()) {
    if (reload && unusable) {
      *error = problem;
      ctx->reset();
      return false;
    }
    shared.logger->Log(LogLevel::kWarning, "llmtap proxy: " + problem);
  }
  return true;
}

// Binds and listens; makes one worker per loop.
bool ProxyServer::Impl::Listen(std::string* error) {
  const ProxyOptions& options = shared.options;
  error_code ec;
  const auto address = asio::ip::make_address(options.host, ec);
  if (ec) {
    *error = "bad listen address '" + options.host + "': " + ec.message();
    return false;
  }
  net::ListenStep failed;
  if (!loops.Listen(tcp::endpoint(address, options.port), &failed, &ec)) {
    *error = "cannot listen on " + options.host + ":" + std::to_string(options.port) + ": " +
             ec.message();
    return false;
  }
  workers.clear();
  for (size_t i = 0; i < loops.size(); ++i)
    workers.push_back(std::make_unique<Worker>(loops.loop(i)));
  return true;
}

ProxyServer::ProxyServer(ProxyOptions options, std::vector<RequestObserver*> observers,
                         std::vector<const MetricsSource*> metrics_sources)
    : impl_(std::make_unique<Impl>(options)) {
  ServerShared& s = impl_->shared;
  s.options = std::move(options);
  s.limits = WaitLimits(s.options);
  s.logger = impl_->loops.logger();
  s.upstream_tls_warning.emplace(s.logger, std::chrono::seconds(1));
  s.client_tls_warning.emplace(s.logger, std::chrono::seconds(1));
  s.tls_on_plain_warning.emplace(s.logger, std::chrono::seconds(1));
  s.client_timeout_warning.emplace(s.logger, std::chrono::seconds(1));
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
  if (s.shared.observers.size() > kMaxObservers) {
    *error = "at most " + std::to_string(kMaxObservers - 1) + " request observers";
    return false;
  }
  try {
    std::shared_ptr<const net::TlsServerContext> server_tls;
    if (!s.ResolveUpstream(error) || !s.LoadServerTls(&server_tls, /*reload=*/false, error)) {
      return false;
    }
    if (!s.shared.options.shadow.urls.empty() && s.shadow == nullptr) {
      auto shadow = std::make_unique<Shadow>(s.shared.options, s.shared.logger);
      if (!shadow->Start(error)) return false;
      s.shadow = std::move(shadow);
      s.shared.shadow = s.shadow.get();
      s.shared.metrics_sources.push_back(s.shadow.get());
    }
    if (!s.Listen(error)) return false;
    if (server_tls != nullptr) {
      s.shared.counters().tls_certificate_not_after.store(server_tls->not_after(),
                                                          std::memory_order_relaxed);
    }
    for (const std::unique_ptr<Worker>& w : s.workers) w->server_tls = server_tls;
  } catch (const std::exception& e) {
    *error = e.what();
    s.workers.clear();
    s.loops.DestroyLoops();
    return false;
  }
  // Called on loop 0's thread; the session runs on `loop`, the socket's.
  s.loops.Start([&s](Socket socket, size_t loop) {
    return Session::Run(&s.shared, s.workers[loop].get(), std::move(socket));
  });
  s.running = true;
  s.StartTlsSweeps();
  return true;
}

void ProxyServer::Stop() {
  Impl& s = *impl_;
  if (!s.running) return;
  s.loops.StopAccepting();
  s.PostToWorkers([](Worker& w) {
    for (Session* session : w.sessions) session->CloseIfIdle();
    w.upstreams.CloseAll();
    for (ShadowLane& lane : w.shadow) lane.pool.CloseAll();
    if (w.tls_sweep) w.tls_sweep->cancel();
  });
  // Requests in flight finish (their connections then close) within the grace period, and so
  // do the mirrors in flight.
  const Clock::time_point deadline = Clock::now() + s.shared.options.grace;
  auto busy = [&s] {
    return s.shared.counters().client_connections.load() > 0 ||
           (s.shadow != nullptr && s.shadow->in_flight() > 0);
  };
  while (busy() && Clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  s.PostToWorkers([](Worker& w) {
    for (Session* session : w.sessions) session->Close();
    w.upstreams.CloseAll();
    for (ShadowLane& lane : w.shadow) lane.CloseAll();
  });
  s.loops.JoinWhenDone();
  if (s.shadow != nullptr) s.shadow->Stop();
  s.workers.clear();  // their pooled sockets live on the loops
  s.loops.DestroyLoops();
  s.running = false;
}

bool ProxyServer::ReloadTls(std::string* error) {
  Impl& s = *impl_;
  if (!s.running || s.shared.options.tls_cert_file.empty()) {
    *error = "the proxy has no TLS listener (--tls-cert)";
    return false;
  }
  std::shared_ptr<const net::TlsServerContext> ctx;
  if (!s.LoadServerTls(&ctx, /*reload=*/true, error)) {
    s.shared.logger->Log(LogLevel::kWarning,
                         "llmtap proxy: keeping the current certificate: " + *error);
    return false;
  }
  s.PostToWorkers([ctx](Worker& w) { w.server_tls = ctx; });
  s.shared.counters().tls_certificate_not_after.store(ctx->not_after(), std::memory_order_relaxed);
  s.shared.logger->Log(LogLevel::kInfo,
                       "llmtap proxy: reloaded TLS certificate " + ctx->description());
  return true;
}

uint16_t ProxyServer::port() const { return impl_->loops.port(); }

std::string ProxyServer::MetricsText() const { return impl_->shared.MetricsText(); }

int64_t ProxyServer::active_requests() const {
  return impl_->shared.counters().active_requests.load(std::memory_order_acquire);
}

}  // namespace llmtap::proxy
