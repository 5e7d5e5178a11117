#include "capture/config.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <exception>
#include <limits>
#include <string>
#include <utility>

#include <re2/re2.h>
#include <nlohmann/json.hpp>

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
//   duplicate key                -> the last occurrence wins (nlohmann's behaviour); it is
//                                   validated once, in the position of its first occurrence.
//   unknown key                  -> kWarning keyed by the key, ignored.
//   known key, bad value         -> kWarning keyed by the key, the key keeps its default.
//
// Per key (kKeySpecs below, one row per key):
//   path               non-empty string without NUL bytes. The given string is never echoed
//                      (it may name a private location); only "empty" or "contains NUL" is.
//   format             exactly "mooncake_payload" or "raw_payload" (case-sensitive).
//   max_request_bytes, positive integer. A float with zero fraction below 2^63 (1048576.0,
//   max_queue_bytes    1e6) is taken as that integer. Rejected: non-integral floats, zero,
//                      negatives, anything above INT64_MAX (incl. 2^64-1, 1e300), strings
//                      (even "1024"), booleans, null, arrays, objects.
//   sample_rate        any JSON number in [0, 1] (integers 0 and 1 included; -0.0 becomes 0.0).
//                      Rejected: outside [0, 1], strings ("0.5"), booleans, null, containers.
//   endpoint_pattern   string that compiles with RE2. The empty pattern is valid and matches
//                      every path. Rejected: non-strings, patterns RE2 refuses (error text is
//                      included in the message).
//   outcomes           a JSON boolean. Rejected: everything else, including 0/1 and "true".
//   rotate_bytes       positive integer, as max_request_bytes. Absent or null: no size-based
//                      rotation.
//   rotate_seconds     a JSON number > 0 and at most 31622400 (a leap year); fractions allowed
//                      (kept to the millisecond, at least 1 ms). Absent or null: no time-based
//                      rotation.
//   upload_url         a string "s3://bucket[/prefix/]" that store::ParseS3Url accepts; null:
//                      no upload. A prefix without a trailing '/' gets one.
//   replica            1-128 characters of [A-Za-z0-9._-]. Absent or null: the host name.
//   compress           exactly "none" or "zstd".
//   keep_local         a JSON boolean.
//   max_local_bytes    positive integer, as max_request_bytes.
//   session_headers    a string: comma-separated HTTP field names (RFC 9110 tokens, at most 16,
//                      each at most 128 bytes), spaces around each name ignored, stored
//                      lowercased; "" or null: off. Rejected: empty names ("a,,b", "a,"),
//                      characters outside a token, non-strings (arrays included).
//   session_fields     a string: comma-separated dotted paths into the body ("user",
//                      "metadata.session_id"; at most 16, each at most 256 bytes and 8 keys),
//                      spaces around each path ignored; "" or null: off. Rejected: empty paths
//                      or keys ("a..b", ".a"), control characters, non-strings.
//   With format raw_payload and a session key set: kWarning naming the key (rows of that
//   format are bodies alone and never carry a session id); the value is kept.
//   After all keys: with upload_url set and neither rotate key given, rotate_bytes = 256 MiB
//   and rotate_seconds = 60 (a file reaches the store only once finished).
//   If max_queue_bytes < max_request_bytes (set or defaulted), kWarning
//   "max_queue_bytes" and max_queue_bytes falls back to its default 1 GiB; if even that is
//   below max_request_bytes, max_queue_bytes = max_request_bytes, so the largest recordable
//   request always fits in the queue.
//
// No function here throws: nlohmann and allocation exceptions are caught, and a failure to
// build the configuration leaves capture disabled.

namespace {

using Json = nlohmann::ordered_json;

constexpr size_t kMaxEchoBytes = 32;
constexpr size_t kMaxKeyBytes = 64;
constexpr size_t kMaxReasonBytes = 200;
constexpr const char* kEnableVar = "NIM_CAPTURE_ENABLE";
constexpr const char* kArgsVar = "NIM_CAPTURE_ARGS";
constexpr const char* kDisabledSoNoStrayPrompts =
    "capture is disabled so that prompts are not written to an unintended location";

// Cuts `s` to at most `max_bytes` without splitting a UTF-8 sequence, marking the cut.
std::string Truncate(std::string_view s, size_t max_bytes) {
  if (s.size() <= max_bytes) return std::string(s);
  size_t end = max_bytes;
  while (end > 0 && (static_cast<unsigned char>(s[end]) & 0xC0) == 0x80) --end;
  return std::string(s.substr(0, end)) + "...";
}

// `s` as a quoted JSON string: control characters and quotes are escaped, so a value can
// never forge log lines; ill-formed UTF-8 is replaced rather than throwing.
std::string Quote(std::string_view s) {
  return Json(std::string(s)).dump(-1, ' ', false, Json::error_handler_t::replace);
}

std::string QuoteTruncated(std::string_view s, size_t max_bytes) {
  return Quote(Truncate(s, max_bytes));
}

std::string DumpNumber(const Json& value) {
  return value.dump(-1, ' ', false, Json::error_handler_t::replace);
}

// Describes a value for a diagnostic. Strings are echoed only when `echo_strings`.
std::string Describe(const Json& value, bool echo_strings) {
  switch (value.type()) {
    case Json::value_t::null:
      return "null";
    case Json::value_t::boolean:
      return value.get<bool>() ? "the boolean true" : "the boolean false";
    case Json::value_t::number_integer:
    case Json::value_t::number_unsigned:
    case Json::value_t::number_float:
      return "the number " + DumpNumber(value);
    case Json::value_t::string: {
      const auto& s = value.get_ref<const std::string&>();
      if (s.empty()) return "an empty string";
      if (!echo_strings) return "a string";
      return "the string " + QuoteTruncated(s, kMaxEchoBytes);
    }
    case Json::value_t::array:
      return "an array";
    case Json::value_t::object:
      return "an object";
    case Json::value_t::binary:
    case Json::value_t::discarded:
      break;
  }
  return "an unsupported value";
}

// The outcome of applying one key's value: std::nullopt when accepted, otherwise the reason
// it was refused, phrased to follow "but ".
using Refusal = std::optional<std::string>;

// A positive integer, accepting integral floats so that generated JSON (1048576.0, 1e6)
// works; everything that would not round-trip into int64_t exactly is refused.
Refusal ParsePositiveInt64(const Json& value, int64_t* out) {
  constexpr const char* kExpected = "it must be a positive integer";
  if (value.is_number_unsigned()) {
    const auto v = value.get<uint64_t>();
    if (v == 0) return std::string(kExpected);
    if (v > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      return std::string(kExpected) + " no larger than 9223372036854775807";
    }
    *out = static_cast<int64_t>(v);
    return std::nullopt;
  }
  if (value.is_number_integer()) {
    const auto v = value.get<int64_t>();
    if (v <= 0) return std::string(kExpected);
    *out = v;
    return std::nullopt;
  }
  if (value.is_number_float()) {
    const auto v = value.get<double>();
    // 2^63 is the first double above INT64_MAX; anything below it converts exactly.
    constexpr double kTwoPow63 = 9223372036854775808.0;
    if (!std::isfinite(v) || v <= 0) return std::string(kExpected);
    if (std::trunc(v) != v) return std::string(kExpected) + " (no fractional part)";
    if (v >= kTwoPow63) return std::string(kExpected) + " no larger than 9223372036854775807";
    *out = static_cast<int64_t>(v);
    return std::nullopt;
  }
  if (value.is_string()) return std::string(kExpected) + " written as a JSON number, not a string";
  return std::string(kExpected);
}

Refusal ApplyPath(const Json& value, CaptureConfig* config) {
  if (!value.is_string()) return std::string("it must be a non-empty string");
  const auto& s = value.get_ref<const std::string&>();
  if (s.empty()) return std::string("it must be a non-empty string");
  if (s.find('\0') != std::string::npos) {
    return std::string("it contains a NUL byte, which no file path can hold");
  }
  config->path = s;
  return std::nullopt;
}

Refusal ApplyFormat(const Json& value, CaptureConfig* config) {
  constexpr const char* kExpected =
      "it must be \"mooncake_payload\" or \"raw_payload\" (case-sensitive)";
  if (!value.is_string()) return std::string(kExpected);
  const auto& s = value.get_ref<const std::string&>();
  if (s == CaptureFormatName(CaptureFormat::kMooncakePayload)) {
    config->format = CaptureFormat::kMooncakePayload;
  } else if (s == CaptureFormatName(CaptureFormat::kRawPayload)) {
    config->format = CaptureFormat::kRawPayload;
  } else {
    return std::string(kExpected);
  }
  return std::nullopt;
}

Refusal ApplyMaxRequestBytes(const Json& value, CaptureConfig* config) {
  return ParsePositiveInt64(value, &config->max_request_bytes);
}

Refusal ApplyMaxQueueBytes(const Json& value, CaptureConfig* config) {
  return ParsePositiveInt64(value, &config->max_queue_bytes);
}

Refusal ApplySampleRate(const Json& value, CaptureConfig* config) {
  constexpr const char* kExpected = "it must be a JSON number from 0 to 1";
  if (!value.is_number()) {
    if (value.is_string()) return std::string(kExpected) + ", not a string";
    return std::string(kExpected);
  }
  const auto v = value.get<double>();
  if (!(v >= 0.0 && v <= 1.0)) return std::string(kExpected);
  // + 0.0 turns -0.0 into 0.0, so the manifest never shows "-0.0".
  config->sample_rate = v + 0.0;
  return std::nullopt;
}

Refusal ApplyEndpointPattern(const Json& value, CaptureConfig* config) {
  if (!value.is_string()) return std::string("it must be a string holding an RE2 regex");
  const auto& s = value.get_ref<const std::string&>();
  // Quiet: RE2 would print the error to stderr; it goes into our diagnostic instead.
  const RE2 re(s, RE2::Quiet);
  if (!re.ok()) {
    return "it does not compile as an RE2 regex (" + Truncate(re.error(), kMaxReasonBytes) + ")";
  }
  config->endpoint_pattern = s;
  return std::nullopt;
}

Refusal ApplyOutcomes(const Json& value, CaptureConfig* config) {
  if (!value.is_boolean()) return std::string("it must be true or false (a JSON boolean)");
  config->outcomes = value.get<bool>();
  return std::nullopt;
}

Refusal ApplyRotateBytes(const Json& value, CaptureConfig* config) {
  if (value.is_null()) {
    config->rotate_bytes = 0;
    return std::nullopt;
  }
  return ParsePositiveInt64(value, &config->rotate_bytes);
}

Refusal ApplyRotateSeconds(const Json& value, CaptureConfig* config) {
  constexpr const char* kExpected = "it must be a JSON number of seconds above 0, at most 31622400";
  if (value.is_null()) {
    config->rotate_ms = 0;
    return std::nullopt;
  }
  if (!value.is_number()) {
    if (value.is_string()) return std::string(kExpected) + ", not a string";
    return std::string(kExpected);
  }
  const auto v = value.get<double>();
  if (!(v > 0.0 && v <= 31622400.0)) return std::string(kExpected);
  config->rotate_ms = std::max<int64_t>(1, static_cast<int64_t>(std::llround(v * 1000.0)));
  return std::nullopt;
}

Refusal ApplyUploadUrl(const Json& value, CaptureConfig* config) {
  if (value.is_null()) {
    config->upload_url.clear();
    return std::nullopt;
  }
  constexpr const char* kExpected = "it must be a string \"s3://bucket/prefix/\"";
  if (!value.is_string()) return std::string(kExpected);
  const auto& s = value.get_ref<const std::string&>();
  store::S3Url url;
  Status parsed = store::ParseS3Url(s, &url);
  if (!parsed.ok())
    return std::string(kExpected) + " (" + Truncate(parsed.message(), kMaxReasonBytes) + ")";
  if (!url.key.empty() && url.key.back() != '/') url.key.push_back('/');
  config->upload_url = url.ToString();
  return std::nullopt;
}

Refusal ApplyReplica(const Json& value, CaptureConfig* config) {
  if (value.is_null()) {
    config->replica.clear();
    return std::nullopt;
  }
  constexpr const char* kExpected =
      "it must be a string of 1 to 128 letters, digits, '.', '_' or '-' (it names a folder in "
      "the store)";
  if (!value.is_string()) return std::string(kExpected);
  const auto& s = value.get_ref<const std::string&>();
  if (s.empty() || s.size() > 128 || s == "." || s == "..") return std::string(kExpected);
  for (char c : s) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '.' || c == '_' || c == '-';
    if (!ok) return std::string(kExpected);
  }
  config->replica = s;
  return std::nullopt;
}

Refusal ApplyCompress(const Json& value, CaptureConfig* config) {
  constexpr const char* kExpected = "it must be \"none\" or \"zstd\"";
  if (!value.is_string()) return std::string(kExpected);
  const auto& s = value.get_ref<const std::string&>();
  if (s != "none" && s != "zstd") return std::string(kExpected);
  config->compress_zstd = s == "zstd";
  return std::nullopt;
}

Refusal ApplyKeepLocal(const Json& value, CaptureConfig* config) {
  if (!value.is_boolean()) return std::string("it must be true or false (a JSON boolean)");
  config->keep_local = value.get<bool>();
  return std::nullopt;
}

Refusal ApplyMaxLocalBytes(const Json& value, CaptureConfig* config) {
  return ParsePositiveInt64(value, &config->max_local_bytes);
}

// Splits a comma-separated list, trimming spaces and tabs around each item. An empty string is
// an empty list; an empty item is refused (nullopt).
std::optional<std::vector<std::string>> SplitList(std::string_view s) {
  std::vector<std::string> items;
  if (s.find_first_not_of(" \t") == std::string_view::npos) return items;
  size_t start = 0;
  while (true) {
    const size_t comma = s.find(',', start);
    std::string_view item =
        s.substr(start, comma == std::string_view::npos ? s.npos : comma - start);
    const size_t first = item.find_first_not_of(" \t");
    if (first == std::string_view::npos) return std::nullopt;
    item = item.substr(first, item.find_last_not_of(" \t") - first + 1);
    items.emplace_back(item);
    if (comma == std::string_view::npos) break;
    start = comma + 1;
  }
  return items;
}

bool IsTokenChar(char c) {
  if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9')) return true;
  return std::string_view("!#$%&'*+-.^_`|~").find(c) != std::string_view::npos;
}

Refusal ApplySessionHeaders(const Json& value, CaptureConfig* config) {
  if (value.is_null()) {
    config->session_headers.clear();
    return std::nullopt;
  }
  constexpr const char* kExpected =
      "it must be a string of comma-separated header names (\"x-session-id,x-conversation-id\"; "
      "at most 16, each at most 128 characters of letters, digits and !#$%&'*+-.^_`|~)";
  if (!value.is_string()) return std::string(kExpected);
  auto items = SplitList(value.get_ref<const std::string&>());
  if (!items || items->size() > CaptureConfig::kMaxSessionSources) return std::string(kExpected);
  for (std::string& name : *items) {
    if (name.size() > 128) return std::string(kExpected);
    for (char& c : name) {
      if (!IsTokenChar(c)) return std::string(kExpected);
      if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
    }
  }
  config->session_headers = std::move(*items);
  return std::nullopt;
}

Refusal ApplySessionFields(const Json& value, CaptureConfig* config) {
  if (value.is_null()) {
    config->session_fields.clear();
    return std::nullopt;
  }
  constexpr const char* kExpected =
      "it must be a string of comma-separated body fields, dotted for nested objects "
      "(\"user,prompt_cache_key,metadata.session_id\"; at most 16, each at most 256 bytes and 8 "
      "keys, no empty keys or control characters)";
  if (!value.is_string()) return std::string(kExpected);
  auto items = SplitList(value.get_ref<const std::string&>());
  if (!items || items->size() > CaptureConfig::kMaxSessionSources) return std::string(kExpected);
  for (const std::string& path : *items) {
    if (path.size() > 256) return std::string(kExpected);
    if (path.front() == '.' || path.back() == '.' || path.find("..") != std::string::npos) {
      return std::string(kExpected);
    }
    if (std::count(path.begin(), path.end(), '.') >= 8) return std::string(kExpected);
    for (char c : path) {
      if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) return std::string(kExpected);
    }
  }
  config->session_fields = std::move(*items);
  return std::nullopt;
}

std::string JoinList(const std::vector<std::string>& items) {
  std::string joined;
  for (const std::string& item : items) {
    if (!joined.empty()) joined += ',';
    joined += item;
  }
  return joined;
}

// One row per NIM_CAPTURE_ARGS key. `apply` validates and stores the value, leaving the
// default in place when it refuses. `echo_strings` is false for values that may be private.
struct KeySpec {
  std::string_view name;
  Refusal (*apply)(const Json& value, CaptureConfig* config);
  std::string (*default_text)();
  bool echo_strings;
};

const KeySpec kKeySpecs[] = {
    {"path", ApplyPath, [] { return Quote(CaptureConfig::kDefaultPath); }, false},
    {"format", ApplyFormat,
     [] { return Quote(CaptureFormatName(CaptureFormat::kMooncakePayload)); }, true},
    {"max_request_bytes", ApplyMaxRequestBytes,
     [] { return std::to_string(CaptureConfig::kDefaultMaxRequestBytes); }, true},
    {"sample_rate", ApplySampleRate, [] { return std::string("1.0"); }, true},
    {"endpoint_pattern", ApplyEndpointPattern,
     [] { return Quote(CaptureConfig::kDefaultEndpointPattern); }, true},
    {"max_queue_bytes", ApplyMaxQueueBytes,
     [] { return std::to_string(CaptureConfig::kDefaultMaxQueueBytes); }, true},
    {"outcomes", ApplyOutcomes, [] { return std::string("false"); }, true},
    {"rotate_bytes", ApplyRotateBytes, [] { return std::string("(no size-based rotation)"); },
     true},
    {"rotate_seconds", ApplyRotateSeconds, [] { return std::string("(no time-based rotation)"); },
     true},
    {"upload_url", ApplyUploadUrl, [] { return std::string("(no upload)"); }, true},
    {"replica", ApplyReplica, [] { return std::string("(the host name)"); }, true},
    {"compress", ApplyCompress, [] { return Quote("none"); }, true},
    {"keep_local", ApplyKeepLocal, [] { return std::string("false"); }, true},
    {"max_local_bytes", ApplyMaxLocalBytes,
     [] { return std::to_string(CaptureConfig::kDefaultMaxLocalBytes); }, true},
    {"session_headers", ApplySessionHeaders, [] { return std::string("(off)"); }, true},
    {"session_fields", ApplySessionFields, [] { return std::string("(off)"); }, true},
};

const KeySpec* FindKeySpec(std::string_view name) {
  for (const auto& spec : kKeySpecs) {
    if (spec.name == name) return &spec;
  }
  return nullptr;
}

std::string KnownKeyList() {
  std::string list;
  for (const auto& spec : kKeySpecs) {
    if (!list.empty()) list += ", ";
    list += spec.name;
  }
  return list;
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
  DefaultUploadRotation(parsed);
  WarnSessionsWithRawFormat(object, source, parsed);
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
  try {
    json = Json::parse(args->begin(), args->end());
  } catch (const Json::exception& e) {
    DisableWithArgsError(&parsed, "is not valid JSON (" + ParserReason(e.what()) + ")");
    return parsed;
  }
  if (!json.is_object()) {
    DisableWithArgsError(
        &parsed, std::string("is a JSON ") + json.type_name() + ", but it must be a JSON object");
    return parsed;
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
