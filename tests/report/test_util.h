// Helpers shared by the report tests: fixture paths and reading files.
#pragma once

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

#include <gtest/gtest.h>

namespace llmtap::report::testing {

// tests/report/data/<name>; LLMTAP_SOURCE_DIR is set by CTest (llmtap_test in CMakeLists.txt).
inline std::string DataPath(const std::string& name) {
  const char* root = std::getenv("LLMTAP_SOURCE_DIR");
  return std::string(root ? root : ".") + "/tests/report/data/" + name;
}

inline std::string ReadData(const std::string& name) {
  std::ifstream in(DataPath(name), std::ios::binary);
  EXPECT_TRUE(in.good()) << DataPath(name);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

}  // namespace llmtap::report::testing
