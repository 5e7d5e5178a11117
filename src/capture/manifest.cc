#include "capture/manifest.h"

#include <ctime>
#include <nlohmann/json.hpp>

#include "common/version.h"

namespace llmtap {

std::string FormatUtcMillis(int64_t wall_nanos) {
  time_t secs = static_cast<time_t>(wall_nanos / 1000000000);
  int millis = static_cast<int>((wall_nanos / 1000000) % 1000);
  struct tm tm;
  gmtime_r(&secs, &tm);
  char buf[40];
  size_t n = strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%S", &tm);
  snprintf(buf + n, sizeof(buf) - n, ".%03dZ", millis);
  return buf;
}

std::string RenderManifest(const ManifestInfo& info) {
  using Json = nlohmann::ordered_json;
  Json j;
  j["schema"] = "llmtap.capture.manifest/v1";
  j["llmtap_version"] = kVersion;
  j["capture_path"] = info.capture_path;
  j["outcomes_path"] = info.outcomes_path.empty() ? Json(nullptr) : Json(info.outcomes_path);
  j["format"] = CaptureFormatName(info.config.format);
  j["config"] = Json::parse(CaptureConfigToJson(info.config));
  if (info.timestamp_zero_wall_nanos) {
    j["timestamp_zero_unix_ms"] = *info.timestamp_zero_wall_nanos / 1000000;
    j["timestamp_zero_utc"] = FormatUtcMillis(*info.timestamp_zero_wall_nanos);
  } else {
    j["timestamp_zero_unix_ms"] = nullptr;
    j["timestamp_zero_utc"] = nullptr;
  }
  j["host"] = info.host;
  j["pid"] = info.pid;
  j["started_utc"] = FormatUtcMillis(info.started_wall_nanos);
  j["updated_utc"] = FormatUtcMillis(info.updated_wall_nanos);
  j["state"] = info.stopped ? "stopped" : info.rotated ? "rotated" : "running";
  j["file"] = {
      {"sequence", info.file_sequence},
      {"records", info.file_records},
      {"bytes", info.file_bytes},
      {"last_timestamp_ms", info.file_last_timestamp_ms},
  };
  // Records by API, those with any (an empty object: no records yet).
  Json apis = Json::object();
  for (size_t i = 0; i < kEndpointCount; ++i) {
    if (info.file_apis[i] == 0) continue;
    apis[std::string(api::EndpointName(static_cast<api::Endpoint>(i)))] = info.file_apis[i];
  }
  j["file"]["apis"] = std::move(apis);
  j["last_error"] = info.last_error.empty() ? Json(nullptr) : Json(info.last_error);
  const CaptureCountersSnapshot& c = info.counters;
  j["counters"] = {
      {"offered", c.offered},
      {"matched", c.matched},
      {"recorded", c.recorded},
      {"bytes_written", c.bytes_written},
      {"skipped_too_large", c.skipped_too_large},
      {"sampled_out", c.sampled_out},
      {"invalid_body", c.invalid_body},
      {"non_standard_json", c.non_standard_json},
      {"dropped_queue_full", c.dropped_queue_full},
      {"skipped_upload_backlog", c.skipped_upload_backlog},
      {"write_failed_records", c.write_failed_records},
      {"queued_records", c.queued_records},
      {"queue_bytes", c.queue_bytes},
      {"outcomes_written", c.outcomes_written},
      {"outcomes_lost", c.outcomes_lost},
      {"files_rotated", c.files_rotated},
      {"with_session_id", c.with_session_id},
      {"responses_truncated", c.responses_truncated},
      {"shadow_pairs_written", c.shadow_pairs_written},
      {"shadow_pairs_lost", c.shadow_pairs_lost},
  };
  if (!info.config.upload_url.empty()) {
    j["upload"] = {
        {"url", info.config.upload_url},
        {"replica", info.replica},
        {"files_uploaded", c.files_uploaded},
        {"bytes_uploaded", c.bytes_uploaded},
        {"requests_failed", c.upload_requests_failed},
        {"retries", c.upload_retries},
        {"files_waiting", c.upload_files_waiting},
        {"bytes_waiting", c.upload_bytes_waiting},
        {"last_error",
         info.last_upload_error.empty() ? Json(nullptr) : Json(info.last_upload_error)},
    };
  }
  // Invalid UTF-8 in a path must not make rendering throw.
  return j.dump(2, ' ', false, Json::error_handler_t::replace) + "\n";
}

}  // namespace llmtap
