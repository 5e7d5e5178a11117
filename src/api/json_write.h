// Numbers in JSON text, for the API modules' response writers.
#pragma once

#include <charconv>
#include <cstdint>
#include <string>

namespace llmtap::api {

inline void AppendUint(std::string* out, uint64_t v) {
  char buf[24];
  out->append(buf, std::to_chars(buf, buf + sizeof buf, v).ptr);
}

// The shortest text that reads back as `v` (finite values only).
inline void AppendDouble(std::string* out, double v) {
  char buf[32];
  out->append(buf, std::to_chars(buf, buf + sizeof buf, v).ptr);
}

}  // namespace llmtap::api
