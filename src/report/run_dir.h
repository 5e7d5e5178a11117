// A replay's output directory (`llmtap replay --out DIR`): summary.json, requests.jsonl and
// report.html. Loading one (for compare, merge and re-rendering), merging shards' outputs, and
// writing a directory. One call per thread.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "report/summary.h"

namespace llmtap::report {

inline constexpr const char* kSummaryFile = "summary.json";
inline constexpr const char* kRequestsFile = "requests.jsonl";
inline constexpr const char* kReportFile = "report.html";

struct RunDir {
  std::string path;  // as given: a directory or a summary.json
  std::string dir;   // the directory holding summary.json
  nlohmann::json summary;
  std::vector<RequestResult> requests;  // loaded only when asked for
};

// `path` is a directory (or an s3:// prefix) with summary.json, or a summary JSON file itself. With
// `with_requests`, DIR/requests.jsonl is read too and must exist. False with a reason (file:line
// for a bad line).
bool LoadRun(const std::string& path, bool with_requests, RunDir* out, std::string* error);

// Reads a requests.jsonl file (blank lines skipped).
bool ReadRequestsJsonl(const std::string& file, std::vector<RequestResult>* out,
                       std::string* error);

struct MergeOutput {
  nlohmann::json summary;
  std::vector<RequestResult> requests;  // sorted by scheduled time
  std::vector<std::string> warnings;
};

// Combines the outputs of the shards of one replay (`--shard i/N`). Each shard's times are moved
// onto the earliest shard's clock by its started_at_unix_ms, requests are concatenated, and every
// statistic is recomputed by SummarizeRequests (goodput constraints and max_concurrency taken
// from the shards' summaries; the duration is the merged requests' measured window, as for one
// run); "sessions" (causal replay) by SummarizeSessions, left out with a warning when a shard's
// requests.jsonl does not mark the turns its summary counts; "response_chains" by adding the
// shards' counts (a chain is replayed by one shard). server_metrics is the one of the
// shard with the longest scrape window (all shards scrape the same server). Inconsistencies
// (different traces or URLs, shard indexes repeated or missing) are warnings. `runs` must have
// their requests loaded.
bool MergeRuns(const std::vector<RunDir>& runs, MergeOutput* out, std::string* error);

// Writes DIR/summary.json, DIR/requests.jsonl and DIR/report.html (creating DIR), each through a
// temporary file renamed into place; DIR may be an s3:// prefix (each object is put whole).
bool WriteRunDir(const std::string& dir, const nlohmann::json& summary,
                 const std::vector<RequestResult>& requests, std::string* error);

// Writes `content` to `path` through `path.tmp` renamed into place, or as one s3:// object.
bool WriteFileAtomically(const std::string& path, const std::string& content, std::string* error);

}  // namespace llmtap::report
