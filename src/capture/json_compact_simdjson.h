// The simdjson path of JsonCompactor (json_compact_simdjson.cc), for CPUs without the AVX-512
// kernel; see json_compact.cc for how it fits with the other paths.
//
// Apart from json_compact_internal.h because the class holds simdjson types, and <simdjson.h>
// is a private dependency of llmtap_capture: the tests and benchmarks that include the internal
// header do not see it.
#pragma once

#include <simdjson.h>

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>

namespace llmtap::json_compact_internal {

class SimdjsonCompactor {
 public:
  // Appends the compact form and returns true, or leaves *out as it was and returns false.
  bool TryCompactSimdjson(std::string_view body, std::string* out);

 private:
  // Grows with the largest body seen (simdjson keeps ~14 bytes of state per input byte).
  static constexpr size_t kInitialCapacity = 4096;
  simdjson::dom::parser parser;
  bool parser_ready = false;
  std::unique_ptr<char[]> scratch;
  size_t scratch_size = 0;
};

}  // namespace llmtap::json_compact_internal
