// `llmtap validate`: checks that every line of a trace would load in AIPerf, with the rules of
// AIPerf 0.11.0's mooncake_trace and raw_payload loaders as its code applies them (checked
// against that code by tests/aiperf/validate_test.sh): how it reads a line, orjson's JSON,
// pydantic's coercions of each field, the Turn a row becomes, the 512-token hash blocks, the
// rules of a session (one input mode) and of a fixed-schedule run (every session's first row
// has a timestamp). Where AIPerf loads a row that llmtap's other tools or a server would trip
// on, the row passes with a deliberate warning (ValidateWarningRules, listed in --help).
// Streaming; memory grows with the number of distinct session ids only. Any thread (one call
// per thread at a time shares nothing).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "trace/record.h"
#include "trace/tool_common.h"

namespace llmtap::trace {

// The AIPerf release whose loader rules validate applies.
inline constexpr std::string_view kValidateAIPerfVersion = "0.11.0";

struct ValidateOptions {
  std::string path;
  // kChat or kCompletions: the --endpoint-type of the AIPerf run; rows whose request suits the
  // other type pass with a warning (AIPerf loads them and sends them as they are).
  std::optional<Endpoint> endpoint_type;
  std::optional<TraceFormat> format;  // default: manifest, else the first valid row
  // The run has --fixed-schedule (AIPerf replays a mooncake file on its timestamps anyway when
  // its first row has one).
  bool fixed_schedule = false;
  size_t max_failures = 20;  // failures (and row warnings) kept for the report (all are counted)
  bool progress = false;
};

// A deliberate difference from AIPerf: the row loads in AIPerf, validate says why it may still
// not do what was meant.
struct ValidateWarningRule {
  std::string_view id;
  std::string_view help;
};
std::span<const ValidateWarningRule> ValidateWarningRules();

struct ValidateReport {
  std::string path;
  Status io;  // open/read error: nothing below is complete
  TraceFormat format = TraceFormat::kUnknown;
  std::string format_source;
  std::optional<Endpoint> endpoint_type;
  // How AIPerf would schedule a mooncake file: "fixed" (--fixed-schedule, or its first row has
  // a timestamp) or "rate" (timestamps are not used); empty for raw_payload.
  std::string schedule;
  uint64_t lines = 0;  // every line, blank ones included
  uint64_t rows = 0;   // non-blank lines
  uint64_t passed = 0;
  uint64_t warned = 0;                        // of the passed rows, those with a row warning
  uint64_t blank = 0;                         // skipped, as AIPerf does
  uint64_t crlf = 0;                          // lines ending in "\r\n" (accepted)
  bool torn_tail = false;                     // last line had no '\n'
  std::map<std::string, uint64_t> endpoints;  // of rows that parsed, by EndpointName
  // Rows read as chat that a Messages server would take too (counted without --endpoint-type
  // in a file whose API llmtap's capture did not record).
  ChatOrMessagesRows chat_or_messages;
  uint64_t sessions = 0;      // distinct non-empty session_ids (mooncake rows)
  uint64_t session_rows = 0;  // rows carrying one
  FailureList failures;
  // Deliberate warnings on lines AIPerf loads: the first failures.limit kept, all counted (in
  // total and by rule).
  struct RowWarning {
    uint64_t line = 0;
    std::string rule;  // a ValidateWarningRule id
    std::string reason;
  };
  std::vector<RowWarning> row_warnings;
  uint64_t row_warnings_total = 0;
  std::map<std::string, uint64_t> warning_rules;
  std::vector<std::string> warnings;  // about the file as a whole

  uint64_t failed() const { return failures.total; }
  bool ok() const { return io.ok() && failures.total == 0; }
  // 0 every line passes, 1 some fail, 2 the file could not be read.
  int exit_code() const { return !io.ok() ? 2 : (failures.total == 0 ? 0 : 1); }
};

ValidateReport ValidateTrace(const ValidateOptions& options);

std::string RenderValidateText(const ValidateReport& report);
std::string RenderValidateJson(const ValidateReport& report);

}  // namespace llmtap::trace
