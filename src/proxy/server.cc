#include "proxy/server.h"

#include <sys/socket.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <exception>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_set>
#include <utility>
#include <vector>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include "capture/log.h"
#include "common/json_escape.h"
#include "common/version.h"

namespace llmtap::proxy {

std::string_view UpstreamErrorName(UpstreamError error) {
  switch (error) {
    case UpstreamError::kNone:
      return "none";
    case UpstreamError::kConnect:
      return "connect";
    case UpstreamError::kTimeout:
      return "timeout";
    case UpstreamError::kReset:
      return "reset";
    case UpstreamError::kProtocol:
      return "protocol";
  }
  return "unknown";
}

namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;
using asio::awaitable;
using asio::use_awaitable;
using boost::system::error_code;
using Clock = std::chrono::steady_clock;

constexpr size_t kRelayBufferBytes = 16 * 1024;
constexpr int kUpstreamErrorKinds = 5;

std::string_view Sv(beast::string_view s) { return {s.data(), s.size()}; }
beast::string_view Bv(std::string_view s) { return {s.data(), s.size()}; }

class FieldsView final : public HeaderView {
 public:
  explicit FieldsView(const http::fields& fields) : fields_(fields) {}
  std::string_view Get(std::string_view name) const override {
    auto it = fields_.find(Bv(name));
    return it == fields_.end() ? std::string_view() : Sv(it->value());
  }

 private:
  const http::fields& fields_;
};

// Hop-by-hop fields (RFC 9110 7.6.1, RFC 9112): they describe one connection, not the
// message, so a proxy must not forward them. Trailer goes too: the proxy re-frames bodies and
// does not relay trailer fields.
bool IsHopByHop(const http::fields::value_type& f) {
  switch (f.name()) {
    case http::field::connection:
    case http::field::keep_alive:
    case http::field::te:
    case http::field::transfer_encoding:
    case http::field::upgrade:
    case http::field::proxy_connection:
    case http::field::proxy_authenticate:
    case http::field::proxy_authorization:
    case http::field::trailer:
      return true;
    default:
      return false;
  }
}

// Copies every end-to-end field of `from` into `to`: not hop-by-hop, not named by a Connection
// field, and not refused by `skip`.
template <class Skip>
void CopyEndToEnd(const http::fields& from, http::fields& to, Skip skip) {
  beast::string_view named[16];
  size_t named_count = 0;
  bool named_overflow = false;
  for (auto range = from.equal_range(http::field::connection); range.first != range.second;
       ++range.first) {
    for (auto token : http::token_list(range.first->value())) {
      if (named_count < std::size(named)) {
        named[named_count++] = token;
      } else {
        named_overflow = true;
      }
    }
  }
  for (const auto& f : from) {
    if (IsHopByHop(f) || skip(f.name())) continue;
    bool is_named = false;
    for (size_t i = 0; i < named_count && !is_named; ++i) {
      is_named = beast::iequals(f.name_string(), named[i]);
    }
    // More than 16 named fields is not a real client; check the rest the slow way.
    if (!is_named && named_overflow) {
      for (auto range = from.equal_range(http::field::connection);
           range.first != range.second && !is_named; ++range.first) {
        for (auto token : http::token_list(range.first->value())) {
          if (beast::iequals(f.name_string(), token)) is_named = true;
        }
      }
    }
    if (is_named) continue;
    if (f.name() != http::field::unknown) {
      to.insert(f.name(), f.value());
    } else {
      to.insert(f.name_string(), f.value());
    }
  }
}

// An OpenAI-style error body.
std::string ErrorBody(std::string_view message, std::string_view type, std::string_view code) {
  std::string b = "{\"error\":{\"message\":\"";
  AppendJsonEscaped(&b, message);
  b.append("\",\"type\":\"").append(type).append("\",\"param\":null,\"code\":\"");
  b.append(code).append("\"}}");
  return b;
}

// The upstream URL, "http://HOST[:PORT][/]".
bool ParseUpstream(const std::string& url, std::string* host, uint16_t* port,
                   std::string* authority, std::string* error) {
  constexpr std::string_view kScheme = "http://";
  std::string_view rest = url;
  if (rest.substr(0, kScheme.size()) != kScheme) {
    *error = "upstream '" + url + "' must start with http:// (TLS upstreams are not supported)";
    return false;
  }
  rest.remove_prefix(kScheme.size());
  if (!rest.empty() && rest.back() == '/') rest.remove_suffix(1);
  if (rest.empty() || rest.find('/') != std::string_view::npos ||
      rest.find_first_of("?#@") != std::string_view::npos) {
    *error = "upstream '" + url + "' must be http://HOST:PORT (no path, query or user)";
    return false;
  }
  *authority = std::string(rest);
  std::string_view h = rest;
  std::string_view p;
  if (rest.front() == '[') {
    const size_t close = rest.find(']');
    if (close == std::string_view::npos) {
      *error = "upstream '" + url + "': unterminated IPv6 address";
      return false;
    }
    h = rest.substr(1, close - 1);
    std::string_view after = rest.substr(close + 1);
    if (!after.empty()) {
      if (after.front() != ':') {
        *error = "upstream '" + url + "': junk after the IPv6 address";
        return false;
      }
      p = after.substr(1);
    }
  } else if (const size_t colon = rest.rfind(':'); colon != std::string_view::npos) {
    h = rest.substr(0, colon);
    p = rest.substr(colon + 1);
  }
  unsigned long v = 80;
  if (!p.empty() || rest.back() == ':') {
    if (p.empty() || p.size() > 5 || p.find_first_not_of("0123456789") != std::string_view::npos ||
        (v = std::stoul(std::string(p))) == 0 || v > 65535) {
      *error = "upstream '" + url + "': bad port";
      return false;
    }
  }
  if (h.empty()) {
    *error = "upstream '" + url + "': no host";
    return false;
  }
  *host = std::string(h);
  *port = static_cast<uint16_t>(v);
  return true;
}

// The proxy's own counters. Relaxed atomics: each is read on its own.
struct ProxyCounters {
  std::atomic<uint64_t> requests_by_class[6] = {};  // [status / 100]; [0]: no response
  std::atomic<uint64_t> upstream_errors[kUpstreamErrorKinds] = {};
  std::atomic<uint64_t> client_cancelled{0};
  std::atomic<uint64_t> request_body_bytes{0};
  std::atomic<uint64_t> response_body_bytes{0};
  std::atomic<uint64_t> upstream_connects{0};
  std::atomic<uint64_t> upstream_reuses{0};
  std::atomic<uint64_t> metrics_requests{0};
  std::atomic<int64_t> active_requests{0};
  std::atomic<int64_t> active_streams{0};
  std::atomic<int64_t> client_connections{0};

  void CountStatus(int status) {
    const int c = status >= 100 && status < 600 ? status / 100 : 0;
    requests_by_class[c].fetch_add(1, std::memory_order_relaxed);
  }
};

// The proxy's request metrics are one more observer of the phases.
class MetricsObserver final : public RequestObserver {
 public:
  explicit MetricsObserver(ProxyCounters* c) : c_(c) {}
  void OnRequestReceived(RequestContext&, const HeaderView&) noexcept override {
    c_->active_requests.fetch_add(1, std::memory_order_relaxed);
  }
  void OnBodyComplete(RequestContext&, std::string_view body) noexcept override {
    c_->request_body_bytes.fetch_add(body.size(), std::memory_order_relaxed);
  }
  void OnResponseHeaders(RequestContext&, int, const HeaderView&) noexcept override {
    c_->active_streams.fetch_add(1, std::memory_order_relaxed);
  }
  void OnResponseChunk(RequestContext&, std::string_view bytes) noexcept override {
    c_->response_body_bytes.fetch_add(bytes.size(), std::memory_order_relaxed);
  }
  void OnDone(RequestContext& ctx, const RequestOutcome& o) noexcept override {
    c_->CountStatus(o.status);
    if (o.client_cancelled) c_->client_cancelled.fetch_add(1, std::memory_order_relaxed);
    if (o.upstream_error != UpstreamError::kNone) {
      c_->upstream_errors[static_cast<int>(o.upstream_error)].fetch_add(1,
                                                                        std::memory_order_relaxed);
    }
    if (ctx.response_started) c_->active_streams.fetch_sub(1, std::memory_order_relaxed);
    // Last, so that a reader who saw the request end also sees its counts.
    c_->active_requests.fetch_sub(1, std::memory_order_release);
  }

 private:
  ProxyCounters* c_;
};

class Session;

// One event loop and what lives on it. Everything but `ioc` is touched only by its thread.
struct Worker {
  asio::io_context ioc{1};
  std::optional<asio::executor_work_guard<asio::io_context::executor_type>> guard;
  std::thread thread;
  struct Idle {
    std::unique_ptr<beast::tcp_stream> stream;
    Clock::time_point since;
  };
  std::vector<Idle> idle_upstreams;
  std::unordered_set<Session*> sessions;
};

}  // namespace

struct ProxyServer::Impl {
  ProxyOptions options;
  std::vector<RequestObserver*> observers;  // the metrics observer first
  std::vector<const MetricsSource*> metrics_sources;
  Logger* logger = nullptr;
  ProxyCounters counters;
  MetricsObserver metrics_observer{&counters};

  std::string upstream_host;
  uint16_t upstream_port = 0;
  std::string upstream_authority;  // the Host field sent upstream
  std::vector<tcp::endpoint> upstream_endpoints;

  std::vector<std::unique_ptr<Worker>> workers;
  std::unique_ptr<tcp::acceptor> acceptor;  // lives on workers[0]
  size_t next_worker = 0;                   // the acceptor's thread only
  uint16_t port = 0;
  bool running = false;
  std::atomic<bool> stopping{false};
  std::atomic<uint64_t> next_request_id{1};

  awaitable<void> Accept();
  std::string MetricsText() const;
  void Log(LogLevel level, const std::string& message) const { logger->Log(level, message); }
};

namespace {

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

// One client connection. Lives on one worker thread; its coroutines never run concurrently.
class Session : public std::enable_shared_from_this<Session> {
 public:
  Session(ProxyServer::Impl& impl, Worker& worker, tcp::socket socket)
      : impl_(impl), opt_(impl.options), worker_(worker), client_(std::move(socket)) {
    worker_.sessions.insert(this);
    impl_.counters.client_connections.fetch_add(1, std::memory_order_relaxed);
  }
  ~Session() {
    worker_.sessions.erase(this);
    impl_.counters.client_connections.fetch_sub(1, std::memory_order_relaxed);
  }

  static awaitable<void> Run(ProxyServer::Impl* impl, Worker* worker, tcp::socket socket) {
    auto session = std::make_shared<Session>(*impl, *worker, std::move(socket));
    co_await session->Loop();
  }

  // Shutdown: an idle keep-alive connection is closed at once.
  void CloseIfIdle() {
    if (idle_) client_.close();
  }
  // Shutdown after the grace period: cut everything.
  void Close() {
    client_.close();
    if (upstream_ != nullptr) upstream_->close();
  }

 private:
  struct RelayResult {
    int status = 0;
    UpstreamError error = UpstreamError::kNone;
    bool client_gone = false;
    bool keep_client = false;
  };

  awaitable<void> Loop() {
    error_code ec;
    for (;;) {
      idle_ = buffer_.size() == 0;
      if (impl_.stopping.load(std::memory_order_relaxed)) break;
      parser_.emplace();
      parser_->header_limit(opt_.max_header_bytes);
      parser_->body_limit(opt_.max_body_bytes);
      client_.expires_after(idle_ ? opt_.idle_timeout : opt_.read_timeout);
      co_await http::async_read_header(client_, buffer_, *parser_,
                                       asio::redirect_error(use_awaitable, ec));
      idle_ = false;
      if (ec) {
        if (ec == http::error::body_limit) {
          co_await RejectAndClose(413, "The request body is larger than max_body_bytes.",
                                  "request_too_large");
        } else if (ec.category() == http::make_error_code(http::error::bad_target).category() &&
                   ec != http::error::end_of_stream && ec != http::error::partial_message) {
          co_await RejectAndClose(400, "Malformed HTTP request.", "bad_request");
        }
        break;
      }
      auto& req = parser_->get();
      ctx_.start = Clock::now();
      if (!opt_.metrics_path.empty() && req.method() == http::verb::get &&
          Sv(req.target()) == opt_.metrics_path) {
        impl_.counters.metrics_requests.fetch_add(1, std::memory_order_relaxed);
        if (!parser_->is_done()) {  // a GET with a body: read and ignore it
          client_.expires_after(opt_.read_timeout);
          co_await http::async_read(client_, buffer_, *parser_,
                                    asio::redirect_error(use_awaitable, ec));
          if (ec) break;
        }
        const bool keep = req.keep_alive() && !impl_.stopping.load(std::memory_order_relaxed);
        co_await Respond(200, "text/plain; version=0.0.4; charset=utf-8", impl_.MetricsText(),
                         req.version(), keep, ec);
        if (ec || !keep) break;
        continue;
      }
      if (!parser_->is_done()) {
        // Expect: 100-continue is answered here: the proxy reads the body whole anyway, and
        // the upstream is sent the body at once (so Expect is not forwarded).
        if (beast::iequals(req[http::field::expect], "100-continue") && req.version() >= 11) {
          static constexpr std::string_view kContinue = "HTTP/1.1 100 Continue\r\n\r\n";
          client_.expires_after(opt_.write_timeout);
          co_await asio::async_write(client_, asio::buffer(kContinue.data(), kContinue.size()),
                                     asio::redirect_error(use_awaitable, ec));
          if (ec) break;
        }
        client_.expires_after(opt_.read_timeout);
        co_await http::async_read(client_, buffer_, *parser_,
                                  asio::redirect_error(use_awaitable, ec));
        if (ec) {
          if (ec == http::error::body_limit) {
            co_await RejectAndClose(413, "The request body is larger than max_body_bytes.",
                                    "request_too_large");
          }
          break;
        }
      }
      if (!co_await Forward()) break;
    }
    error_code ignored;
    client_.socket().shutdown(tcp::socket::shutdown_send, ignored);
    client_.close();
  }

  // Runs one request read whole through the phases and the upstream. Returns whether the
  // client connection stays open for another request.
  awaitable<bool> Forward() {
    auto& req = parser_->get();
    ctx_.id = impl_.next_request_id.fetch_add(1, std::memory_order_relaxed);
    ctx_.method.assign(Sv(req.method_string()));
    ctx_.target.assign(Sv(req.target()));
    ctx_.response_started = false;
    ctx_.state.reset();
    {
      FieldsView headers(req);
      for (RequestObserver* o : impl_.observers) o->OnRequestReceived(ctx_, headers);
    }
    for (RequestObserver* o : impl_.observers) o->OnBodyComplete(ctx_, req.body());

    // The upstream request: same method, target and end-to-end fields; Host names the
    // upstream; the body goes with a Content-Length.
    ureq_ = {};
    if (req.method() != http::verb::unknown) {
      ureq_.method(req.method());
    } else {
      ureq_.method_string(req.method_string());
    }
    ureq_.target(req.target());
    ureq_.version(11);
    CopyEndToEnd(req, ureq_, [](http::field f) {
      return f == http::field::host || f == http::field::expect || f == http::field::content_length;
    });
    ureq_.set(http::field::host, impl_.upstream_authority);
    const bool had_body = req.has_content_length() || req.chunked();
    ureq_.body() = std::move(req.body());
    if (had_body || !ureq_.body().empty()) ureq_.content_length(ureq_.body().size());
    for (RequestObserver* o : impl_.observers) o->OnUpstreamChosen(ctx_, opt_.upstream);

    outcome_ = RequestOutcome{};
    client_gone_ = false;
    const uint64_t watch = ++watch_seq_;
    asio::co_spawn(client_.get_executor(), WatchClient(shared_from_this(), watch),
                   [logger = impl_.logger](std::exception_ptr e) { LogException(logger, e); });

    RelayResult r;
    co_await Relay(req.method() == http::verb::head, req.keep_alive(), req.version(), r);

    ++watch_seq_;  // stops the watcher
    error_code ignored;
    client_.socket().cancel(ignored);

    bool keep = r.keep_client;
    if (r.client_gone) {
      outcome_.client_cancelled = true;
      keep = false;
    } else if (!ctx_.response_started && r.error != UpstreamError::kNone) {
      // Nothing was sent yet: answer for the upstream.
      const bool timeout = r.error == UpstreamError::kTimeout;
      r.status = timeout ? 504 : 502;
      keep = req.keep_alive() && !impl_.stopping.load(std::memory_order_relaxed);
      std::string message = timeout ? "The upstream server did not answer in time ("
                                    : "The upstream server could not be reached or failed (";
      message.append(UpstreamErrorName(r.error)).append(").");
      error_code ec;
      co_await Respond(r.status, "application/json",
                       ErrorBody(message, "upstream_error",
                                 timeout ? "upstream_timeout" : "upstream_unavailable"),
                       req.version(), keep, ec);
      if (ec) keep = false;
    }
    outcome_.status = r.status;
    outcome_.upstream_error = r.error;
    outcome_.total = Clock::now() - ctx_.start;
    for (RequestObserver* o : impl_.observers) o->OnDone(ctx_, outcome_);
    ctx_.state.reset();
    if (ureq_.body().capacity() > (1u << 20)) ureq_.body() = std::string();
    co_return keep;
  }

  // Takes a pooled upstream connection that is still open, or returns null.
  std::unique_ptr<beast::tcp_stream> TakeIdle() {
    const Clock::time_point now = Clock::now();
    while (!worker_.idle_upstreams.empty()) {
      Worker::Idle idle = std::move(worker_.idle_upstreams.back());
      worker_.idle_upstreams.pop_back();
      if (now - idle.since >= opt_.idle_timeout) continue;
      // A closed (or chattering) idle connection is readable; a live one is not.
      char c;
      const ssize_t n =
          ::recv(idle.stream->socket().native_handle(), &c, 1, MSG_PEEK | MSG_DONTWAIT);
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return std::move(idle.stream);
    }
    return nullptr;
  }

  void ParkIdle(std::unique_ptr<beast::tcp_stream> stream) {
    if (impl_.stopping.load(std::memory_order_relaxed) ||
        worker_.idle_upstreams.size() >= opt_.max_idle_upstream_per_thread) {
      return;
    }
    stream->expires_never();
    worker_.idle_upstreams.push_back({std::move(stream), Clock::now()});
  }

  // Sends ureq_ upstream and relays the response to the client.
  awaitable<void> Relay(bool head_request, bool client_keep_alive, unsigned client_version,
                        RelayResult& r) {
    error_code ec;
    std::unique_ptr<beast::tcp_stream> up;
    for (int attempt = 0;; ++attempt) {
      up = attempt == 0 ? TakeIdle() : nullptr;
      const bool reused = up != nullptr;
      ubuffer_.consume(ubuffer_.size());
      // Beast sizes each read by the buffer's free capacity (512 bytes for a fresh one):
      // reserve room so one read takes whatever the upstream has sent, not 512 bytes of it.
      ubuffer_.reserve(kRelayBufferBytes);
      if (!reused) {
        up = std::make_unique<beast::tcp_stream>(client_.get_executor());
        upstream_ = up.get();
        impl_.counters.upstream_connects.fetch_add(1, std::memory_order_relaxed);
        up->expires_after(opt_.connect_timeout);
        co_await up->async_connect(impl_.upstream_endpoints,
                                   asio::redirect_error(use_awaitable, ec));
        if (client_gone_) break;
        if (ec) {
          r.error = ec == beast::error::timeout ? UpstreamError::kTimeout : UpstreamError::kConnect;
          break;
        }
        error_code ignored;
        up->socket().set_option(tcp::no_delay(true), ignored);
      } else {
        upstream_ = up.get();
        impl_.counters.upstream_reuses.fetch_add(1, std::memory_order_relaxed);
      }
      up->expires_after(opt_.write_timeout);
      co_await http::async_write(*up, ureq_, asio::redirect_error(use_awaitable, ec));
      if (!ec && !client_gone_) {
        // Interim responses (103 Early Hints, an unasked 100) are not relayed; the final
        // response follows on the same connection.
        do {
          uparser_.emplace();
          uparser_->header_limit(opt_.max_header_bytes);
          uparser_->body_limit(std::numeric_limits<std::uint64_t>::max());
          if (head_request) uparser_->skip(true);
          up->expires_after(opt_.read_timeout);
          co_await http::async_read_header(*up, ubuffer_, *uparser_,
                                           asio::redirect_error(use_awaitable, ec));
        } while (!ec && !client_gone_ && uparser_->get().result_int() / 100 == 1 &&
                 uparser_->get().result_int() != 101);
      }
      if (client_gone_) break;
      if (!ec) {
        co_await RelayResponse(*up, head_request, client_keep_alive, client_version, r);
        // Bytes already read past the response (a server that sent more than it framed) make
        // the connection unusable for the next request.
        if (uparser_->is_done() && uparser_->keep_alive() && r.error == UpstreamError::kNone &&
            !r.client_gone && ubuffer_.size() == 0) {
          upstream_ = nullptr;
          ParkIdle(std::move(up));
        }
        break;
      }
      // A pooled connection the upstream closed while it was idle fails before any response
      // byte: that request never reached the server, so it is sent once more on a new one.
      const bool stale = ec == http::error::end_of_stream || ec == asio::error::connection_reset ||
                         ec == asio::error::broken_pipe || ec == asio::error::eof;
      if (reused && stale && attempt == 0) continue;
      r.error = ec == beast::error::timeout ? UpstreamError::kTimeout
                : ec.category() == http::make_error_code(http::error::end_of_stream).category() &&
                        ec != http::error::end_of_stream && ec != http::error::partial_message
                    ? UpstreamError::kProtocol
                    : UpstreamError::kReset;
      break;
    }
    if (client_gone_) r.client_gone = true;
    upstream_ = nullptr;
  }

  awaitable<void> RelayResponse(beast::tcp_stream& up, bool head_request, bool client_keep_alive,
                                unsigned client_version, RelayResult& r) {
    error_code ec;
    auto& ures = uparser_->get();
    r.status = ures.result_int();
    http::response<http::buffer_body> res;
    res.result(ures.result_int());
    res.reason(ures.reason());
    res.version(client_version >= 11 ? 11 : 10);
    CopyEndToEnd(ures, res, [](http::field) { return false; });
    const int status = r.status;
    const bool body_expected = !head_request && status >= 200 && status != 204 && status != 304;
    bool keep = client_keep_alive && !impl_.stopping.load(std::memory_order_relaxed);
    if (body_expected && !ures.has_content_length()) {
      // Chunked or close-delimited upstream bodies go to HTTP/1.1 clients chunked.
      if (client_version >= 11) {
        res.chunked(true);
      } else {
        keep = false;
      }
    }
    res.keep_alive(keep);
    res.body().data = nullptr;
    res.body().size = 0;
    res.body().more = body_expected;
    ctx_.response_started = true;
    {
      FieldsView headers(ures);
      for (RequestObserver* o : impl_.observers) o->OnResponseHeaders(ctx_, r.status, headers);
    }
    http::response_serializer<http::buffer_body> sr{res};
    client_.expires_after(opt_.write_timeout);
    co_await http::async_write_header(client_, sr, asio::redirect_error(use_awaitable, ec));
    if (ec) {
      r.client_gone = true;
      co_return;
    }
    while (body_expected && !uparser_->is_done()) {
      auto& b = uparser_->get().body();
      b.data = relay_buffer_;
      b.size = kRelayBufferBytes;
      up.expires_after(opt_.read_timeout);
      // read_some, not read: return with what one read gave, so that each SSE event goes out
      // as soon as it came in.
      co_await http::async_read_some(up, ubuffer_, *uparser_,
                                     asio::redirect_error(use_awaitable, ec));
      if (ec == http::error::need_buffer) ec = {};
      // The parser stops at each chunk boundary; hand it the rest of what is already
      // buffered, so that everything received goes out in one client write rather than one
      // write per upstream chunk (SSE events still go out as soon as they arrive).
      while (!ec && b.size > 0 && ubuffer_.size() > 0 && !uparser_->is_done()) {
        const size_t used = uparser_->put(ubuffer_.data(), ec);
        ubuffer_.consume(used);
        if (ec == http::error::need_buffer || ec == http::error::need_more) {
          ec = {};
          if (used == 0) break;
        }
      }
      if (client_gone_) {
        r.client_gone = true;
        co_return;
      }
      if (ec) {
        r.error = ec == beast::error::timeout ? UpstreamError::kTimeout : UpstreamError::kReset;
        co_return;
      }
      const size_t n = kRelayBufferBytes - b.size;
      if (n == 0 && !uparser_->is_done()) continue;
      res.body().data = n ? relay_buffer_ : nullptr;
      res.body().size = n;
      res.body().more = !uparser_->is_done();
      client_.expires_after(opt_.write_timeout);
      co_await http::async_write(client_, sr, asio::redirect_error(use_awaitable, ec));
      if (ec == http::error::need_buffer) ec = {};
      if (ec) {
        r.client_gone = true;
        co_return;
      }
      if (n) {
        if (outcome_.response_body_bytes == 0) outcome_.ttft = Clock::now() - ctx_.start;
        outcome_.response_body_bytes += n;
        const std::string_view chunk(relay_buffer_, n);
        for (RequestObserver* o : impl_.observers) o->OnResponseChunk(ctx_, chunk);
      }
    }
    if (!sr.is_done()) {
      res.body().data = nullptr;
      res.body().size = 0;
      res.body().more = false;
      client_.expires_after(opt_.write_timeout);
      co_await http::async_write(client_, sr, asio::redirect_error(use_awaitable, ec));
      if (ec == http::error::need_buffer) ec = {};
      if (ec) {
        r.client_gone = true;
        co_return;
      }
    }
    r.keep_client = keep;
  }

  // Waits for the client socket to become readable while a request is relayed: end of stream
  // or an error there means the client went away, and the upstream connection is closed at
  // once so that the server stops generating. Bytes there are the client's next request.
  static awaitable<void> WatchClient(std::shared_ptr<Session> self, uint64_t seq) {
    for (;;) {
      error_code ec;
      co_await self->client_.socket().async_wait(tcp::socket::wait_read,
                                                 asio::redirect_error(use_awaitable, ec));
      if (ec || self->watch_seq_ != seq) co_return;
      char c;
      const ssize_t n =
          ::recv(self->client_.socket().native_handle(), &c, 1, MSG_PEEK | MSG_DONTWAIT);
      if (n > 0) co_return;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) continue;
      self->client_gone_ = true;
      if (self->upstream_ != nullptr) self->upstream_->close();
      co_return;
    }
  }

  awaitable<void> Respond(int status, std::string_view content_type, std::string body,
                          unsigned version, bool keep_alive, error_code& ec) {
    http::response<http::string_body> res;
    res.result(status);
    res.version(version >= 11 ? 11 : 10);
    res.set(http::field::content_type, Bv(content_type));
    res.body() = std::move(body);
    res.keep_alive(keep_alive);
    res.prepare_payload();
    client_.expires_after(opt_.write_timeout);
    co_await http::async_write(client_, res, asio::redirect_error(use_awaitable, ec));
  }

  // Answers an error to a request whose body was not read, then closes gracefully: stop
  // sending, and read and drop what the client still sends (bounded), so that the close does
  // not reset the connection before the client read the answer.
  awaitable<void> RejectAndClose(int status, std::string_view message, std::string_view code) {
    impl_.counters.CountStatus(status);
    error_code ec;
    const unsigned version = parser_->get().version() >= 10 ? parser_->get().version() : 11;
    co_await Respond(status, "application/json", ErrorBody(message, "invalid_request_error", code),
                     version, false, ec);
    if (ec) co_return;
    client_.socket().shutdown(tcp::socket::shutdown_send, ec);
    char sink[4096];
    size_t total = 0;
    client_.expires_after(
        std::min<std::chrono::milliseconds>(opt_.read_timeout, std::chrono::seconds(5)));
    while (!ec && total < (1u << 20)) {
      total += co_await client_.async_read_some(asio::buffer(sink),
                                                asio::redirect_error(use_awaitable, ec));
    }
  }

  ProxyServer::Impl& impl_;
  const ProxyOptions& opt_;
  Worker& worker_;
  beast::tcp_stream client_;
  beast::flat_buffer buffer_;
  std::optional<http::request_parser<http::string_body>> parser_;
  http::request<http::string_body> ureq_;
  beast::flat_buffer ubuffer_;
  std::optional<http::response_parser<http::buffer_body>> uparser_;
  beast::tcp_stream* upstream_ = nullptr;  // the upstream connection of the relay in progress
  RequestContext ctx_;
  RequestOutcome outcome_;
  uint64_t watch_seq_ = 0;
  bool client_gone_ = false;
  bool idle_ = true;  // waiting for a request head, nothing of it read yet
  char relay_buffer_[kRelayBufferBytes];
};

}  // namespace

awaitable<void> ProxyServer::Impl::Accept() {
  for (;;) {
    Worker& w = *workers[next_worker++ % workers.size()];
    error_code ec;
    tcp::socket socket = co_await acceptor->async_accept(
        asio::any_io_executor(w.ioc.get_executor()), asio::redirect_error(use_awaitable, ec));
    if (ec) {
      if (stopping.load() || !acceptor->is_open() || ec == asio::error::operation_aborted) {
        co_return;
      }
      // Out of file descriptors or similar: back off instead of spinning.
      Log(LogLevel::kWarning, "llmtap proxy: accept failed: " + ec.message());
      asio::steady_timer t(co_await asio::this_coro::executor, std::chrono::milliseconds(50));
      co_await t.async_wait(asio::redirect_error(use_awaitable, ec));
      continue;
    }
    socket.set_option(tcp::no_delay(true), ec);
    asio::co_spawn(w.ioc, Session::Run(this, &w, std::move(socket)),
                   [logger = logger](std::exception_ptr e) { LogException(logger, e); });
  }
}

std::string ProxyServer::Impl::MetricsText() const {
  std::string out;
  out.reserve(4096);
  char line[160];
  auto get = [](const auto& a) {
    return static_cast<unsigned long long>(a.load(std::memory_order_relaxed));
  };
  auto head = [&out](const char* name, const char* type, const char* help) {
    out.append("# HELP ").append(name).append(" ").append(help).append("\n");
    out.append("# TYPE ").append(name).append(" ").append(type).append("\n");
  };
  head("llmtap_build_info", "gauge", "The llmtap version.");
  out.append("llmtap_build_info{version=\"").append(kVersion).append("\"} 1\n");
  head("llmtap_proxy_requests_total", "counter",
       "Requests answered, by status class (\"none\": the client went away first).");
  static constexpr const char* kClasses[] = {"none", "1xx", "2xx", "3xx", "4xx", "5xx"};
  for (int i = 0; i < 6; ++i) {
    std::snprintf(line, sizeof line, "llmtap_proxy_requests_total{class=\"%s\"} %llu\n",
                  kClasses[i], get(counters.requests_by_class[i]));
    out.append(line);
  }
  head("llmtap_proxy_upstream_errors_total", "counter", "Upstream failures, by kind.");
  for (int i = 1; i < kUpstreamErrorKinds; ++i) {
    const std::string_view kind = UpstreamErrorName(static_cast<UpstreamError>(i));
    std::snprintf(line, sizeof line, "llmtap_proxy_upstream_errors_total{kind=\"%.*s\"} %llu\n",
                  static_cast<int>(kind.size()), kind.data(), get(counters.upstream_errors[i]));
    out.append(line);
  }
  auto metric = [&](const char* name, const char* type, const char* help, long long value) {
    head(name, type, help);
    std::snprintf(line, sizeof line, "%s %lld\n", name, value);
    out.append(line);
  };
  metric("llmtap_proxy_client_cancelled_total", "counter",
         "Requests whose client went away before the response ended.",
         static_cast<long long>(get(counters.client_cancelled)));
  metric("llmtap_proxy_request_body_bytes_total", "counter", "Request body bytes received.",
         static_cast<long long>(get(counters.request_body_bytes)));
  metric("llmtap_proxy_response_body_bytes_total", "counter",
         "Response body bytes relayed to clients.",
         static_cast<long long>(get(counters.response_body_bytes)));
  metric("llmtap_proxy_upstream_connects_total", "counter", "Upstream connections opened.",
         static_cast<long long>(get(counters.upstream_connects)));
  metric("llmtap_proxy_upstream_reuses_total", "counter",
         "Requests sent on a pooled upstream connection.",
         static_cast<long long>(get(counters.upstream_reuses)));
  metric("llmtap_proxy_active_requests", "gauge", "Requests in flight.",
         counters.active_requests.load(std::memory_order_relaxed));
  metric("llmtap_proxy_active_streams", "gauge", "Responses being relayed.",
         counters.active_streams.load(std::memory_order_relaxed));
  metric("llmtap_proxy_client_connections", "gauge", "Open client connections.",
         counters.client_connections.load(std::memory_order_relaxed));
  for (const MetricsSource* s : metrics_sources) s->AppendPrometheus(&out);
  return out;
}

ProxyServer::ProxyServer(ProxyOptions options, std::vector<RequestObserver*> observers,
                         std::vector<const MetricsSource*> metrics_sources)
    : impl_(std::make_unique<Impl>()) {
  impl_->options = std::move(options);
  impl_->logger = impl_->options.logger ? impl_->options.logger : Logger::Stderr();
  impl_->observers.push_back(&impl_->metrics_observer);
  for (RequestObserver* o : observers) impl_->observers.push_back(o);
  impl_->metrics_sources = std::move(metrics_sources);
}

ProxyServer::~ProxyServer() {
  impl_->options.grace = std::chrono::milliseconds(0);
  Stop();
}

bool ProxyServer::Start(std::string* error) {
  Impl& s = *impl_;
  if (s.running) return true;
  if (!ParseUpstream(s.options.upstream, &s.upstream_host, &s.upstream_port, &s.upstream_authority,
                     error)) {
    return false;
  }
  try {
    {
      asio::io_context resolver_ioc;
      tcp::resolver resolver(resolver_ioc);
      error_code ec;
      auto results = resolver.resolve(s.upstream_host, std::to_string(s.upstream_port), ec);
      if (ec || results.empty()) {
        *error = "cannot resolve upstream host '" + s.upstream_host + "': " + ec.message();
        return false;
      }
      s.upstream_endpoints.clear();
      for (const auto& r : results) s.upstream_endpoints.push_back(r.endpoint());
    }
    uint32_t threads = s.options.threads;
    if (threads == 0) threads = std::max(1u, std::thread::hardware_concurrency());
    s.workers.clear();
    for (uint32_t i = 0; i < threads; ++i) s.workers.push_back(std::make_unique<Worker>());
    error_code ec;
    const auto address = asio::ip::make_address(s.options.host, ec);
    if (ec) {
      *error = "bad listen address '" + s.options.host + "': " + ec.message();
      return false;
    }
    const tcp::endpoint endpoint(address, s.options.port);
    s.acceptor = std::make_unique<tcp::acceptor>(s.workers[0]->ioc);
    s.acceptor->open(endpoint.protocol(), ec);
    if (!ec) s.acceptor->set_option(asio::socket_base::reuse_address(true), ec);
    if (!ec) s.acceptor->bind(endpoint, ec);
    if (!ec) s.acceptor->listen(asio::socket_base::max_listen_connections, ec);
    if (ec) {
      *error = "cannot listen on " + s.options.host + ":" + std::to_string(s.options.port) + ": " +
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
  s.stopping = false;
  asio::co_spawn(s.workers[0]->ioc, s.Accept(),
                 [logger = s.logger](std::exception_ptr e) { LogException(logger, e); });
  for (auto& w : s.workers) {
    w->guard.emplace(w->ioc.get_executor());
    w->thread = std::thread([w = w.get(), logger = s.logger] {
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
  s.stopping = true;
  asio::post(s.workers[0]->ioc, [&s] {
    error_code ignored;
    s.acceptor->close(ignored);
  });
  for (auto& w : s.workers) {
    asio::post(w->ioc, [w = w.get()] {
      for (Session* session : w->sessions) session->CloseIfIdle();
      w->idle_upstreams.clear();
    });
  }
  // Requests in flight finish (their connections then close) within the grace period.
  const Clock::time_point deadline = Clock::now() + s.options.grace;
  while (s.counters.client_connections.load() > 0 && Clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  for (auto& w : s.workers) {
    asio::post(w->ioc, [w = w.get()] {
      for (Session* session : w->sessions) session->Close();
      w->idle_upstreams.clear();
    });
    w->guard.reset();
  }
  for (auto& w : s.workers) w->thread.join();
  s.acceptor.reset();
  s.workers.clear();
  s.running = false;
}

uint16_t ProxyServer::port() const { return impl_->port; }

std::string ProxyServer::MetricsText() const { return impl_->MetricsText(); }

int64_t ProxyServer::active_requests() const {
  return impl_->counters.active_requests.load(std::memory_order_acquire);
}

}  // namespace llmtap::proxy
