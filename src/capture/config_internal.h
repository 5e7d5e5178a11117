// Internals of the capture configuration parser (config.h), shared by config.cc (the contract's
// flow: NIM_CAPTURE_ENABLE, NIM_CAPTURE_ARGS, overrides, diagnostics) and config_keys.cc (one
// rule per NIM_CAPTURE_ARGS key). Internal to llmtap_capture; pure functions, any thread.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>

#include "capture/config.h"

namespace llmtap::config_internal {

using Json = nlohmann::ordered_json;

// Values are echoed in diagnostics cut to this many bytes.
constexpr size_t kMaxEchoBytes = 32;
// Parser and RE2 error texts are cut to this many bytes.
constexpr size_t kMaxReasonBytes = 200;

// Cuts `s` to at most `max_bytes` without splitting a UTF-8 sequence, marking the cut.
std::string Truncate(std::string_view s, size_t max_bytes);
// `s` as a quoted JSON string: control characters and quotes are escaped, so a value can
// never forge log lines; ill-formed UTF-8 is replaced rather than throwing.
std::string Quote(std::string_view s);
std::string QuoteTruncated(std::string_view s, size_t max_bytes);
// Describes a value for a diagnostic. Strings are echoed only when `echo_strings`.
std::string Describe(const Json& value, bool echo_strings);

// The outcome of applying one key's value: std::nullopt when accepted, otherwise the reason
// it was refused, phrased to follow "but ".
using Refusal = std::optional<std::string>;

// One row per NIM_CAPTURE_ARGS key. `apply` validates and stores the value, leaving the
// default in place when it refuses. `echo_strings` is false for values that may be private.
struct KeySpec {
  std::string_view name;
  Refusal (*apply)(const Json& value, CaptureConfig* config);
  std::string (*default_text)();
  bool echo_strings;
};

// The key's row, or nullptr for an unknown key.
const KeySpec* FindKeySpec(std::string_view name);
// "path, format, ...": every known key, for the unknown-key warning.
std::string KnownKeyList();

}  // namespace llmtap::config_internal
