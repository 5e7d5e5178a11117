// The phases of a proxied request, and the observers that act on them (Pingora's proxy phases
// are the model). For every request whose head and body were read whole, the relay calls:
//
//   OnRequestReceived -> OnBodyComplete -> OnUpstreamChosen -> OnResponseHeaders
//   -> OnResponseChunk (each body chunk, as it is relayed) -> OnDone (exactly once)
//
// A request that fails on the way skips the phases it never reached (an unreachable upstream
// gives no OnResponseHeaders; the proxy's own 502 or 504 shows in OnDone), but OnDone always
// comes once OnRequestReceived came. Requests the proxy answers itself (the metrics endpoint,
// 413 for a body over max_body_bytes, 400 for a malformed head) reach no phase; the proxy's own
// metrics count them.
//
// Public, with server.h: callers of ProxyServer implement observers (capture_observer.h is one).
//
// Threads: a request's phases all run on the thread of its client connection, in order.
// Different requests run on different threads at once, so an observer shared by the server
// must be safe to call concurrently. Observer methods must not block and must not throw.
#pragma once

#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "capture/outcome.h"

namespace llmtap::proxy {

// Read access to a header block. Lookups are case-insensitive; a missing field is "".
class HeaderView {
 public:
  virtual std::string_view Get(std::string_view name) const = 0;

 protected:
  ~HeaderView() = default;
};

// State an observer keeps for one request (set it in any phase; it lives until after OnDone).
class ObserverState {
 public:
  virtual ~ObserverState() = default;
};

// Takes a recorded request's outcome in place of Capture::ReportOutcome, to report it later with
// more on it: a mirrored request's pair (shadow.h) holds its outcome until the candidate's
// response has ended too, then reports both (the pair joins the capture row through it).
class OutcomeHold {
 public:
  virtual void Hold(uint64_t ticket, ResponseOutcome&& outcome) noexcept = 0;

 protected:
  ~OutcomeHold() = default;
};

// How many observers one server takes, its own metrics observer included: every connection's
// RequestContext holds this many state slots, so that per-request state costs no allocation of
// the relay's (ProxyServer::Start() refuses more observers).
inline constexpr size_t kMaxObservers = 8;

// What the relay knows about one request. Owned by the connection; valid from
// OnRequestReceived to the end of OnDone.
struct RequestContext {
  using Clock = std::chrono::steady_clock;
  uint64_t id = 0;                // distinct per request within a server
  std::string method;             // as sent, e.g. "POST"
  std::string target;             // as sent, query string included
  Clock::time_point start;        // when the request head was read
  bool response_started = false;  // response headers were sent to the client
  // The request's header fields, during OnRequestReceived and OnBodyComplete only (the relay
  // reuses their storage afterwards; nullptr in the later phases). Copy what you keep.
  const HeaderView* request_headers = nullptr;
  // Set by the relay after OnBodyComplete, until the end of OnDone, when the request is mirrored
  // (--shadow): the capture observer hands its outcome to it instead of reporting it.
  OutcomeHold* outcome_hold = nullptr;

  // The calling observer's own state for this request: each observer has a slot of its own
  // (its index in the server's observer list), so observers never see each other's state, and
  // the slot holds only what that observer put there (a static_cast back is safe). Set it in
  // any phase; it is destroyed after OnDone. Call only from inside an observer method: the
  // relay points the context at each observer as it calls it (SetObserver).
  std::unique_ptr<ObserverState>& state() { return states_[observer_]; }

  // For the relay: whose slot state() means during the next observer call, and the end of a
  // request (every slot emptied).
  void SetObserver(size_t index) { observer_ = index; }
  void ResetStates() {
    for (std::unique_ptr<ObserverState>& s : states_) s.reset();
  }

 private:
  std::array<std::unique_ptr<ObserverState>, kMaxObservers> states_;
  size_t observer_ = 0;
};

enum class UpstreamError {
  kNone,
  kConnect,   // refused or unreachable (502)
  kTimeout,   // the connect or a read deadline passed (504 if nothing was sent yet)
  kReset,     // the upstream closed or reset the connection before the response ended
  kProtocol,  // the upstream sent something that is not HTTP/1.1
  kTls,       // the TLS handshake with an https:// upstream failed (502)
};
inline constexpr int kUpstreamErrorKinds = 6;  // the values of UpstreamError

// "none", "connect", "timeout", "reset", "protocol", "tls": a string literal (observer.cc).
std::string_view UpstreamErrorName(UpstreamError error);

// How the relay of one request ended, as the proxy saw it (passed to OnDone). Not the capture
// core's ResponseOutcome (the outcomes sidecar line the capture observer builds from this).
struct RelayResult {
  // The status sent to the client (the upstream's, or the proxy's own 502/504); 0 if the
  // client went away before any response.
  int status = 0;
  bool client_cancelled = false;  // the client disconnected before the response ended
  UpstreamError upstream_error = UpstreamError::kNone;
  // From the request head to the first response body byte sent (0 if none), and to the end.
  std::chrono::nanoseconds ttft{0};
  std::chrono::nanoseconds total{0};
  uint64_t response_body_bytes = 0;  // body bytes relayed to the client
};

class RequestObserver {
 public:
  virtual ~RequestObserver() = default;
  virtual void OnRequestReceived(RequestContext& /*ctx*/, const HeaderView& /*headers*/) noexcept {}
  // The whole request body (decoded if it was chunked), before it is forwarded.
  virtual void OnBodyComplete(RequestContext& /*ctx*/, std::string_view /*body*/) noexcept {}
  virtual void OnUpstreamChosen(RequestContext& /*ctx*/, std::string_view /*upstream*/) noexcept {}
  virtual void OnResponseHeaders(RequestContext& /*ctx*/, int /*status*/,
                                 const HeaderView& /*headers*/) noexcept {}
  // Body bytes as relayed (de-chunked), in order, each chunk as soon as it was sent.
  virtual void OnResponseChunk(RequestContext& /*ctx*/, std::string_view /*bytes*/) noexcept {}
  virtual void OnDone(RequestContext& /*ctx*/, const RelayResult& /*result*/) noexcept {}
};

// Something that adds lines to the proxy's Prometheus metrics text. Called from any thread.
class MetricsSource {
 public:
  virtual ~MetricsSource() = default;
  virtual void AppendPrometheus(std::string* out) const = 0;
};

}  // namespace llmtap::proxy
