// The Runner's exchanges (runner_internal.h): one request written on a keep-alive connection (or
// a new one) and its response read and measured as it streams, and the sweep that times them out
// or cancels them.
#include <limits>

#include <cstdio>

#include <boost/asio/redirect_error.hpp>
#include <boost/beast/core/string.hpp>
#include <boost/beast/http/basic_parser.hpp>

#include "net/stream_io.h"
#include "replay/runner_internal.h"

namespace llmtap::replay::internal {

namespace http = beast::http;

namespace {

// --responses-chain inline: the most of a response's output kept for the next turn's input
// (text, tool calls); an answer cut there is not inlined.
constexpr size_t kMaxInlinedOutputBytes = size_t{4} << 20;

// Parses a response head and hands every piece of body, timed, to the request's meter; with a
// BodyTiming (a pair's side), also the time of each read that brought body bytes.
class ResponseParser final : public http::basic_parser<false>, public net::ReadObserver {
 public:
  ResponseParser(ResponseMeter* meter, api::DocumentReader* reader,
                 shadow::BodyTiming* timing = nullptr)
      : meter_(meter), reader_(reader), timing_(timing) {}

  // A read brought bytes (net::ReadHttpMessage): body in it is timed as arriving now.
  void OnRead() override {
    read_at_ = Clock::now();
    read_timed_ = false;
  }

 private:
  using string_view = beast::string_view;
  void on_request_impl(http::verb, string_view, string_view, int, error_code&) override {}
  void on_response_impl(int code, string_view, int, error_code&) override { status_ = code; }
  void on_field_impl(http::field name, string_view, string_view value, error_code&) override {
    if (name == http::field::content_type) {
      sse_ = value.size() >= 17 && beast::iequals(value.substr(0, 17), "text/event-stream");
    }
  }
  void on_header_impl(error_code&) override { meter_->OnHead(status_, sse_); }
  void on_body_init_impl(const boost::optional<std::uint64_t>&, error_code&) override {}
  size_t on_body_impl(string_view body, error_code&) override {
    OnBody(body);
    return body.size();
  }
  void on_chunk_header_impl(std::uint64_t, string_view, error_code&) override {}
  size_t on_chunk_body_impl(std::uint64_t, string_view body, error_code&) override {
    OnBody(body);
    return body.size();
  }
  void on_finish_impl(error_code&) override {}

  void OnBody(string_view body) {
    if (timing_ != nullptr && !read_timed_ && !body.empty()) {
      timing_->OnBody(read_at_);
      read_timed_ = true;
    }
    meter_->OnBody({body.data(), body.size()}, Clock::now(), reader_);
  }

  ResponseMeter* meter_;
  api::DocumentReader* reader_;
  shadow::BodyTiming* timing_;
  int status_ = 0;
  bool sse_ = false;
  // Bytes a kept-alive connection held before the first read count as arriving at the start.
  Clock::time_point read_at_ = Clock::now();
  bool read_timed_ = false;
};

}  // namespace

std::string Runner::Head(Side side, api::Endpoint endpoint, size_t body_size) const {
  std::string head = peers_[side]->head[static_cast<size_t>(endpoint)];
  head.append(std::to_string(body_size)).append("\r\n\r\n");
  return head;
}

Start Runner::Prepare(Worker& w, Side side, const TraceRequest& req, std::string_view body) {
  Start start;
  start.sent = Clock::now();
  start.head = Head(side, req.endpoint, body.size());
  std::vector<std::unique_ptr<Conn>>& idle = w.pools[side].idle;
  if (idle.empty()) return start;
  start.conn = std::move(idle.back());
  idle.pop_back();
  const std::array<asio::const_buffer, 2> pieces{asio::buffer(start.head), asio::buffer(body)};
  Conn& conn = *start.conn;
  if (conn.tls) {
    // Takes everything; what the socket could not take yet stays pending in the TlsSocket.
    start.written = conn.tls->WriteNow(pieces, start.write_error);
  } else {
    conn.socket.non_blocking(true, start.write_error);
    if (!start.write_error) start.written = conn.socket.write_some(pieces, start.write_error);
  }
  if (start.write_error == asio::error::would_block) start.write_error = {};
  return start;
}

awaitable<error_code> Runner::Connect(Worker& w, Side side, Conn& conn, ErrorKind* kind) {
  Peer& peer = *peers_[side];
  error_code ec;
  *kind = ErrorKind::kConnect;
  co_await conn.socket.async_connect(peer.endpoint, asio::redirect_error(use_awaitable, ec));
  if (ec) co_return ec;
  conn.socket.set_option(tcp::no_delay(true), ec);
  if (peer.tls == nullptr) co_return error_code();
  *kind = ErrorKind::kTls;
  ec = co_await net::ClientHandshake(conn.socket, *peer.tls, peer.tls_host,
                                     &w.pools[side].tls_session, &conn.tls);
  // The first failure in words, once (RunPlan's pre-flight check passed, so this is news).
  if (ec && conn.tls != nullptr && conn.socket.is_open() && !peer.tls_failure_told.exchange(true)) {
    std::fprintf(stderr, "llmtap replay: TLS handshake with %s failed: %s\n", peer.tls_host.c_str(),
                 conn.tls->failure().c_str());
  }
  co_return ec;
}

awaitable<Runner::Transfer> Runner::Send(Worker& w, Side side, Start& start,
                                         const std::string& head, std::string_view body,
                                         api::Endpoint endpoint, bool keep_answer, bool keep_output,
                                         ResponseMeter& meter, shadow::BodyTiming* timing,
                                         Active& act) {
  Transfer t;
  const size_t total = head.size() + body.size();
  std::optional<shadow::BodyTiming> fresh_timing;  // a pair's side: restarted on a retry
  if (timing != nullptr) fresh_timing = *timing;
  for (int attempt = 0; attempt < 2 && !act.cancelled && !act.timed_out; ++attempt) {
    meter.Begin(start.sent, endpoint);
    if (keep_answer) meter.KeepAnswer();
    if (timing != nullptr) {
      meter.KeepOutput(shadow::kMaxCompareBytes);
      *timing = *fresh_timing;
    } else if (keep_output) {
      meter.KeepOutput(kMaxInlinedOutputBytes);
    }
    std::unique_ptr<Conn> conn = std::move(start.conn);
    const bool reused = conn != nullptr;
    size_t written = 0;
    error_code ec;
    if (reused) {
      act.conn = conn.get();
      written = start.written;
      ec = start.write_error;
    } else {
      conn = std::make_unique<Conn>(w.ioc.get_executor());
      act.conn = conn.get();
      ErrorKind kind;
      ec = co_await Connect(w, side, *conn, &kind);
      if (ec) {
        t.transport = kind;
        t.ec = ec;
        act.conn = nullptr;
        break;
      }
    }
    if (!ec && conn->tls && conn->tls->write_pending()) {
      co_await net::FinishWrite(*conn->tls, ec);
    }
    if (!ec && written < total) {
      std::array<asio::const_buffer, 2> rest{asio::buffer(head), asio::buffer(body)};
      if (written < head.size()) {
        rest[0] += written;
      } else {
        rest[0] = asio::const_buffer();
        rest[1] += written - head.size();
      }
      co_await net::WriteAll(conn->socket, conn->tls.get(), rest, ec);
    }
    ResponseParser parser(&meter, &w.reader, timing);
    parser.body_limit(std::numeric_limits<std::uint64_t>::max());
    parser.header_limit(64 * 1024);
    if (!ec) {
      co_await net::ReadHttpMessage(conn->socket, conn->tls.get(), conn->buffer, parser, ec,
                                    timing != nullptr ? &parser : nullptr);
    }
    act.conn = nullptr;
    if (!ec) {
      t.complete = true;
      if (parser.keep_alive() && !cancel_.load(std::memory_order_relaxed)) {
        w.pools[side].idle.push_back(std::move(conn));
      }
      break;
    }
    t.ec = ec;
    // A kept-alive connection the server closed while idle fails before any response byte:
    // send again on a new one.
    if (reused && !parser.got_some() && conn->buffer.size() == 0 &&
        !(conn->tls && conn->tls->HasPending())) {
      continue;
    }
    break;
  }
  co_return t;
}

awaitable<void> Runner::Exchange(Worker& w, Job job, Start start, std::shared_ptr<PairState> pair) {
  const TraceRequest& req = job.due.request;
  RequestResult r = ResultOf(job.due);
  r.held_ms = job.held_ms;
  const Clock::time_point sent = start.sent;
  r.sent = true;
  r.sent_ms = Ms(sent - t0_);
  sent_.fetch_add(1, std::memory_order_relaxed);

  Active act;
  act.deadline = sent + timeout_;
  act.cancelled = cancel_.load(std::memory_order_relaxed);
  w.active.insert(&act);
  const std::string head = std::move(start.head);
  ResponseMeter meter;
  const Transfer t = co_await Send(w, kPrimary, start, head, req.body, req.endpoint,
                                   req.turn_begin != std::string::npos, KeepsOutput(req), meter,
                                   pair ? &pair->primary.timing : nullptr, act);
  const Clock::time_point done = Clock::now();
  w.active.erase(&act);
  r.done_ms = Ms(done - t0_);
  if (t.complete) {
    meter.Finish(true, done, req.body, tok_, &w.reader, &r);
    NoteRefusal(req, meter, &r);
  } else {
    r.status = meter.status();
    r.error = act.cancelled   ? ErrorKind::kCancelled
              : act.timed_out ? ErrorKind::kTimeout
                              : t.transport;
  }
  (r.ok() ? ok_ : failed_).fetch_add(1, std::memory_order_relaxed);
  const double ended_ms = r.done_ms;
  // The answer goes into the session's history before the next turn can be released.
  if (req.turn_begin != std::string::npos) {
    history_.Answered(req, job.history_turn, r.ok() ? std::string_view(meter.Answer()) : "",
                      ended_ms);
  }
  // The id the target gave this response, for the rows continuing it (before the next turn of
  // its chain is released).
  if (!req.response_id.empty()) {
    response_ids_.Answered(req.response_id, r.ok() ? meter.response_id() : std::string(), ended_ms);
  }
  if (inline_chains_ && !req.response_id.empty()) {
    inliner_.Answered(req.response_id, KeepsOutput(req) ? OutputOf(r, meter) : nullptr, ended_ms);
  }
  if (pair) {
    pair->primary.timing.OnEnd(done);
    meter.TakeOutcome(PairErrorName(r.error, t.ec), &pair->primary.outcome);
    pair->primary_ended_ms = ended_ms;
  }
  // Published before Finished, so that every result is there once the run is seen done.
  Publish(std::move(r));
  // A pair ends with its second side: the next turn of a session and the row's slot wait for it.
  if (pair) {
    SideEnded(w, pair);
    co_return;
  }
  // The next turn is counted in outstanding_ before this one leaves it.
  if (causal_ && !req.session_id.empty()) {
    TurnEnded(w, req.session_id, job.due.captured_end_ms, ended_ms);
  }
  if (!closed_loop_) Finished(w);
}

void Runner::NoteRefusal(const TraceRequest& req, const ResponseMeter& meter, RequestResult* r) {
  if (r->status != 400 || req.previous_response_id.empty() ||
      meter.error_body().find("previous_response_id") == std::string_view::npos) {
    return;
  }
  r->previous_id_refused = true;
  if (!inline_chains_ && !refusal_told_.exchange(true)) {
    std::fprintf(stderr,
                 "llmtap replay: the target refused previous_response_id (HTTP 400): it keeps no "
                 "responses; replay with --responses-chain inline to send each turn with the "
                 "conversation so far\n");
  }
}

awaitable<void> Runner::Sweep(Worker& w) {
  error_code ec;
  while (!w.stopping) {
    w.sweep->expires_after(std::chrono::milliseconds(20));
    co_await w.sweep->async_wait(asio::redirect_error(use_awaitable, ec));
    const Clock::time_point now = Clock::now();
    const bool cancel = cancel_.load(std::memory_order_relaxed);
    for (Active* a : w.active) {
      if (cancel && !a->cancelled) {
        a->cancelled = true;
        a->Abort();
      } else if (now >= a->deadline && !a->timed_out && !a->cancelled) {
        a->timed_out = true;
        a->Abort();
      }
    }
  }
}

}  // namespace llmtap::replay::internal
