// The response outcomes sidecar (`<capture>.outcomes.jsonl`, see README "Response outcomes")
// as `llmtap anonymize` uses it: for each capture line, the completion tokens the server
// actually produced, or why that number cannot stand for the request's output length.
// Built once by one thread, then read-only (any thread may call Find).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "common/status.h"

namespace llmtap::anonymize {

struct Outcome {
  // Set when the response ended normally and reported its usage.
  std::optional<uint64_t> completion_tokens;
  // Otherwise why not: "cancelled", "upstream error", "HTTP status", "no usage reported".
  std::string unusable;
};

class OutcomeTable {
 public:
  // Reads `path`. A missing file is not an error (*loaded stays false). Lines that are not
  // outcome objects are counted in bad_lines() and ignored; a capture line listed twice keeps
  // its last outcome.
  Status Load(const std::string& path, bool* loaded);

  // The outcome of capture line `line` (1-based), or null when the sidecar has none.
  const Outcome* Find(uint64_t line) const {
    auto it = by_line_.find(line);
    return it == by_line_.end() ? nullptr : &it->second;
  }
  size_t size() const { return by_line_.size(); }
  uint64_t bad_lines() const { return bad_lines_; }
  uint64_t duplicate_lines() const { return duplicates_; }

 private:
  std::unordered_map<uint64_t, Outcome> by_line_;
  uint64_t bad_lines_ = 0;
  uint64_t duplicates_ = 0;
};

}  // namespace llmtap::anonymize
