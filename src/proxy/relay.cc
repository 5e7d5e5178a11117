// The relay of one request to the upstream, as named phases (Pingora's proxy phases are the
// model): Connect (a pooled connection, or a new one), send the request, RelayResponse, and
// EndAttempt (park the connection, retry once on a new one, or name the failure).
#include <chrono>
#include <string_view>
#include <utility>

#include <boost/asio/redirect_error.hpp>

#include "net/stream_io.h"
#include "proxy/session.h"

namespace llmtap::proxy {

awaitable<void> Session::Relay(Exchange x, RelayExit& r) {
  for (int attempt = 0;; ++attempt) {
    Attempt a;
    a.up = attempt == 0 ? worker_.upstreams.Take(ctx_.start, opt_.idle_timeout) : nullptr;
    a.reused = a.up != nullptr;
    if (a.reused) {
      up_ = a.up;
      shared_.counters().upstream_reuses.fetch_add(1, std::memory_order_relaxed);
    } else {
      a.up = co_await Connect(r);
      if (a.up == nullptr) break;
    }
    // The request: written at once, waiting only when the socket buffer is full.
    const Buffers request{asio::buffer(uhead_), asio::buffer(req_.body)};
    const size_t sent = a.up->WriteNow(request, a.ec);
    if (!a.ec && (sent < uhead_.size() + req_.body.size() || a.up->WritePending())) {
      co_await WriteRest(*a.up, request, sent, Wait::kUpstreamWrite, a.ec);
    }
    if (!a.ec && shadow_pair_ != nullptr) shadow_pair_->PrimarySent(Clock::now());
    NewResponseParser(x.head_request);
    if (!a.ec && !client_gone_) co_await RelayResponse(a, x, r);
    if (!EndAttempt(a, attempt, r)) break;
  }
  if (client_gone_) r.client_gone = true;
  if (up_ != nullptr) {
    up_->Close();
    up_ = nullptr;
  }
}

awaitable<std::shared_ptr<Pipe>> Session::Connect(RelayExit& r) {
  auto up = std::make_shared<Pipe>(worker_.ioc.get_executor());
  up_ = up;
  shared_.counters().upstream_connects.fetch_add(1, std::memory_order_relaxed);
  error_code ec;
  BeginWait(Wait::kConnect);
  ec = co_await ConnectFirst(*up, shared_.upstream_endpoints,
                             [this] { return client_gone_ || timed_out_; });
  const bool connected = !ec;
  if (connected && shared_.upstream_tls) ec = co_await UpstreamHandshake(*up);
  EndWait();
  if (client_gone_) co_return nullptr;
  if (ec && connected) {
    UpstreamHandshakeFailed(*up, r);
    co_return nullptr;
  }
  if (ec) {
    r.error = timed_out_ ? UpstreamError::kTimeout : UpstreamError::kConnect;
    co_return nullptr;
  }
  co_return up;
}

awaitable<error_code> Session::UpstreamHandshake(Pipe& up) {
  const error_code ec = co_await net::ClientHandshake(
      up.socket, *shared_.upstream_tls, shared_.upstream_host, &worker_.upstream_session, &up.tls);
  if (!ec) {
    up.tls->KeepBuffers();
    shared_.counters()
        .tls_handshakes[ProxyCounters::kUpstreamSide][up.tls->resumed() ? 1 : 0]
        .fetch_add(1, std::memory_order_relaxed);
  }
  co_return ec;
}

void Session::UpstreamHandshakeFailed(const Pipe& up, RelayExit& r) {
  shared_.counters().tls_handshake_failures[ProxyCounters::kUpstreamSide].fetch_add(
      1, std::memory_order_relaxed);
  if (timed_out_) {
    r.error = UpstreamError::kTimeout;
    r.detail = "TLS handshake with upstream timed out";
  } else {
    r.error = UpstreamError::kTls;
    r.detail = up.tls != nullptr ? up.tls->failure() : "out of memory";
  }
  shared_.upstream_tls_warning->Hit(NowNs(), [&] {
    return "llmtap proxy: TLS handshake with upstream " + shared_.upstream_host +
           " failed: " + r.detail;
  });
}

awaitable<void> Session::RelayResponse(Attempt& a, const Exchange& x, RelayExit& r) {
  Pipe& up = *a.up;
  error_code& ec = a.ec;
  up.StartRead();
  Framing f;
  for (;;) {
    error_code pec;
    uparser_->Feed(up.buffer, pec);
    // Interim responses (103 Early Hints, an unasked 100) are not relayed; the final response
    // follows on the same connection.
    while (!pec && uparser_->is_done() && resp_.status / 100 == 1 && resp_.status != 101) {
      NewResponseParser(x.head_request);
      uparser_->Feed(up.buffer, pec);
    }
    // A response head that does not parse is a protocol error (502 to the client). A body that
    // stops parsing is cut like a reset: what was parsed before the error (from this read too)
    // is relayed, then the stream ends unterminated.
    if (pec && !uparser_->is_header_done()) {
      a.protocol_error = true;
      SpeaksTls(up, r);
      ec = pec;
      co_return;
    }
    if (uparser_->is_header_done()) {
      const bool done = uparser_->is_done();
      if (!f.head_sent) StartResponse(x, r, f);
      const size_t n = resp_.body.size();
      if (!f.head_sent || n > 0 || (done && f.chunked)) {
        char size_line[24];
        Buffers out;
        const size_t bytes = FrameClientWrite(f, done, size_line, out);
        const size_t written = client_->WriteNow(out, ec);
        if (!ec && (written < bytes || client_->WritePending())) {
          co_await WriteRest(*client_, out, written, Wait::kClientWrite, ec);
        }
        f.head_sent = true;
        if (ec) {
          r.client_gone = true;
          co_return;
        }
        if (n > 0) BodyRelayed(n);
      }
      if (done) {
        r.keep_client = f.keep;
        co_return;
      }
      if (pec) {
        ec = pec;
        co_return;
      }
    }
    // More is needed from the upstream.
    if (client_gone_) co_return;
    if (up.error) {
      // A close-delimited body ends with the connection.
      if (up.error == asio::error::eof && uparser_->is_header_done() && uparser_->need_eof()) {
        uparser_->put_eof(pec);
        if (!pec) continue;
      }
      // A TLS server that got plain HTTP may answer with a short alert and close: too short
      // for the parser to fail on.
      if (!uparser_->is_header_done() && SpeaksTls(up, r)) a.protocol_error = true;
      ec = up.error;
      co_return;
    }
    up.StartRead();
    BeginWait(Wait::kUpstreamRead);
    co_await up.Wait(use_awaitable);
    EndWait();
    if (client_gone_) co_return;
  }
}

bool Session::SpeaksTls(const Pipe& up, RelayExit& r) {
  // A TLS record (an alert, 0x15, or a handshake, 0x16) where a response head should be.
  const auto* first = static_cast<const unsigned char*>(up.buffer.data().data());
  if (up.buffer.size() == 0 || (first[0] != 0x15 && first[0] != 0x16)) return false;
  r.detail = "upstream speaks TLS: use https://";
  return true;
}

void Session::StartResponse(const Exchange& x, RelayExit& r, Framing& f) {
  r.status = resp_.status;
  const bool body_expected =
      !x.head_request && r.status >= 200 && r.status != 204 && r.status != 304;
  f.keep = x.client_keep_alive && !shared_.Stopping();
  if (body_expected && !uparser_->content_length()) {
    // Chunked or close-delimited upstream bodies go to HTTP/1.1 clients chunked.
    if (x.client_version >= 11) {
      f.chunked = true;
    } else {
      f.keep = false;
    }
  }
  BuildRelayedHead(resp_, x.client_version, f.keep, f.chunked, &head_);
  ctx_.response_started = true;
  Notify([&](RequestObserver& o) { o.OnResponseHeaders(ctx_, r.status, resp_.headers); });
  if (shadow_pair_ != nullptr) shadow_pair_->PrimaryHeaders(resp_.headers);
}

size_t Session::FrameClientWrite(const Framing& f, bool done, char (&size_line)[24],
                                 Buffers& out) const {
  const size_t n = resp_.body.size();
  size_t count = 0;
  if (!f.head_sent) out[count++] = asio::buffer(head_);
  if (n > 0) {
    if (f.chunked) {
      const std::string_view line = ChunkSizeLine(n, size_line);
      out[count++] = asio::buffer(line.data(), line.size());
    }
    out[count++] = asio::buffer(resp_.body);
  }
  if (f.chunked) {
    const std::string_view tail = ChunkTail(n > 0, done);
    out[count++] = asio::buffer(tail.data(), tail.size());
  }
  return asio::buffer_size(out);
}

void Session::BodyRelayed(size_t n) {
  if (result_.response_body_bytes == 0) result_.ttft = Clock::now() - ctx_.start;
  result_.response_body_bytes += n;
  const std::string_view chunk(resp_.body.data(), n);
  Notify([&](RequestObserver& o) { o.OnResponseChunk(ctx_, chunk); });
  if (shadow_pair_ != nullptr) shadow_pair_->PrimaryChunk(chunk);
  resp_.body.clear();
}

bool Session::EndAttempt(Attempt& a, int attempt, RelayExit& r) {
  if (client_gone_ || r.client_gone) return false;
  if (!a.ec) {
    // Bytes already read past the response (a server that sent more than it framed) make the
    // connection unusable for the next request.
    if (uparser_->keep_alive() && !a.up->error && !a.up->HasBufferedInput()) {
      up_ = nullptr;
      if (shared_.Stopping()) {
        a.up->Close();
      } else {
        worker_.upstreams.Park(std::move(a.up), opt_.max_idle_upstream_per_thread);
      }
    }
    return false;
  }
  // A pooled connection the upstream closed while it was idle fails before any response byte:
  // that request never reached the server, so it is sent once more on a new one.
  const bool stale = a.ec == asio::error::eof || a.ec == asio::error::connection_reset ||
                     a.ec == asio::error::broken_pipe;
  if (a.reused && stale && attempt == 0 && !uparser_->got_some() && !timed_out_) {
    a.up->Close();
    return true;
  }
  r.error = timed_out_         ? UpstreamError::kTimeout
            : a.protocol_error ? UpstreamError::kProtocol
                               : UpstreamError::kReset;
  return false;
}

void Session::NewResponseParser(bool head_request) {
  uparser_.emplace(&resp_, opt_.max_header_bytes, head_request);
}

}  // namespace llmtap::proxy
