#include "proxy/session.h"

#include <algorithm>
#include <chrono>
#include <utility>

#include <boost/asio/redirect_error.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/buffers_suffix.hpp>
#include <boost/beast/http/verb.hpp>

#include "net/stream_io.h"
#include "proxy/error_response.h"

namespace llmtap::proxy {

namespace http = boost::beast::http;

Session::Session(ServerShared& shared, Worker& worker, Socket socket)
    : shared_(shared),
      opt_(shared.options),
      worker_(worker),
      client_(std::make_shared<Pipe>(std::move(socket))),
      watchdog_(worker.ioc.get_executor(), shared.limits.shortest()) {
  client_->owner = this;
  error_code ignored;
  client_->socket.non_blocking(true, ignored);
  worker_.sessions.insert(this);
  shared_.counters().client_connections.fetch_add(1, std::memory_order_relaxed);
}

Session::~Session() {
  client_->owner = nullptr;
  client_->Close();
  worker_.sessions.erase(this);
  shared_.counters().client_connections.fetch_sub(1, std::memory_order_relaxed);
}

awaitable<void> Session::Run(ServerShared* shared, Worker* worker, Socket socket) {
  auto session = std::make_shared<Session>(*shared, *worker, std::move(socket));
  Session* s = session.get();
  s->watchdog_.Start(session, [s] { s->OnWaitExpired(); });
  co_await s->Loop();
}

void Session::OnHangUp() {
  if (!relaying_) return;
  client_gone_ = true;
  if (up_ != nullptr) up_->Close();
}

void Session::OnWaitExpired() {
  // Closing the socket fails the operation that waits on it.
  switch (wait_) {
    case Wait::kConnect:
    case Wait::kUpstreamWrite:
    case Wait::kUpstreamRead:
      timed_out_ = true;
      if (up_ != nullptr) up_->Close();
      break;
    default:
      if (client_->socket.is_open()) CountClientTimeout();
      client_->Close();
      break;
  }
}

void Session::CountClientTimeout() {
  TimeoutStage stage = TimeoutStage::kWrite;
  const char* why = "it did not read the answer within --write-timeout-s";
  switch (wait_) {
    case Wait::kHandshake:
      stage = sent_bytes_ ? TimeoutStage::kTlsHandshake : TimeoutStage::kNoBytes;
      break;
    case Wait::kIdle:
      // Nothing of a request read: a keep-alive client after its requests, or one that never
      // sent one (after its TLS handshake, or nothing at all).
      stage = requests_read_ != 0 ? TimeoutStage::kIdle
              : sent_bytes_       ? TimeoutStage::kRequestHead
                                  : TimeoutStage::kNoBytes;
      why = "it sent no request after its TLS handshake within --idle-timeout-s";
      break;
    case Wait::kClientRead:
      stage = reader_.header_done() ? TimeoutStage::kRequestBody : TimeoutStage::kRequestHead;
      why = reader_.header_done() ? "its request body did not arrive within --read-timeout-s"
                                  : "its request head did not arrive within --read-timeout-s";
      break;
    case Wait::kDrain:
      stage = TimeoutStage::kDrain;
      why = "it kept sending after its request was refused";
      break;
    default:
      break;
  }
  if (stage == TimeoutStage::kNoBytes) {
    why = wait_ == Wait::kHandshake ? "it sent nothing within --tls-handshake-timeout-s"
                                    : "it sent nothing within --idle-timeout-s";
  }
  shared_.counters().client_timeouts[static_cast<int>(stage)].fetch_add(1,
                                                                        std::memory_order_relaxed);
  // An idle keep-alive connection's close is routine; a handshake that timed out is logged as a
  // failed handshake (AcceptTls).
  if (stage == TimeoutStage::kIdle || stage == TimeoutStage::kTlsHandshake) return;
  shared_.client_timeout_warning->Hit(NowNs(), [&] {
    return "llmtap proxy: closed a client connection on a timeout (" +
           std::string(TimeoutStageName(stage)) + "): " + why;
  });
}

WaitLimits::WaitLimits(const ProxyOptions& o) {
  auto limit = [&](Wait w, std::chrono::milliseconds ms) {
    // A year stands for "never" without overflowing the time point.
    limits_[static_cast<size_t>(w)] = std::min<Clock::duration>(ms, std::chrono::hours(24 * 365));
  };
  limit(Wait::kIdle, o.idle_timeout);
  limit(Wait::kClientRead, o.read_timeout);
  limit(Wait::kUpstreamRead, o.read_timeout);
  limit(Wait::kClientWrite, o.write_timeout);
  limit(Wait::kUpstreamWrite, o.write_timeout);
  limit(Wait::kDrain, std::min(o.read_timeout, kDrainMax));
  limit(Wait::kConnect, o.connect_timeout);
  limit(Wait::kHandshake, o.tls_handshake_timeout);
  const std::chrono::milliseconds shortest =
      std::min({o.connect_timeout, o.read_timeout, o.write_timeout, o.idle_timeout, kDrainMax,
                o.tls_handshake_timeout});
  shortest_ = std::max(shortest, std::chrono::milliseconds(1));
}

awaitable<void> Session::WriteRest(Pipe& pipe, Buffers buffers, size_t done, Wait wait,
                                   error_code& ec) {
  BeginWait(wait);
  if (pipe.tls) {
    // The TlsSocket took every byte and holds the rest.
    co_await net::FinishWrite(*pipe.tls, ec);
  } else {
    boost::beast::buffers_suffix<Buffers> rest(buffers);
    rest.consume(done);
    co_await asio::async_write(pipe.socket, rest, asio::redirect_error(use_awaitable, ec));
  }
  EndWait();
}

awaitable<void> Session::WriteAll(Pipe& pipe, Buffers buffers, Wait wait, error_code& ec) {
  const size_t n = pipe.WriteNow(buffers, ec);
  if (!ec && (n < asio::buffer_size(buffers) || pipe.WritePending())) {
    co_await WriteRest(pipe, buffers, n, wait, ec);
  }
}

awaitable<void> Session::Loop() {
  bool serve = true;
  if (worker_.server_tls != nullptr) serve = co_await AcceptTls(worker_.server_tls);
  while (serve) {
    if (shared_.Stopping()) break;
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
        idle_since_ = CoarseNow();
        BeginWait(Wait::kIdle);
      } else {
        if (!request_deadline)
          request_deadline = CoarseNow() + shared_.limits.of(Wait::kClientRead);
        BeginWaitUntil(Wait::kClientRead, *request_deadline);
      }
      co_await client_->Wait(use_awaitable);
      EndWait();
      idle_ = false;
    }
    if (state == RequestReader::State::kRejected && !TlsOnPlainPort()) {
      co_await RejectAndClose(reader_.rejection());
    }
    if (state != RequestReader::State::kDone) break;
    ++requests_read_;
    const bool keep_alive = reader_.keep_alive();
    if (!opt_.metrics_path.empty() && req_.method == http::verb::get &&
        req_.target == opt_.metrics_path) {
      shared_.counters().metrics_requests.fetch_add(1, std::memory_order_relaxed);
      const bool keep = keep_alive && !shared_.Stopping();
      co_await Respond(200, "text/plain; version=0.0.4; charset=utf-8", shared_.MetricsText(),
                       req_.version, keep, ec);
      if (ec || !keep) break;
      continue;
    }
    if (!co_await Forward(keep_alive)) break;
  }
  watchdog_.Stop();
  client_->ShutdownSend();
  client_->Close();
}

awaitable<bool> Session::AcceptTls(std::shared_ptr<const net::TlsServerContext> ctx) {
  BeginWait(Wait::kHandshake);
  error_code ec;
  co_await client_->socket.async_wait(Socket::wait_read, asio::redirect_error(use_awaitable, ec));
  unsigned char first = 0;
  size_t n = 0;
  if (!ec) n = client_->socket.receive(asio::buffer(&first, 1), Socket::message_peek, ec);
  if (ec || n == 0) {
    EndWait();
    co_return false;
  }
  sent_bytes_ = true;
  if (first != 0x16) {
    // Not a TLS handshake record: plain HTTP, answered as nginx does.
    EndWait();
    shared_.counters().tls_plain_http_rejected.fetch_add(1, std::memory_order_relaxed);
    static constexpr Rejection kPlainHttp{400, "The plain HTTP request was sent to HTTPS port",
                                          "plain_http_to_https_port"};
    co_await RejectAndClose(kPlainHttp);
    co_return false;
  }
  client_->tls = net::TlsSocket::Server(*ctx, client_->socket);
  if (client_->tls != nullptr) {
    client_->tls->KeepBuffers();
    ec = co_await net::Handshake(*client_->tls);
  }
  EndWait();
  ProxyCounters& c = shared_.counters();
  if (client_->tls == nullptr || ec) {
    if (shared_.Stopping()) co_return false;  // closed by Stop(), not the client's failure
    c.tls_handshake_failures[ProxyCounters::kClientSide].fetch_add(1, std::memory_order_relaxed);
    const std::string why =
        client_->tls == nullptr ? "out of memory"
        : ec == asio::error::operation_aborted || ec == asio::error::bad_descriptor
            ? "the client did not complete the TLS handshake in time"
            : client_->tls->failure();
    shared_.client_tls_warning->Hit(
        NowNs(), [&] { return "llmtap proxy: TLS handshake with a client failed: " + why; });
    client_->tls.reset();
    co_return false;
  }
  c.tls_handshakes[ProxyCounters::kClientSide][client_->tls->resumed() ? 1 : 0].fetch_add(
      1, std::memory_order_relaxed);
  co_return true;
}

bool Session::TlsOnPlainPort() {
  const boost::beast::flat_buffer& b = client_->buffer;
  if (client_->tls != nullptr || ctx_.id != 0 || b.size() == 0 ||
      *static_cast<const unsigned char*>(b.data().data()) != 0x16) {
    return false;
  }
  shared_.tls_on_plain_warning->Hit(NowNs(), [] {
    return std::string(
        "llmtap proxy: TLS handshake on the plain HTTP port (start the proxy with "
        "--tls-cert/--tls-key)");
  });
  return true;
}

awaitable<bool> Session::Forward(bool keep_alive) {
  BeginRequest();
  result_ = RelayResult{};
  client_gone_ = false;
  timed_out_ = false;
  relaying_ = true;
  // The client connection's next read stays posted while the response is relayed: it fails
  // if the client hangs up (OnHangUp), and bytes it brings are the next request.
  if (client_->buffer.size() == 0) client_->StartRead();

  RelayExit r;
  co_await Relay({req_.method == http::verb::head, keep_alive, req_.version}, r);
  relaying_ = false;

  bool keep = r.keep_client;
  if (r.client_gone) {
    result_.client_cancelled = true;
    keep = false;
  } else if (!ctx_.response_started && r.error != UpstreamError::kNone) {
    // Nothing was sent yet: answer for the upstream.
    ErrorAnswer answer = UpstreamErrorAnswer(r.error, r.detail);
    r.status = answer.status;
    keep = keep_alive && !shared_.Stopping();
    error_code ec;
    co_await Respond(answer.status, kErrorContentType, std::move(answer.body), req_.version, keep,
                     ec);
    if (ec) keep = false;
  }
  EndRequest(r);
  co_return keep;
}

void Session::BeginRequest() {
  ctx_.id = shared_.next_request_id.fetch_add(1, std::memory_order_relaxed);
  ctx_.method = req_.method_string;
  ctx_.target = req_.target;
  ctx_.response_started = false;
  ctx_.ResetStates();
  ctx_.request_headers = &req_.headers;
  Notify([&](RequestObserver& o) { o.OnRequestReceived(ctx_, req_.headers); });
  Notify([&](RequestObserver& o) { o.OnBodyComplete(ctx_, req_.body); });
  ctx_.request_headers = nullptr;
  if (shared_.shadow != nullptr) {
    // The mirror starts on this loop once this request is on its way upstream.
    shadow_pair_ = shared_.shadow->Begin(worker_.shadow, worker_.ioc.get_executor(), ctx_,
                                         reader_, shared_.Stopping());
    ctx_.outcome_hold = shadow_pair_.get();
  }

  reader_.BuildUpstreamHead(shared_.upstream_authority, &uhead_);
  Notify([&](RequestObserver& o) { o.OnUpstreamChosen(ctx_, opt_.upstream); });
}

void Session::EndRequest(const RelayExit& r) {
  result_.status = r.status;
  result_.upstream_error = r.error;
  result_.total = Clock::now() - ctx_.start;
  Notify([&](RequestObserver& o) { o.OnDone(ctx_, result_); });
  if (shadow_pair_ != nullptr) {
    shadow_pair_->PrimaryDone(result_);
    shadow_pair_.reset();
    ctx_.outcome_hold = nullptr;
  }
  ctx_.ResetStates();
  if (req_.body.capacity() > (1u << 20)) req_.body = std::string();
  if (resp_.body.capacity() > (1u << 20)) resp_.body = std::string();
}

awaitable<void> Session::Respond(int status, std::string_view content_type, std::string body,
                                 unsigned version, bool keep_alive, error_code& ec) {
  BuildOwnHead(status, content_type, version, keep_alive, body.size(), &head_);
  const Buffers out{asio::buffer(head_), asio::buffer(body)};
  co_await WriteAll(*client_, out, Wait::kClientWrite, ec);
}

// Answers an error to a request whose body was not read, then closes gracefully: stop
// sending, and read and drop what the client still sends (bounded), so that the close does
// not reset the connection before the client read the answer.
awaitable<void> Session::RejectAndClose(const Rejection& rejection) {
  shared_.counters().CountStatus(rejection.status);
  error_code ec;
  const unsigned version = req_.version >= 10 ? req_.version : 11;
  ErrorAnswer answer = RejectionAnswer(rejection);
  co_await Respond(answer.status, kErrorContentType, std::move(answer.body), version, false, ec);
  if (ec) co_return;
  client_->ShutdownSend();
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

}  // namespace llmtap::proxy
