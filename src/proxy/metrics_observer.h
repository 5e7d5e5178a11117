// The proxy's own metrics: ProxyCounters, what the sessions and the relay count; MetricsObserver,
// the observer of the request phases that keeps the request counts (registered first by every
// ProxyServer); and MetricsPage, the text of the metrics endpoint (Prometheus format: the build
// info, llmtap_proxy_*, then each MetricsSource).
//
// Internal to src/proxy: owned by the server (server.cc), counted into by its sessions.
// Thread-safe: the counters are relaxed atomics, each read on its own; the observer is called
// from every event-loop thread at once and MetricsPage from any thread.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "proxy/observer.h"

namespace llmtap::proxy {

// Where a client connection was when the proxy closed it on a timeout.
enum class TimeoutStage : uint8_t {
  kNoBytes,       // it never sent a byte (no TLS ClientHello, no request)
  kTlsHandshake,  // its TLS handshake started but did not finish (--tls-handshake-timeout-s)
  kRequestHead,   // part of a request head came, not all of it (--read-timeout-s)
  kRequestBody,   // the head came, not all of the body (--read-timeout-s)
  kIdle,          // nothing of a next request after serving one (--idle-timeout-s)
  kWrite,         // it did not read what the proxy wrote to it (--write-timeout-s)
  kDrain,         // a refused request's rest did not end (bounded drain before the close)
};
inline constexpr int kTimeoutStages = 7;
// "no_bytes", "tls_handshake", ... (the stage label of llmtap_proxy_client_timeouts_total).
std::string_view TimeoutStageName(TimeoutStage stage);

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
  // TLS handshakes completed, by side (kUpstreamSide, kClientSide) and resumed (1) or full (0);
  // handshakes that failed, by side; plain HTTP requests refused on the TLS listener.
  std::atomic<uint64_t> tls_handshakes[2][2] = {};
  std::atomic<uint64_t> tls_handshake_failures[2] = {};
  std::atomic<uint64_t> tls_plain_http_rejected{0};
  // Client connections closed on a timeout, by TimeoutStage.
  std::atomic<uint64_t> client_timeouts[kTimeoutStages] = {};
  // The serving certificate's notAfter (Unix seconds); 0 without a TLS listener.
  std::atomic<int64_t> tls_certificate_not_after{0};
  static constexpr int kUpstreamSide = 0;
  static constexpr int kClientSide = 1;

  void CountStatus(int status) {
    const int c = status >= 100 && status < 600 ? status / 100 : 0;
    requests_by_class[c].fetch_add(1, std::memory_order_relaxed);
  }
};

// The proxy's request metrics are one more observer of the phases. It keeps no per-request state.
class MetricsObserver final : public RequestObserver {
 public:
  ProxyCounters& counters() { return c_; }
  const ProxyCounters& counters() const { return c_; }

  void OnRequestReceived(RequestContext&, const HeaderView&) noexcept override {
    c_.active_requests.fetch_add(1, std::memory_order_relaxed);
  }
  void OnBodyComplete(RequestContext&, std::string_view body) noexcept override {
    c_.request_body_bytes.fetch_add(body.size(), std::memory_order_relaxed);
  }
  void OnResponseHeaders(RequestContext&, int, const HeaderView&) noexcept override {
    c_.active_streams.fetch_add(1, std::memory_order_relaxed);
  }
  void OnResponseChunk(RequestContext&, std::string_view bytes) noexcept override {
    c_.response_body_bytes.fetch_add(bytes.size(), std::memory_order_relaxed);
  }
  void OnDone(RequestContext& ctx, const RelayResult& result) noexcept override;

 private:
  ProxyCounters c_;
};

// The metrics endpoint's text: llmtap_build_info, the proxy's counters, then what each source
// appends.
std::string MetricsPage(const ProxyCounters& counters,
                        const std::vector<const MetricsSource*>& sources);

}  // namespace llmtap::proxy
