// `llmtap merge`: interleaves the captures of several replicas on absolute time. Each input's
// timestamps are shifted by its manifest epoch (timestamp_zero_unix_ms); output timestamps
// are relative to the earliest row; ties keep input order, then line order. A k-way merge
// with one streaming cursor per input: memory grows with the number of inputs only.
// One call per thread.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"
#include "trace/record.h"
#include "trace/tool_common.h"

namespace llmtap::trace {

struct MergeOptions {
  std::vector<std::string> inputs;
  std::string out;
  // Inputs without a manifest epoch are taken to share timestamp 0.
  bool assume_aligned = false;
  bool force = false;
  size_t max_failures = 20;
  bool progress = false;
};

struct MergeInputSummary {
  std::string path;
  std::optional<int64_t> epoch_ms;  // from the manifest
  uint64_t rows = 0;
};

struct MergeReport {
  std::string out;
  std::string out_manifest;
  Status io;
  TraceFormat format = TraceFormat::kUnknown;
  std::vector<MergeInputSummary> inputs;
  uint64_t written = 0;
  std::optional<int64_t> epoch_ms;  // wall clock of output timestamp 0 (when known)
  FailureList skipped;              // reasons carry "file:line: "
  std::vector<std::string> warnings;
  int exit_code() const { return !io.ok() ? 2 : (skipped.total == 0 ? 0 : 1); }
};

MergeReport MergeTraces(const MergeOptions& options);
std::string RenderMergeText(const MergeReport& report);

}  // namespace llmtap::trace
