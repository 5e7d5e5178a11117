// `llmtap convert`: between llmtap's two capture formats. mooncake_payload -> raw_payload
// keeps each payload's bytes and drops the timestamps, for chat requests only: AIPerf's
// raw_payload loader refuses a file with any row without 'messages', so completions and other
// rows are skipped and named (exit 1); raw_payload -> mooncake_payload wraps
// each request as {"timestamp":T,"payload":<request bytes>} with T from a synthetic arrival
// process (Poisson or constant at --rate), or 0 for every row. One call per thread.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"
#include "trace/record.h"
#include "trace/tool_common.h"

namespace llmtap::trace {

enum class Arrival { kPoisson, kConstant };

struct ConvertOptions {
  std::string path;
  std::string out;  // default: <input base>.<to>.jsonl next to the input
  TraceFormat to = TraceFormat::kRaw;
  double rate = 0;  // requests per second; 0: every timestamp is 0
  Arrival arrival = Arrival::kPoisson;
  uint64_t seed = 1;
  bool force = false;
  std::optional<TraceFormat> format;  // of the input
  size_t max_failures = 20;
  bool progress = false;
};

struct ConvertReport {
  std::string path;
  std::string out;
  Status io;
  TraceFormat from = TraceFormat::kUnknown;
  TraceFormat to = TraceFormat::kUnknown;
  uint64_t lines = 0, written = 0, blank = 0;
  double last_timestamp_ms = 0;
  FailureList skipped;
  std::vector<std::string> warnings;
  int exit_code() const { return !io.ok() ? 2 : (skipped.total == 0 ? 0 : 1); }
};

ConvertReport ConvertTrace(const ConvertOptions& options);
std::string RenderConvertText(const ConvertReport& report);

// The payload bytes of a mooncake payload row (whose parsed form is `row`); nullopt when the
// row has no payload object.
std::optional<std::string_view> PayloadBytes(std::string_view line, simdjson::dom::object row);

}  // namespace llmtap::trace
