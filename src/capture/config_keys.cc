// The NIM_CAPTURE_ARGS keys: one rule per key and the table that names them (config_internal.h).
// The flow around them (which variables, in what order, what disables capture) is config.cc's.
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
//   capture_responses  a JSON boolean, as outcomes. true also turns outcomes on (config.cc).
//   max_response_bytes positive integer, as max_request_bytes.
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
#include <cmath>
#include <limits>

#include <re2/re2.h>

#include "capture/config_internal.h"
#include "common/ascii.h"
#include "store/s3_url.h"

namespace llmtap::config_internal {

std::string Truncate(std::string_view s, size_t max_bytes) {
  if (s.size() <= max_bytes) return std::string(s);
  size_t end = max_bytes;
  while (end > 0 && (static_cast<unsigned char>(s[end]) & 0xC0) == 0x80) --end;
  return std::string(s.substr(0, end)) + "...";
}

std::string Quote(std::string_view s) {
  return Json(std::string(s)).dump(-1, ' ', false, Json::error_handler_t::replace);
}

std::string QuoteTruncated(std::string_view s, size_t max_bytes) {
  return Quote(Truncate(s, max_bytes));
}

std::string DumpNumber(const Json& value) {
  return value.dump(-1, ' ', false, Json::error_handler_t::replace);
}

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

namespace {

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

// A JSON boolean; 0, 1 and "true" are refused.
Refusal ParseBool(const Json& value, bool* out) {
  if (!value.is_boolean()) return std::string("it must be true or false (a JSON boolean)");
  *out = value.get<bool>();
  return std::nullopt;
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
  return ParseBool(value, &config->outcomes);
}

Refusal ApplyCaptureResponses(const Json& value, CaptureConfig* config) {
  return ParseBool(value, &config->capture_responses);
}

Refusal ApplyMaxResponseBytes(const Json& value, CaptureConfig* config) {
  return ParsePositiveInt64(value, &config->max_response_bytes);
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
  return ParseBool(value, &config->keep_local);
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

// A list key (session_headers, session_fields): null or "" is the empty list (off); else a
// string of at most kMaxSessionSources comma-separated items, each one `item_ok` accepts (it
// may rewrite the item). Anything else is refused with `expected`, leaving *out as it was.
template <class ItemOk>
Refusal ParseList(const Json& value, const char* expected, ItemOk item_ok,
                  std::vector<std::string>* out) {
  if (value.is_null()) {
    out->clear();
    return std::nullopt;
  }
  if (!value.is_string()) return std::string(expected);
  auto items = SplitList(value.get_ref<const std::string&>());
  if (!items || items->size() > CaptureConfig::kMaxSessionSources) return std::string(expected);
  for (std::string& item : *items) {
    if (!item_ok(item)) return std::string(expected);
  }
  *out = std::move(*items);
  return std::nullopt;
}

Refusal ApplySessionHeaders(const Json& value, CaptureConfig* config) {
  constexpr const char* kExpected =
      "it must be a string of comma-separated header names (\"x-session-id,x-conversation-id\"; "
      "at most 16, each at most 128 characters of letters, digits and !#$%&'*+-.^_`|~)";
  auto name_ok = [](std::string& name) {
    if (name.size() > 128) return false;
    for (char& c : name) {
      if (!IsTokenChar(c)) return false;
      c = AsciiLower(c);  // stored lowercased
    }
    return true;
  };
  return ParseList(value, kExpected, name_ok, &config->session_headers);
}

Refusal ApplySessionFields(const Json& value, CaptureConfig* config) {
  constexpr const char* kExpected =
      "it must be a string of comma-separated body fields, dotted for nested objects "
      "(\"user,prompt_cache_key,metadata.session_id\"; at most 16, each at most 256 bytes and 8 "
      "keys, no empty keys or control characters)";
  auto path_ok = [](const std::string& path) {
    if (path.size() > 256) return false;
    if (path.front() == '.' || path.back() == '.' || path.find("..") != std::string::npos) {
      return false;
    }
    if (std::count(path.begin(), path.end(), '.') >= 8) return false;
    for (char c : path) {
      if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) return false;
    }
    return true;
  };
  return ParseList(value, kExpected, path_ok, &config->session_fields);
}

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
    {"capture_responses", ApplyCaptureResponses, [] { return std::string("false"); }, true},
    {"max_response_bytes", ApplyMaxResponseBytes,
     [] { return std::to_string(CaptureConfig::kDefaultMaxResponseBytes); }, true},
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

}  // namespace

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

}  // namespace llmtap::config_internal
