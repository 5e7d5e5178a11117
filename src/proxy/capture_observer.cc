#include "proxy/capture_observer.h"

#include <cstdint>
#include <new>
#include <utility>

#include "common/prometheus.h"
#include "proxy/response_reader.h"

namespace llmtap::proxy {
namespace {

// A recorded request whose outcome is due (outcomes on).
struct OutcomeState final : ObserverState {
  explicit OutcomeState(uint64_t t) : ticket(t) {}
  uint64_t ticket;
  api::Endpoint endpoint = api::Endpoint::kOther;
  ResponseReader reader;
};

// The observer's own slot holds nothing but an OutcomeState.
OutcomeState* StateOf(RequestContext& ctx) { return static_cast<OutcomeState*>(ctx.state().get()); }

// The relay's header block as the capture core's lookup (for session_headers).
class ProxyRequestHeaders final : public RequestHeaders {
 public:
  explicit ProxyRequestHeaders(const HeaderView& headers) : headers_(headers) {}
  std::string_view Get(std::string_view name) const override { return headers_.Get(name); }

 private:
  const HeaderView& headers_;
};

int64_t Micros(std::chrono::nanoseconds d) {
  return std::chrono::duration_cast<std::chrono::microseconds>(d).count();
}

}  // namespace

void CaptureObserver::OnBodyComplete(RequestContext& ctx, std::string_view body) noexcept {
  // Only POST carries an inference request; other methods never reach the decision chain
  // (and cost nothing when capture is off: Offer returns at once).
  if (ctx.method != "POST") return;
  uint64_t ticket = 0;
  if (ctx.request_headers != nullptr && capture_->wants_headers()) {
    // Header values are copied into the record during Offer, while the header block is live.
    const ProxyRequestHeaders headers(*ctx.request_headers);
    OfferContext context;
    context.headers = &headers;
    capture_->Offer(ctx.target, body, context, &ticket);
  } else {
    capture_->Offer(ctx.target, body, &ticket);
  }
  if (ticket == 0) return;
  try {
    auto state = std::make_unique<OutcomeState>(ticket);
    const std::string_view path = std::string_view(ctx.target).substr(0, ctx.target.find('?'));
    state->endpoint = api::EndpointForPath(path).value_or(api::Endpoint::kOther);
    ctx.state() = std::move(state);
  } catch (const std::bad_alloc&) {
    capture_->ReportOutcome(ticket, ResponseOutcome());  // the record still gets its line
  }
}

void CaptureObserver::OnResponseHeaders(RequestContext& ctx, int /*status*/,
                                        const HeaderView& headers) noexcept {
  if (OutcomeState* s = StateOf(ctx)) {
    // With capture_responses, the reader also collects the response's text.
    const size_t max_text_bytes = capture_->responses_enabled()
                                      ? static_cast<size_t>(capture_->config().max_response_bytes)
                                      : 0;
    s->reader = ResponseReader(s->endpoint, headers.Get("content-type"),
                               headers.Get("content-encoding"), max_text_bytes);
  }
}

void CaptureObserver::OnResponseChunk(RequestContext& ctx, std::string_view bytes) noexcept {
  if (OutcomeState* s = StateOf(ctx)) s->reader.Feed(bytes);
}

void CaptureObserver::OnDone(RequestContext& ctx, const RelayResult& result) noexcept {
  OutcomeState* s = StateOf(ctx);
  if (s == nullptr) return;
  ResponseOutcome o;
  o.status = result.status;
  o.ttft_us = result.response_body_bytes > 0 ? Micros(result.ttft) : -1;
  o.total_us = Micros(result.total);
  s->reader.Finish(&o);
  o.client_cancelled = result.client_cancelled;
  if (result.upstream_error != UpstreamError::kNone) {
    o.error = UpstreamErrorName(result.upstream_error).data();  // names are literals
  }
  if (ctx.outcome_hold != nullptr) {
    ctx.outcome_hold->Hold(s->ticket, std::move(o));  // reported with the shadow's pair
  } else {
    capture_->ReportOutcome(s->ticket, std::move(o));
  }
  s->ticket = 0;
}

void CaptureObserver::AppendPrometheus(std::string* out) const {
  AppendCapturePrometheus(*capture_, out);
}

void AppendCapturePrometheus(const Capture& capture, std::string* out) {
  const CaptureCountersSnapshot c = capture.counters();
  PromWriter w(out);
  w.Gauge("llmtap_capture_enabled", "1 when payload capture is on.", capture.enabled() ? 1 : 0);
  w.Counter("llmtap_capture_offered_total", "Requests offered to capture while enabled.",
            c.offered);
  w.Counter("llmtap_capture_matched_total", "Offered requests matching endpoint_pattern.",
            c.matched);
  w.Counter("llmtap_capture_recorded_total", "Records written to the capture file.", c.recorded);
  w.Counter("llmtap_capture_bytes_written_total", "Bytes of the records written.", c.bytes_written);
  w.Counter("llmtap_capture_skipped_too_large_total",
            "Requests not recorded: body larger than max_request_bytes.", c.skipped_too_large);
  w.Counter("llmtap_capture_sampled_out_total", "Requests not recorded: not chosen by sample_rate.",
            c.sampled_out);
  w.Counter("llmtap_capture_invalid_body_total",
            "Requests not recorded: body is not a JSON object.", c.invalid_body);
  w.Counter("llmtap_capture_non_standard_json_total",
            "Requests not recorded: a JSON object but for NaN, Infinity or a lone surrogate "
            "escape (Python servers accept them; no JSON replayer loads them).",
            c.non_standard_json);
  w.Counter("llmtap_capture_dropped_queue_full_total",
            "Records dropped: the queue held max_queue_bytes.", c.dropped_queue_full);
  w.Counter("llmtap_capture_write_failed_records_total",
            "Records lost to a failed write or an unopenable file.", c.write_failed_records);
  w.Gauge("llmtap_capture_queued_records", "Records queued, not yet written.", c.queued_records);
  w.Gauge("llmtap_capture_queue_bytes", "Bytes of the queued records.", c.queue_bytes);
  w.Counter("llmtap_capture_outcomes_written_total",
            "Lines written to the response outcomes sidecar.", c.outcomes_written);
  w.Counter("llmtap_capture_outcomes_lost_total",
            "Response outcomes not written (their record was lost, or the write failed).",
            c.outcomes_lost);
  w.Counter("llmtap_capture_files_rotated_total", "Capture files finished by rotation.",
            c.files_rotated);
  w.Counter("llmtap_capture_with_session_id_total",
            "Records written with a session_id (from session_headers or session_fields).",
            c.with_session_id);
  w.Counter("llmtap_capture_responses_truncated_total",
            "Captured response texts cut at max_response_bytes (capture_responses).",
            c.responses_truncated);
  w.Counter("llmtap_capture_skipped_upload_backlog_total",
            "Requests not recorded: files waiting to upload held max_local_bytes.",
            c.skipped_upload_backlog);
  if (capture.config().upload_url.empty()) return;
  w.Counter("llmtap_capture_files_uploaded_total",
            "Finished capture files whose manifest reached the store.", c.files_uploaded);
  w.Counter("llmtap_capture_bytes_uploaded_total",
            "Bytes of the objects of uploaded files, as stored.", c.bytes_uploaded);
  w.Counter("llmtap_capture_upload_requests_failed_total",
            "Store requests that failed (each is retried with back-off).",
            c.upload_requests_failed);
  w.Counter("llmtap_capture_upload_retries_total", "Store requests repeated after a failure.",
            c.upload_retries);
  w.Gauge("llmtap_capture_upload_files_waiting", "Finished capture files not yet in the store.",
          c.upload_files_waiting);
  w.Gauge("llmtap_capture_upload_bytes_waiting",
          "Bytes on local disk of the files waiting to upload.", c.upload_bytes_waiting);
}

}  // namespace llmtap::proxy
