// The sim's connection sessions: reading requests one after another, the idle watchdog, the
// generation that waits (the concurrency queue, token timers, streaming) and the writes. The
// routes and the bytes of the responses are in responses.cc. Runs on the connection's loop.
#include "sim/connection.h"

#include <chrono>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/string.hpp>
#include <boost/beast/http/basic_parser.hpp>
#include <boost/beast/http/error.hpp>
#include <boost/beast/http/read.hpp>

#include "common/http_body_parser.h"

namespace llmtap::sim {

using namespace std::string_view_literals;
namespace beast = boost::beast;
namespace http = beast::http;

namespace {

Clock::duration Seconds(double s) {
  return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(s));
}

class RequestParser : public BodyParser<true, RequestData, true> {
 public:
  explicit RequestParser(RequestData* out) : BodyParser(out) {
    out_->body.clear();
    out_->target.clear();
    out_->expect_continue = false;
  }

 private:
  void on_field_impl(http::field name, beast::string_view, beast::string_view value,
                     error_code&) override {
    if (name == http::field::expect && beast::iequals(value, "100-continue")) {
      out_->expect_continue = true;
    }
  }
};

}  // namespace

Connection::Connection(SimShared* shared, Socket socket)
    : shared_(shared),
      engine_(shared->engine),
      socket_(std::move(socket)),
      timer_(socket_.get_executor()),
      idle_(Seconds(shared->options.idle_timeout_s)),
      watchdog_(socket_.get_executor(), idle_) {}

void Connection::StartWatchdog() {
  watchdog_.Start(shared_from_this(), [this] {
    error_code ignored;
    socket_.close(ignored);  // fails the pending read or write
  });
}

awaitable<void> Connection::Run() {
  for (;;) {
    RequestParser parser(&request_);
    parser.body_limit(shared_->options.max_body_bytes);
    parser.header_limit(64 * 1024);
    error_code ec;
    BeginIdle();
    // async_read_some in a loop (what async_read does) so that a client waiting for
    // "100 Continue" after its header gets it.
    bool sent_continue = false;
    do {
      co_await http::async_read_some(socket_, buffer_, parser,
                                     asio::redirect_error(use_awaitable, ec));
      if (!ec && !parser.is_done() && parser.is_header_done() && request_.expect_continue &&
          !sent_continue) {
        sent_continue = true;
        co_await asio::async_write(socket_, asio::buffer("HTTP/1.1 100 Continue\r\n\r\n"sv),
                                   asio::redirect_error(use_awaitable, ec));
      }
    } while (!ec && !parser.is_done());
    EndIdle();
    if (ec) {
      bool answered = false;
      keep_alive_ = false;
      if (ec == http::error::body_limit) {
        RespondError(413, "The request body is larger than this server accepts.", "");
        answered = true;
      } else if (ec.category() == http::make_error_code(http::error::bad_target).category() &&
                 ec != http::error::end_of_stream && ec != http::error::partial_message) {
        RespondError(400, "Malformed HTTP request.", "");
        answered = true;
      }
      if (answered) {
        co_await asio::async_write(socket_, asio::buffer(out_),
                                   asio::redirect_error(use_awaitable, ec));
        co_await LingeringClose();
      }
      break;
    }
    version_ = request_.version;
    keep_alive_ = parser.keep_alive();
    // Most requests are answered without a nested coroutine: Handle() builds the response and
    // it is written here. Only generation that has to wait (token timers, the concurrency
    // queue, streaming) runs as a coroutine of its own.
    bool ok = true;
    if (Handle()) ok = co_await GenerateTimed();
    if (ok && !out_.empty()) {
      BeginIdle();
      co_await asio::async_write(socket_, asio::buffer(out_),
                                 asio::redirect_error(use_awaitable, ec));
      EndIdle();
      ok = !ec;
      out_.clear();
    }
    if (!ok || !keep_alive_) break;
    if (out_.capacity() > 256 * 1024) out_ = std::string();
    if (buffer_.capacity() > 256 * 1024) buffer_.shrink_to_fit();
    if (request_.body.capacity() > 256 * 1024) request_.body = std::string();
  }
  error_code ignored;
  socket_.shutdown(tcp::socket::shutdown_send, ignored);
  watchdog_.Stop();
}

awaitable<void> Connection::LingeringClose() {
  error_code ec;
  socket_.shutdown(tcp::socket::shutdown_send, ec);
  char sink[4096];
  size_t total = 0;
  BeginIdle();
  while (!ec && total < (1u << 20)) {
    total += co_await socket_.async_read_some(asio::buffer(sink),
                                              asio::redirect_error(use_awaitable, ec));
  }
  EndIdle();
}

bool Connection::ParseGeneration(Endpoint ep) {
  if (ep == Endpoint::kResponses) return ParseResponses();
  if (ep == Endpoint::kMessages) return ParseMessages();
  RequestError error;
  if (ParseRequest(ep, request_.body, shared_->limits, &sim_request_, &error)) return true;
  RespondError(400, error.message, error.param);
  return false;
}

bool Connection::Prepare(Endpoint ep) {
  if (!ParseGeneration(ep)) return false;
  if (!shared_->options.Serves(sim_request_.model)) {
    // vLLM's answer, word for word, to a model it does not serve.
    RespondError(404, "The model `" + sim_request_.model + "` does not exist.", "model");
    return false;
  }
  endpoint_ = ep;
  chunked_ = net::StreamFraming(version_) == net::BodyFraming::kChunked;
  if (sim_request_.stream) {
    // Headers go out at once, as vLLM's do, before any queueing. An HTTP/1.0 client's stream
    // ends with the connection (AppendStreamHead turns keep_alive_ off).
    AppendStreamHead();
    return true;
  }
  if (!shared_->limiter.unlimited()) return true;
  // Non-streaming without a queue: plan now; answer now if the plan takes no time (such a
  // request is never seen running).
  engine_.MakePlan(sim_request_, &plan_);
  BuildPrefix(ep, sim_request_, plan_, false);
  const double total_s = plan_.prefill_s + plan_.decode_s;
  if (total_s > 0) {
    engine_.metrics().running.fetch_add(1, std::memory_order_relaxed);
    planned_ = true;  // GenerateTimed() waits until due_, then counts it finished
    due_ = Clock::now() + Seconds(total_s);
    return true;
  }
  AppendWholeResponse(plan_);
  engine_.RecordFinished(plan_);
  return false;
}

awaitable<bool> Connection::Flush() {
  if (out_.empty()) co_return true;
  error_code ec;
  BeginIdle();
  co_await asio::async_write(socket_, asio::buffer(out_), asio::redirect_error(use_awaitable, ec));
  EndIdle();
  out_.clear();
  co_return !ec;
}

awaitable<bool> Connection::GenerateTimed() {
  SimMetrics& m = engine_.metrics();
  const bool stream = sim_request_.stream;
  if (stream && !co_await Flush()) co_return false;  // the headers

  bool held_slot = false;
  if (!planned_) {
    if (!shared_->limiter.unlimited()) {
      m.waiting.fetch_add(1, std::memory_order_relaxed);
      const bool admitted = co_await shared_->limiter.Acquire();
      m.waiting.fetch_sub(1, std::memory_order_relaxed);
      if (!admitted) co_return false;
      held_slot = true;
    }
    m.running.fetch_add(1, std::memory_order_relaxed);
    engine_.MakePlan(sim_request_, &plan_);
    BuildPrefix(endpoint_, sim_request_, plan_, stream);
    due_ = Clock::now() + Seconds(plan_.prefill_s);
  }
  planned_ = false;
  struct Slot {
    SimShared* s;
    bool held;
    ~Slot() {
      s->engine.metrics().running.fetch_sub(1, std::memory_order_relaxed);
      if (held) s->limiter.Release();
    }
  } slot{shared_, held_slot};
  const Plan& plan = plan_;
  error_code ec;

  if (!stream) {
    if (due_ > Clock::now()) {
      timer_.expires_at(due_);
      co_await timer_.async_wait(asio::redirect_error(use_awaitable, ec));
    }
    AppendWholeResponse(plan);
    engine_.RecordFinished(plan);
    co_return true;
  }

  // Streaming: one event per choice per engine step, each step at its due time. Events already
  // due are written together. A chat stream opens with every choice's role event, as vLLM's; a
  // responses stream with response.created, response.in_progress and the output item's opening
  // events; a messages stream with message_start, content_block_start and ping.
  const TimingModel& timing = engine_.timing();
  const auto n = static_cast<uint32_t>(plan.choices.size());
  for (size_t i = 0, steps = plan.steps(); i < steps; ++i) {
    if (i > 0) due_ += Seconds(timing.StepSeconds(plan_.step_rng));
    if (due_ > Clock::now()) {
      if (!co_await Flush()) break;
      timer_.expires_at(due_);
      co_await timer_.async_wait(asio::redirect_error(use_awaitable, ec));
    }
    if (i == 0 && endpoint_ == Endpoint::kChatCompletions) {
      for (uint32_t c = 0; c < n; ++c) AppendRoleEvent(plan, c);
    } else if (i == 0 && endpoint_ == Endpoint::kResponses) {
      AppendResponsesStart(plan);
    } else if (i == 0 && endpoint_ == Endpoint::kMessages) {
      AppendMessagesStart(plan);
    }
    for (uint32_t c = 0; c < n; ++c) {
      const std::vector<uint32_t>& ends = plan.choices[c].gen.step_ends;
      if (i >= ends.size()) continue;  // this choice has ended
      AppendDelta(plan, c, i == 0 ? 0 : ends[i - 1], ends[i], i + 1 == ends.size());
    }
    if (i + 1 == steps) {
      AppendStreamEnd(plan);
      engine_.RecordFinished(plan);
      co_return true;  // Run() writes the rest
    }
  }
  m.requests_aborted.fetch_add(1, std::memory_order_relaxed);
  co_return false;
}

awaitable<void> RunConnection(SimShared* shared, Socket socket) {
  SimMetrics& m = shared->engine.metrics();
  m.open_connections.fetch_add(1, std::memory_order_relaxed);
  struct Gauge {
    SimMetrics& m;
    ~Gauge() { m.open_connections.fetch_sub(1, std::memory_order_relaxed); }
  } gauge{m};
  auto c = std::make_shared<Connection>(shared, std::move(socket));
  c->StartWatchdog();
  co_await c->Run();
}

}  // namespace llmtap::sim
