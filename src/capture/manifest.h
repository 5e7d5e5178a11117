// The manifest sidecar: what a capture file holds and how much was lost, so that a reader
// can trust (or distrust) the capture without the process that wrote it. Pure rendering;
// any thread.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>

#include "api/endpoints.h"
#include "capture/config.h"
#include "capture/counters.h"

namespace llmtap {

// One count per api::Endpoint, indexed by its value.
inline constexpr size_t kEndpointCount = static_cast<size_t>(api::Endpoint::kRerank) + 1;
using EndpointCounts = std::array<uint64_t, kEndpointCount>;

struct ManifestInfo {
  std::string capture_path;  // this file's path (a rotated file's new name)
  std::string outcomes_path;  // empty when outcomes are off
  CaptureConfig config;
  // Wall-clock time (ns since the Unix epoch) of timestamp 0; unset until the first record.
  std::optional<int64_t> timestamp_zero_wall_nanos;
  int64_t started_wall_nanos = 0;
  int64_t updated_wall_nanos = 0;
  std::string host;
  int pid = 0;
  bool stopped = false;
  // The file this manifest describes: its place in the run (1 = the first file), its
  // complete lines, and whether rotation finished it.
  uint64_t file_sequence = 1;
  uint64_t file_records = 0;
  uint64_t file_bytes = 0;
  int64_t file_last_timestamp_ms = 0;  // the timestamp of the file's last record
  // The file's records by the API of the path each was recorded from (kOther: a path of no
  // known API): "file"."apis", so that a tool knows which APIs a raw_payload file can hold.
  EndpointCounts file_apis{};
  bool rotated = false;  // state "rotated" (a finished file), unless `stopped` too
  std::string last_error;  // empty when none
  // With upload_url: this process's replica name and the last upload error (no secrets).
  std::string replica;
  std::string last_upload_error;
  CaptureCountersSnapshot counters;
};

// Pretty-printed JSON object. "counters" are the whole run's (every file so far); "file" is
// this file's. , newline-terminated. Schema name "llmtap.capture.manifest/v1".
std::string RenderManifest(const ManifestInfo& info);

// "2026-12-02T15:48:00.123Z"
std::string FormatUtcMillis(int64_t wall_nanos);

}  // namespace llmtap
