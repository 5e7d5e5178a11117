// The few simdjson lookups every API's response reading uses (api/response_document.h). Internal
// to src/api.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include <simdjson.h>

#include "api/response_document.h"

namespace llmtap::api::document {

// o[key] as a string; "" when absent or not a string.
inline std::string_view String(const simdjson::dom::object& o, std::string_view key) {
  std::string_view s;
  return o.at_key(key).get(s) == simdjson::SUCCESS ? s : std::string_view();
}

// o[key] as an object; false when absent or not an object.
inline bool Object(const simdjson::dom::object& o, std::string_view key,
                   simdjson::dom::object* out) {
  return o.at_key(key).get(*out) == simdjson::SUCCESS;
}

inline bool Array(const simdjson::dom::object& o, std::string_view key, simdjson::dom::array* out) {
  return o.at_key(key).get(*out) == simdjson::SUCCESS;
}

// o[key] as a non-negative integer that fits int64; nullopt otherwise.
inline std::optional<int64_t> Count(const simdjson::dom::object& o, std::string_view key) {
  int64_t v = 0;
  if (o.at_key(key).get(v) != simdjson::SUCCESS || v < 0) return std::nullopt;
  return v;
}

// o[key] as an integer, else `fallback`.
inline int64_t Index(const simdjson::dom::object& o, std::string_view key, int64_t fallback) {
  int64_t v = 0;
  return o.at_key(key).get(v) == simdjson::SUCCESS ? v : fallback;
}

// An "error" member that is present and not null.
inline bool HasError(const simdjson::dom::object& o) {
  simdjson::dom::element e;
  return o.at_key("error").get(e) == simdjson::SUCCESS && !e.is_null();
}

// A content value as text: a string, or its parts joined (each part's "text": chat text parts,
// Responses input_text / output_text, Messages text blocks; a Responses refusal's "refusal");
// other parts (images, tool blocks) add nothing.
inline std::string PartsText(simdjson::dom::element content) {
  std::string_view s;
  if (content.get(s) == simdjson::SUCCESS) return std::string(s);
  std::string text;
  simdjson::dom::array parts;
  if (content.get(parts) != simdjson::SUCCESS) return text;
  for (simdjson::dom::element p : parts) {
    simdjson::dom::object part;
    if (p.get(part) != simdjson::SUCCESS) continue;
    std::string_view t = String(part, "text");
    if (t.empty()) t = String(part, "refusal");
    text.append(t);
  }
  return text;
}

// The members of a document's top level that report the server's own work (llama.cpp's
// "timings", vLLM's metrics.speculative_decoding, SGLang's sglext.spec_tokens_details) into r
// (server_report.cc): the members present overwrite what r held.
void ReadServerReport(const simdjson::dom::object& o, ServerReport* r);
// usage[details].cached_tokens (chat's "prompt_tokens_details", Responses'
// "input_tokens_details") into r->cached_tokens when present.
void ReadCachedTokens(const simdjson::dom::object& usage, std::string_view details,
                      ServerReport* r);

// Sets a finish reason (a non-empty string wins over what was there).
inline void SetFinish(std::string_view reason, DocumentFacts* facts) {
  if (!reason.empty()) facts->finish_reason.assign(reason);
}

}  // namespace llmtap::api::document
