// `llmtap validate`: checks that every line of a trace would load in AIPerf, with the rules
// of AIPerf's mooncake_trace and raw_payload loaders, sessions included (rows sharing a
// session_id: one input mode, one endpoint type). Streaming; memory grows with the number of
// distinct session ids only. Any thread (one call per thread at a time shares nothing).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"
#include "trace/record.h"
#include "trace/tool_common.h"

namespace llmtap::trace {

struct ValidateOptions {
  std::string path;
  // kChat or kCompletions: also check that every row suits that endpoint type.
  std::optional<Endpoint> endpoint_type;
  std::optional<TraceFormat> format;  // default: manifest, else the first valid row
  size_t max_failures = 20;           // failures kept for the report (all are counted)
  bool progress = false;
};

struct ValidateReport {
  std::string path;
  Status io;  // open/read error: nothing below is complete
  TraceFormat format = TraceFormat::kUnknown;
  std::string format_source;
  std::optional<Endpoint> endpoint_type;
  uint64_t lines = 0;  // every line, blank ones included
  uint64_t rows = 0;   // non-blank lines
  uint64_t passed = 0;
  uint64_t blank = 0;                         // skipped, as AIPerf does
  uint64_t crlf = 0;                          // lines ending in "\r\n" (accepted)
  bool torn_tail = false;                     // last line had no '\n'
  std::map<std::string, uint64_t> endpoints;  // of rows that parsed, by EndpointName
  uint64_t sessions = 0;                      // distinct non-empty session_ids (mooncake rows)
  uint64_t session_rows = 0;                  // rows carrying one
  FailureList failures;
  std::vector<std::string> warnings;

  uint64_t failed() const { return failures.total; }
  bool ok() const { return io.ok() && failures.total == 0; }
  // 0 every line passes, 1 some fail, 2 the file could not be read.
  int exit_code() const { return !io.ok() ? 2 : (failures.total == 0 ? 0 : 1); }
};

ValidateReport ValidateTrace(const ValidateOptions& options);

// The per-row rules, for one parsed row (exposed for tests). Empty string: the row passes.
std::string CheckRow(simdjson::dom::object row, TraceFormat format,
                     std::optional<Endpoint> endpoint_type);

std::string RenderValidateText(const ValidateReport& report);
std::string RenderValidateJson(const ValidateReport& report);

}  // namespace llmtap::trace
