// Shared by the streamed replay tests: the builtin tokenizer, a payload trace, Lookahead options.
#pragma once

#include <fcntl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <csignal>
#include <fstream>
#include <map>
#include <mutex>
#include <numeric>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "common/testing/temp_files.h"
#include "replay/input.h"
#include "replay/lookahead.h"
#include "replay/runner.h"
#include "replay/schedule.h"
#include "replay/summary.h"
#include "replay/synthetic.h"
#include "report/summary.h"
#include "tokenizer/tokenizer.h"

namespace llmtap::replay::stream_test_util {

inline std::unique_ptr<tokenizer::Tokenizer> Builtin() {
  std::string error;
  auto tok = tokenizer::Tokenizer::Load("builtin", &error);
  EXPECT_TRUE(tok) << error;
  return tok;
}

// Payload rows, 1 ms apart, whose prompts are 200 to 1,700 bytes long.
inline std::string PayloadTrace(size_t n, uint64_t seed = 1) {
  std::mt19937_64 rng(seed);
  std::string text;
  for (size_t i = 0; i < n; ++i) {
    const std::string prompt(200 + rng() % 1500, static_cast<char>('a' + i % 26));
    text += R"({"timestamp":)" + std::to_string(1000 + i) +
            R"(,"payload":{"model":"m","prompt":")" + prompt + R"(","max_tokens":4}})" + "\n";
  }
  return text;
}

inline Lookahead::Options InputOf(const std::string& path) {
  Lookahead::Options o;
  o.load.input.path = path;
  o.note_prefix = path + ":";
  return o;
}

}  // namespace llmtap::replay::stream_test_util
