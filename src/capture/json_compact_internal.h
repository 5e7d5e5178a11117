// Test and benchmark hooks into JsonCompactor's individual paths. Not for production use:
// JsonCompactor::Compact picks the path. Thread-safety as JsonCompactor (thread-local state).
#pragma once

#include <string>
#include <string_view>

namespace llmtap::json_compact_internal {

// Whether this CPU runs the AVX-512 kernel (AVX-512 BW/VL/VBMI/VBMI2).
bool HasAvx512Kernel();
// Run one fast path alone: true when it accepts `body` (and appends its compact form).
bool TryCompactAvx512ForTest(std::string_view body, std::string* out);
bool TryCompactSimdjsonForTest(std::string_view body, std::string* out);

}  // namespace llmtap::json_compact_internal
