#include "proxy/capture_observer.h"

#include <cstdio>

namespace llmtap::proxy {

void CaptureObserver::OnBodyComplete(RequestContext& ctx, std::string_view body) noexcept {
  // Only POST carries an inference request; other methods never reach the decision chain
  // (and cost nothing when capture is off: Offer returns at once).
  if (ctx.method == "POST") capture_->Offer(ctx.target, body);
}

void CaptureObserver::AppendPrometheus(std::string* out) const {
  AppendCapturePrometheus(*capture_, out);
}

void AppendCapturePrometheus(const Capture& capture, std::string* out) {
  const CaptureCountersSnapshot c = capture.counters();
  auto metric = [out](const char* name, const char* type, const char* help, uint64_t value) {
    char line[96];
    out->append("# HELP ").append(name).append(" ").append(help).append("\n");
    out->append("# TYPE ").append(name).append(" ").append(type).append("\n");
    std::snprintf(line, sizeof line, " %llu\n", static_cast<unsigned long long>(value));
    out->append(name).append(line);
  };
  metric("llmtap_capture_enabled", "gauge", "1 when payload capture is on.",
         capture.enabled() ? 1 : 0);
  metric("llmtap_capture_offered_total", "counter", "Requests offered to capture while enabled.",
         c.offered);
  metric("llmtap_capture_matched_total", "counter", "Offered requests matching endpoint_pattern.",
         c.matched);
  metric("llmtap_capture_recorded_total", "counter", "Records written to the capture file.",
         c.recorded);
  metric("llmtap_capture_bytes_written_total", "counter", "Bytes of the records written.",
         c.bytes_written);
  metric("llmtap_capture_skipped_too_large_total", "counter",
         "Requests not recorded: body larger than max_request_bytes.", c.skipped_too_large);
  metric("llmtap_capture_sampled_out_total", "counter",
         "Requests not recorded: not chosen by sample_rate.", c.sampled_out);
  metric("llmtap_capture_invalid_body_total", "counter",
         "Requests not recorded: body is not a JSON object.", c.invalid_body);
  metric("llmtap_capture_dropped_queue_full_total", "counter",
         "Records dropped: the queue held max_queue_bytes.", c.dropped_queue_full);
  metric("llmtap_capture_write_failed_records_total", "counter",
         "Records lost to a failed write or an unopenable file.", c.write_failed_records);
  metric("llmtap_capture_queued_records", "gauge", "Records queued, not yet written.",
         c.queued_records);
  metric("llmtap_capture_queue_bytes", "gauge", "Bytes of the queued records.", c.queue_bytes);
}

}  // namespace llmtap::proxy
