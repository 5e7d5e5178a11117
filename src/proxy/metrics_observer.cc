#include "proxy/metrics_observer.h"

#include "common/prometheus.h"
#include "common/version.h"

namespace llmtap::proxy {

void MetricsObserver::OnDone(RequestContext& ctx, const RelayResult& result) noexcept {
  c_.CountStatus(result.status);
  if (result.client_cancelled) c_.client_cancelled.fetch_add(1, std::memory_order_relaxed);
  if (result.upstream_error != UpstreamError::kNone) {
    c_.upstream_errors[static_cast<int>(result.upstream_error)].fetch_add(
        1, std::memory_order_relaxed);
  }
  if (ctx.response_started) c_.active_streams.fetch_sub(1, std::memory_order_relaxed);
  // Last, so that a reader who saw the request end also sees its counts.
  c_.active_requests.fetch_sub(1, std::memory_order_release);
}

std::string_view TimeoutStageName(TimeoutStage stage) {
  static constexpr std::string_view kNames[kTimeoutStages] = {
      "no_bytes", "tls_handshake", "request_head", "request_body", "idle", "write", "drain"};
  return kNames[static_cast<int>(stage)];
}

namespace {

void AppendTlsMetrics(const ProxyCounters& c, PromWriter& w) {
  static constexpr std::string_view kSides[] = {"upstream", "client"};
  w.Header("llmtap_proxy_tls_handshakes_total", PromType::kCounter,
           "TLS handshakes completed, by side and whether a session was resumed.");
  for (int side = 0; side < 2; ++side) {
    for (int resumed = 0; resumed < 2; ++resumed) {
      w.Sample("llmtap_proxy_tls_handshakes_total",
               {{"side", kSides[side]}, {"resumed", resumed ? "true" : "false"}},
               c.tls_handshakes[side][resumed].load(std::memory_order_relaxed));
    }
  }
  w.Header("llmtap_proxy_tls_handshake_failures_total", PromType::kCounter,
           "TLS handshakes that failed, by side.");
  for (int side = 0; side < 2; ++side) {
    w.Sample("llmtap_proxy_tls_handshake_failures_total", {{"side", kSides[side]}},
             c.tls_handshake_failures[side].load(std::memory_order_relaxed));
  }
  w.Counter("llmtap_proxy_tls_plain_http_rejected_total",
            "Plain HTTP requests on the TLS listener, answered 400.",
            c.tls_plain_http_rejected.load(std::memory_order_relaxed));
  if (const int64_t not_after = c.tls_certificate_not_after.load(std::memory_order_relaxed)) {
    w.Gauge("llmtap_proxy_tls_certificate_expiry_timestamp_seconds",
            "When the listener's certificate (--tls-cert) expires: its notAfter, in Unix seconds.",
            not_after);
  }
}

}  // namespace

std::string MetricsPage(const ProxyCounters& c, const std::vector<const MetricsSource*>& sources) {
  std::string out;
  out.reserve(4096);
  auto get = [](const auto& a) { return a.load(std::memory_order_relaxed); };
  PromWriter w(&out);
  w.Gauge("llmtap_build_info", "The llmtap version.", 1, {{"version", kVersion}});
  w.Header("llmtap_proxy_requests_total", PromType::kCounter,
           "Requests answered, by status class (\"none\": the client went away first).");
  static constexpr std::string_view kClasses[] = {"none", "1xx", "2xx", "3xx", "4xx", "5xx"};
  for (int i = 0; i < 6; ++i) {
    w.Sample("llmtap_proxy_requests_total", {{"class", kClasses[i]}}, get(c.requests_by_class[i]));
  }
  w.Header("llmtap_proxy_upstream_errors_total", PromType::kCounter, "Upstream failures, by kind.");
  for (int i = 1; i < kUpstreamErrorKinds; ++i) {
    w.Sample("llmtap_proxy_upstream_errors_total",
             {{"kind", UpstreamErrorName(static_cast<UpstreamError>(i))}},
             get(c.upstream_errors[i]));
  }
  w.Counter("llmtap_proxy_client_cancelled_total",
            "Requests whose client went away before the response ended.", get(c.client_cancelled));
  w.Counter("llmtap_proxy_request_body_bytes_total", "Request body bytes received.",
            get(c.request_body_bytes));
  w.Counter("llmtap_proxy_response_body_bytes_total", "Response body bytes relayed to clients.",
            get(c.response_body_bytes));
  w.Counter("llmtap_proxy_upstream_connects_total", "Upstream connections opened.",
            get(c.upstream_connects));
  w.Counter("llmtap_proxy_upstream_reuses_total", "Requests sent on a pooled upstream connection.",
            get(c.upstream_reuses));
  w.Gauge("llmtap_proxy_active_requests", "Requests in flight.", get(c.active_requests));
  w.Gauge("llmtap_proxy_active_streams", "Responses being relayed.", get(c.active_streams));
  w.Gauge("llmtap_proxy_client_connections", "Open client connections.", get(c.client_connections));
  w.Header("llmtap_proxy_client_timeouts_total", PromType::kCounter,
           "Client connections the proxy closed on a timeout, by the stage they were in.");
  for (int i = 0; i < kTimeoutStages; ++i) {
    w.Sample("llmtap_proxy_client_timeouts_total",
             {{"stage", TimeoutStageName(static_cast<TimeoutStage>(i))}},
             get(c.client_timeouts[i]));
  }
  AppendTlsMetrics(c, w);
  for (const MetricsSource* s : sources) s->AppendPrometheus(&out);
  return out;
}

}  // namespace llmtap::proxy
