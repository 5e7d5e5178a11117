// Session: one client connection of the proxy, from accept to close. It reads requests
// (RequestReader), answers the metrics endpoint and the requests it refuses itself, and runs
// every other request through the observers' phases (session.cc) and the relay to the upstream
// (relay.cc: connect, send the request, relay the response, end the attempt). Also what a
// session lives in: Worker, what the proxy keeps on one event loop of the server's ServerLoops
// (net/server_loops.h), and ServerShared, what every session of a server reads.
//
// Internal to src/proxy: server.cc creates sessions (Session::Run, the ServerLoops connection
// handler, on a worker's loop) and, at shutdown, calls CloseIfIdle() and Close() on that
// worker's thread. Everything a session does runs on its worker's thread; its coroutine and
// callbacks never run concurrently.
//
// Writes are tried at once on the non-blocking socket and only wait (as an asynchronous write)
// when the socket buffer is full; reads wait for readiness. A request relayed from a pooled
// upstream connection thus costs one read and one write on each side, and the two waits.
#pragma once

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_set>
#include <vector>

#include "common/log.h"
#include "net/server_loops.h"
#include "net/watchdog.h"
#include "proxy/http_message.h"
#include "proxy/metrics_observer.h"
#include "proxy/observer.h"
#include "proxy/options.h"
#include "proxy/pipe.h"
#include "proxy/shadow.h"
#include "proxy/upstream_pool.h"

namespace llmtap::proxy {

// What a session may wait for; each kind has its own limit (WaitLimits).
enum class Wait : uint8_t {
  kIdle,        // for the next request on a keep-alive connection
  kClientRead,  // for the rest of a request
  kClientWrite,
  kDrain,  // reading what a rejected client still sends
  kConnect,
  kUpstreamWrite,
  kUpstreamRead,
  kHandshake,  // for a client's TLS handshake, from the accept
};

// The limit of each kind of wait, from the options, and the shortest of them (how often a
// session's watchdog wakes: so no wait's deadline is earlier than its next wake).
class WaitLimits {
 public:
  WaitLimits() = default;
  explicit WaitLimits(const ProxyOptions& options);
  Clock::duration of(Wait w) const { return limits_[static_cast<size_t>(w)]; }
  Clock::duration shortest() const { return shortest_; }

 private:
  static constexpr std::chrono::milliseconds kDrainMax{5000};
  std::array<Clock::duration, 8> limits_{};
  Clock::duration shortest_{std::chrono::milliseconds(1)};
};

// What every session of one server reads. Set up by ProxyServer before its event loops start;
// after that only the atomics and the counters change.
struct ServerShared {
  ProxyOptions options;
  WaitLimits limits;  // from options
  Logger* logger = nullptr;
  MetricsObserver metrics;
  std::vector<RequestObserver*> observers;  // `metrics` first
  std::vector<const MetricsSource*> metrics_sources;
  std::string upstream_authority;  // the Host field sent upstream
  std::vector<tcp::endpoint> upstream_endpoints;
  // An https:// upstream: the client context (made once by Start) and the name its certificate
  // must carry (SNI); null for http://.
  std::shared_ptr<const net::TlsClientContext> upstream_tls;
  std::string upstream_host;
  // Failed handshakes (upstream, client) and TLS on the plain port, each logged at most once a
  // second.
  std::optional<RateLimitedWarning> upstream_tls_warning;
  std::optional<RateLimitedWarning> client_tls_warning;
  std::optional<RateLimitedWarning> tls_on_plain_warning;
  // Client connections closed on a timeout (but idle keep-alive ones), at most once a second.
  std::optional<RateLimitedWarning> client_timeout_warning;
  // --shadow: the mirror to the candidate (owned by the server); null when off.
  Shadow* shadow = nullptr;
  // The server's event loops; a session only asks whether the server is stopping (from
  // Stop()'s StopAccepting on), to stop keeping connections alive.
  const net::ServerLoops* loops = nullptr;
  std::atomic<uint64_t> next_request_id{1};

  ProxyCounters& counters() { return metrics.counters(); }
  bool Stopping() const { return loops->stopping(); }
  std::string MetricsText() const { return MetricsPage(metrics.counters(), metrics_sources); }
};

class Session;

// A monotonic clock reading for RateLimitedWarning.
inline int64_t NowNs() { return std::chrono::steady_clock::now().time_since_epoch().count(); }

// What the proxy keeps on one event loop of its ServerLoops (the loop of the same index).
// Touched only by that loop's thread.
struct Worker {
  explicit Worker(asio::io_context& loop) : ioc(loop) {}
  asio::io_context& ioc;  // owned by the ServerLoops, which outlive the worker
  UpstreamPool upstreams;
  ShadowLanes shadow;  // each --shadow's candidate connections and mirrors on this loop
  std::unordered_set<Session*> sessions;
  // The session of this loop's last upstream TLS connection, offered by the next one.
  net::TlsSessionSlot upstream_session;
  // The listener's certificate (--tls-cert), null for plain HTTP. Replaced by a reload
  // (ProxyServer::ReloadTls); a connection keeps the context it was accepted with.
  std::shared_ptr<const net::TlsServerContext> server_tls;
  // With TLS on either side, TLS connections keep their record buffers while busy
  // (net::TlsSocket::KeepBuffers) and this timer frees those of connections idle for
  // kTlsBuffersIdle (server.cc). Null without TLS.
  std::unique_ptr<Timer> tls_sweep;
  static constexpr std::chrono::seconds kTlsBuffersIdle{1};
};

class Session final : public std::enable_shared_from_this<Session>, private Pipe::Owner {
 public:
  Session(ServerShared& shared, Worker& worker, Socket socket);
  ~Session();

  // Serves the connection until it closes.
  static awaitable<void> Run(ServerShared* shared, Worker* worker, Socket socket);

  // Shutdown: an idle keep-alive connection is closed at once.
  void CloseIfIdle() {
    if (idle_) client_->Close();
  }
  // Frees the client connection's TLS record buffers if it has waited for a request since
  // `idle_since` or earlier.
  void ReleaseIdleTlsBuffers(Clock::time_point idle_since) {
    if (idle_ && client_->tls != nullptr && idle_since_ <= idle_since) {
      client_->tls->ReleaseBuffers();
    }
  }
  // Shutdown after the grace period: cut everything.
  void Close() {
    client_->Close();
    if (up_ != nullptr) up_->Close();
  }

 private:
  // One request's relay, as Forward() starts it.
  struct Exchange {
    bool head_request = false;
    bool client_keep_alive = false;
    unsigned client_version = 11;
  };
  // How Relay() left the exchange.
  struct RelayExit {
    int status = 0;
    UpstreamError error = UpstreamError::kNone;
    std::string detail;  // why, in words, for the error answer ("" for most errors)
    bool client_gone = false;
    bool keep_client = false;
  };
  // One try on one upstream connection.
  struct Attempt {
    std::shared_ptr<Pipe> up;
    bool reused = false;  // taken from the pool
    error_code ec;
    bool protocol_error = false;  // the response head did not parse
  };
  // How the response goes to the client, decided at its head.
  struct Framing {
    bool head_sent = false;
    bool chunked = false;
    bool keep = false;
  };

  // --- session.cc: the connection, its requests and the observers' phases ---
  // The client connection's read ended with an error while nobody waited for it: the client
  // went away. During a relay the upstream connection is closed at once, so that the server
  // stops generating.
  void OnHangUp() override;
  // The watchdog's deadlines: a wait of kind `w` begins (bounded by its limit, and by
  // `deadline` too in BeginWaitUntil), or ends. At an overdue wait, OnWaitExpired closes the
  // socket it waits on, which fails the operation.
  void BeginWait(Wait w) {
    wait_ = w;
    watchdog_.BeginFor(shared_.limits.of(w));
  }
  void BeginWaitUntil(Wait w, Clock::time_point deadline) {
    wait_ = w;
    watchdog_.Begin(std::min(CoarseNow() + shared_.limits.of(w), deadline));
  }
  void EndWait() { watchdog_.End(); }
  void OnWaitExpired();
  // The client connection is closed on a timeout of wait_: counted by stage, and logged.
  void CountClientTimeout();
  awaitable<void> Loop();
  // A TLS listener's first step: a TLS handshake, or a 400 to plain HTTP. Whether to serve.
  awaitable<bool> AcceptTls(std::shared_ptr<const net::TlsServerContext> ctx);
  // A rejected first request that starts as a TLS handshake does on the plain port: logged.
  bool TlsOnPlainPort();
  // Runs one request read whole through the phases and the upstream. Returns whether the
  // client connection stays open for another request.
  awaitable<bool> Forward(bool keep_alive);
  void BeginRequest();                  // OnRequestReceived .. OnUpstreamChosen
  void EndRequest(const RelayExit& r);  // OnDone
  // Calls `call(observer)` for every observer in order, each pointed at its own state slot.
  template <class Call>
  void Notify(Call&& call) {
    const std::vector<RequestObserver*>& observers = shared_.observers;
    for (size_t i = 0; i < observers.size(); ++i) {
      ctx_.SetObserver(i);
      call(*observers[i]);
    }
  }
  awaitable<void> Respond(int status, std::string_view content_type, std::string body,
                          unsigned version, bool keep_alive, error_code& ec);
  awaitable<void> RejectAndClose(const Rejection& rejection);
  // Writes all of `buffers`, `done` bytes of which were already written, waiting as `wait`.
  awaitable<void> WriteRest(Pipe& pipe, Buffers buffers, size_t done, Wait wait, error_code& ec);
  awaitable<void> WriteAll(Pipe& pipe, Buffers buffers, Wait wait, error_code& ec);

  // --- relay.cc: the exchange with the upstream ---
  // Sends the request in uhead_ and req_.body upstream and relays the response to the client,
  // on a pooled connection or, failing that, a new one (once more on a new one when a pooled
  // connection turns out stale).
  awaitable<void> Relay(Exchange x, RelayExit& r);
  // Opens a new upstream connection (up_), with its TLS handshake for an https:// upstream;
  // null if that failed (r says why) or the client left.
  awaitable<std::shared_ptr<Pipe>> Connect(RelayExit& r);
  // After Connect's TCP connect: the TLS handshake, within the same wait.
  awaitable<error_code> UpstreamHandshake(Pipe& up);
  void UpstreamHandshakeFailed(const Pipe& up, RelayExit& r);
  // Each upstream read goes out in one client write (with the response head, the first time).
  awaitable<void> RelayResponse(Attempt& a, const Exchange& x, RelayExit& r);
  // The upstream's first bytes are a TLS record (an http:// URL for a TLS server): says so in r.
  static bool SpeaksTls(const Pipe& up, RelayExit& r);
  void StartResponse(const Exchange& x, RelayExit& r, Framing& f);  // OnResponseHeaders
  size_t FrameClientWrite(const Framing& f, bool done, char (&size_line)[24], Buffers& out) const;
  void BodyRelayed(size_t n);  // OnResponseChunk
  // After an attempt: parks a reusable connection, or says why the exchange failed. Returns
  // whether to try once more on a new connection.
  bool EndAttempt(Attempt& a, int attempt, RelayExit& r);
  void NewResponseParser(bool head_request);

  ServerShared& shared_;
  const ProxyOptions& opt_;
  Worker& worker_;
  std::shared_ptr<Pipe> client_;
  std::shared_ptr<Pipe> up_;  // the upstream connection of the relay in progress
  net::Watchdog watchdog_;
  Wait wait_ = Wait::kIdle;  // the kind of the watchdog's wait, while it has one
  RequestReader reader_;
  Request& req_ = reader_.request();
  UpstreamResponse resp_;
  std::optional<UpstreamResponseParser> uparser_;
  std::string uhead_;  // the upstream request's head
  std::string head_;   // the client response's head
  RequestContext ctx_;
  RelayResult result_;
  std::shared_ptr<ShadowPair> shadow_pair_;  // the request in progress is mirrored (--shadow)
  bool relaying_ = false;
  bool client_gone_ = false;
  bool timed_out_ = false;
  bool idle_ = true;  // waiting for a request head, nothing of it read yet
  bool sent_bytes_ = false;       // a TLS client sent its first byte (AcceptTls)
  uint64_t requests_read_ = 0;    // requests read whole on this connection
  Clock::time_point idle_since_;  // when idle_ last became true
};

}  // namespace llmtap::proxy
