// ProxyServer: the asynchronous HTTP/1.1 reverse proxy behind `llmtap proxy`, as a library so
// that tests can run it in-process (for example on 127.0.0.1 port 0, in front of a SimServer).
//
// Every request is forwarded to one upstream (all methods and targets, query strings intact,
// end-to-end headers kept, hop-by-hop headers dropped, Host rewritten to the upstream). The
// request body is read whole (Content-Length or chunked) and forwarded with Content-Length;
// the response is relayed as it arrives, each chunk flushed at once (SSE is never buffered).
// A request whose framing is ambiguous or malformed is answered 400/413/501 and its connection
// closed, never forwarded (the policy is in http_message.h).
// What happens to a request along the way is reported to RequestObservers (observer.h);
// payload capture is one of them (capture_observer.h).
//
// The proxy's public header (src/cli/proxy_command.cc, tests), with observer.h, options.h and
// capture_observer.h; the other headers of src/proxy are internal to it.
//
// Threads: Start() and Stop() from one controlling thread; port() and metrics from any thread
// after Start() succeeded. The server runs `threads` event loops of its own (net::ServerLoops,
// the sim's server skeleton too); a client connection and the upstream connections it uses live
// on one loop (the connection's strand).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "proxy/observer.h"
#include "proxy/options.h"

namespace llmtap::proxy {

class ProxyServer {
 public:
  // Observers are called in order for every request (at most kMaxObservers - 1 of them: Start()
  // refuses more); metrics sources add to the metrics endpoint's text. Neither is owned; both
  // must outlive the server.
  ProxyServer(ProxyOptions options, std::vector<RequestObserver*> observers = {},
              std::vector<const MetricsSource*> metrics_sources = {});
  ~ProxyServer();  // Stop(), with no grace.
  ProxyServer(const ProxyServer&) = delete;
  ProxyServer& operator=(const ProxyServer&) = delete;

  // Parses the upstream URL, resolves it, binds, listens and starts the threads. Returns
  // false with a reason in *error; the server is then not running.
  bool Start(std::string* error);

  // Stops accepting and closes idle client connections at once; lets requests in flight
  // finish for up to options.grace (their connections close after the response); then cuts
  // what remains and joins the threads. Idempotent.
  void Stop();

  // Loads the listener's certificate and key again (the files of --tls-cert and --tls-key) on the
  // calling thread and hands the new context to every event loop: connections accepted from then
  // on use it, open ones keep theirs. Logs "reloaded TLS certificate <description>", or on a
  // failure keeps the current certificate, logs "keeping the current certificate: <why>" and
  // returns false with the reason in *error. False too without a TLS listener. Any thread.
  bool ReloadTls(std::string* error);

  // The bound port (the chosen one when options.port was 0). Valid after Start() succeeded.
  uint16_t port() const;

  // The metrics endpoint's text (Prometheus exposition format).
  std::string MetricsText() const;

  // Requests between OnRequestReceived and OnDone right now.
  int64_t active_requests() const;

  struct Impl;  // Implementation detail, opaque outside server.cc.

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace llmtap::proxy
