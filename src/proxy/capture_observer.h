// CaptureObserver: hands the body of every POST request to the capture core once it has been
// read whole, before it is forwarded (Capture::Offer never blocks and never throws; it strips
// the query string and applies endpoint_pattern itself). Also exports the capture counters
// as Prometheus text. Thread-safe, as Capture is.
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
  void AppendPrometheus(std::string* out) const override;

 private:
  Capture* capture_;
};

// The capture counters in Prometheus text format (llmtap_capture_*).
void AppendCapturePrometheus(const Capture& capture, std::string* out);

}  // namespace llmtap::proxy
