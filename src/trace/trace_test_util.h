// Helpers for the trace tool tests: temporary directories (TempDir, from
// common/testing/temp_files.h), the lines of a text, reading a file, fixture paths.
#pragma once

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "common/testing/temp_files.h"

namespace llmtap::trace::testing {

using llmtap::testing::TempDir;

// The lines of `text`, without their '\n'.
inline std::vector<std::string> Lines(const std::string& text) {
  std::vector<std::string> out;
  std::stringstream ss(text);
  std::string l;
  while (std::getline(ss, l)) out.push_back(l);
  return out;
}

inline std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

inline std::string Fixture(const std::string& name) {
  const char* root = std::getenv("LLMTAP_SOURCE_DIR");
  return std::string(root ? root : ".") + "/tests/data/traces/" + name;
}

}  // namespace llmtap::trace::testing
