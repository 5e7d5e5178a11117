// Reading summary JSON written by other versions or by hand: lookups that never throw.
#pragma once

#include <nlohmann/json.hpp>

namespace llmtap::report {

// The value at a JSON pointer ("/metrics/ttft_ms/p99"), or nullptr when it is absent or the
// document has another shape there.
inline const nlohmann::json* JsonAt(const nlohmann::json& j, const char* pointer) {
  try {
    nlohmann::json::json_pointer p(pointer);
    return j.contains(p) ? &j.at(p) : nullptr;
  } catch (const nlohmann::json::exception&) {
    return nullptr;
  }
}

// The number at a JSON pointer, or `fallback`.
inline double JsonNumberAt(const nlohmann::json& j, const char* pointer, double fallback) {
  const nlohmann::json* v = JsonAt(j, pointer);
  return v && v->is_number() ? v->get<double>() : fallback;
}

}  // namespace llmtap::report
