// Shared by the capture core tests: request bodies, reading files, the CaptureTest fixture.
#pragma once

#include "capture/capture.h"

#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "capture/capture_file.h"
#include "common/testing/fault_env.h"
#include "common/testing/temp_files.h"

namespace llmtap::capture_test_util {

namespace fs = std::filesystem;
using testing::CapturingLogger;
using testing::FaultEnv;
using testing::TempDir;

inline constexpr std::string_view kChat = R"({
  "model": "m",
  "messages": [ {"role": "user", "content": "hello\nworld \u00e9"} ],
  "max_tokens": 128
})";

inline constexpr std::string_view kChatCompact =
    R"({"model":"m","messages":[{"role":"user","content":"hello\nworld \u00e9"}],"max_tokens":128})";

inline constexpr std::string_view kCompletion =
    R"({"model": "m", "prompt": "hi", "max_tokens": 64})";

using testing::ReadFile;

// How long a test waits for something the test itself caused (a record written, a file
// rotated, an upload retried) before it fails: a guard against a hang only. Every wait ends as
// soon as what it waits for holds, so a loaded machine makes a test slower, never red.
inline constexpr std::chrono::seconds kHangGuard{120};

// Polls `done` until it holds; whether it did within kHangGuard.
template <typename F>
bool WaitUntil(F done) {
  const auto end = std::chrono::steady_clock::now() + kHangGuard;
  while (!done() && std::chrono::steady_clock::now() < end) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return done();
}

inline std::vector<std::string> Lines(const std::string& s) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start < s.size()) {
    size_t nl = s.find('\n', start);
    EXPECT_NE(nl, std::string::npos) << "file ends in a torn line";
    if (nl == std::string::npos) break;
    out.push_back(s.substr(start, nl - start));
    start = nl + 1;
  }
  return out;
}

class CaptureTest : public ::testing::Test {
 protected:
  CaptureOptions Options(std::string name = "requests.jsonl") {
    CaptureOptions o;
    o.config.path = (dir_ / name).string();
    o.env = &env_;
    o.logger = &logger_;
    o.initial_backoff = std::chrono::milliseconds(1);
    o.max_backoff = std::chrono::milliseconds(5);
    return o;
  }
  std::string Path(std::string name = "requests.jsonl") { return (dir_ / name).string(); }

  static void ExpectAccounted(const CaptureCountersSnapshot& c) {
    EXPECT_EQ(c.Unaccounted(), 0) << "matched=" << c.matched << " recorded=" << c.recorded;
    EXPECT_EQ(c.queued_records, 0u);
    EXPECT_EQ(c.queue_bytes, 0u);
  }

  const TempDir tmp_;
  const fs::path dir_ = tmp_.path();
  FaultEnv env_;
  CapturingLogger logger_;
};

}  // namespace llmtap::capture_test_util
