#include "capture/config.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <exception>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include <re2/re2.h>
#include <nlohmann/json.hpp>

#include "capture/config_internal.h"
#include "store/s3_url.h"

namespace llmtap {

// Defined outcomes of ParseCaptureConfig (the capture contract in DESIGN.md, made exact).
//
// NIM_CAPTURE_ENABLE
//   "1"                          -> enabled.
//   unset, "0"                   -> disabled, no diagnostic.
//   anything else ("", "true",   -> disabled, kWarning "NIM_CAPTURE_ENABLE" naming the problem
//   " 1", "2", ...)                 (value echoed escaped, cut to 32 bytes) and the fix (1 or 0).
//   When capture is not enabled NIM_CAPTURE_ARGS is not parsed at all: it is irrelevant, and
//   a diagnostic about it would only confuse an operator who turned capture off.
//
// NIM_CAPTURE_ARGS (only when enabled)
//   unset, empty, or only JSON whitespace (space, tab, CR, LF) -> all defaults, no diagnostic.
//   does not parse (syntax error, ill-formed UTF-8, number overflow such as 1e400)
//                                -> disabled, kError "NIM_CAPTURE_ARGS" with the parser's
//                                   position and reason (its "last read" echo is dropped).
//   parses but is not an object  -> disabled, kError "NIM_CAPTURE_ARGS".
//   duplicate key                -> kWarning keyed by the key, naming the value used: the last
//                                   occurrence wins (nlohmann's behaviour); it is validated
//                                   once, in the position of its first occurrence.
//   unknown key                  -> kWarning keyed by the key, ignored.
//   known key, bad value         -> kWarning keyed by the key, the key keeps its default.
//
// Per key: see config_keys.cc (kKeySpecs, one row per key).
//   With format raw_payload and a session key set: kWarning naming the key (rows of that
//   format are bodies alone and never carry a session id); the value is kept.
//   After all keys: with capture_responses true, outcomes is true (the text goes in the outcomes
//   lines), with a kWarning if outcomes was given as false.
//   With upload_url set and neither rotate key given, rotate_bytes = 256 MiB
//   and rotate_seconds = 60 (a file reaches the store only once finished).
//   If max_queue_bytes < max_request_bytes (set or defaulted), kWarning
//   "max_queue_bytes" and max_queue_bytes falls back to its default 1 GiB; if even that is
//   below max_request_bytes, max_queue_bytes = max_request_bytes, so the largest recordable
//   request always fits in the queue.
//
// No function here throws: nlohmann and allocation exceptions are caught, and a failure to
// build the configuration leaves capture disabled.

namespace {


constexpr size_t kMaxKeyBytes = 64;
constexpr const char* kEnableVar = "NIM_CAPTURE_ENABLE";
constexpr const char* kArgsVar = "NIM_CAPTURE_ARGS";
constexpr const char* kDisabledSoNoStrayPrompts =
    "capture is disabled so that prompts are not written to an unintended location";

using config_internal::Describe;
using config_internal::FindKeySpec;
using config_internal::Json;
using config_internal::KeySpec;
using config_internal::KnownKeyList;
using config_internal::kMaxEchoBytes;
using config_internal::kMaxReasonBytes;
using config_internal::Quote;
using config_internal::QuoteTruncated;
using config_internal::Refusal;
using config_internal::Truncate;

std::string JoinList(const std::vector<std::string>& items) {
  std::string joined;
  for (const std::string& item : items) {
    if (!joined.empty()) joined += ',';
    joined += item;
  }
  return joined;
}

// Says what is wrong with a NIM_CAPTURE_ENABLE value other than "1" or "0".
std::string DescribeEnableProblem(std::string_view value) {
  if (value.empty()) return "is set but empty";
  constexpr std::string_view kSpace = " \t\r\n\v\f";
  const size_t first = value.find_first_not_of(kSpace);
  if (first != std::string_view::npos) {
    const size_t last = value.find_last_not_of(kSpace);
    const std::string_view trimmed = value.substr(first, last - first + 1);
    if ((trimmed == "1" || trimmed == "0") && trimmed.size() != value.size()) {
      return "is " + QuoteTruncated(value, kMaxEchoBytes) +
             ", which has whitespace around the digit";
    }
  }
  return "is " + QuoteTruncated(value, kMaxEchoBytes) + ", which is neither 1 nor 0";
}

// nlohmann's what() is "[json.exception.parse_error.101] parse error at line 1, column 2:
// ...; last read: '<input>'". The tag is noise and the echo can be long, so both go.
std::string ParserReason(const std::string& what) {
  std::string reason = what;
  if (reason.rfind("[json.exception.", 0) == 0) {
    const size_t close = reason.find("] ");
    if (close != std::string::npos) reason.erase(0, close + 2);
  }
  const size_t last_read = reason.find("; last read:");
  if (last_read != std::string::npos) reason.erase(last_read);
  return Truncate(reason, kMaxReasonBytes);
}

bool IsJsonWhitespaceOnly(std::string_view s) {
  return s.find_first_not_of(" \t\r\n") == std::string_view::npos;
}

void AddDiagnostic(ParsedCaptureConfig* parsed, LogLevel level, std::string key,
                   std::string message) {
  parsed->diagnostics.push_back(ConfigDiagnostic{level, std::move(key), std::move(message)});
}

void DisableWithArgsError(ParsedCaptureConfig* parsed, const std::string& problem) {
  parsed->enabled = false;
  parsed->config = CaptureConfig{};
  AddDiagnostic(parsed, LogLevel::kError, kArgsVar,
                std::string(kArgsVar) + " " + problem + "; " + kDisabledSoNoStrayPrompts +
                    ". Fix " + kArgsVar + " or unset it to use the defaults.");
}

// A queue smaller than one request could never hold the largest recordable request.
void CheckQueueHoldsRequest(ParsedCaptureConfig* parsed) {
  CaptureConfig& config = parsed->config;
  if (config.max_queue_bytes >= config.max_request_bytes) return;
  const std::string prefix = std::string(kArgsVar) + " key \"max_queue_bytes\" is " +
                             std::to_string(config.max_queue_bytes) +
                             ", less than max_request_bytes " +
                             std::to_string(config.max_request_bytes);
  std::string message;
  if (CaptureConfig::kDefaultMaxQueueBytes >= config.max_request_bytes) {
    config.max_queue_bytes = CaptureConfig::kDefaultMaxQueueBytes;
    message = prefix + ", so the largest recordable request could never be queued; using the " +
              "default " + std::to_string(CaptureConfig::kDefaultMaxQueueBytes) + ".";
  } else {
    config.max_queue_bytes = config.max_request_bytes;
    message = prefix + ", and its default " + std::to_string(CaptureConfig::kDefaultMaxQueueBytes) +
              " is less too; using max_queue_bytes = max_request_bytes = " +
              std::to_string(config.max_request_bytes) + ".";
  }
  AddDiagnostic(parsed, LogLevel::kWarning, "max_queue_bytes", std::move(message));
}

// A file reaches the store only once finished: with upload on and no rotation asked for, files
// are finished at a size and an age that keep the store close behind.
void DefaultUploadRotation(ParsedCaptureConfig* parsed) {
  CaptureConfig& config = parsed->config;
  if (config.upload_url.empty()) return;
  auto given = [&](std::string_view key) {
    return std::find(parsed->set_keys.begin(), parsed->set_keys.end(), key) !=
           parsed->set_keys.end();
  };
  if (given("rotate_bytes") || given("rotate_seconds")) return;
  config.rotate_bytes = CaptureConfig::kUploadRotateBytes;
  config.rotate_ms = CaptureConfig::kUploadRotateMs;
}

// raw_payload rows are request bodies alone: a session id has nowhere to go. Said once per
// source that sets a session key or the format.
void WarnSessionsWithRawFormat(const Json& object, std::string_view source,
                               ParsedCaptureConfig* parsed) {
  const CaptureConfig& config = parsed->config;
  if (config.format != CaptureFormat::kRawPayload) return;
  for (const char* key : {"session_headers", "session_fields"}) {
    const bool set = std::string_view(key) == "session_headers" ? !config.session_headers.empty()
                                                                : !config.session_fields.empty();
    if (!set || (!object.contains(key) && !object.contains("format"))) continue;
    AddDiagnostic(parsed, LogLevel::kWarning, key,
                  std::string(source) + " key \"" + key +
                      "\" is set, but format is \"raw_payload\", whose rows are request bodies "
                      "alone and carry no session id; it has no effect. Use format "
                      "\"mooncake_payload\" to record session ids.");
  }
}

// AIPerf's raw_payload loader takes chat requests only (a row needs `messages`) and refuses a
// whole file for one completions row. Said once per source that sets the format or pattern.
void WarnRawCompletions(const Json& object, std::string_view source,
                        ParsedCaptureConfig* parsed) {
  const CaptureConfig& config = parsed->config;
  if (config.format != CaptureFormat::kRawPayload) return;
  if (!object.contains("format") && !object.contains("endpoint_pattern")) return;
  const RE2 pattern(config.endpoint_pattern, RE2::Quiet);
  if (!pattern.ok() || !RE2::PartialMatch("/v1/completions", pattern)) return;
  AddDiagnostic(parsed, LogLevel::kWarning, "format",
                std::string(source) +
                    " key \"format\" is \"raw_payload\" and endpoint_pattern matches "
                    "/v1/completions, but AIPerf's raw_payload loader takes chat requests only "
                    "and refuses a file holding a completions row. Capture completions in "
                    "\"mooncake_payload\", set endpoint_pattern to \"^/v1/chat/completions$\", "
                    "or separate the capture later with `llmtap split` (it writes completions "
                    "as mooncake_payload rows AIPerf replays verbatim).");
}

// The response text has nowhere to go but the outcomes lines.
void ResponsesNeedOutcomes(std::string_view source, ParsedCaptureConfig* parsed) {
  CaptureConfig& config = parsed->config;
  if (!config.capture_responses || config.outcomes) return;
  config.outcomes = true;
  const bool outcomes_given = std::find(parsed->set_keys.begin(), parsed->set_keys.end(),
                                        "outcomes") != parsed->set_keys.end();
  if (outcomes_given) {
    AddDiagnostic(parsed, LogLevel::kWarning, "outcomes",
                  std::string(source) +
                      " key \"outcomes\" is false, but capture_responses is true and writes the "
                      "response text in the outcomes lines; turning outcomes on. Set "
                      "capture_responses to false to write no outcomes.");
  }
}

// `source` names where the object came from in diagnostics (NIM_CAPTURE_ARGS or the flags).
void ApplyArgsObject(const Json& object, std::string_view source, ParsedCaptureConfig* parsed) {
  for (const auto& [raw_key, value] : object.items()) {
    const KeySpec* spec = FindKeySpec(raw_key);
    if (spec == nullptr) {
      const std::string key = Truncate(raw_key, kMaxKeyBytes);
      AddDiagnostic(parsed, LogLevel::kWarning, key,
                    std::string(source) + " key " + Quote(key) +
                        " is not a known key; it is ignored. Known keys: " + KnownKeyList() + ".");
      continue;
    }
    const Refusal refusal = spec->apply(value, &parsed->config);
    const bool was_set = std::find(parsed->set_keys.begin(), parsed->set_keys.end(), spec->name) !=
                         parsed->set_keys.end();
    if (!refusal) {
      if (!was_set) parsed->set_keys.emplace_back(spec->name);
      continue;
    }
    AddDiagnostic(parsed, LogLevel::kWarning, std::string(spec->name),
                  std::string(source) + " key \"" + std::string(spec->name) + "\" is " +
                      Describe(value, spec->echo_strings) + ", but " + *refusal +
                      (was_set ? "; keeping the value " + std::string(kArgsVar) + " gave it."
                               : "; using the default " + spec->default_text() + "."));
  }
  CheckQueueHoldsRequest(parsed);
  ResponsesNeedOutcomes(source, parsed);
  DefaultUploadRotation(parsed);
  WarnSessionsWithRawFormat(object, source, parsed);
  WarnRawCompletions(object, source, parsed);
}

ParsedCaptureConfig ParseOrThrow(std::optional<std::string_view> enable,
                                 std::optional<std::string_view> args) {
  ParsedCaptureConfig parsed;
  if (!enable || *enable == "0") return parsed;
  if (*enable != "1") {
    AddDiagnostic(&parsed, LogLevel::kWarning, kEnableVar,
                  std::string(kEnableVar) + " " + DescribeEnableProblem(*enable) +
                      "; capture is disabled. Use " + kEnableVar + "=1 to enable capture or " +
                      kEnableVar + "=0 to disable it.");
    return parsed;
  }
  parsed.enabled = true;
  if (!args || IsJsonWhitespaceOnly(*args)) return parsed;

  Json json;
  // Top-level keys given more than once, each once, in order: warned about below (the last
  // occurrence wins).
  std::vector<std::string> seen_keys;
  std::vector<std::string> repeated_keys;
  auto note_keys = [&](int depth, Json::parse_event_t event, Json& parsed_value) {
    if (depth == 1 && event == Json::parse_event_t::key) {
      std::string key = parsed_value.get<std::string>();
      if (std::find(seen_keys.begin(), seen_keys.end(), key) == seen_keys.end()) {
        seen_keys.push_back(std::move(key));
      } else if (std::find(repeated_keys.begin(), repeated_keys.end(), key) ==
                 repeated_keys.end()) {
        repeated_keys.push_back(std::move(key));
      }
    }
    return true;
  };
  try {
    json = Json::parse(args->begin(), args->end(), note_keys);
  } catch (const Json::exception& e) {
    DisableWithArgsError(&parsed, "is not valid JSON (" + ParserReason(e.what()) + ")");
    return parsed;
  }
  if (!json.is_object()) {
    DisableWithArgsError(
        &parsed, std::string("is a JSON ") + json.type_name() + ", but it must be a JSON object");
    return parsed;
  }
  for (const std::string& repeated : repeated_keys) {
    const std::string key = Truncate(repeated, kMaxKeyBytes);
    const KeySpec* spec = FindKeySpec(repeated);
    AddDiagnostic(
        &parsed, LogLevel::kWarning, key,
        std::string(kArgsVar) + " key " + Quote(key) + " is given more than once; the last one (" +
            Describe(json[repeated], spec != nullptr && spec->echo_strings) + ") is used.");
  }
  ApplyArgsObject(json, kArgsVar, &parsed);
  return parsed;
}

}  // namespace

std::string_view CaptureFormatName(CaptureFormat format) {
  switch (format) {
    case CaptureFormat::kMooncakePayload:
      return "mooncake_payload";
    case CaptureFormat::kRawPayload:
      return "raw_payload";
  }
  return "mooncake_payload";
}

ParsedCaptureConfig ParseCaptureConfig(std::optional<std::string_view> enable,
                                       std::optional<std::string_view> args) {
  try {
    return ParseOrThrow(enable, args);
  } catch (const std::exception& e) {
    // Only allocation failure or a library bug gets here. Capture stays off: a configuration
    // that was not fully understood must not decide where prompts go.
    ParsedCaptureConfig parsed;
    try {
      AddDiagnostic(&parsed, LogLevel::kError, kArgsVar,
                    std::string(kArgsVar) + " could not be processed (" +
                        Truncate(e.what(), kMaxReasonBytes) + "); " + kDisabledSoNoStrayPrompts +
                        ".");
    } catch (...) {
      parsed.diagnostics.clear();
    }
    return parsed;
  }
}

std::optional<std::string> CaptureKeyRefusal(std::string_view key, std::string_view json_value) {
  const KeySpec* spec = FindKeySpec(key);
  if (spec == nullptr) return Quote(key) + " is not a known key";
  try {
    const Json value = Json::parse(json_value.begin(), json_value.end());
    CaptureConfig scratch;
    const Refusal refusal = spec->apply(value, &scratch);
    if (!refusal) return std::nullopt;
    return Describe(value, spec->echo_strings) + ", but " + *refusal;
  } catch (const std::exception& e) {
    return "not JSON (" + Truncate(e.what(), kMaxReasonBytes) + ")";
  }
}

void ApplyCaptureOverrides(std::string_view overrides, ParsedCaptureConfig* parsed) {
  try {
    const Json json = Json::parse(overrides.begin(), overrides.end());
    if (!json.is_object() || json.empty()) return;
    ApplyArgsObject(json, "command-line flag for", parsed);
  } catch (const std::exception& e) {
    AddDiagnostic(parsed, LogLevel::kWarning, "flags",
                  "command-line capture flags could not be applied (" +
                      Truncate(e.what(), kMaxReasonBytes) + ")");
  }
}

ParsedCaptureConfig ParseCaptureConfigFromEnvironment() {
  auto read = [](const char* name) -> std::optional<std::string_view> {
    const char* value = std::getenv(name);
    if (value == nullptr) return std::nullopt;
    return std::string_view(value);
  };
  return ParseCaptureConfig(read(kEnableVar), read(kArgsVar));
}

std::string CaptureConfigToJson(const CaptureConfig& config) {
  try {
    Json json = Json::object();
    json["path"] = config.path;
    json["format"] = std::string(CaptureFormatName(config.format));
    json["max_request_bytes"] = config.max_request_bytes;
    json["sample_rate"] = config.sample_rate;
    json["endpoint_pattern"] = config.endpoint_pattern;
    json["max_queue_bytes"] = config.max_queue_bytes;
    json["outcomes"] = config.outcomes;
    json["capture_responses"] = config.capture_responses;
    json["max_response_bytes"] = config.max_response_bytes;
    json["rotate_bytes"] = config.rotate_bytes > 0 ? Json(config.rotate_bytes) : Json(nullptr);
    json["rotate_seconds"] =
        config.rotate_ms > 0 ? Json(static_cast<double>(config.rotate_ms) / 1000.0) : Json(nullptr);
    json["upload_url"] = config.upload_url.empty() ? Json(nullptr) : Json(config.upload_url);
    json["replica"] = config.replica.empty() ? Json(nullptr) : Json(config.replica);
    json["compress"] = config.compress_zstd ? "zstd" : "none";
    json["keep_local"] = config.keep_local;
    json["max_local_bytes"] = config.max_local_bytes;
    json["session_headers"] =
        config.session_headers.empty() ? Json(nullptr) : Json(JoinList(config.session_headers));
    json["session_fields"] =
        config.session_fields.empty() ? Json(nullptr) : Json(JoinList(config.session_fields));
    // A path given on the command line may be ill-formed UTF-8; JSON cannot carry it, so
    // such bytes become U+FFFD instead of making the manifest unwritable.
    return json.dump(-1, ' ', false, Json::error_handler_t::replace);
  } catch (...) {
    return "{}";
  }
}

}  // namespace llmtap
