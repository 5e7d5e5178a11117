#include "sim/server.h"

#include <time.h>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <deque>
#include <mutex>
#include <thread>
#include <vector>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/string.hpp>
#include <boost/beast/http/basic_parser.hpp>
#include <boost/beast/http/error.hpp>
#include <boost/beast/http/read.hpp>

#include "common/asio_types.h"
#include "common/http_body_parser.h"
#include "sim/engine.h"
#include "sim/request.h"
#include "sim/text.h"

namespace llmtap::sim {

using namespace std::string_view_literals;

using namespace llmtap::asio_types;
namespace beast = boost::beast;
namespace http = beast::http;

namespace {

// The idle watchdog needs only millisecond precision: the coarse clock is cheaper to read and
// shares steady_clock's epoch (both are CLOCK_MONOTONIC based on Linux).
Clock::time_point CoarseNow() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
  return Clock::time_point(std::chrono::seconds(ts.tv_sec) + std::chrono::nanoseconds(ts.tv_nsec));
}

Clock::duration Seconds(double s) {
  return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(s));
}

// A FIFO counting semaphore for coroutines on several event loops. A waiter parks on a timer
// that never expires; Release() hands the slot over and cancels that timer on the waiter's own
// loop, so the waiter's timer is only ever touched by its own thread.
class ConcurrencyLimiter {
 public:
  explicit ConcurrencyLimiter(uint32_t limit) : limit_(limit) {}

  // True once a slot is held (release it with Release()); false if Close() was called.
  awaitable<bool> Acquire() {
    if (limit_ == 0) co_return true;
    Executor ex = co_await asio::this_coro::executor;
    Timer timer(ex, Clock::time_point::max());
    Waiter w{&timer, ex, false};
    bool queued = false;
    {
      std::lock_guard lock(mu_);
      if (!closed_) {
        if (in_use_ < limit_) {
          ++in_use_;
        } else {
          waiters_.push_back(&w);
          queued = true;
        }
      }
    }
    if (!queued) co_return !closed();
    error_code ec;
    co_await timer.async_wait(asio::redirect_error(use_awaitable, ec));
    std::lock_guard lock(mu_);
    if (w.granted) co_return true;
    std::erase(waiters_, &w);
    co_return false;
  }

  bool unlimited() const { return limit_ == 0; }

  void Release() {
    if (limit_ == 0) return;
    std::lock_guard lock(mu_);
    if (!closed_ && !waiters_.empty()) {
      Waiter* w = waiters_.front();
      waiters_.pop_front();
      w->granted = true;  // the slot passes to w; in_use_ is unchanged
      asio::post(w->ex, [t = w->timer] { t->cancel(); });
      return;
    }
    --in_use_;
  }

  // After Close(), nothing is woken any more: the event loops are about to go away.
  void Close() {
    std::lock_guard lock(mu_);
    closed_ = true;
    waiters_.clear();
  }

 private:
  struct Waiter {
    Timer* timer;
    Executor ex;
    bool granted;
  };
  bool closed() {
    std::lock_guard lock(mu_);
    return closed_;
  }
  const uint32_t limit_;
  std::mutex mu_;
  uint32_t in_use_ = 0;
  bool closed_ = false;
  std::deque<Waiter*> waiters_;
};

struct Worker {
  // One thread runs this loop and every socket on it is only ever used from that thread, so the
  // per-socket reactor locks can go (UNSAFE_IO); posting from other threads stays safe.
  asio::io_context ioc{BOOST_ASIO_CONCURRENCY_HINT_UNSAFE_IO};
  // Keeps run() going while this loop has no connection yet.
  asio::executor_work_guard<asio::io_context::executor_type> work = asio::make_work_guard(ioc);
  std::thread thread;
};

std::string_view StatusLine(int status) {
  switch (status) {
    case 200:
      return "HTTP/1.1 200 OK\r\n";
    case 400:
      return "HTTP/1.1 400 Bad Request\r\n";
    case 404:
      return "HTTP/1.1 404 Not Found\r\n";
    case 405:
      return "HTTP/1.1 405 Method Not Allowed\r\n";
    case 413:
      return "HTTP/1.1 413 Payload Too Large\r\n";
    default:
      return "HTTP/1.1 500 Internal Server Error\r\n";
  }
}

// Frames `payload` as one HTTP/1.1 chunk (or raw, for HTTP/1.0 clients).
void AppendChunk(std::string* out, std::string_view payload, bool chunked) {
  if (chunked) {
    static constexpr char kHex[] = "0123456789abcdef";
    char buf[16];
    char* p = buf + sizeof(buf);
    size_t n = payload.size();
    do {
      *--p = kHex[n & 15];
      n >>= 4;
    } while (n != 0);
    out->append(p, static_cast<size_t>(buf + sizeof(buf) - p));
    out->append("\r\n"sv);
  }
  out->append(payload);
  if (chunked) out->append("\r\n"sv);
}

void AppendUsage(std::string* out, const Plan& plan) {
  out->append("\"usage\":{\"prompt_tokens\":"sv);
  AppendUint(out, plan.prompt_tokens);
  out->append(",\"total_tokens\":"sv);
  AppendUint(out, uint64_t{plan.prompt_tokens} + plan.gen.tokens);
  out->append(",\"completion_tokens\":"sv);
  AppendUint(out, plan.gen.tokens);
  out->append(",\"prompt_tokens_details\":{\"cached_tokens\":"sv);
  AppendUint(out, plan.cached_tokens);
  out->append("}}"sv);
}

}  // namespace

struct SimServer::Impl {
  explicit Impl(SimOptions o)
      : options(std::move(o)), engine(options), limiter(options.max_concurrency) {}

  awaitable<void> Accept(Acceptor& acceptor);

  const SimOptions options;
  Engine engine;
  ConcurrencyLimiter limiter;
  std::vector<std::unique_ptr<Worker>> workers;
  std::unique_ptr<Acceptor> acceptor;  // on workers[0]
  uint16_t port = 0;
  bool running = false;
};

namespace {

// The request head and body, parsed by Beast into strings the connection owns and reuses, so a
// request costs no allocation once the connection is warm. A fresh parser per request (Beast's
// parsers are single-use) carries the body and header limits.
struct RequestData {
  http::verb method = http::verb::unknown;
  std::string method_string;
  std::string target;
  std::string body;
  unsigned version = 11;
  bool expect_continue = false;  // "Expect: 100-continue" (curl sends it for bodies over 1 KiB)
};

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

// One client connection: reads requests one after another (HTTP/1.1 keep-alive) and answers
// each, on one event loop. A watchdog coroutine beside it closes the socket when a read waits
// for a request, or a write waits for the client, longer than the idle timeout; the time spent
// generating (waiting on token timers) never counts as idle.
class Connection {
 public:
  Connection(SimServer::Impl* server, Socket socket)
      : server_(server),
        engine_(server->engine),
        socket_(std::move(socket)),
        timer_(socket_.get_executor()),
        watchdog_timer_(socket_.get_executor()),
        idle_(Seconds(server->options.idle_timeout_s)) {}

  awaitable<void> Run() {
    for (;;) {
      RequestParser parser(&request_);
      parser.body_limit(server_->options.max_body_bytes);
      parser.header_limit(64 * 1024);
      error_code ec;
      Enter(Phase::kReading);
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
      Enter(Phase::kWorking);
      if (ec) {
        bool answered = false;
        keep_alive_ = false;
        if (ec == http::error::body_limit) {
          RespondError(413, "The request body is larger than this server accepts.",
                       "request_too_large", "");
          answered = true;
        } else if (ec.category() == http::make_error_code(http::error::bad_target).category() &&
                   ec != http::error::end_of_stream && ec != http::error::partial_message) {
          RespondError(400, "Malformed HTTP request.", "", "");
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
        Enter(Phase::kWriting);
        co_await asio::async_write(socket_, asio::buffer(out_),
                                   asio::redirect_error(use_awaitable, ec));
        Enter(Phase::kWorking);
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
    Enter(Phase::kClosed);
    watchdog_timer_.cancel();
  }

  // After an error response to a request whose body was not read: stop sending, then read and
  // drop what the client still sends (bounded by the idle timeout and 1 MiB), so that closing
  // with unread data does not reset the connection before the client has read the response.
  awaitable<void> LingeringClose() {
    error_code ec;
    socket_.shutdown(tcp::socket::shutdown_send, ec);
    char sink[4096];
    size_t total = 0;
    Enter(Phase::kReading);
    while (!ec && total < (1u << 20)) {
      total += co_await socket_.async_read_some(asio::buffer(sink),
                                                asio::redirect_error(use_awaitable, ec));
    }
    Enter(Phase::kWorking);
  }

  // A static coroutine taking its own reference, so the connection outlives the watchdog even if
  // Run() finishes before the watchdog first runs.
  static awaitable<void> Watchdog(std::shared_ptr<Connection> c) {
    while (c->phase_ != Phase::kClosed) {
      const Clock::time_point now = CoarseNow();
      Clock::time_point next = now + c->idle_;
      if (c->phase_ == Phase::kReading || c->phase_ == Phase::kWriting) {
        if (now - c->since_ >= c->idle_) {
          error_code ignored;
          c->socket_.close(ignored);  // fails the pending read or write
          co_return;
        }
        next = c->since_ + c->idle_;
      }
      c->watchdog_timer_.expires_at(next);
      error_code ec;
      co_await c->watchdog_timer_.async_wait(asio::redirect_error(use_awaitable, ec));
    }
  }

 private:
  enum class Phase { kReading, kWorking, kWriting, kClosed };
  void Enter(Phase p) {
    phase_ = p;
    if (p == Phase::kReading || p == Phase::kWriting) since_ = CoarseNow();
  }

  // Routes the request in request_. Either builds the whole response in out_ and returns false,
  // or prepares a generation that must wait and returns true (GenerateTimed() then runs it).
  bool Handle() {
    out_.clear();
    std::string_view target = request_.target;
    if (size_t q = target.find('?'); q != std::string_view::npos) target = target.substr(0, q);
    const http::verb method = request_.method;
    if (target == "/v1/chat/completions" || target == "/v1/completions") {
      if (method != http::verb::post) {
        RespondMethodNotAllowed("POST");
        return false;
      }
      return Prepare(target == "/v1/completions" ? Endpoint::kCompletions
                                                 : Endpoint::kChatCompletions);
    }
    if (target == "/v1/models" || target == "/health" || target == "/v1/metrics" ||
        target == "/metrics") {
      if (method != http::verb::get) {
        RespondMethodNotAllowed("GET");
      } else if (target == "/health") {
        Respond(200, "", "");
      } else if (target == "/v1/models") {
        Respond(200, "application/json", ModelsBody());
      } else {
        Respond(200, "text/plain; version=0.0.4; charset=utf-8", engine_.MetricsText());
      }
      return false;
    }
    std::string message = "Not found: ";
    message.append(request_.method_string);
    message.push_back(' ');
    message.append(target.substr(0, 200));
    RespondError(404, message, "unknown_url", "");
    return false;
  }

  std::string ModelsBody() const {
    const SimOptions& o = server_->options;
    std::string b = "{\"object\":\"list\",\"data\":[{\"id\":\"";
    AppendJsonEscaped(&b, o.model);
    b.append("\",\"object\":\"model\",\"created\":"sv);
    AppendUint(&b, static_cast<uint64_t>(std::time(nullptr)));
    b.append(",\"owned_by\":\"llmtap\",\"root\":\""sv);
    AppendJsonEscaped(&b, o.model);
    b.append("\",\"parent\":null,\"max_model_len\":"sv);
    AppendUint(&b, o.max_model_len);
    b.append("}]}"sv);
    return b;
  }

  // --- responses (built into out_) ---

  void AppendHead(int status, std::string_view content_type, std::string_view extra) {
    out_.append(StatusLine(status));
    if (!content_type.empty())
      out_.append("Content-Type: "sv).append(content_type).append("\r\n"sv);
    out_.append(extra);
    if (!keep_alive_) {
      out_.append("Connection: close\r\n"sv);
    } else if (version_ < 11) {
      out_.append("Connection: keep-alive\r\n"sv);
    }
  }

  void Respond(int status, std::string_view content_type, std::string_view body,
               std::string_view extra = "") {
    AppendHead(status, content_type, extra);
    out_.append("Content-Length: "sv);
    AppendUint(&out_, body.size());
    out_.append("\r\n\r\n"sv);
    out_.append(body);
  }

  void RespondError(int status, std::string_view message, std::string_view code,
                    std::string_view param, std::string_view extra = "") {
    engine_.metrics().http_errors_4xx.fetch_add(1, std::memory_order_relaxed);
    std::string& body = event_;
    body.assign("{\"error\":{\"message\":\""sv);
    AppendJsonEscaped(&body, message);
    body.append("\",\"type\":\"invalid_request_error\",\"param\":"sv);
    if (param.empty()) {
      body.append("null"sv);
    } else {
      body.push_back('"');
      AppendJsonEscaped(&body, param);
      body.push_back('"');
    }
    body.append(",\"code\":"sv);
    if (code.empty()) {
      body.append("null"sv);
    } else {
      body.push_back('"');
      AppendJsonEscaped(&body, code);
      body.push_back('"');
    }
    body.append("}}"sv);
    Respond(status, "application/json", body, extra);
  }

  void RespondMethodNotAllowed(const char* allow) {
    const std::string extra = std::string("Allow: ") + allow + "\r\n";
    RespondError(405, std::string("Method not allowed; use ") + allow + ".", "method_not_allowed",
                 "", extra);
  }

  // --- generation ---

  // `{"id":"...","object":"...","created":...,"model":"...","choices":[` for this response.
  void BuildPrefix(Endpoint ep, const SimRequest& r, const Plan& plan, bool chunk) {
    prefix_.assign("{\"id\":\""sv);
    prefix_.append(ep == Endpoint::kChatCompletions ? "chatcmpl-" : "cmpl-");
    AppendHex(&prefix_, plan.id, 16);
    AppendHex(&prefix_, Mix64(plan.id), 16);
    prefix_.append("\",\"object\":\""sv);
    if (ep == Endpoint::kChatCompletions) {
      prefix_.append(chunk ? "chat.completion.chunk" : "chat.completion");
    } else {
      prefix_.append("text_completion"sv);
    }
    prefix_.append("\",\"created\":"sv);
    AppendUint(&prefix_, static_cast<uint64_t>(std::time(nullptr)));
    prefix_.append(",\"model\":\""sv);
    AppendJsonEscaped(&prefix_, r.model.empty() ? server_->options.model : r.model);
    prefix_.append("\",\"choices\":["sv);
  }

  std::string_view FinishReason(const Plan& plan) const {
    if (!sim_request_.forced_tool.empty()) return "\"tool_calls\""sv;
    return plan.length_capped ? "\"length\""sv : "\"stop\""sv;
  }

  // A forced tool call (SimRequest::forced_tool): its arguments are the JSON text
  // {"input":"<generated text>"}, sent as a JSON string. Appends the string's inside for the
  // generated bytes [begin, end) of `text` (of `size` in all), opening and closing the
  // arguments object at the ends.
  void AppendToolArguments(std::string_view text, size_t begin, size_t end, size_t size,
                           std::string* out) {
    scratch_.clear();
    if (begin == 0) scratch_.append("{\"input\":\""sv);
    AppendJsonEscaped(&scratch_, text.substr(begin, end - begin));
    if (end == size) scratch_.append("\"}"sv);
    AppendJsonEscaped(out, scratch_);
  }

  // {["index":0,]"id":...,"type":"function","function":{"name":...,"arguments":" (left open;
  // stream deltas index their tool calls, a whole message does not).
  void AppendToolCallHead(const Plan& plan, bool delta, std::string* out) {
    out->append(delta ? "{\"index\":0,\"id\":\"call_"sv : "{\"id\":\"call_"sv);
    AppendHex(out, Mix64(plan.id ^ 0x746f6f6cull), 16);
    out->append("\",\"type\":\"function\",\"function\":{\"name\":\""sv);
    AppendJsonEscaped(out, sim_request_.forced_tool);
    out->append("\",\"arguments\":\""sv);
  }

  // Appends one SSE event carrying generated text [begin, end) to out_.
  void AppendDelta(const Plan& plan, size_t begin, size_t end, bool last) {
    event_.assign("data: "sv);
    event_.append(prefix_);
    std::string_view text(plan.gen.text.data() + begin, end - begin);
    if (endpoint_ == Endpoint::kChatCompletions && !sim_request_.forced_tool.empty()) {
      event_.append(
          "{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"function\":{"
          "\"arguments\":\""sv);
      AppendToolArguments(plan.gen.text, begin, end, plan.gen.text.size(), &event_);
      event_.append("\"}}]},\"logprobs\":null,\"finish_reason\":"sv);
    } else if (endpoint_ == Endpoint::kChatCompletions) {
      event_.append("{\"index\":0,\"delta\":{\"content\":\""sv);
      AppendJsonEscaped(&event_, text);
      event_.append("\"},\"logprobs\":null,\"finish_reason\":"sv);
    } else {
      event_.append("{\"index\":0,\"text\":\""sv);
      AppendJsonEscaped(&event_, text);
      event_.append("\",\"logprobs\":null,\"finish_reason\":"sv);
    }
    event_.append(last ? FinishReason(plan) : "null"sv);
    event_.append(",\"stop_reason\":null}]}\n\n"sv);
    AppendChunk(&out_, event_, chunked_);
  }

  // Appends the complete non-streaming response to out_.
  void AppendWholeResponse(const Plan& plan) {
    std::string& b = event_;  // the body
    b.assign(prefix_);
    if (endpoint_ == Endpoint::kChatCompletions && !sim_request_.forced_tool.empty()) {
      b.append(
          "{\"index\":0,\"message\":{\"role\":\"assistant\",\"content\":null,"
          "\"tool_calls\":["sv);
      AppendToolCallHead(plan, /*delta=*/false, &b);
      AppendToolArguments(plan.gen.text, 0, plan.gen.text.size(), plan.gen.text.size(), &b);
      b.append("\"}}]},\"logprobs\":null,\"finish_reason\":"sv);
    } else if (endpoint_ == Endpoint::kChatCompletions) {
      b.append("{\"index\":0,\"message\":{\"role\":\"assistant\",\"content\":\""sv);
      AppendJsonEscaped(&b, plan.gen.text);
      b.append("\"},\"logprobs\":null,\"finish_reason\":"sv);
    } else {
      b.append("{\"index\":0,\"text\":\""sv);
      AppendJsonEscaped(&b, plan.gen.text);
      b.append("\",\"logprobs\":null,\"finish_reason\":"sv);
    }
    b.append(FinishReason(plan));
    b.append(",\"stop_reason\":null}],"sv);
    AppendUsage(&b, plan);
    b.append("}"sv);
    Respond(200, "application/json", b);
  }

  // Parses a generation request and, when nothing has to wait, answers it at once. Returns true
  // when GenerateTimed() must run.
  bool Prepare(Endpoint ep) {
    RequestError error;
    if (!ParseRequest(ep, request_.body, server_->options.max_model_len, &sim_request_, &error)) {
      RespondError(400, error.message, "", error.param);
      return false;
    }
    endpoint_ = ep;
    chunked_ = version_ >= 11;
    if (sim_request_.stream) {
      // Headers go out at once, as vLLM's do, before any queueing.
      if (!chunked_) keep_alive_ = false;
      AppendHead(200, "text/event-stream; charset=utf-8",
                 chunked_ ? "Cache-Control: no-cache\r\nX-Accel-Buffering: no\r\n"
                            "Transfer-Encoding: chunked\r\n\r\n"
                          : "Cache-Control: no-cache\r\nX-Accel-Buffering: no\r\n\r\n");
      return true;
    }
    if (!server_->limiter.unlimited()) return true;
    // Non-streaming without a queue: plan now; answer now if the plan takes no time (such a
    // request is never seen running).
    engine_.MakePlan(sim_request_, &plan_);
    BuildPrefix(ep, sim_request_, plan_, false);
    double total_s = plan_.prefill_s;
    for (size_t i = 1; i < plan_.gen.step_ends.size(); ++i) {
      total_s += engine_.timing().StepSeconds(plan_.step_rng);
    }
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

  awaitable<bool> Flush() {
    if (out_.empty()) co_return true;
    error_code ec;
    Enter(Phase::kWriting);
    co_await asio::async_write(socket_, asio::buffer(out_),
                               asio::redirect_error(use_awaitable, ec));
    Enter(Phase::kWorking);
    out_.clear();
    co_return !ec;
  }

  // The generation that waits: the concurrency queue, the token timers, streaming. Leaves the
  // last bytes (or the whole non-streaming response) in out_ for Run() to write.
  awaitable<bool> GenerateTimed() {
    SimMetrics& m = engine_.metrics();
    const bool stream = sim_request_.stream;
    if (stream && !co_await Flush()) co_return false;  // the headers

    bool held_slot = false;
    if (!planned_) {
      if (!server_->limiter.unlimited()) {
        m.waiting.fetch_add(1, std::memory_order_relaxed);
        const bool admitted = co_await server_->limiter.Acquire();
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
      SimServer::Impl* s;
      bool held;
      ~Slot() {
        s->engine.metrics().running.fetch_sub(1, std::memory_order_relaxed);
        if (held) s->limiter.Release();
      }
    } slot{server_, held_slot};
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

    // Streaming: one event per engine step, each at its due time. Events already due are
    // written together.
    const TimingModel& timing = engine_.timing();
    size_t sent = 0;  // bytes of plan.gen.text already sent
    const std::vector<uint32_t>& steps = plan.gen.step_ends;
    for (size_t i = 0; i < steps.size(); ++i) {
      if (i > 0) due_ += Seconds(timing.StepSeconds(plan_.step_rng));
      if (due_ > Clock::now()) {
        if (!co_await Flush()) break;
        timer_.expires_at(due_);
        co_await timer_.async_wait(asio::redirect_error(use_awaitable, ec));
      }
      if (i == 0 && endpoint_ == Endpoint::kChatCompletions) {
        event_.assign("data: "sv);
        event_.append(prefix_);
        if (sim_request_.forced_tool.empty()) {
          event_.append(
              "{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\"},\"logprobs\":"
              "null,\"finish_reason\":null}]}\n\n");
        } else {
          event_.append(
              "{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":null,"
              "\"tool_calls\":["sv);
          AppendToolCallHead(plan, /*delta=*/true, &event_);
          event_.append("\"}}]},\"logprobs\":null,\"finish_reason\":null}]}\n\n"sv);
        }
        AppendChunk(&out_, event_, chunked_);
      }
      const bool last = i + 1 == steps.size();
      AppendDelta(plan, sent, steps[i], last);
      sent = steps[i];
      if (last) {
        if (sim_request_.include_usage) {
          event_.assign("data: "sv);
          event_.append(prefix_);
          event_.append("],"sv);
          AppendUsage(&event_, plan);
          event_.append("}\n\n"sv);
          AppendChunk(&out_, event_, chunked_);
        }
        AppendChunk(&out_, "data: [DONE]\n\n", chunked_);
        if (chunked_) out_.append("0\r\n\r\n"sv);
        engine_.RecordFinished(plan);
        co_return true;  // Run() writes the rest
      }
    }
    m.requests_aborted.fetch_add(1, std::memory_order_relaxed);
    co_return false;
  }

  SimServer::Impl* server_;
  Engine& engine_;
  Endpoint endpoint_ = Endpoint::kChatCompletions;
  bool planned_ = false;   // Prepare() made plan_ and counted it running
  Clock::time_point due_;  // when the next step of plan_ is due
  Socket socket_;
  Timer timer_;           // token timing
  Timer watchdog_timer_;  // idle timeout
  beast::flat_buffer buffer_;
  RequestData request_;
  SimRequest sim_request_;  // reused, with plan_, by every request of this connection
  Plan plan_;
  const Clock::duration idle_;
  Phase phase_ = Phase::kWorking;
  Clock::time_point since_;  // when the current read or write began
  unsigned version_ = 11;
  bool keep_alive_ = true;
  bool chunked_ = true;
  std::string out_;      // bytes waiting to be written
  std::string event_;    // one SSE event being built
  std::string scratch_;  // a forced tool call's arguments before their escaping as a string
  std::string prefix_;   // the JSON prefix shared by this response's objects
};

void LogException(std::exception_ptr e);

awaitable<void> RunConnection(SimServer::Impl* server, Socket socket) {
  SimMetrics& m = server->engine.metrics();
  m.open_connections.fetch_add(1, std::memory_order_relaxed);
  struct Gauge {
    SimMetrics& m;
    ~Gauge() { m.open_connections.fetch_sub(1, std::memory_order_relaxed); }
  } gauge{m};
  auto c = std::make_shared<Connection>(server, std::move(socket));
  asio::co_spawn(co_await asio::this_coro::executor, Connection::Watchdog(c), LogException);
  co_await c->Run();
}

void LogException(std::exception_ptr e) {
  if (!e) return;
  try {
    std::rethrow_exception(e);
  } catch (const std::exception& ex) {
    std::fprintf(stderr, "llmtap sim: connection failed: %s\n", ex.what());
  } catch (...) {
    std::fprintf(stderr, "llmtap sim: connection failed\n");
  }
}

}  // namespace

awaitable<void> SimServer::Impl::Accept(Acceptor& acceptor) {
  size_t next = 0;
  for (;;) {
    Worker& w = *workers[next];
    next = (next + 1) % workers.size();
    error_code ec;
    Socket socket = co_await acceptor.async_accept(w.ioc, asio::redirect_error(use_awaitable, ec));
    if (ec == asio::error::operation_aborted || !acceptor.is_open()) co_return;
    if (ec) {
      // Out of descriptors and the like: back off instead of spinning.
      Timer t(co_await asio::this_coro::executor, std::chrono::milliseconds(50));
      co_await t.async_wait(asio::redirect_error(use_awaitable, ec));
      continue;
    }
    socket.set_option(tcp::no_delay(true), ec);
    asio::co_spawn(w.ioc, RunConnection(this, std::move(socket)), LogException);
  }
}

SimServer::SimServer(SimOptions options) : impl_(std::make_unique<Impl>(std::move(options))) {}

SimServer::~SimServer() { Stop(); }

bool SimServer::Start(std::string* error) {
  Impl& s = *impl_;
  if (s.running) return true;
  error_code ec;
  const std::string host = s.options.host == "localhost" ? "127.0.0.1" : s.options.host;
  const asio::ip::address address = asio::ip::make_address(host, ec);
  if (ec) {
    *error = "invalid listen address '" + s.options.host + "' (want an IP address)";
    return false;
  }
  const uint32_t threads = std::max<uint32_t>(1, s.options.threads);
  s.workers.clear();
  for (uint32_t i = 0; i < threads; ++i) s.workers.push_back(std::make_unique<Worker>());
  s.acceptor = std::make_unique<Acceptor>(s.workers[0]->ioc);
  const tcp::endpoint endpoint(address, s.options.port);
  auto fail = [&](const char* what) {
    *error = std::string(what) + " " + s.options.host + ":" + std::to_string(s.options.port) +
             ": " + ec.message();
    s.acceptor.reset();
    s.workers.clear();
    return false;
  };
  if (s.acceptor->open(endpoint.protocol(), ec)) return fail("cannot open a socket for");
  s.acceptor->set_option(asio::socket_base::reuse_address(true), ec);
  if (s.acceptor->bind(endpoint, ec)) return fail("cannot listen on");
  if (s.acceptor->listen(asio::socket_base::max_listen_connections, ec)) {
    return fail("cannot listen on");
  }
  s.port = s.acceptor->local_endpoint(ec).port();
  asio::co_spawn(s.workers[0]->ioc, s.Accept(*s.acceptor), LogException);
  for (auto& w : s.workers) {
    Worker* wp = w.get();
    wp->thread = std::thread([wp] { wp->ioc.run(); });
  }
  s.running = true;
  return true;
}

void SimServer::Stop() {
  Impl& s = *impl_;
  if (!s.running) return;
  s.running = false;
  s.limiter.Close();
  for (auto& w : s.workers) w->ioc.stop();
  for (auto& w : s.workers) w->thread.join();
  // Destroying the loops destroys every suspended connection with them.
  s.acceptor.reset();
  for (auto& w : s.workers) w.reset();
  s.workers.clear();
}

uint16_t SimServer::port() const { return impl_->port; }

Engine& SimServer::engine() { return impl_->engine; }

}  // namespace llmtap::sim
