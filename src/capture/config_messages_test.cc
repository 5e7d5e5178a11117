// Capture config's messages, flag overrides, JSON form and environment variables.
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

ParsedCaptureConfig ParseArgs(std::string_view args) { return ParseCaptureConfig("1", args); }

TEST(ApplyCaptureOverrides, FlagsWinKeyByKeyWithTheSameValidation) {
  ParsedCaptureConfig parsed =
      ParseArgs(R"({"path": "/env/requests.jsonl", "sample_rate": 0.5, "outcomes": true})");
  ApplyCaptureOverrides(R"({"sample_rate": 0.25, "rotate_seconds": 60, "max_request_bytes": -1})",
                        &parsed);
  EXPECT_TRUE(parsed.enabled);
  EXPECT_EQ(parsed.config.path, "/env/requests.jsonl");  // not overridden: kept
  EXPECT_EQ(parsed.config.sample_rate, 0.25);
  EXPECT_TRUE(parsed.config.outcomes);
  EXPECT_EQ(parsed.config.rotate_ms, 60000);
  ASSERT_EQ(parsed.diagnostics.size(), 1u);
  EXPECT_EQ(parsed.diagnostics[0].key, "max_request_bytes");
  EXPECT_NE(parsed.diagnostics[0].message.find("command-line flag"), std::string::npos)
      << parsed.diagnostics[0].message;
  EXPECT_EQ(parsed.config.max_request_bytes, CaptureConfig::kDefaultMaxRequestBytes);
}

TEST(ApplyCaptureOverrides, ABadFlagKeepsTheEnvironmentsValueAndSaysSo) {
  ParsedCaptureConfig parsed = ParseArgs(R"({"sample_rate": 0.5})");
  ApplyCaptureOverrides(R"({"sample_rate": 7, "outcomes": "yes"})", &parsed);
  EXPECT_EQ(parsed.config.sample_rate, 0.5);
  ASSERT_EQ(parsed.diagnostics.size(), 2u);
  for (const ConfigDiagnostic& d : parsed.diagnostics) {
    if (d.key == "sample_rate") {
      EXPECT_NE(d.message.find("keeping the value NIM_CAPTURE_ARGS gave it"), std::string::npos)
          << d.message;
      EXPECT_EQ(d.message.find("default"), std::string::npos) << d.message;
    } else {
      EXPECT_NE(d.message.find("using the default false"), std::string::npos) << d.message;
    }
  }
}

TEST(ApplyCaptureOverrides, QueueStillHoldsTheLargestRequest) {
  ParsedCaptureConfig parsed = ParseArgs(R"({"max_queue_bytes": 4096})");
  ApplyCaptureOverrides(R"({"max_request_bytes": 8192})", &parsed);
  EXPECT_GE(parsed.config.max_queue_bytes, parsed.config.max_request_bytes);
}

TEST(ParseCaptureConfigMessages, BadValueNamesGivenValueReasonAndDefault) {
  const auto parsed = ParseArgs(R"({"sample_rate": 1.5})");
  ASSERT_EQ(parsed.diagnostics.size(), 1u);
  const std::string& m = parsed.diagnostics[0].message;
  EXPECT_NE(m.find("sample_rate"), std::string::npos) << m;
  EXPECT_NE(m.find("1.5"), std::string::npos) << m;
  EXPECT_NE(m.find("from 0 to 1"), std::string::npos) << m;
  EXPECT_NE(m.find("default 1.0"), std::string::npos) << m;
}

TEST(ParseCaptureConfigMessages, RawPayloadWithCompletionsSaysWhatAIPerfRefusesAndTheFixes) {
  ParsedCaptureConfig parsed = ParseArgs(R"({"format": "raw_payload"})");
  ASSERT_EQ(parsed.diagnostics.size(), 1u);
  const std::string& m = parsed.diagnostics[0].message;
  EXPECT_EQ(parsed.diagnostics[0].level, kW);
  for (const char* words : {"takes chat requests only", "mooncake_payload",
                            "^/v1/chat/completions$", "llmtap split"}) {
    EXPECT_NE(m.find(words), std::string::npos) << words << " in " << m;
  }
  EXPECT_EQ(parsed.config.format, CaptureFormat::kRawPayload);  // kept: a warning only
}

TEST(ParseCaptureConfigMessages, StringGivenForIntegerSaysSo) {
  const auto parsed = ParseArgs(R"({"max_request_bytes": "1024"})");
  ASSERT_EQ(parsed.diagnostics.size(), 1u);
  const std::string& m = parsed.diagnostics[0].message;
  EXPECT_NE(m.find("not a string"), std::string::npos) << m;
  EXPECT_NE(m.find("default 1048576"), std::string::npos) << m;
}

TEST(ParseCaptureConfigMessages, PathIsNeverEchoed) {
  for (const char* args : {R"({"path": "/secret/place\u0000x"})", R"({"path": ""})"}) {
    const auto parsed = ParseArgs(args);
    ASSERT_EQ(parsed.diagnostics.size(), 1u) << args;
    const std::string& m = parsed.diagnostics[0].message;
    EXPECT_EQ(m.find("secret"), std::string::npos) << m;
    EXPECT_NE(m.find("/opt/nim/captures/requests.jsonl"), std::string::npos) << m;
  }
  const std::string nul = ParseArgs(R"({"path": "/a\u0000b"})").diagnostics.at(0).message;
  EXPECT_NE(nul.find("NUL"), std::string::npos) << nul;
  const std::string empty = ParseArgs(R"({"path": ""})").diagnostics.at(0).message;
  EXPECT_NE(empty.find("empty"), std::string::npos) << empty;
}

TEST(ParseCaptureConfigMessages, RegexErrorIsIncluded) {
  const auto parsed = ParseArgs(R"({"endpoint_pattern": "(abc"})");
  ASSERT_EQ(parsed.diagnostics.size(), 1u);
  const std::string& m = parsed.diagnostics[0].message;
  EXPECT_NE(m.find("RE2"), std::string::npos) << m;
  EXPECT_NE(m.find("missing )"), std::string::npos) << m;
}

TEST(ParseCaptureConfigMessages, ParseErrorHasPositionButNoEcho) {
  const auto parsed = ParseArgs(R"({"a" "secret-token"})");
  EXPECT_FALSE(parsed.enabled);
  ASSERT_EQ(parsed.diagnostics.size(), 1u);
  const std::string& m = parsed.diagnostics[0].message;
  EXPECT_NE(m.find("line 1, column"), std::string::npos) << m;
  EXPECT_NE(m.find("unintended location"), std::string::npos) << m;
  EXPECT_EQ(m.find("secret-token"), std::string::npos) << m;
  EXPECT_EQ(m.find("json.exception"), std::string::npos) << m;
}

TEST(ParseCaptureConfigMessages, NotObjectNamesTheType) {
  const auto parsed = ParseArgs("[1, 2]");
  ASSERT_EQ(parsed.diagnostics.size(), 1u);
  EXPECT_NE(parsed.diagnostics[0].message.find("array"), std::string::npos);
}

TEST(ParseCaptureConfigMessages, EnableValueIsTruncatedAndEscaped) {
  const std::string huge(10000, 'x');
  auto parsed = ParseCaptureConfig(huge, std::nullopt);
  ASSERT_EQ(parsed.diagnostics.size(), 1u);
  EXPECT_LT(parsed.diagnostics[0].message.size(), 300u);
  EXPECT_EQ(parsed.diagnostics[0].message.find(std::string(33, 'x')), std::string::npos);

  parsed = ParseCaptureConfig("1\nfake log line", std::nullopt);
  ASSERT_EQ(parsed.diagnostics.size(), 1u);
  EXPECT_EQ(parsed.diagnostics[0].message.find('\n'), std::string::npos);

  parsed = ParseCaptureConfig(" 1", std::nullopt);
  ASSERT_EQ(parsed.diagnostics.size(), 1u);
  EXPECT_NE(parsed.diagnostics[0].message.find("whitespace"), std::string::npos);

  parsed = ParseCaptureConfig("", std::nullopt);
  ASSERT_EQ(parsed.diagnostics.size(), 1u);
  EXPECT_NE(parsed.diagnostics[0].message.find("empty"), std::string::npos);
}

TEST(ParseCaptureConfigMessages, UnknownKeyIsIgnoredAndKnownKeysListed) {
  const auto parsed = ParseArgs(R"({"sampel_rate": 0.5})");
  ASSERT_EQ(parsed.diagnostics.size(), 1u);
  const std::string& m = parsed.diagnostics[0].message;
  EXPECT_NE(m.find("ignored"), std::string::npos) << m;
  EXPECT_NE(m.find("sample_rate"), std::string::npos) << m;
  EXPECT_EQ(parsed.config.sample_rate, 1.0);
}

TEST(ParseCaptureConfigMessages, LongUnknownKeyIsTruncated) {
  const std::string key(5000, 'k');
  const auto parsed = ParseArgs("{\"" + key + "\": 1}");
  ASSERT_EQ(parsed.diagnostics.size(), 1u);
  EXPECT_LT(parsed.diagnostics[0].key.size(), 100u);
  EXPECT_LT(parsed.diagnostics[0].message.size(), 400u);
  EXPECT_NE(parsed.diagnostics[0].message.find(parsed.diagnostics[0].key), std::string::npos);
}

TEST(ParseCaptureConfigMessages, DuplicateKeyIsNamedWithTheValueUsed) {
  const auto parsed = ParseArgs(R"({"outcomes":true, "sample_rate": 1, "outcomes":false})");
  ASSERT_EQ(parsed.diagnostics.size(), 1u);
  EXPECT_EQ(parsed.diagnostics[0].key, "outcomes");
  EXPECT_EQ(parsed.diagnostics[0].message,
            "NIM_CAPTURE_ARGS key \"outcomes\" is given more than once; the last one (the "
            "boolean false) is used.");
  EXPECT_FALSE(parsed.config.outcomes);
  // The path is never echoed, not even here.
  const auto paths = ParseArgs(R"({"path":"/secret/a.jsonl","path":"/secret/b.jsonl"})");
  ASSERT_EQ(paths.diagnostics.size(), 1u);
  EXPECT_EQ(paths.diagnostics[0].message.find("secret"), std::string::npos)
      << paths.diagnostics[0].message;
  EXPECT_EQ(paths.config.path, "/secret/b.jsonl");
}

TEST(ParseCaptureConfigMessages, QueueFallbackSaysWhichValueIsUsed) {
  auto m = ParseArgs(R"({"max_queue_bytes": 1000})").diagnostics.at(0).message;
  EXPECT_NE(m.find("default 1073741824"), std::string::npos) << m;
  m = ParseArgs(R"({"max_request_bytes": 2147483648})").diagnostics.at(0).message;
  EXPECT_NE(m.find("max_queue_bytes = max_request_bytes = 2147483648"), std::string::npos) << m;
}

TEST(CaptureFormatNameTest, Names) {
  EXPECT_EQ(CaptureFormatName(CaptureFormat::kMooncakePayload), "mooncake_payload");
  EXPECT_EQ(CaptureFormatName(CaptureFormat::kRawPayload), "raw_payload");
}

TEST(CaptureConfigToJsonTest, DefaultsAreExact) {
  EXPECT_EQ(CaptureConfigToJson(CaptureConfig{}),
            R"({"path":"/opt/nim/captures/requests.jsonl","format":"mooncake_payload",)"
            R"("max_request_bytes":1048576,"sample_rate":1.0,)"
            R"("endpoint_pattern":"^/v1/(chat/completions|completions)$",)"
            R"("max_queue_bytes":1073741824,"outcomes":false,"capture_responses":false,)"
            R"("max_response_bytes":1048576,"rotate_bytes":null,)"
            R"("rotate_seconds":null,"upload_url":null,"replica":null,"compress":"none",)"
            R"("keep_local":false,"max_local_bytes":4294967296,"session_headers":null,)"
            R"("session_fields":null})");
}

TEST(CaptureConfigToJsonTest, RoundTripsThroughParse) {
  const CaptureConfig config{.path = "/tmp/ünï \"q\"\\日本.jsonl",
                             .format = CaptureFormat::kRawPayload,
                             .max_request_bytes = 4096,
                             .sample_rate = 0.1,
                             .endpoint_pattern = R"(^/v\d+/"x"$)",
                             .max_queue_bytes = INT64_MAX,
                             .outcomes = true,
                             .rotate_bytes = 1 << 30,
                             .rotate_ms = 1500,
                             .upload_url = "s3://fleet-bucket/day/",
                             .replica = "pod-1",
                             .compress_zstd = true,
                             .keep_local = true,
                             .max_local_bytes = 123456789};
  const std::string json = CaptureConfigToJson(config);

  std::vector<std::string> keys;
  const auto reparsed = nlohmann::ordered_json::parse(json);  // items() must not outlive it
  for (const auto& [key, value] : reparsed.items()) {
    keys.push_back(key);
  }
  EXPECT_EQ(keys, (std::vector<std::string>{
                      "path", "format", "max_request_bytes", "sample_rate", "endpoint_pattern",
                      "max_queue_bytes", "outcomes", "capture_responses", "max_response_bytes",
                      "rotate_bytes", "rotate_seconds", "upload_url", "replica", "compress",
                      "keep_local", "max_local_bytes", "session_headers", "session_fields"}));
  EXPECT_EQ(std::count(json.begin(), json.end(), ' '), 1)
      << "compact: the only space is the path's";

  const auto parsed = ParseArgs(json);
  EXPECT_TRUE(parsed.enabled);
  EXPECT_TRUE(parsed.diagnostics.empty());
  EXPECT_EQ(parsed.config.path, config.path);
  EXPECT_EQ(parsed.config.format, config.format);
  EXPECT_EQ(parsed.config.max_request_bytes, config.max_request_bytes);
  EXPECT_EQ(parsed.config.sample_rate, config.sample_rate);
  EXPECT_EQ(parsed.config.endpoint_pattern, config.endpoint_pattern);
  EXPECT_EQ(parsed.config.max_queue_bytes, config.max_queue_bytes);
  EXPECT_EQ(CaptureConfigToJson(parsed.config), json);
}

TEST(CaptureConfigToJsonTest, SessionSourcesRoundTripAsCommaSeparatedLists) {
  const CaptureConfig config{.session_headers = {"x-session-id", "x-conversation-id"},
                             .session_fields = {"user", "metadata.session_id"}};
  const std::string json = CaptureConfigToJson(config);
  EXPECT_NE(json.find(R"("session_headers":"x-session-id,x-conversation-id")"), std::string::npos)
      << json;
  EXPECT_NE(json.find(R"("session_fields":"user,metadata.session_id")"), std::string::npos) << json;
  const auto parsed = ParseArgs(json);
  EXPECT_TRUE(parsed.diagnostics.empty());
  EXPECT_EQ(parsed.config.session_headers, config.session_headers);
  EXPECT_EQ(parsed.config.session_fields, config.session_fields);
}

TEST(ApplyCaptureOverrides, SessionFlagsOverrideTheEnvironmentAndABadOneKeepsIt) {
  ParsedCaptureConfig parsed = ParseArgs(R"({"session_headers": "x-a", "session_fields": "user"})");
  ApplyCaptureOverrides(R"({"session_headers": "X-B,x-c", "session_fields": "a..b"})", &parsed);
  EXPECT_EQ(parsed.config.session_headers, (std::vector<std::string>{"x-b", "x-c"}));
  EXPECT_EQ(parsed.config.session_fields, std::vector<std::string>{"user"});
  ASSERT_EQ(parsed.diagnostics.size(), 1u);
  EXPECT_EQ(parsed.diagnostics[0].key, "session_fields");
  EXPECT_NE(parsed.diagnostics[0].message.find("keeping the value NIM_CAPTURE_ARGS gave it"),
            std::string::npos)
      << parsed.diagnostics[0].message;
}

TEST(CaptureConfigToJsonTest, IllFormedUtf8PathDoesNotThrow) {
  const CaptureConfig config{.path = "/tmp/\xff\xfe.jsonl"};
  std::string json;
  EXPECT_NO_THROW(json = CaptureConfigToJson(config));
  EXPECT_TRUE(nlohmann::json::accept(json)) << json;
}

// Sets or unsets an environment variable for one scope, restoring the old state after.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    if (value == nullptr) {
      unsetenv(name);
    } else {
      setenv(name, value, 1);
    }
  }
  ~ScopedEnv() {
    if (old_) {
      setenv(name_, old_->c_str(), 1);
    } else {
      unsetenv(name_);
    }
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  const char* name_;
  std::optional<std::string> old_;
};

TEST(ParseCaptureConfigFromEnvironmentTest, BothUnsetIsDisabled) {
  ScopedEnv enable("NIM_CAPTURE_ENABLE", nullptr);
  ScopedEnv args("NIM_CAPTURE_ARGS", nullptr);
  const auto parsed = ParseCaptureConfigFromEnvironment();
  EXPECT_FALSE(parsed.enabled);
  EXPECT_TRUE(parsed.diagnostics.empty());
}

TEST(ParseCaptureConfigFromEnvironmentTest, ReadsBothVariables) {
  ScopedEnv enable("NIM_CAPTURE_ENABLE", "1");
  ScopedEnv args("NIM_CAPTURE_ARGS", R"({"format": "raw_payload", "sample_rate": 0.5,)"
                                      R"( "endpoint_pattern": "^/v1/chat/completions$"})");
  const auto parsed = ParseCaptureConfigFromEnvironment();
  EXPECT_TRUE(parsed.enabled);
  EXPECT_TRUE(parsed.diagnostics.empty());
  EXPECT_EQ(parsed.config.format, CaptureFormat::kRawPayload);
  EXPECT_EQ(parsed.config.sample_rate, 0.5);
}

TEST(ParseCaptureConfigFromEnvironmentTest, EnabledWithoutArgsUsesDefaults) {
  ScopedEnv enable("NIM_CAPTURE_ENABLE", "1");
  ScopedEnv args("NIM_CAPTURE_ARGS", nullptr);
  const auto parsed = ParseCaptureConfigFromEnvironment();
  EXPECT_TRUE(parsed.enabled);
  EXPECT_TRUE(parsed.diagnostics.empty());
  EXPECT_EQ(parsed.config.path, CaptureConfig::kDefaultPath);
}

TEST(ParseCaptureConfigFromEnvironmentTest, BadValuesAreReported) {
  ScopedEnv enable("NIM_CAPTURE_ENABLE", "true");
  ScopedEnv args("NIM_CAPTURE_ARGS", "{");
  auto parsed = ParseCaptureConfigFromEnvironment();
  EXPECT_FALSE(parsed.enabled);
  ASSERT_EQ(parsed.diagnostics.size(), 1u);
  EXPECT_EQ(parsed.diagnostics[0].key, "NIM_CAPTURE_ENABLE");

  ScopedEnv enable_on("NIM_CAPTURE_ENABLE", "1");
  parsed = ParseCaptureConfigFromEnvironment();
  EXPECT_FALSE(parsed.enabled);
  ASSERT_EQ(parsed.diagnostics.size(), 1u);
  EXPECT_EQ(parsed.diagnostics[0].key, "NIM_CAPTURE_ARGS");
  EXPECT_EQ(parsed.diagnostics[0].level, kE);
}

}  // namespace
}  // namespace llmtap
