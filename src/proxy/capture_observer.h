// CaptureObserver: hands the body of every POST request to the capture core once it has been
// read whole, before it is forwarded (Capture::Offer never blocks and never throws; it strips
// the query string and applies endpoint_pattern itself). With outcomes on, it follows each
// recorded request's response (status, timings, and the usage and finish_reason the body
// reports, read by a UsageScanner as the chunks pass; with capture_responses, the generated text
// too) and reports it to the capture core when the response ends. Also exports the capture counters as Prometheus text. Thread-safe, as
// Capture is; per-request state lives in the RequestContext.
#pragma once

#include <string>
#include <string_view>

#include "capture/capture.h"
#include "proxy/observer.h"

namespace llmtap::proxy {

class CaptureObserver : public RequestObserver, public MetricsSource {
 public:
  // `capture` is not owned and must outlive this observer.
  explicit CaptureObserver(Capture* capture) : capture_(capture) {}

  void OnBodyComplete(RequestContext& ctx, std::string_view body) noexcept override;
  void OnResponseHeaders(RequestContext& ctx, int status,
                         const HeaderView& headers) noexcept override;
  void OnResponseChunk(RequestContext& ctx, std::string_view bytes) noexcept override;
  void OnDone(RequestContext& ctx, const RelayResult& result) noexcept override;
  void AppendPrometheus(std::string* out) const override;

 private:
  Capture* capture_;
};

// The capture counters in Prometheus text format (llmtap_capture_*).
void AppendCapturePrometheus(const Capture& capture, std::string* out);

}  // namespace llmtap::proxy
