// Shared plumbing of the trace tools (internal to llmtap_trace): how a file's format is
// decided and how a failing line is described.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "trace/record.h"
#include "trace/trace_io.h"

namespace llmtap::trace {

// A line that failed, with why.
struct LineFailure {
  uint64_t line = 0;
  std::string reason;
};

// Keeps the first `limit` failures and counts the rest.
struct FailureList {
  size_t limit = 20;
  std::vector<LineFailure> kept;
  uint64_t total = 0;
  void Add(uint64_t line, std::string reason) {
    ++total;
    if (kept.size() < limit) kept.push_back({line, std::move(reason)});
  }
};

// A file's format: --format beats the manifest, which beats the first valid row.
class FormatResolver {
 public:
  void Init(const std::optional<TraceFormat>& flag, const std::optional<ManifestView>& manifest) {
    if (flag) {
      format_ = *flag;
      source_ = "--format";
    } else if (manifest && ParseTraceFormat(manifest->format)) {
      format_ = *ParseTraceFormat(manifest->format);
      source_ = "manifest";
    }
  }
  TraceFormat Resolve(simdjson::dom::object row) {
    if (format_ == TraceFormat::kUnknown) {
      format_ = RowFormat(row);
      source_ = "first valid row";
    }
    return format_;
  }
  TraceFormat format() const { return format_; }
  const std::string& source() const { return source_; }

 private:
  TraceFormat format_ = TraceFormat::kUnknown;
  std::string source_ = "none (no valid row)";
};

// "file:line: reason"
inline std::string Located(const std::string& path, uint64_t line, const std::string& reason) {
  return path + ":" + std::to_string(line) + ": " + reason;
}

}  // namespace llmtap::trace
