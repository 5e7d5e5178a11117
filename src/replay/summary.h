// The outputs of a replay, in the schemas src/report reads (the HTML report, `llmtap compare`,
// `llmtap report merge`): every request as a report::RequestResult (one requests.jsonl line),
// and summary.json = the statistics of report::SummarizeRequests (computed the same way for one
// run and for merged shards) plus the run's own fields.
//
// A replay keeps no per-request record in memory: RunOutputs takes each request as it ends,
// writes its requests.jsonl line and adds it to a SummaryBuilder, whose memory does not grow with
// the run (each metric's values wait in a temporary file: ValueSpool).
//
// Implemented by role: run_outputs.cc (ToReportResult, RunOutputs), summary.cc (SummaryBuilder,
// BuildSummary), value_spool.cc (ValueSpool), console.cc (RenderConsole).
//
// Threads: the free functions are pure, any thread. ValueSpool, SummaryBuilder and RunOutputs
// belong to one thread (the one running the replay).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "replay/metrics.h"
#include "replay/options.h"
#include "report/summary.h"
#include "store/s3_url.h"
#include "store/stream.h"

namespace llmtap::replay {

// Run-wide facts that are not in the per-request results.
struct RunFacts {
  std::string command;
  std::string url;
  std::string trace;
  uint32_t shard_index = 0;
  uint32_t shard_count = 1;
  int64_t started_at_unix_ms = 0;
  std::string server_metrics_json;  // "" = null
  // What was read: {"rows", "skipped", "out_of_order", ...}; null = left out.
  nlohmann::json input;
  // RunOutputs::Sessions (null = left out: no row had a session_id).
  nlohmann::json sessions;
  // RunOutputs::Chains (null = left out: no row continued a Responses response).
  nlohmann::json response_chains;
  // {"cache": report::CacheJson} of what the capture's server reported for the rows replayed
  // (the outcomes sidecar; null = left out: no sidecar, or no outcome had cached_tokens).
  nlohmann::json captured_server;
  // The replay-fidelity certificate (fidelity::BuildCertificate; null = left out: no pairs).
  nlohmann::json fidelity;
};

// Times rounded to the microsecond. A request never sent (the run was interrupted) has no
// sent_ms; lag, latency and done are 0. `causal_sessions`: the run follows sessions (--schedule
// causal), so a session turn carries session_turn, causal_shift_ms and captured_latency.
report::RequestResult ToReportResult(const RequestResult& r, uint32_t shard,
                                     bool causal_sessions = false);

// The values of one metric in an unlinked temporary file, and their statistics computed exactly as
// report::ComputeStats computes them (count, p50/p90/p95/p99 by the same interpolation, max; the
// mean summed in extended precision, so equal to its last bits or so) with memory independent of
// how many there are: each pass over the file counts the values in 65,536 buckets of the range
// still open for a wanted rank and narrows that range to the rank's bucket, until few enough
// values are left to sort.
class ValueSpool {
 public:
  // `collect_limit`: values sorted in memory at most (the last pass); tests make it small.
  explicit ValueSpool(size_t collect_limit = size_t{1} << 20) : collect_limit_(collect_limit) {}
  ~ValueSpool();
  ValueSpool(const ValueSpool&) = delete;
  ValueSpool& operator=(const ValueSpool&) = delete;

  // Creates the file in the first of `dirs` ("" entries skipped) where one can be made. False
  // with *error when none can: the values then stay in memory (the results are the same).
  bool Open(const std::vector<std::string>& dirs, std::string* error);
  // Non-finite values are left out, as ComputeStats does.
  void Add(double value);
  // False with *error after a failed write or read (a full disk).
  bool Compute(report::Stats* stats, std::string* error);
  size_t count() const { return count_; }

 private:
  bool Flush();
  struct Range;
  bool Pass(std::vector<Range>* ranges, std::string* error);

  const size_t collect_limit_;
  int fd_ = -1;
  std::vector<uint64_t> buffer_;  // order-preserving keys of the values
  size_t count_ = 0;
  long double sum_ = 0;
  uint64_t min_key_ = ~uint64_t{0}, max_key_ = 0;
  std::string error_;
};

// summary.json's statistics, request by request: Summarize() returns what
// report::SummarizeRequests returns for the same requests and options (replay_test compares the
// two), with memory that does not grow with the number of requests.
class SummaryBuilder {
 public:
  explicit SummaryBuilder(report::SummaryOptions options);
  // The ValueSpools' files (ValueSpool::Open; false: some stay in memory, *error says why).
  bool Open(const std::vector<std::string>& dirs, std::string* error);
  void Add(const report::RequestResult& r) { tally_.Add(r, spools_); }
  // False with *error when a value file failed.
  bool Summarize(nlohmann::json* out, std::string* error);

 private:
  // Each series' values in a ValueSpool of its own.
  struct Spools final : report::RequestTally::ValueSink {
    void Add(report::Series s, double v) override { series[static_cast<size_t>(s)].Add(v); }
    ValueSpool series[report::kSeriesCount];
  };
  report::RequestTally tally_;
  Spools spools_;
};

// The requests of a run as they end: each becomes a report::RequestResult, goes into the
// SummaryBuilder and, with an output directory, is a line of DIR/requests.jsonl.tmp at once (in
// the order the requests ended; an open loop's never-sent ones last). DIR may be an s3:// prefix
// (`--out s3://bucket/run/shard-0/`), where requests.jsonl is streamed up as a multipart upload.
// Finish() renames it into place (or completes the upload) and writes summary.json and, for runs of
// up to kHtmlMaxRequests requests, report.html (it plots every request; `llmtap report html DIR`
// renders a larger run's, with the memory that takes).
class RunOutputs {
 public:
  static constexpr size_t kHtmlMaxRequests = 100000;
  static constexpr size_t kLinesBufferBytes = size_t{256} << 10;

  // `causal_sessions`: as for ToReportResult.
  RunOutputs(const report::SummaryOptions& options, uint32_t shard, bool causal_sessions = false)
      : shard_(shard), causal_sessions_(causal_sessions), summary_(options) {}
  ~RunOutputs();
  // `dir` "" = no files, statistics only. False with *error when DIR or its requests file cannot
  // be created. *warning: no temporary file could be made for the statistics' values (in
  // $TMPDIR, DIR or /tmp), so they stay in memory.
  bool Open(const std::string& dir, std::string* error, std::string* warning);
  void Add(const RequestResult& r);
  // summary.json's statistics (report::SummarizeRequests' part).
  bool Summarize(nlohmann::json* out, std::string* error) { return summary_.Summarize(out, error); }
  // Writes the files. *html_skipped: report.html was not written (too many requests).
  bool Finish(const nlohmann::json& summary, bool* html_skipped, std::string* error);

  uint64_t requests() const { return requests_; }
  uint64_t failed() const { return failed_; }  // sent and not ok

  // summary.json's "sessions" (report::SessionsJson; for a causal run what
  // report::SummarizeSessions computes from requests.jsonl); null when no turn was sent.
  // `schedule`: "causal" when the run followed sessions, else why not ("timestamps": --schedule
  // timestamps; "closed loop": --concurrency).
  bool Sessions(const std::string& schedule, nlohmann::json* out, std::string* error);

  // summary.json's "response_chains": of the sent Responses rows with a previous_response_id
  // (chains.h), {"mode": "remap"|"inline", "rows", "remapped", "inlined", "inlined_output":
  // {"captured", "replayed"}, "sent_with_captured_id": {why: count},
  // "previous_response_id_refused"}; null when none.
  nlohmann::json Chains(ResponsesChain mode) const;

  // Replay fidelity (fidelity/pairs.h): each measured row sent with a captured outcome
  // (RequestResult::captured_side) makes a line of DIR/fidelity-pairs.ndjson as it ends. Closes
  // the file; false with *error when it could not be written. fidelity_pairs(): lines written.
  bool CloseFidelityPairs(std::string* error);
  uint64_t fidelity_pairs() const { return fidelity_pairs_; }
  std::string FidelityPairsPath() const;

 private:
  std::string dir_;
  const uint32_t shard_;
  const bool causal_sessions_;
  SummaryBuilder summary_;
  // requests.jsonl as it is written: DIR/requests.jsonl.tmp renamed at Finish, or for an s3://
  // DIR the object itself (it exists once Finish closes it).
  std::unique_ptr<store::ByteSink> lines_;
  std::string lines_buffer_;
  Status lines_status_;
  uint64_t requests_ = 0, failed_ = 0;
  uint64_t turns_ = 0, moved_ = 0, without_latency_ = 0;
  uint64_t chain_links_[kChainLinkCount] = {};  // by ChainLink, sent rows
  // RequestResult::previous_id_refused
  uint64_t previous_id_refused_ = 0;
  ValueSpool shift_;                           // of the moved turns
  std::unique_ptr<store::ByteSink> fidelity_;  // opened at the first pair
  std::string fidelity_buffer_;
  Status fidelity_status_;
  uint64_t fidelity_pairs_ = 0;
};

// summary.json: the statistics (SummaryBuilder::Summarize or report::SummarizeRequests) and the
// run's facts.
nlohmann::json BuildSummary(nlohmann::json statistics, const RunFacts& facts);

// A few lines for the console: counts, throughput, then one row per metric.
std::string RenderConsole(const nlohmann::json& summary);

}  // namespace llmtap::replay
