#include "proxy/server.h"

#include <time.h>

#include <algorithm>
#include <array>
#include <atomic>
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
#include <boost/beast/core/buffers_suffix.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/string.hpp>
#include <boost/beast/http/basic_parser.hpp>
#include <boost/beast/http/error.hpp>
#include <boost/beast/http/field.hpp>
#include <boost/beast/http/rfc7230.hpp>
#include <boost/beast/http/status.hpp>
#include <boost/beast/http/verb.hpp>

#include "common/log.h"
#include "common/asio_types.h"
#include "common/http_body_parser.h"
#include "common/json_escape.h"
#include "common/thread_name.h"
#include "common/version.h"
#include "proxy/http_message.h"

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

using namespace std::string_view_literals;

using namespace llmtap::asio_types;
namespace beast = boost::beast;
namespace http = beast::http;
// What a coroutine suspended by Pipe::Wait() is resumed through.
using Waiter = asio::async_result<asio::use_awaitable_t<Executor>, void()>::handler_type;
using Buffers = std::array<asio::const_buffer, 4>;

// Each read asks for this much: an upstream read takes whatever the upstream has sent so far
// (so that it goes to the client in one write), a client read a whole request in most cases.
constexpr size_t kReadBytes = 16 * 1024;
constexpr int kUpstreamErrorKinds = 5;

// Deadlines need only millisecond precision: the coarse clock is cheaper to read (it matters a
// few times per request) and shares steady_clock's epoch (both are CLOCK_MONOTONIC on Linux).
// It lags by at most a tick, so a deadline measured from it passes at most a tick early.
Clock::time_point CoarseNow() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
  return Clock::time_point(std::chrono::seconds(ts.tv_sec) + std::chrono::nanoseconds(ts.tv_nsec));
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
  void OnDone(RequestContext& ctx, const RelayResult& o) noexcept override {
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

// One TCP connection with at most one read in flight. A read may stay posted while its owner
// does something else; its completion resumes the coroutine waiting in Wait(), if any, or is
// kept until one asks. So the client connection's next read doubles as the watch for a client
// that hangs up mid-response, and a pooled upstream connection's read both notices an upstream
// that closes it and becomes the read of the next response: neither costs a system call of its
// own (no MSG_PEEK, no epoll_ctl).
// Shared because a read in flight keeps it alive. Touched only by its event loop's thread.
class Pipe : public std::enable_shared_from_this<Pipe> {
 public:
  explicit Pipe(Socket s) : socket(std::move(s)) {}

  // Posts a read unless one is in flight or the connection has failed. (Asio 1.74 tries the
  // read at once, one recv that usually finds nothing, then waits for readiness.)
  void StartRead() {
    if (reading || error) return;
    reading = true;
    socket.async_read_some(
        buffer.prepare(kReadBytes),
        [self = shared_from_this()](error_code ec, size_t n) { self->OnRead(ec, n); });
  }

  // Suspends until the read in flight completes. Only call while `reading`.
  template <class Token>
  auto Wait(Token&& token) {
    return asio::async_initiate<Token, void()>(
        [this](auto handler) { waiter_.emplace(std::move(handler)); }, token);
  }

  void Close() {
    error_code ignored;
    socket.close(ignored);
  }

  Socket socket;
  beast::flat_buffer buffer;
  error_code error;      // what ended the connection's reads (sticky)
  bool reading = false;  // a read is in flight
  bool parked = false;   // in a worker's idle pool: any completed read makes it useless
  // The client connection's session, told when the client hangs up while nobody waits for a
  // read (the session clears it before it goes away).
  Session* owner = nullptr;

 private:
  void OnRead(error_code ec, size_t n);

  std::optional<Waiter> waiter_;
};

// One event loop and what lives on it. Everything but `ioc` is touched only by its thread.
struct Worker {
  asio::io_context ioc{1};
  std::optional<asio::executor_work_guard<asio::io_context::executor_type>> guard;
  std::thread thread;
  struct Idle {
    std::shared_ptr<Pipe> pipe;
    Clock::time_point since;
  };
  std::vector<Idle> idle_upstreams;
  std::unordered_set<Session*> sessions;

  void CloseIdleUpstreams() {
    for (Idle& idle : idle_upstreams) idle.pipe->Close();
    idle_upstreams.clear();
  }
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
  std::unique_ptr<Acceptor> acceptor;  // lives on workers[0]
  size_t next_worker = 0;              // the acceptor's thread only
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

// The upstream's response head, and its body de-chunked into `body` (which the relay empties
// after each client write).
struct Response {
  HeaderStore headers;
  std::string reason;
  std::string body;
  int status = 0;
};

class ResponseParser final : public BodyParser<false, Response, false> {
 public:
  explicit ResponseParser(Response* out) : BodyParser(out) {
    out_->headers.Clear();
    out_->body.clear();
  }

 private:
  void on_field_impl(http::field name, beast::string_view name_string, beast::string_view value,
                     error_code&) override {
    // Trailer fields (after a chunked body) are not relayed.
    if (is_header_done()) return;
    out_->headers.Add(name, {name_string.data(), name_string.size()}, {value.data(), value.size()});
  }
};

// Feeds everything buffered to the parser. need_more is not an error here: it means "read more".
template <class Parser>
void Parse(Parser& parser, beast::flat_buffer& buffer, error_code& ec) {
  while (buffer.size() > 0 && !parser.is_done()) {
    const size_t used = parser.put(buffer.data(), ec);
    buffer.consume(used);
    if (ec == http::error::need_more) {
      ec = {};
      return;
    }
    if (ec || used == 0) return;
  }
}

// Writes what the socket takes now, without waiting (the socket is in non-blocking mode).
// Returns the bytes written; a full socket buffer is not an error.
template <class ConstBuffers>
size_t WriteNow(Socket& socket, const ConstBuffers& buffers, error_code& ec) {
  const size_t n = socket.write_some(buffers, ec);
  if (ec == asio::error::would_block || ec == asio::error::try_again) ec = {};
  return n;
}

// One client connection. Lives on one worker thread; its coroutine and callbacks never run
// concurrently.
//
// Deadlines: one watchdog timer per connection instead of a timer armed before every operation
// (each arming was a timerfd_settime). An operation that may wait notes when it began; the
// watchdog wakes at least every min_limit_ and, once the operation is older than its limit,
// closes the socket it waits on. So a wait never moves the timer in steady state: its deadline
// is never earlier than the watchdog's next wake.
//
// Writes are tried at once on the non-blocking socket and only wait (as an asynchronous write)
// when the socket buffer is full; reads wait for readiness. A request relayed from a pooled
// upstream connection thus costs one read and one write on each side, and the two waits.
class Session : public std::enable_shared_from_this<Session> {
 public:
  Session(ProxyServer::Impl& impl, Worker& worker, Socket socket)
      : impl_(impl),
        opt_(impl.options),
        worker_(worker),
        client_(std::make_shared<Pipe>(std::move(socket))),
        watchdog_(worker.ioc.get_executor()) {
    client_->owner = this;
    error_code ignored;
    client_->socket.non_blocking(true, ignored);
    std::chrono::milliseconds min_limit =
        std::min({opt_.connect_timeout, opt_.read_timeout, opt_.write_timeout, opt_.idle_timeout,
                  kDrainMax});
    min_limit_ = std::max(min_limit, std::chrono::milliseconds(1));
    worker_.sessions.insert(this);
    impl_.counters.client_connections.fetch_add(1, std::memory_order_relaxed);
  }
  ~Session() {
    client_->owner = nullptr;
    client_->Close();
    worker_.sessions.erase(this);
    impl_.counters.client_connections.fetch_sub(1, std::memory_order_relaxed);
  }

  static awaitable<void> Run(ProxyServer::Impl* impl, Worker* worker, Socket socket) {
    auto session = std::make_shared<Session>(*impl, *worker, std::move(socket));
    session->ArmWatchdog();
    co_await session->Loop();
  }

  // Shutdown: an idle keep-alive connection is closed at once.
  void CloseIfIdle() {
    if (idle_) client_->Close();
  }
  // Shutdown after the grace period: cut everything.
  void Close() {
    client_->Close();
    if (up_ != nullptr) up_->Close();
  }

  // The client connection's read ended with an error while nobody waited for it: the client
  // went away. During a relay the upstream connection is closed at once, so that the server
  // stops generating.
  void OnClientGone() {
    if (!relaying_) return;
    client_gone_ = true;
    if (up_ != nullptr) up_->Close();
  }

 private:
  static constexpr std::chrono::milliseconds kDrainMax{5000};

  enum class Wait {
    kNone,
    kIdle,        // for the next request on a keep-alive connection
    kClientRead,  // for the rest of a request
    kClientWrite,
    kDrain,  // reading what a rejected client still sends
    kConnect,
    kUpstreamWrite,
    kUpstreamRead,
  };

  struct RelayExit {  // how Relay() left the exchange
    int status = 0;
    UpstreamError error = UpstreamError::kNone;
    bool client_gone = false;
    bool keep_client = false;
  };

  Clock::duration Limit(Wait w) const {
    std::chrono::milliseconds limit{0};
    switch (w) {
      case Wait::kIdle:
        limit = opt_.idle_timeout;
        break;
      case Wait::kClientRead:
      case Wait::kUpstreamRead:
        limit = opt_.read_timeout;
        break;
      case Wait::kClientWrite:
      case Wait::kUpstreamWrite:
        limit = opt_.write_timeout;
        break;
      case Wait::kDrain:
        limit = std::min(opt_.read_timeout, kDrainMax);
        break;
      case Wait::kConnect:
        limit = opt_.connect_timeout;
        break;
      case Wait::kNone:
        break;
    }
    // A year stands for "never" without overflowing the time point.
    return std::min<Clock::duration>(limit, std::chrono::hours(24 * 365));
  }

  void BeginWait(Wait w) {
    wait_ = w;
    wait_deadline_ = CoarseNow() + Limit(w);
    // Only a limit shorter than min_limit_ (none with valid options) needs an earlier wake; the
    // watchdog's handler re-arms it.
    if (wait_deadline_ < watchdog_expiry_) watchdog_.cancel();
  }
  // A wait that must end by `deadline` (or sooner by its own limit): reading one request is
  // bounded as a whole, so a client sending a byte at a time (slowloris) cannot stretch it.
  void BeginWaitUntil(Wait w, Clock::time_point deadline) {
    BeginWait(w);
    if (deadline < wait_deadline_) {
      wait_deadline_ = deadline;
      if (wait_deadline_ < watchdog_expiry_) watchdog_.cancel();
    }
  }
  void EndWait() { wait_ = Wait::kNone; }

  // From the coarse clock, like every wait's deadline: so a wait that begins later never has an
  // earlier deadline than this wake (when its limit is at least min_limit_).
  void ArmWatchdog() {
    Clock::time_point next = CoarseNow() + min_limit_;
    if (wait_ != Wait::kNone && wait_deadline_ < next) next = wait_deadline_;
    watchdog_expiry_ = next;
    watchdog_.expires_at(next);
    watchdog_.async_wait([self = shared_from_this()](error_code) { self->OnWatchdog(); });
  }

  void OnWatchdog() {
    if (closed_) return;
    // The precise clock here: the timer fired at or after its (coarse) expiry, and the coarse
    // clock may not show that yet, which would re-arm for a time already past, again and again.
    if (wait_ != Wait::kNone && Clock::now() >= wait_deadline_) {
      // Closing the socket fails the operation that waits on it.
      switch (wait_) {
        case Wait::kConnect:
        case Wait::kUpstreamWrite:
        case Wait::kUpstreamRead:
          timed_out_ = true;
          if (up_ != nullptr) up_->Close();
          break;
        default:
          client_->Close();
          break;
      }
      wait_ = Wait::kNone;
    }
    ArmWatchdog();
  }

  // Writes all of `buffers`, `done` bytes of which were already written, waiting as `wait`.
  awaitable<void> WriteRest(Pipe& pipe, Buffers buffers, size_t done, Wait wait, error_code& ec) {
    beast::buffers_suffix<Buffers> rest(buffers);
    rest.consume(done);
    BeginWait(wait);
    co_await asio::async_write(pipe.socket, rest, asio::redirect_error(use_awaitable, ec));
    EndWait();
  }

  awaitable<void> WriteAll(Pipe& pipe, Buffers buffers, Wait wait, error_code& ec) {
    const size_t n = WriteNow(pipe.socket, buffers, ec);
    if (!ec && n < asio::buffer_size(buffers)) co_await WriteRest(pipe, buffers, n, wait, ec);
  }

  awaitable<void> Loop() {
    for (;;) {
      if (impl_.stopping.load(std::memory_order_relaxed)) break;
      reader_.Begin(opt_.max_header_bytes, opt_.max_body_bytes);
      error_code ec;
      RequestReader::State state = RequestReader::State::kNeedMore;
      bool header_done = false;
      bool sent_continue = false;
      // Set at the request's first byte: the whole request must arrive within read_timeout.
      std::optional<Clock::time_point> request_deadline;
      for (;;) {
        state = reader_.Feed(client_->buffer);
        if (!header_done && reader_.header_done()) {
          header_done = true;
          ctx_.start = Clock::now();
        }
        if (state != RequestReader::State::kNeedMore) break;
        // Expect: 100-continue is answered here: the proxy reads the body whole anyway, and
        // the upstream is sent the body at once (so Expect is not forwarded).
        if (header_done && req_.expect_continue && req_.version >= 11 && !sent_continue) {
          sent_continue = true;
          static constexpr std::string_view kContinue = "HTTP/1.1 100 Continue\r\n\r\n";
          const Buffers out{asio::buffer(kContinue.data(), kContinue.size())};
          co_await WriteAll(*client_, out, Wait::kClientWrite, ec);
          if (ec) break;
        }
        if (client_->error) break;
        idle_ = !reader_.got_some();
        client_->StartRead();
        if (idle_) {
          BeginWait(Wait::kIdle);
        } else {
          if (!request_deadline) request_deadline = CoarseNow() + Limit(Wait::kClientRead);
          BeginWaitUntil(Wait::kClientRead, *request_deadline);
        }
        co_await client_->Wait(use_awaitable);
        EndWait();
        idle_ = false;
      }
      if (state == RequestReader::State::kRejected) {
        const Rejection& r = reader_.rejection();
        co_await RejectAndClose(r.status, r.message, r.code);
      }
      if (state != RequestReader::State::kDone) break;
      const bool keep_alive = reader_.keep_alive();
      if (!opt_.metrics_path.empty() && req_.method == http::verb::get &&
          req_.target == opt_.metrics_path) {
        impl_.counters.metrics_requests.fetch_add(1, std::memory_order_relaxed);
        const bool keep = keep_alive && !impl_.stopping.load(std::memory_order_relaxed);
        co_await Respond(200, "text/plain; version=0.0.4; charset=utf-8", impl_.MetricsText(),
                         req_.version, keep, ec);
        if (ec || !keep) break;
        continue;
      }
      if (!co_await Forward(keep_alive)) break;
    }
    closed_ = true;
    watchdog_.cancel();
    error_code ignored;
    client_->socket.shutdown(tcp::socket::shutdown_send, ignored);
    client_->Close();
  }

  // Runs one request read whole through the phases and the upstream. Returns whether the
  // client connection stays open for another request.
  awaitable<bool> Forward(bool keep_alive) {
    ctx_.id = impl_.next_request_id.fetch_add(1, std::memory_order_relaxed);
    ctx_.method = req_.method_string;
    ctx_.target = req_.target;
    ctx_.response_started = false;
    ctx_.state.reset();
    ctx_.request_headers = &req_.headers;
    for (RequestObserver* o : impl_.observers) o->OnRequestReceived(ctx_, req_.headers);
    for (RequestObserver* o : impl_.observers) o->OnBodyComplete(ctx_, req_.body);
    ctx_.request_headers = nullptr;

    reader_.BuildUpstreamHead(impl_.upstream_authority, &uhead_);
    for (RequestObserver* o : impl_.observers) o->OnUpstreamChosen(ctx_, opt_.upstream);

    result_ = RelayResult{};
    client_gone_ = false;
    timed_out_ = false;
    relaying_ = true;
    // The client connection's next read stays posted while the response is relayed: it fails
    // if the client hangs up (OnClientGone), and bytes it brings are the next request.
    if (client_->buffer.size() == 0) client_->StartRead();

    RelayExit r;
    co_await Relay(req_.method == http::verb::head, keep_alive, req_.version, r);
    relaying_ = false;

    bool keep = r.keep_client;
    if (r.client_gone) {
      result_.client_cancelled = true;
      keep = false;
    } else if (!ctx_.response_started && r.error != UpstreamError::kNone) {
      // Nothing was sent yet: answer for the upstream.
      const bool timeout = r.error == UpstreamError::kTimeout;
      r.status = timeout ? 504 : 502;
      keep = keep_alive && !impl_.stopping.load(std::memory_order_relaxed);
      std::string message = timeout ? "The upstream server did not answer in time ("
                                    : "The upstream server could not be reached or failed (";
      message.append(UpstreamErrorName(r.error)).append(").");
      error_code ec;
      co_await Respond(r.status, "application/json",
                       ErrorBody(message, "upstream_error",
                                 timeout ? "upstream_timeout" : "upstream_unavailable"),
                       req_.version, keep, ec);
      if (ec) keep = false;
    }
    result_.status = r.status;
    result_.upstream_error = r.error;
    result_.total = Clock::now() - ctx_.start;
    for (RequestObserver* o : impl_.observers) o->OnDone(ctx_, result_);
    ctx_.state.reset();
    if (req_.body.capacity() > (1u << 20)) req_.body = std::string();
    if (resp_.body.capacity() > (1u << 20)) resp_.body = std::string();
    co_return keep;
  }

  // Takes a pooled upstream connection that is still open and quiet, or returns null. A pooled
  // connection keeps a read posted, so one the upstream closed (or wrote to) has none.
  std::shared_ptr<Pipe> TakeIdle() {
    while (!worker_.idle_upstreams.empty()) {
      Worker::Idle idle = std::move(worker_.idle_upstreams.back());
      worker_.idle_upstreams.pop_back();
      if (!idle.pipe->reading || ctx_.start - idle.since >= opt_.idle_timeout) {
        idle.pipe->Close();
        continue;
      }
      idle.pipe->parked = false;
      return std::move(idle.pipe);
    }
    return nullptr;
  }

  void ParkIdle(std::shared_ptr<Pipe> pipe) {
    if (impl_.stopping.load(std::memory_order_relaxed) ||
        worker_.idle_upstreams.size() >= opt_.max_idle_upstream_per_thread) {
      pipe->Close();
      return;
    }
    pipe->parked = true;
    pipe->StartRead();
    worker_.idle_upstreams.push_back({std::move(pipe), CoarseNow()});
  }

  void NewResponseParser(bool head_request) {
    uparser_.emplace(&resp_);
    uparser_->header_limit(opt_.max_header_bytes);
    uparser_->body_limit(std::numeric_limits<std::uint64_t>::max());
    uparser_->eager(true);
    if (head_request) uparser_->skip(true);
  }

  // The client's response head, in head_.
  void BuildHead(unsigned version, bool keep, bool chunked) {
    head_.assign(version >= 11 ? "HTTP/1.1 "sv : "HTTP/1.0 "sv);
    AppendUint(&head_, static_cast<uint64_t>(resp_.status));
    head_.push_back(' ');
    if (resp_.reason.empty()) {
      const beast::string_view reason = http::obsolete_reason(http::int_to_status(resp_.status));
      head_.append(reason.data(), reason.size());
    } else {
      head_.append(resp_.reason);
    }
    head_.append("\r\n"sv);
    AppendEndToEnd(resp_.headers, &head_);
    if (chunked) head_.append("Transfer-Encoding: chunked\r\n"sv);
    if (version >= 11 && !keep) head_.append("Connection: close\r\n"sv);
    if (version < 11 && keep) head_.append("Connection: keep-alive\r\n"sv);
    head_.append("\r\n"sv);
  }

  // Sends the request in uhead_ and req_.body upstream and relays the response to the client:
  // each upstream read goes out in one client write (with the response head, the first time).
  awaitable<void> Relay(bool head_request, bool client_keep_alive, unsigned client_version,
                        RelayExit& r) {
    error_code ec;
    std::shared_ptr<Pipe> up;
    for (int attempt = 0;; ++attempt) {
      up = attempt == 0 ? TakeIdle() : nullptr;
      const bool reused = up != nullptr;
      ec = {};
      if (!reused) {
        up = std::make_shared<Pipe>(Socket(worker_.ioc.get_executor()));
        up_ = up;
        impl_.counters.upstream_connects.fetch_add(1, std::memory_order_relaxed);
        BeginWait(Wait::kConnect);
        for (const tcp::endpoint& endpoint : impl_.upstream_endpoints) {
          co_await up->socket.async_connect(endpoint, asio::redirect_error(use_awaitable, ec));
          if (!ec || client_gone_ || timed_out_) break;
          up->Close();
        }
        EndWait();
        if (client_gone_) break;
        if (ec) {
          r.error = timed_out_ ? UpstreamError::kTimeout : UpstreamError::kConnect;
          break;
        }
        error_code ignored;
        up->socket.set_option(tcp::no_delay(true), ignored);
        up->socket.non_blocking(true, ignored);
      } else {
        up_ = up;
        impl_.counters.upstream_reuses.fetch_add(1, std::memory_order_relaxed);
      }
      {
        const Buffers request{asio::buffer(uhead_), asio::buffer(req_.body)};
        const size_t n = WriteNow(up->socket, request, ec);
        if (!ec && n < uhead_.size() + req_.body.size()) {
          co_await WriteRest(*up, request, n, Wait::kUpstreamWrite, ec);
        }
      }
      NewResponseParser(head_request);
      bool protocol_error = false;
      if (!ec && !client_gone_) {
        up->StartRead();
        bool head_sent = false;
        bool chunked = false;
        bool keep = false;
        for (;;) {
          error_code pec;
          Parse(*uparser_, up->buffer, pec);
          // Interim responses (103 Early Hints, an unasked 100) are not relayed; the final
          // response follows on the same connection.
          while (!pec && uparser_->is_done() && resp_.status / 100 == 1 && resp_.status != 101) {
            NewResponseParser(head_request);
            Parse(*uparser_, up->buffer, pec);
          }
          // A response head that does not parse is a protocol error (502 to the client). A body
          // that stops parsing is cut like a reset: what was parsed before the error (from this
          // read too) is relayed, then the stream ends unterminated.
          if (pec && !uparser_->is_header_done()) {
            protocol_error = true;
            ec = pec;
            break;
          }
          if (uparser_->is_header_done()) {
            const bool done = uparser_->is_done();
            if (!head_sent) {
              r.status = resp_.status;
              const bool body_expected =
                  !head_request && r.status >= 200 && r.status != 204 && r.status != 304;
              keep = client_keep_alive && !impl_.stopping.load(std::memory_order_relaxed);
              if (body_expected && !uparser_->content_length()) {
                // Chunked or close-delimited upstream bodies go to HTTP/1.1 clients chunked.
                if (client_version >= 11) {
                  chunked = true;
                } else {
                  keep = false;
                }
              }
              BuildHead(client_version, keep, chunked);
              ctx_.response_started = true;
              for (RequestObserver* o : impl_.observers) {
                o->OnResponseHeaders(ctx_, r.status, resp_.headers);
              }
            }
            const size_t n = resp_.body.size();
            if (!head_sent || n > 0 || (done && chunked)) {
              Buffers out;
              size_t count = 0;
              if (!head_sent) out[count++] = asio::buffer(head_);
              char size_line[24];
              if (n > 0) {
                if (chunked) {
                  const int len = std::snprintf(size_line, sizeof size_line, "%zx\r\n", n);
                  out[count++] = asio::buffer(size_line, static_cast<size_t>(len));
                }
                out[count++] = asio::buffer(resp_.body);
              }
              if (chunked) {
                static constexpr std::string_view kTail = "\r\n0\r\n\r\n";
                if (n > 0 && done) {
                  out[count++] = asio::buffer(kTail.data(), kTail.size());
                } else if (n > 0) {
                  out[count++] = asio::buffer(kTail.data(), 2);
                } else if (done) {
                  out[count++] = asio::buffer(kTail.data() + 2, kTail.size() - 2);
                }
              }
              const size_t written = WriteNow(client_->socket, out, ec);
              if (!ec && written < asio::buffer_size(out)) {
                co_await WriteRest(*client_, out, written, Wait::kClientWrite, ec);
              }
              head_sent = true;
              if (ec) {
                r.client_gone = true;
                break;
              }
              if (n > 0) {
                if (result_.response_body_bytes == 0) result_.ttft = Clock::now() - ctx_.start;
                result_.response_body_bytes += n;
                const std::string_view chunk(resp_.body.data(), n);
                for (RequestObserver* o : impl_.observers) o->OnResponseChunk(ctx_, chunk);
                resp_.body.clear();
              }
            }
            if (done) {
              r.keep_client = keep;
              break;
            }
            if (pec) {
              ec = pec;
              break;
            }
          }
          // More is needed from the upstream.
          if (client_gone_) break;
          if (up->error) {
            // A close-delimited body ends with the connection.
            if (up->error == asio::error::eof && uparser_->is_header_done() &&
                uparser_->need_eof()) {
              uparser_->put_eof(pec);
              if (!pec) continue;
            }
            ec = up->error;
            break;
          }
          up->StartRead();
          BeginWait(Wait::kUpstreamRead);
          co_await up->Wait(use_awaitable);
          EndWait();
          if (client_gone_) break;
        }
      }
      if (client_gone_ || r.client_gone) break;
      if (!ec) {
        // Bytes already read past the response (a server that sent more than it framed) make
        // the connection unusable for the next request.
        if (uparser_->keep_alive() && !up->error && up->buffer.size() == 0) {
          up_ = nullptr;
          ParkIdle(std::move(up));
        }
        break;
      }
      // A pooled connection the upstream closed while it was idle fails before any response
      // byte: that request never reached the server, so it is sent once more on a new one.
      const bool stale = ec == asio::error::eof || ec == asio::error::connection_reset ||
                         ec == asio::error::broken_pipe;
      if (reused && stale && attempt == 0 && !uparser_->got_some() && !timed_out_) {
        up->Close();
        continue;
      }
      r.error = timed_out_       ? UpstreamError::kTimeout
                : protocol_error ? UpstreamError::kProtocol
                                 : UpstreamError::kReset;
      break;
    }
    if (client_gone_) r.client_gone = true;
    if (up_ != nullptr) {
      up_->Close();
      up_ = nullptr;
    }
  }

  awaitable<void> Respond(int status, std::string_view content_type, std::string body,
                          unsigned version, bool keep_alive, error_code& ec) {
    head_.assign(version >= 11 ? "HTTP/1.1 "sv : "HTTP/1.0 "sv);
    AppendUint(&head_, static_cast<uint64_t>(status));
    head_.push_back(' ');
    const beast::string_view reason = http::obsolete_reason(http::int_to_status(status));
    head_.append(reason.data(), reason.size()).append("\r\nContent-Type: "sv).append(content_type);
    head_.append("\r\n"sv);
    if (version >= 11 && !keep_alive) head_.append("Connection: close\r\n"sv);
    if (version < 11 && keep_alive) head_.append("Connection: keep-alive\r\n"sv);
    head_.append("Content-Length: "sv);
    AppendUint(&head_, body.size());
    head_.append("\r\n\r\n"sv);
    const Buffers out{asio::buffer(head_), asio::buffer(body)};
    co_await WriteAll(*client_, out, Wait::kClientWrite, ec);
  }

  // Answers an error to a request whose body was not read, then closes gracefully: stop
  // sending, and read and drop what the client still sends (bounded), so that the close does
  // not reset the connection before the client read the answer.
  awaitable<void> RejectAndClose(int status, std::string_view message, std::string_view code) {
    impl_.counters.CountStatus(status);
    error_code ec;
    const unsigned version = req_.version >= 10 ? req_.version : 11;
    co_await Respond(status, "application/json", ErrorBody(message, "invalid_request_error", code),
                     version, false, ec);
    if (ec) co_return;
    client_->socket.shutdown(tcp::socket::shutdown_send, ec);
    size_t total = 0;
    while (!ec && !client_->error && total < (1u << 20)) {
      total += client_->buffer.size();
      client_->buffer.consume(client_->buffer.size());
      client_->StartRead();
      if (!client_->reading) break;
      BeginWait(Wait::kDrain);
      co_await client_->Wait(use_awaitable);
      EndWait();
    }
  }

  ProxyServer::Impl& impl_;
  const ProxyOptions& opt_;
  Worker& worker_;
  std::shared_ptr<Pipe> client_;
  std::shared_ptr<Pipe> up_;  // the upstream connection of the relay in progress
  Timer watchdog_;
  Clock::duration min_limit_;
  Clock::time_point watchdog_expiry_ = Clock::time_point::max();
  Clock::time_point wait_deadline_;
  Wait wait_ = Wait::kNone;
  RequestReader reader_;
  Request& req_ = reader_.request();
  Response resp_;
  std::optional<ResponseParser> uparser_;
  std::string uhead_;  // the upstream request's head
  std::string head_;   // the client response's head
  RequestContext ctx_;
  RelayResult result_;
  bool relaying_ = false;
  bool client_gone_ = false;
  bool timed_out_ = false;
  bool idle_ = true;  // waiting for a request head, nothing of it read yet
  bool closed_ = false;
};

void Pipe::OnRead(error_code ec, size_t n) {
  reading = false;
  buffer.commit(n);
  if (ec) error = ec;
  if (parked) {
    // A pooled connection has nothing to say; whatever it said makes it useless.
    Close();
    return;
  }
  if (waiter_) {
    Waiter waiter = std::move(*waiter_);
    waiter_.reset();
    waiter();
    return;
  }
  if (ec && owner != nullptr) owner->OnClientGone();
}

}  // namespace

awaitable<void> ProxyServer::Impl::Accept() {
  for (;;) {
    Worker& w = *workers[next_worker++ % workers.size()];
    error_code ec;
    Socket socket = co_await acceptor->async_accept(w.ioc.get_executor(),
                                                    asio::redirect_error(use_awaitable, ec));
    if (ec) {
      if (stopping.load() || !acceptor->is_open() || ec == asio::error::operation_aborted) {
        co_return;
      }
      // Out of file descriptors or similar: back off instead of spinning.
      Log(LogLevel::kWarning, "llmtap proxy: accept failed: " + ec.message());
      Timer t(co_await asio::this_coro::executor, std::chrono::milliseconds(50));
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
    s.acceptor = std::make_unique<Acceptor>(s.workers[0]->ioc);
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
  s.stopping = true;
  asio::post(s.workers[0]->ioc, [&s] {
    error_code ignored;
    s.acceptor->close(ignored);
  });
  for (auto& w : s.workers) {
    asio::post(w->ioc, [w = w.get()] {
      for (Session* session : w->sessions) session->CloseIfIdle();
      w->CloseIdleUpstreams();
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
      w->CloseIdleUpstreams();
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
