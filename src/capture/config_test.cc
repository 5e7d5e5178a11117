// ParseCaptureConfig against its table of cases: every key, good and bad values.
#include "capture/config.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <optional>
#include <ostream>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>
#include "capture/config_test_util.h"

namespace llmtap {
namespace {

using namespace config_test_util;

constexpr LogLevel kW = LogLevel::kWarning;

constexpr int64_t kMiB = 1048576;

constexpr int64_t kGiB = 1073741824;

struct ExpectedDiagnostic {
  std::string key;
  LogLevel level = kW;
};

struct Case {
  std::string name;  // test name suffix: [A-Za-z0-9_] only
  std::optional<std::string> args = std::nullopt;
  std::optional<std::string> enable = "1";
  bool enabled = true;
  CaptureConfig config = {};
  std::vector<ExpectedDiagnostic> diagnostics = {};
};

void PrintTo(const Case& c, std::ostream* os) {
  *os << c.name << " enable=" << (c.enable ? "\"" + *c.enable + "\"" : "unset")
      << " args=" << (c.args ? c.args->substr(0, 80) : "unset");
}

// A warning for `key`, all fields at their defaults.
Case BadValue(std::string name, std::string key, std::string json_value) {
  std::string args = "{\"" + key + "\":" + json_value + "}";
  return Case{.name = std::move(name), .args = std::move(args), .diagnostics = {{key, kW}}};
}

// NIM_CAPTURE_ARGS that disable capture with an error.
Case Disabled(std::string name, std::string args) {
  return Case{.name = std::move(name),
              .args = std::move(args),
              .enabled = false,
              .diagnostics = {{"NIM_CAPTURE_ARGS", kE}}};
}

// NIM_CAPTURE_ENABLE values that disable capture with a warning.
Case BadEnable(std::string name, std::string enable) {
  return Case{.name = std::move(name),
              .enable = std::move(enable),
              .enabled = false,
              .diagnostics = {{"NIM_CAPTURE_ENABLE", kW}}};
}

// Every kind of value a positive-integer key must refuse.
const std::vector<std::pair<std::string, std::string>> kBadPositiveIntegers = {
    {"zero", "0"},
    {"zero_float", "0.0"},
    {"negative_zero_float", "-0.0"},
    {"underflow_to_zero", "1e-400"},
    {"negative", "-1"},
    {"negative_float", "-1048576.0"},
    {"int64_min", "-9223372036854775808"},
    {"non_integral_float", "1.5"},
    {"small_fraction", "1048576.000001"},
    {"below_one", "0.5"},
    {"int64_max_plus_one", "9223372036854775808"},
    {"uint64_max", "18446744073709551615"},
    {"beyond_uint64", "18446744073709551616"},
    {"two_pow_63_float", "9223372036854775808.0"},
    {"huge_float", "1e300"},
    {"numeric_string", "\"1024\""},
    {"empty_string", "\"\""},
    {"true", "true"},
    {"false", "false"},
    {"null", "null"},
    {"array", "[1024]"},
    {"object", "{\"bytes\":1024}"},
};

std::vector<Case> AllCases() {
  std::vector<Case> cases = {
      // NIM_CAPTURE_ENABLE.
      {.name = "enable_unset", .enable = std::nullopt, .enabled = false},
      {.name = "enable_zero", .enable = "0", .enabled = false},
      {.name = "enable_one", .enable = "1", .enabled = true},
      BadEnable("enable_empty", ""),
      BadEnable("enable_true", "true"),
      BadEnable("enable_yes", "yes"),
      BadEnable("enable_on", "on"),
      BadEnable("enable_leading_space", " 1"),
      BadEnable("enable_trailing_newline", "1\n"),
      BadEnable("enable_zero_with_space", "0 "),
      BadEnable("enable_two", "2"),
      BadEnable("enable_leading_zero", "01"),
      BadEnable("enable_minus_one", "-1"),
      BadEnable("enable_embedded_nul", std::string("1\0", 2)),
      BadEnable("enable_huge", std::string(10000, 'x')),
      // NIM_CAPTURE_ARGS is not even parsed when capture is off.
      {.name = "args_ignored_when_unset",
       .args = "{not json",
       .enable = std::nullopt,
       .enabled = false},
      {.name = "args_ignored_when_zero", .args = "[1]", .enable = "0", .enabled = false},
      {.name = "args_ignored_when_bad_enable",
       .args = R"({"bogus": 1, "path": ""})",
       .enable = "yes",
       .enabled = false,
       .diagnostics = {{"NIM_CAPTURE_ENABLE", kW}}},

      // Absent or blank NIM_CAPTURE_ARGS: defaults, no diagnostic.
      {.name = "args_unset"},
      {.name = "args_empty", .args = ""},
      {.name = "args_whitespace", .args = " \t\r\n  "},
      {.name = "args_empty_object", .args = "{}"},
      {.name = "args_empty_object_padded", .args = "\n  { }  \n"},

      // Not JSON: disabled with an error, even when other keys were fine.
      Disabled("invalid_unclosed", "{"),
      Disabled("invalid_bare_word", "nope"),
      Disabled("invalid_unquoted_key", "{path: \"/x\"}"),
      Disabled("invalid_single_quotes", "{'path': '/x'}"),
      Disabled("invalid_missing_value", R"({"path": })"),
      Disabled("invalid_trailing_comma", R"({"path": "/x",})"),
      Disabled("invalid_comment", R"({"path": "/x"} // here)"),
      Disabled("invalid_trailing_garbage", R"({"path": "/x"} x)"),
      Disabled("invalid_two_objects", R"({} {})"),
      Disabled("invalid_utf8", "{\"path\": \"/x\xff\"}"),
      Disabled("invalid_raw_control_char", "{\"path\": \"/x\ny\"}"),
      Disabled("invalid_vertical_tab_only", "\v"),
      Disabled("invalid_nan", R"({"sample_rate": NaN})"),
      Disabled("invalid_number_overflow", R"({"path": "/x", "max_request_bytes": 1e400})"),
      // JSON, but not an object.
      Disabled("not_object_empty_array", "[]"),
      Disabled("not_object_array_of_object", R"([{"path": "/x"}])"),
      Disabled("not_object_string", R"("{\"path\": \"/x\"}")"),
      Disabled("not_object_number", "42"),
      Disabled("not_object_null", "null"),
      Disabled("not_object_true", "true"),
      Disabled("not_object_deeply_nested", std::string(10000, '[') + std::string(10000, ']')),

      // path.
      {.name = "path_good",
       .args = R"({"path": "/tmp/x.jsonl"})",
       .config = {.path = "/tmp/x.jsonl"}},
      {.name = "path_relative",
       .args = R"({"path": "caps.jsonl"})",
       .config = {.path = "caps.jsonl"}},
      {.name = "path_unicode",
       .args = R"({"path": "/tmp/ünïcødé/日本語 😀.jsonl"})",
       .config = {.path = "/tmp/ünïcødé/日本語 😀.jsonl"}},
      {.name = "path_unicode_escaped",
       .args = R"({"path": "/tmp/\u00fc\ud83d\ude00.jsonl"})",
       .config = {.path = "/tmp/ü😀.jsonl"}},
      {.name = "path_with_quote_and_backslash",
       .args = R"({"path": "/tmp/a\"b\\c"})",
       .config = {.path = "/tmp/a\"b\\c"}},
      BadValue("path_empty", "path", R"("")"),
      BadValue("path_nul", "path", R"("/tmp/a\u0000b")"),
      BadValue("path_only_nul", "path", R"("\u0000")"),
      BadValue("path_number", "path", "42"),
      BadValue("path_true", "path", "true"),
      BadValue("path_null", "path", "null"),
      BadValue("path_array", "path", R"(["/tmp/x"])"),
      BadValue("path_object", "path", R"({"p": "/tmp/x"})"),

      // format.
      {.name = "format_mooncake",
       .args = R"({"format": "mooncake_payload"})",
       .config = {.format = CaptureFormat::kMooncakePayload}},
      // raw_payload with the default pattern, which matches /v1/completions: kept, with a
      // warning (AIPerf's raw_payload loader refuses completions rows).
      {.name = "format_raw",
       .args = R"({"format": "raw_payload"})",
       .config = {.format = CaptureFormat::kRawPayload},
       .diagnostics = {{"format", kW}}},
      {.name = "format_raw_chat_only",
       .args = R"({"format": "raw_payload", "endpoint_pattern": "^/v1/chat/completions$"})",
       .config = {.format = CaptureFormat::kRawPayload,
                  .endpoint_pattern = "^/v1/chat/completions$"}},
      BadValue("format_wrong_case", "format", R"("Raw_Payload")"),
      BadValue("format_upper", "format", R"("MOONCAKE_PAYLOAD")"),
      BadValue("format_short", "format", R"("raw")"),
      BadValue("format_padded", "format", R"(" raw_payload")"),
      BadValue("format_empty", "format", R"("")"),
      BadValue("format_number", "format", "1"),
      BadValue("format_null", "format", "null"),
      BadValue("format_bool", "format", "false"),
      BadValue("format_array", "format", R"(["raw_payload"])"),
      BadValue("format_object", "format", R"({"raw_payload": true})"),

      // max_request_bytes / max_queue_bytes: accepted forms (bad forms are generated below).
      {.name = "max_request_bytes_one",
       .args = R"({"max_request_bytes": 1})",
       .config = {.max_request_bytes = 1}},
      {.name = "max_request_bytes_4096",
       .args = R"({"max_request_bytes": 4096})",
       .config = {.max_request_bytes = 4096}},
      {.name = "max_request_bytes_integral_float",
       .args = R"({"max_request_bytes": 2097152.0})",
       .config = {.max_request_bytes = 2097152}},
      {.name = "max_request_bytes_exponent",
       .args = R"({"max_request_bytes": 1e6})",
       .config = {.max_request_bytes = 1000000}},
      {.name = "max_request_bytes_exponent_fraction",
       .args = R"({"max_request_bytes": 2.5e3})",
       .config = {.max_request_bytes = 2500}},
      {.name = "max_queue_bytes_two_mib",
       .args = R"({"max_queue_bytes": 2097152})",
       .config = {.max_queue_bytes = 2097152}},
      {.name = "max_queue_bytes_integral_float",
       .args = R"({"max_queue_bytes": 1073741824.0})",
       .config = {.max_queue_bytes = kGiB}},
      {.name = "max_queue_bytes_exponent",
       .args = R"({"max_queue_bytes": 1e9})",
       .config = {.max_queue_bytes = 1000000000}},
      {.name = "max_queue_bytes_int64_max",
       .args = R"({"max_queue_bytes": 9223372036854775807})",
       .config = {.max_queue_bytes = INT64_MAX}},
      {.name = "max_queue_bytes_largest_float_below_2_pow_63",
       .args = R"({"max_queue_bytes": 9223372036854774784.0})",
       .config = {.max_queue_bytes = 9223372036854774784}},
      {.name = "max_queue_bytes_equal_to_request",
       .args = R"({"max_request_bytes": 2048, "max_queue_bytes": 2048})",
       .config = {.max_request_bytes = 2048, .max_queue_bytes = 2048}},
      {.name = "max_queue_bytes_any_key_order",
       .args = R"({"max_queue_bytes": 1000, "max_request_bytes": 500})",
       .config = {.max_request_bytes = 500, .max_queue_bytes = 1000}},

      // max_queue_bytes < max_request_bytes, first branch: the default 1 GiB is enough.
      {.name = "queue_below_default_request",
       .args = R"({"max_queue_bytes": 1000})",
       .diagnostics = {{"max_queue_bytes", kW}}},
      {.name = "queue_below_set_request",
       .args = R"({"max_request_bytes": 2048, "max_queue_bytes": 1024})",
       .config = {.max_request_bytes = 2048},
       .diagnostics = {{"max_queue_bytes", kW}}},
      {.name = "queue_below_defaulted_request",
       .args = R"({"max_request_bytes": 0, "max_queue_bytes": 1000})",
       .diagnostics = {{"max_request_bytes", kW}, {"max_queue_bytes", kW}}},
      // Second branch: max_request_bytes above 1 GiB, so the queue takes its value.
      {.name = "queue_default_below_request",
       .args = R"({"max_request_bytes": 2147483648})",
       .config = {.max_request_bytes = 2 * kGiB, .max_queue_bytes = 2 * kGiB},
       .diagnostics = {{"max_queue_bytes", kW}}},
      {.name = "queue_set_and_default_below_request",
       .args = R"({"max_request_bytes": 2147483648, "max_queue_bytes": 4096})",
       .config = {.max_request_bytes = 2 * kGiB, .max_queue_bytes = 2 * kGiB},
       .diagnostics = {{"max_queue_bytes", kW}}},
      {.name = "queue_bad_and_default_below_request",
       .args = R"({"max_request_bytes": 2147483648, "max_queue_bytes": -1})",
       .config = {.max_request_bytes = 2 * kGiB, .max_queue_bytes = 2 * kGiB},
       .diagnostics = {{"max_queue_bytes", kW}, {"max_queue_bytes", kW}}},
      {.name = "queue_int64_max_request",
       .args = R"({"max_request_bytes": 9223372036854775807})",
       .config = {.max_request_bytes = INT64_MAX, .max_queue_bytes = INT64_MAX},
       .diagnostics = {{"max_queue_bytes", kW}}},
      {.name = "queue_above_large_request",
       .args = R"({"max_request_bytes": 2147483648, "max_queue_bytes": 4294967296})",
       .config = {.max_request_bytes = 2 * kGiB, .max_queue_bytes = 4 * kGiB}},

      // sample_rate.
      {.name = "sample_rate_int_zero",
       .args = R"({"sample_rate": 0})",
       .config = {.sample_rate = 0.0}},
      {.name = "sample_rate_int_one",
       .args = R"({"sample_rate": 1})",
       .config = {.sample_rate = 1.0}},
      {.name = "sample_rate_float_zero",
       .args = R"({"sample_rate": 0.0})",
       .config = {.sample_rate = 0.0}},
      {.name = "sample_rate_negative_zero",
       .args = R"({"sample_rate": -0.0})",
       .config = {.sample_rate = 0.0}},
      {.name = "sample_rate_float_one",
       .args = R"({"sample_rate": 1.0})",
       .config = {.sample_rate = 1.0}},
      {.name = "sample_rate_half",
       .args = R"({"sample_rate": 0.5})",
       .config = {.sample_rate = 0.5}},
      {.name = "sample_rate_tenth",
       .args = R"({"sample_rate": 0.1})",
       .config = {.sample_rate = 0.1}},
      {.name = "sample_rate_exponent",
       .args = R"({"sample_rate": 25e-2})",
       .config = {.sample_rate = 0.25}},
      {.name = "sample_rate_tiny",
       .args = R"({"sample_rate": 1e-9})",
       .config = {.sample_rate = 1e-9}},
      {.name = "sample_rate_underflow",
       .args = R"({"sample_rate": 1e-400})",
       .config = {.sample_rate = 0.0}},
      BadValue("sample_rate_negative", "sample_rate", "-0.1"),
      BadValue("sample_rate_negative_int", "sample_rate", "-1"),
      BadValue("sample_rate_just_above_one", "sample_rate", "1.0000001"),
      BadValue("sample_rate_two", "sample_rate", "2"),
      BadValue("sample_rate_percent", "sample_rate", "50"),
      BadValue("sample_rate_huge", "sample_rate", "1e300"),
      BadValue("sample_rate_uint64", "sample_rate", "18446744073709551615"),
      BadValue("sample_rate_string", "sample_rate", R"("0.5")"),
      BadValue("sample_rate_true", "sample_rate", "true"),
      BadValue("sample_rate_false", "sample_rate", "false"),
      BadValue("sample_rate_null", "sample_rate", "null"),
      BadValue("sample_rate_array", "sample_rate", "[0.5]"),
      BadValue("sample_rate_object", "sample_rate", R"({"rate": 0.5})"),

      // endpoint_pattern.
      {.name = "endpoint_pattern_embeddings",
       .args = R"({"endpoint_pattern": "^/v1/embeddings$"})",
       .config = {.endpoint_pattern = "^/v1/embeddings$"}},
      {.name = "endpoint_pattern_empty_matches_all",
       .args = R"({"endpoint_pattern": ""})",
       .config = {.endpoint_pattern = ""}},
      {.name = "endpoint_pattern_escapes",
       .args = R"({"endpoint_pattern": "^/v\\d+/(chat/)?completions$"})",
       .config = {.endpoint_pattern = R"(^/v\d+/(chat/)?completions$)"}},
      {.name = "endpoint_pattern_unicode",
       .args = R"({"endpoint_pattern": "^/v1/é+$"})",
       .config = {.endpoint_pattern = "^/v1/é+$"}},
      BadValue("endpoint_pattern_unclosed_group", "endpoint_pattern", R"("(")"),
      BadValue("endpoint_pattern_unclosed_class", "endpoint_pattern", R"("[a-")"),
      BadValue("endpoint_pattern_double_star", "endpoint_pattern", R"("a**")"),
      BadValue("endpoint_pattern_backreference", "endpoint_pattern", R"("(a)\\1")"),
      BadValue("endpoint_pattern_lookahead", "endpoint_pattern", R"re("(?=a)")re"),
      BadValue("endpoint_pattern_bad_escape", "endpoint_pattern", R"("\\")"),
      BadValue("endpoint_pattern_number", "endpoint_pattern", "1"),
      BadValue("endpoint_pattern_null", "endpoint_pattern", "null"),
      BadValue("endpoint_pattern_bool", "endpoint_pattern", "true"),
      BadValue("endpoint_pattern_array", "endpoint_pattern", R"(["^/v1$"])"),
      BadValue("endpoint_pattern_object", "endpoint_pattern", "{}"),

      // Unknown keys: warned about and ignored; keys are case-sensitive.
      {.name = "unknown_key", .args = R"({"foo": 1})", .diagnostics = {{"foo", kW}}},
      {.name = "unknown_key_wrong_case",
       .args = R"({"Path": "/tmp/x"})",
       .diagnostics = {{"Path", kW}}},
      {.name = "rotation_and_outcomes_together",
       .args = R"({"outcomes": true, "rotate_bytes": 1, "rotate_seconds": 1})",
       .config = {.outcomes = true, .rotate_bytes = 1, .rotate_ms = 1000}},
      {.name = "rotation_null_is_off", .args = R"({"rotate_bytes": null, "rotate_seconds": null})"},
      {.name = "unknown_key_beside_good_key",
       .args = R"({"path": "/tmp/x", "extra": {"nested": [1, 2]}})",
       .config = {.path = "/tmp/x"},
       .diagnostics = {{"extra", kW}}},
      {.name = "unknown_key_deeply_nested_value",
       .args = "{\"deep\":" + std::string(10000, '[') + std::string(10000, ']') + "}",
       .diagnostics = {{"deep", kW}}},

      // Duplicate keys: a warning naming the key (once however often it repeats); the last
      // occurrence wins.
      {.name = "duplicate_last_wins",
       .args = R"({"path": "/tmp/a", "path": "/tmp/b"})",
       .config = {.path = "/tmp/b"},
       .diagnostics = {{"path", kW}}},
      {.name = "duplicate_outcomes_true_then_false",
       .args = R"({"outcomes": true, "sample_rate": 1, "outcomes": false})",
       .diagnostics = {{"outcomes", kW}}},
      {.name = "duplicate_three_times_one_warning",
       .args = R"({"outcomes": false, "outcomes": false, "outcomes": true})",
       .config = {.outcomes = true},
       .diagnostics = {{"outcomes", kW}}},
      {.name = "duplicate_unknown_key",
       .args = R"({"foo": 1, "foo": 2})",
       .diagnostics = {{"foo", kW}, {"foo", kW}}},
      {.name = "duplicate_nested_keys_are_not_top_level",
       .args = R"({"a": {"x": 1, "x": 2}, "b": {"x": 3}})",
       .diagnostics = {{"a", kW}, {"b", kW}}},
      {.name = "duplicate_good_after_bad",
       .args = R"({"max_request_bytes": 0, "max_request_bytes": 4096})",
       .config = {.max_request_bytes = 4096},
       .diagnostics = {{"max_request_bytes", kW}}},
      {.name = "duplicate_bad_after_good",
       .args = R"({"max_request_bytes": 4096, "max_request_bytes": 0})",
       .diagnostics = {{"max_request_bytes", kW}, {"max_request_bytes", kW}}},

      // Everything at once.
      {.name = "all_keys_good",
       .args = R"({"path": "/data/caps.jsonl", "format": "raw_payload",
                   "max_request_bytes": 65536, "sample_rate": 0.25,
                   "endpoint_pattern": "^/v1/chat/completions$", "max_queue_bytes": 1048576})",
       .config = {.path = "/data/caps.jsonl",
                  .format = CaptureFormat::kRawPayload,
                  .max_request_bytes = 65536,
                  .sample_rate = 0.25,
                  .endpoint_pattern = "^/v1/chat/completions$",
                  .max_queue_bytes = kMiB}},
      {.name = "bad_values_fall_back_independently",
       .args = R"({"path": "", "format": "raw_payload", "max_request_bytes": 1.5,
                   "sample_rate": 0.5, "endpoint_pattern": "(", "max_queue_bytes": "big",
                   "mystery": null})",
       .config = {.format = CaptureFormat::kRawPayload, .sample_rate = 0.5},
       .diagnostics = {{"path", kW},
                       {"max_request_bytes", kW},
                       {"endpoint_pattern", kW},
                       {"max_queue_bytes", kW},
                       {"mystery", kW},
                       {"format", kW}}},
  };

  // outcomes: a JSON boolean only.
  cases.push_back(
      {.name = "outcomes_true", .args = R"({"outcomes": true})", .config = {.outcomes = true}});
  cases.push_back({.name = "outcomes_false", .args = R"({"outcomes": false})"});
  for (const auto& [kind, value] :
       std::vector<std::pair<std::string, std::string>>{{"one", "1"},
                                                        {"zero", "0"},
                                                        {"string", "\"true\""},
                                                        {"null", "null"},
                                                        {"array", "[]"}}) {
    cases.push_back(BadValue("outcomes_" + kind, "outcomes", value));
  }
  // capture_responses: a JSON boolean, which turns outcomes on (with a warning if they were
  // turned off); max_response_bytes: a positive integer.
  cases.push_back({.name = "capture_responses_true",
                   .args = R"({"capture_responses": true})",
                   .config = {.outcomes = true, .capture_responses = true}});
  cases.push_back({.name = "capture_responses_overrides_outcomes_false",
                   .args = R"({"outcomes": false, "capture_responses": true})",
                   .config = {.outcomes = true, .capture_responses = true},
                   .diagnostics = {{"outcomes", kW}}});
  cases.push_back({.name = "capture_responses_false", .args = R"({"capture_responses": false})"});
  cases.push_back(
      {.name = "max_response_bytes_set",
       .args = R"({"capture_responses": true, "max_response_bytes": 4096})",
       .config = {.outcomes = true, .capture_responses = true, .max_response_bytes = 4096}});
  for (const auto& [kind, value] :
       std::vector<std::pair<std::string, std::string>>{{"one", "1"}, {"string", "\"true\""}}) {
    cases.push_back(BadValue("capture_responses_" + kind, "capture_responses", value));
  }
  for (const auto& [kind, value] : std::vector<std::pair<std::string, std::string>>{
           {"zero", "0"}, {"negative", "-5"}, {"fraction", "1.5"}, {"string", "\"1024\""}}) {
    cases.push_back(BadValue("max_response_bytes_" + kind, "max_response_bytes", value));
  }
  // rotate_bytes: a positive integer; rotate_seconds: a number in (0, 31622400].
  cases.push_back({.name = "rotate_bytes_set",
                   .args = R"({"rotate_bytes": 1000000})",
                   .config = {.rotate_bytes = 1000000}});
  cases.push_back({.name = "rotate_bytes_float",
                   .args = R"({"rotate_bytes": 1e6})",
                   .config = {.rotate_bytes = 1000000}});
  cases.push_back({.name = "rotate_seconds_integer",
                   .args = R"({"rotate_seconds": 3600})",
                   .config = {.rotate_ms = 3600000}});
  cases.push_back({.name = "rotate_seconds_fraction",
                   .args = R"({"rotate_seconds": 0.25})",
                   .config = {.rotate_ms = 250}});
  cases.push_back({.name = "rotate_seconds_tiny_is_1ms",
                   .args = R"({"rotate_seconds": 1e-9})",
                   .config = {.rotate_ms = 1}});
  cases.push_back({.name = "rotate_seconds_max",
                   .args = R"({"rotate_seconds": 31622400})",
                   .config = {.rotate_ms = 31622400000}});
  for (const auto& [kind, value] :
       std::vector<std::pair<std::string, std::string>>{{"zero", "0"},
                                                        {"negative", "-1"},
                                                        {"too_long", "31622401"},
                                                        {"string", "\"60\""},
                                                        {"bool", "true"}}) {
    cases.push_back(BadValue("rotate_seconds_" + kind, "rotate_seconds", value));
  }

  // Fleet upload keys. upload_url alone also turns on rotation at 256 MiB / 60 s.
  const CaptureConfig uploading{.rotate_bytes = CaptureConfig::kUploadRotateBytes,
                                .rotate_ms = CaptureConfig::kUploadRotateMs,
                                .upload_url = "s3://bucket/fleet/a/"};
  cases.push_back({.name = "upload_url_prefix_gets_slash",
                   .args = R"({"upload_url": "s3://bucket/fleet/a"})",
                   .config = uploading});
  cases.push_back({.name = "upload_url_bucket_only",
                   .args = R"({"upload_url": "s3://bucket"})",
                   .config = {.rotate_bytes = CaptureConfig::kUploadRotateBytes,
                              .rotate_ms = CaptureConfig::kUploadRotateMs,
                              .upload_url = "s3://bucket/"}});
  cases.push_back({.name = "upload_url_keeps_given_rotation",
                   .args = R"({"upload_url": "s3://bucket/fleet/a/", "rotate_seconds": 5})",
                   .config = {.rotate_ms = 5000, .upload_url = "s3://bucket/fleet/a/"}});
  cases.push_back({.name = "upload_url_null", .args = R"({"upload_url": null})"});
  for (const auto& [kind, value] :
       std::vector<std::pair<std::string, std::string>>{{"not_s3", "\"http://bucket/x\""},
                                                        {"short_bucket", "\"s3://ab/x\""},
                                                        {"upper_bucket", "\"s3://Bucket/x\""},
                                                        {"number", "5"}}) {
    cases.push_back(BadValue("upload_url_" + kind, "upload_url", value));
  }
  cases.push_back({.name = "replica_set",
                   .args = R"({"replica": "pod-7.a_b"})",
                   .config = {.replica = "pod-7.a_b"}});
  for (const auto& [kind, value] : std::vector<std::pair<std::string, std::string>>{
           {"empty", "\"\""}, {"slash", "\"a/b\""}, {"dotdot", "\"..\""}, {"number", "1"}}) {
    cases.push_back(BadValue("replica_" + kind, "replica", value));
  }
  cases.push_back({.name = "compress_zstd",
                   .args = R"({"compress": "zstd"})",
                   .config = {.compress_zstd = true}});
  cases.push_back({.name = "compress_none", .args = R"({"compress": "none"})"});
  cases.push_back(BadValue("compress_gzip", "compress", "\"gzip\""));
  cases.push_back(BadValue("compress_bool", "compress", "true"));
  cases.push_back({.name = "keep_local_true",
                   .args = R"({"keep_local": true})",
                   .config = {.keep_local = true}});
  cases.push_back(BadValue("keep_local_one", "keep_local", "1"));
  cases.push_back({.name = "max_local_bytes_set",
                   .args = R"({"max_local_bytes": 1e9})",
                   .config = {.max_local_bytes = 1000000000}});

  // Session sources: comma-separated, trimmed, header names lowercased; "" and null are off.
  cases.push_back({.name = "session_headers_set",
                   .args = R"({"session_headers": "X-Session-Id, x-conversation-id"})",
                   .config = {.session_headers = {"x-session-id", "x-conversation-id"}}});
  cases.push_back({.name = "session_headers_empty", .args = R"({"session_headers": ""})"});
  cases.push_back({.name = "session_headers_null", .args = R"({"session_headers": null})"});
  for (const auto& [kind, value] : std::vector<std::pair<std::string, std::string>>{
           {"empty_item", R"("a,,b")"},
           {"trailing_comma", R"("x-session-id,")"},
           {"space_inside", R"("x session")"},
           {"colon", R"("x-session-id:")"},
           {"non_ascii", R"("x-sessión")"},
           {"control", R"("x\u0000y")"},
           {"array", R"(["x-session-id"])"},
           {"number", "1"},
           {"too_long", "\"" + std::string(129, 'h') + "\""},
           {"too_many", "\"a,b,c,d,e,f,g,h,i,j,k,l,m,n,o,p,q\""}}) {
    cases.push_back(BadValue("session_headers_" + kind, "session_headers", value));
  }
  cases.push_back(
      {.name = "session_fields_set",
       .args = R"({"session_fields": "user, prompt_cache_key,metadata.session_id"})",
       .config = {.session_fields = {"user", "prompt_cache_key", "metadata.session_id"}}});
  cases.push_back({.name = "session_fields_unicode_key",
                   .args = R"({"session_fields": "sesión"})",
                   .config = {.session_fields = {"sesión"}}});
  cases.push_back({.name = "session_fields_empty", .args = R"({"session_fields": " "})"});
  for (const auto& [kind, value] : std::vector<std::pair<std::string, std::string>>{
           {"empty_item", R"("user,,x")"},
           {"leading_dot", R"(".user")"},
           {"trailing_dot", R"("metadata.")"},
           {"double_dot", R"("metadata..id")"},
           {"control", R"("a\nb")"},
           {"too_deep", R"("a.b.c.d.e.f.g.h.i")"},
           {"too_long", "\"" + std::string(257, 'f') + "\""},
           {"object", R"({"user": true})"},
           {"bool", "true"}}) {
    cases.push_back(BadValue("session_fields_" + kind, "session_fields", value));
  }
  cases.push_back({.name = "session_fields_eight_keys",
                   .args = R"({"session_fields": "a.b.c.d.e.f.g.h"})",
                   .config = {.session_fields = {"a.b.c.d.e.f.g.h"}}});
  // Kept, but raw_payload rows cannot carry an id: said once per key.
  cases.push_back({.name = "session_keys_with_raw_payload",
                   .args = R"({"format": "raw_payload", "session_headers": "x-session-id",)"
                           R"( "session_fields": "user"})",
                   .config = {.format = CaptureFormat::kRawPayload,
                              .session_headers = {"x-session-id"},
                              .session_fields = {"user"}},
                   .diagnostics = {{"session_headers", kW}, {"session_fields", kW}, {"format", kW}}});

  for (const std::string key :
       {"max_request_bytes", "max_queue_bytes", "rotate_bytes", "max_local_bytes"}) {
    for (const auto& [kind, value] : kBadPositiveIntegers) {
      if (key == "rotate_bytes" && value == "null") continue;  // null turns rotation off
      cases.push_back(BadValue(key + "_" + kind, key, value));
    }
  }
  return cases;
}

class ParseCaptureConfigTest : public testing::TestWithParam<Case> {};

TEST_P(ParseCaptureConfigTest, MatchesTable) {
  const Case& c = GetParam();
  std::optional<std::string_view> enable;
  std::optional<std::string_view> args;
  if (c.enable) enable = *c.enable;
  if (c.args) args = *c.args;

  const ParsedCaptureConfig parsed = ParseCaptureConfig(enable, args);

  EXPECT_EQ(parsed.enabled, c.enabled);
  EXPECT_EQ(parsed.config.path, c.config.path);
  EXPECT_EQ(parsed.config.format, c.config.format);
  EXPECT_EQ(parsed.config.max_request_bytes, c.config.max_request_bytes);
  EXPECT_EQ(parsed.config.sample_rate, c.config.sample_rate);
  EXPECT_FALSE(std::signbit(parsed.config.sample_rate));
  EXPECT_EQ(parsed.config.endpoint_pattern, c.config.endpoint_pattern);
  EXPECT_EQ(parsed.config.max_queue_bytes, c.config.max_queue_bytes);
  EXPECT_EQ(parsed.config.outcomes, c.config.outcomes);
  EXPECT_EQ(parsed.config.capture_responses, c.config.capture_responses);
  EXPECT_EQ(parsed.config.max_response_bytes, c.config.max_response_bytes);
  EXPECT_EQ(parsed.config.rotate_bytes, c.config.rotate_bytes);
  EXPECT_EQ(parsed.config.rotate_ms, c.config.rotate_ms);
  EXPECT_EQ(parsed.config.upload_url, c.config.upload_url);
  EXPECT_EQ(parsed.config.replica, c.config.replica);
  EXPECT_EQ(parsed.config.compress_zstd, c.config.compress_zstd);
  EXPECT_EQ(parsed.config.keep_local, c.config.keep_local);
  EXPECT_EQ(parsed.config.max_local_bytes, c.config.max_local_bytes);
  EXPECT_EQ(parsed.config.session_headers, c.config.session_headers);
  EXPECT_EQ(parsed.config.session_fields, c.config.session_fields);

  ASSERT_EQ(parsed.diagnostics.size(), c.diagnostics.size());
  for (size_t i = 0; i < c.diagnostics.size(); ++i) {
    const ConfigDiagnostic& got = parsed.diagnostics[i];
    SCOPED_TRACE("diagnostic " + std::to_string(i) + ": " + got.message);
    EXPECT_EQ(got.key, c.diagnostics[i].key);
    EXPECT_EQ(got.level, c.diagnostics[i].level);
    EXPECT_NE(got.message.find(got.key), std::string::npos) << "message must name its key";
    EXPECT_LT(got.message.size(), 600u) << "messages must stay short";
    if (got.level == kE) {
      EXPECT_NE(got.message.find("disabled"), std::string::npos);
    }
    if (got.key == "NIM_CAPTURE_ENABLE") {
      EXPECT_NE(got.message.find("=1"), std::string::npos);
      EXPECT_NE(got.message.find("=0"), std::string::npos);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Table, ParseCaptureConfigTest, testing::ValuesIn(AllCases()),
                         [](const testing::TestParamInfo<Case>& info) { return info.param.name; });

}  // namespace
}  // namespace llmtap
