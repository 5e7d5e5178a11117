// `llmtap stats`: what a trace's traffic looks like, in one streaming pass: count, duration,
// rates, endpoint mix, models, streaming share, prompt sizes, max_tokens, prefix reuse, and
// the capture's own loss counters from its manifest. One call per thread.
//
// Memory: constant per row, except the prefix-reuse tables, which hold one 8-byte hash (plus
// a counter) per distinct message prefix or hash_ids prefix, and the per-second rate table
// (one entry per second of trace time).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "common/status.h"
#include "trace/record.h"
#include "trace/tool_common.h"

namespace llmtap::trace {

// Counts per 64-bit key: open addressing with linear probing, for the per-row tables that
// node-based maps made the hot spot of `stats`.
class FlatCounter {
 public:
  // Adds `n` to key's count and returns the count before.
  uint64_t Add(uint64_t key, uint64_t n = 1);
  uint64_t Get(uint64_t key) const;
  size_t size() const { return size_; }
  template <typename F>
  void ForEach(F&& f) const {
    if (has_zero_) f(uint64_t{0}, zero_count_);
    for (const Slot& s : slots_) {
      if (s.key != 0) f(s.key, s.count);
    }
  }

 private:
  struct Slot {
    uint64_t key = 0;  // 0 marks an empty slot; key 0 itself is kept aside
    uint64_t count = 0;
  };
  void Grow();
  static size_t Index(uint64_t key, size_t mask) {
    key ^= key >> 33;
    key *= 0xff51afd7ed558ccdull;
    key ^= key >> 33;
    return static_cast<size_t>(key) & mask;
  }
  std::vector<Slot> slots_;
  size_t size_ = 0;
  bool has_zero_ = false;
  uint64_t zero_count_ = 0;
};

// Values with <= 0.1% error above 1024 and exact below: ten significant bits are kept.
class Histogram {
 public:
  void Add(uint64_t v);
  uint64_t count() const { return count_; }
  double mean() const {
    return count_ ? static_cast<double>(sum_) / static_cast<double>(count_) : 0;
  }
  uint64_t min() const { return min_; }
  uint64_t max() const { return max_; }
  uint64_t sum() const { return sum_; }
  // Nearest-rank percentile, p in (0, 100].
  uint64_t Percentile(double p) const;

 private:
  FlatCounter buckets_;
  uint64_t count_ = 0, sum_ = 0, min_ = UINT64_MAX, max_ = 0;
};

// Prefix reuse as AIPerf's analyze-trace (PrefixAnalyzer) defines it, over a sequence of
// "blocks" per request: hash_ids for hashed traces, chained message hashes for payload
// traces (block i stands for messages[0..i]).
//   cache_hit_rate: mean over requests of (index of the first block not seen in any earlier
//     request) / (blocks in the request) -- an infinite prefix cache.
//   prefix_reuse_ratio: over every prefix of every request (blocks[0..i]), the share of
//     occurrences whose prefix occurs more than once in the trace.
//   unique_prefixes; prefix_groups: first blocks shared by two or more requests.
class PrefixReuse {
 public:
  // `weights[i]` (optional, same length) is the size of block i, for the weighted hit share.
  void AddRequest(const uint64_t* blocks, size_t n, const uint64_t* weights = nullptr);
  struct Result {
    uint64_t requests = 0;
    uint64_t unique_prefixes = 0;
    uint64_t prefix_groups = 0;
    double cache_hit_rate = 0;
    double prefix_reuse_ratio = 0;
    double weighted_hit_share = 0;  // sum of weights before the first unseen block / total
  };
  Result Compute() const;

 private:
  FlatCounter seen_blocks_;
  FlatCounter prefix_counts_;
  FlatCounter first_block_counts_;
  uint64_t requests_ = 0;
  double hit_rate_sum_ = 0;
  uint64_t weight_hit_ = 0, weight_total_ = 0;
};

struct Outcome;

// Conversations in a trace: rows sharing a session_id, in file order (AIPerf sends a session's
// rows one after another). For each turn after the first: the gap from the previous turn's
// start, and, when the previous turn's response outcome (latency) is known, the think time
// from the end of its response to this turn's start. A turn that started before the previous
// one ended (a client that does not wait) is counted as overlapping, not as a think time.
// Memory: about 48 bytes per distinct session (ids are kept as 64-bit hashes). One thread.
class SessionStats {
 public:
  // A row, in file order: its session id ("" for none), timestamp (ms) and joined outcome.
  void Add(std::string_view session_id, std::optional<double> timestamp_ms, const Outcome* outcome);
  void Finish();  // fills turns()

  uint64_t sessions() const { return sessions_.size(); }
  uint64_t rows() const { return rows_; }
  const Histogram& turns() const { return turns_; }        // per session
  const Histogram& gap_ms() const { return gap_ms_; }      // start to next start
  const Histogram& think_ms() const { return think_ms_; }  // response end to next start
  uint64_t overlapping() const { return overlapping_; }
  uint64_t without_latency() const { return without_latency_; }  // previous turn's unknown
  void DropThinkTimes() { think_ms_ = {}, overlapping_ = 0, without_latency_ = 0; }

 private:
  struct Session {
    uint64_t turns = 0;
    std::optional<double> last_start_ms, last_end_ms;
  };
  std::unordered_map<uint64_t, Session> sessions_;
  uint64_t rows_ = 0, overlapping_ = 0, without_latency_ = 0;
  Histogram turns_, gap_ms_, think_ms_;
};

struct StatsOptions {
  std::string path;
  // The outcomes sidecar for think times: this file, else <path>.outcomes.ndjson when it
  // exists; none with no_outcomes.
  std::string outcomes_path;
  bool no_outcomes = false;
  std::optional<TraceFormat> format;
  size_t max_failures = 20;
  bool progress = false;
};

struct StatsReport {
  std::string path;
  Status io;
  TraceFormat format = TraceFormat::kUnknown;
  std::string format_source;
  uint64_t lines = 0, rows = 0, blank = 0;
  bool torn_tail = false;
  FailureList skipped;

  // Timing (rows with a numeric timestamp).
  uint64_t timed_rows = 0;
  double first_ts_ms = 0, last_ts_ms = 0;
  double duration_s = 0;
  double mean_rate = 0;  // timed rows / duration (0 when the duration is 0)
  uint64_t peak_second_count = 0;
  double peak_second_start_ms = 0;

  std::map<std::string, uint64_t> endpoints;
  std::map<std::string, uint64_t> models;  // requests by "model"; "(none)" when absent
  uint64_t stream_requests = 0;            // "stream": true
  uint64_t requests = 0;                   // rows carrying a request (payload or raw)
  // The prompt's text, as the chat template would lay it out: chat, all message text;
  // completions, the prompt; Responses, instructions then the input items; Messages, system
  // then the messages; embeddings, the inputs; rerank, the query and the documents.
  Histogram prompt_chars;
  std::map<std::string, Histogram> prompt_chars_by_api;  // the same, by API (EndpointName)
  // max_tokens, else max_completion_tokens, else (Responses) max_output_tokens
  Histogram max_tokens;
  uint64_t no_max_tokens = 0;
  Histogram input_length;  // hashed/synthetic mooncake rows
  Histogram output_length;
  std::optional<PrefixReuse::Result> message_prefix;
  std::optional<PrefixReuse::Result> hash_prefix;
  SessionStats sessions;
  std::string outcomes_path;  // the sidecar joined, if any
  uint64_t outcomes_joined = 0;
  // What the capture's server reported of its prompt cache (the outcomes' prompt_tokens and
  // cached_tokens), over the rows whose outcome has both: beside the prefix-reuse estimate.
  struct ServerCache {
    uint64_t requests = 0, prompt_tokens = 0, cached_tokens = 0;
  } server_cache;

  std::optional<ManifestView> manifest;
  std::optional<double> effective_sample_rate;  // recorded / matched
  std::vector<std::string> warnings;

  int exit_code() const { return !io.ok() ? 2 : (skipped.total == 0 ? 0 : 1); }
};

StatsReport ComputeStats(const StatsOptions& options);
std::string RenderStatsText(const StatsReport& report);
std::string RenderStatsJson(const StatsReport& report);

// Unicode code points in UTF-8 text (continuation bytes are not counted).
uint64_t CountChars(std::string_view utf8);

}  // namespace llmtap::trace
