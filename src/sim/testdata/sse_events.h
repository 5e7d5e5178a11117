// The JSON objects of a chat or completions SSE body, for the sim's tests (gtest expectations on
// its framing: every event `data: ...`, nothing after [DONE]).
#pragma once

#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

namespace llmtap::sim::testing {

// The JSON objects of an SSE body; `done` tells whether it ended with [DONE].
inline std::vector<nlohmann::json> Events(const std::string& body, bool* done) {
  std::vector<nlohmann::json> out;
  *done = false;
  size_t pos = 0;
  while (pos < body.size()) {
    size_t end = body.find("\n\n", pos);
    EXPECT_NE(end, std::string::npos) << "unterminated event";
    if (end == std::string::npos) break;
    std::string event = body.substr(pos, end - pos);
    pos = end + 2;
    EXPECT_EQ(event.rfind("data: ", 0), 0u) << event;
    EXPECT_FALSE(*done) << "event after [DONE]";
    std::string data = event.substr(6);
    if (data == "[DONE]") {
      *done = true;
      continue;
    }
    out.push_back(nlohmann::json::parse(data));
  }
  return out;
}

}  // namespace llmtap::sim::testing
