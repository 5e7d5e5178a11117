// Capture configuration: the NIM_CAPTURE_ENABLE / NIM_CAPTURE_ARGS contract.
//
// ParseCaptureConfig is a pure function (no I/O, no globals) and may be called from any
// thread. Its diagnostics never contain payload content; they name the key and the reason.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/log.h"

namespace llmtap {

enum class CaptureFormat {
  kMooncakePayload,  // {"timestamp":<ms since first record>,"payload":<body>}
  kRawPayload,       // <body>
};

std::string_view CaptureFormatName(CaptureFormat format);

// The effective capture settings. Every field has the documented default.
struct CaptureConfig {
  static constexpr const char* kDefaultPath = "/opt/nim/captures/requests.jsonl";
  static constexpr const char* kDefaultEndpointPattern = "^/v1/(chat/completions|completions)$";
  static constexpr int64_t kDefaultMaxRequestBytes = 1048576;         // 1 MiB
  static constexpr int64_t kDefaultMaxQueueBytes = 1073741824;        // 1 GiB
  static constexpr int64_t kDefaultMaxLocalBytes = int64_t{4} << 30;  // 4 GiB
  static constexpr int64_t kDefaultMaxResponseBytes = 1048576;        // 1 MiB
  // With upload_url and no rotation key given, files are finished at these bounds so that
  // they reach the store while the process runs.
  static constexpr int64_t kUploadRotateBytes = int64_t{256} << 20;
  static constexpr int64_t kUploadRotateMs = 60000;

  // Destination JSONL file. Non-empty string.
  std::string path = kDefaultPath;
  // Record format. "mooncake_payload" or "raw_payload".
  CaptureFormat format = CaptureFormat::kMooncakePayload;
  // Bodies larger than this are forwarded but not recorded. Positive integer.
  int64_t max_request_bytes = kDefaultMaxRequestBytes;
  // Probability that a matching request is recorded. In [0, 1].
  double sample_rate = 1.0;
  // RE2 regex searched in the request path without its query string.
  std::string endpoint_pattern = kDefaultEndpointPattern;
  // Ceiling on queued record bytes. Positive integer, >= max_request_bytes.
  int64_t max_queue_bytes = kDefaultMaxQueueBytes;
  // Also write "<path>.outcomes.ndjson": one line per recorded request once its response ends
  // (see ResponseOutcome in capture.h). JSON boolean.
  bool outcomes = false;
  // Also put the generated text of each response's choice 0 (content, reasoning, tool calls) in
  // its outcomes line (see ResponseText in outcome.h). Turns `outcomes` on. JSON boolean. Like
  // the prompts, responses may hold sensitive data.
  bool capture_responses = false;
  // At most this many decoded bytes of text per response; the rest is cut (and counted).
  // Positive integer.
  int64_t max_response_bytes = kDefaultMaxResponseBytes;
  // Start a new capture file once the current one would grow past this many bytes
  // (positive integer; 0 = never). A file always takes at least one record.
  int64_t rotate_bytes = 0;
  // Start a new capture file once the current one spans this long from its first record
  // (key rotate_seconds, a positive number; kept in ms here; 0 = never).
  int64_t rotate_ms = 0;

  // Fleet upload (see uploader.h). Where finished files go: "s3://bucket/prefix/"; empty = no
  // upload, files stay where `path` puts them. Each replica writes under prefix/<replica>/.
  std::string upload_url{};
  // This process's name in the store: letters, digits, '.', '_', '-' (at most 128). Empty
  // means the host name (a pod's name in Kubernetes), resolved at start.
  std::string replica{};
  // "none" or "zstd": finished files are compressed before upload (requests.<time>.jsonl.zst).
  bool compress_zstd = false;
  // Keep files on disk after the store confirmed them. JSON boolean.
  bool keep_local = false;
  // Disk budget for finished files waiting to upload (plus the file being written): when the
  // store is down this long, capture refuses requests (counted) instead of filling the disk.
  int64_t max_local_bytes = kDefaultMaxLocalBytes;

  // Session ids (see session.h), written only in mooncake_payload rows. Tried in order: these
  // request headers (names lowercased; looked up case-insensitively), then these body fields
  // (dotted paths: "metadata.session_id"). Key values are comma-separated lists; empty = off.
  static constexpr size_t kMaxSessionSources = 16;
  std::vector<std::string> session_headers{};
  std::vector<std::string> session_fields{};
};

struct ConfigDiagnostic {
  LogLevel level;       // kWarning: a value fell back to its default; kError: capture disabled
  std::string key;      // the NIM_CAPTURE_ARGS key, or the variable name
  std::string message;  // complete human-readable sentence naming the key and the fix
};

struct ParsedCaptureConfig {
  bool enabled = false;
  CaptureConfig config;
  std::vector<ConfigDiagnostic> diagnostics;
  // Keys a source gave a value that was taken (NIM_CAPTURE_ARGS, then flags): a later bad
  // value for one of them keeps that value rather than the default.
  std::vector<std::string> set_keys;
};

// Parses the two variables' values. `enable` / `args` are std::nullopt when unset.
//
// NIM_CAPTURE_ENABLE: "1" enables; unset or "0" disables; anything else disables with a
// warning. NIM_CAPTURE_ARGS: an optional JSON object. A bad value for a known key warns
// and uses that key's default; an unknown key warns and is ignored; JSON that does not
// parse, or is not an object, disables capture with an error.
ParsedCaptureConfig ParseCaptureConfig(std::optional<std::string_view> enable,
                                       std::optional<std::string_view> args);

// Applies a JSON object of NIM_CAPTURE_ARGS keys given another way (command-line flags) over
// `parsed->config`, with the same validation; diagnostics name the flag source. Keys absent
// from `overrides`, and keys whose override is refused, keep their value (the message says
// whether that is NIM_CAPTURE_ARGS's or the default). Does not change `parsed->enabled`.
void ApplyCaptureOverrides(std::string_view overrides, ParsedCaptureConfig* parsed);

// Checks one key's value (JSON text) alone, for a command-line flag that sets it: there a bad
// value is a usage error, where NIM_CAPTURE_ARGS (whose rules the contract fixes) warns and keeps
// the default. std::nullopt when the key takes the value, else what was given and what the key
// accepts: "the number 5, but it must be a JSON number from 0 to 1".
std::optional<std::string> CaptureKeyRefusal(std::string_view key, std::string_view json_value);

// Reads NIM_CAPTURE_ENABLE and NIM_CAPTURE_ARGS from the process environment.
ParsedCaptureConfig ParseCaptureConfigFromEnvironment();

// The effective configuration as a JSON object with all keys (used in the manifest).
std::string CaptureConfigToJson(const CaptureConfig& config);

}  // namespace llmtap
