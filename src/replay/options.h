// Options of `llmtap replay`: plain data, every default below is what the command uses when the
// matching flag is not given. Filled by src/cli/replay_command.cc, read by Replay (replay.h) and
// RunPlan (runner.h).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "fidelity/certificate.h"
#include "net/tls_options.h"
#include "replay/metrics.h"
#include "report/summary.h"

namespace llmtap::net {
class TlsClientContext;
}

namespace llmtap::replay {

enum class Arrival { kPoisson, kConstant };

enum class ResponsesChain { kRemap, kInline };

// Where a run is when the server-metrics hook is called.
enum class RunPhase { kBefore, kDuring, kAfter };

struct InputOptions {
  std::string path;  // JSONL trace: a file, .jsonl.zst, s3://bucket/key, "-" = standard input
  // Rewrites the request's "model" field when set (hashed rows always get a model: this, or
  // the server's first /v1/models entry, or "default").
  std::string model;
  // Forces "stream":true and "stream_options":{"include_usage":true} on every request.
  bool stream = false;
  // Hashed Mooncake rows (hash_ids + input_length): tokens per hash id, and the endpoint their
  // synthetic prompt goes to ("completions" keeps the block structure token-exact; "chat" puts
  // it in one user message, which the server's chat template then prefixes).
  uint32_t block_size = 512;
  bool hashed_chat = false;
  // Adds "ignore_eos":true to hashed rows so servers that know it (vLLM, SGLang) generate
  // exactly output_length tokens.
  bool ignore_eos = false;
  // The outcomes sidecar whose latency_ms gives session turns their captured think time
  // (sessions.h): this path, else <path>.outcomes.ndjson when it exists; none with no_outcomes.
  std::string outcomes_path;
  bool no_outcomes = false;
};

struct ScheduleOptions {
  double speedup = 1.0;  // divides the trace's gaps
  // Window in trace time (ms after the trace's first timestamp); rows outside are skipped.
  std::optional<double> start_offset_ms;
  std::optional<double> end_offset_ms;
  // Without timestamps (or to override them): an open-loop rate, or a closed loop of N.
  std::optional<double> rate;
  Arrival arrival = Arrival::kPoisson;
  uint64_t seed = 0;
  std::optional<uint32_t> concurrency;
  uint64_t max_requests = 0;  // 0 = all
  uint64_t warmup = 0;        // the first N planned requests are sent but excluded from stats
  uint32_t shard_index = 0;
  uint32_t shard_count = 1;
};

// A row's pair (--paired-url): its line in the pairs file (shadow/pair.h, no trailing newline) and
// what the console's summary of the pairs counts.
struct PairRecord {
  std::string line;
  bool candidate_failed = false;  // the paired side ended with an error or a non-2xx status
  bool compared = false;          // both sides had an output to compare ("output" not null)
  bool equal = false;             // ... and it was equal
  int64_t primary_ttft_us = -1;   // -1: no body
  int64_t candidate_ttft_us = -1;
};

struct RunOptions {
  std::string url = "http://127.0.0.1:8000";
  std::vector<std::string> headers;  // "Name: value" (never logged)
  // An https:// --url: how its certificate is checked, and the context made from that (Replay
  // makes it once for the requests, the model probe and the metrics scrapes; RunPlan makes one
  // when it is null).
  net::TlsClientOptions tls;
  std::shared_ptr<const net::TlsClientContext> tls_context;
  // --paired-url: each row also goes to this server at the same instant as to `url`, and each
  // row's two answers make a pair line (on_pairs). Empty: no paired target. Its requests carry
  // `headers` with `paired_headers` replacing those of the same name (and adding the others);
  // an https:// one is checked by `paired_tls` (Replay makes `paired_tls_context`; RunPlan
  // makes one when it is null).
  std::string paired_url;
  std::vector<std::string> paired_headers;
  net::TlsClientOptions paired_tls;
  std::shared_ptr<const net::TlsClientContext> paired_tls_context;
  double request_timeout_s = 600;
  double duration_s = 0;                    // 0 = until the plan is done
  std::optional<uint32_t> max_concurrency;  // open loop: hold requests beyond it (violations)
  unsigned threads = 0;                     // 0 = one per core
  // Wall-clock start (Unix seconds): every shard starts its schedule at this instant.
  std::optional<double> start_at_unix_s;
  bool progress = false;  // progress line on stderr (also on when stderr is a terminal)
  // Each event loop sleeps on a timer (1 us timer slack) until this long before its next request
  // is due, then spins to the instant. 0: no spinning. Spinning takes the lag of an idle machine
  // from ~30 us to ~1 us but costs CPU, and on a machine with more runnable threads than cores
  // it makes lag worse (measured: bench/replay_lag.sh), hence the default.
  double spin_us = 0;
  // Open loop: rows with a session_id are turns of a conversation, each sent no earlier than
  // its predecessor's end plus the captured think time (sessions.h). False: every row at its
  // plan time (--schedule timestamps). A closed loop (--concurrency) never follows sessions.
  bool causal_sessions = true;
  // An idle session's state is kept this long after its last turn ended (sessions.h).
  double session_idle_s = 600;
  // --responses-chain: a Responses row continuing a response of the trace goes with the id the
  // target gave its predecessor (kRemap, chains.h), or with the conversation so far inlined as
  // its `input` and no previous_response_id (kInline, inline.h: servers that keep no
  // responses). The --paired-url target is sent the same way.
  ResponsesChain responses_chain = ResponsesChain::kRemap;

  // Server-metrics hook, for src/report's scraper. Called on the thread running the replay (never
  // an event loop): once with kBefore before the first request, about every second with
  // kDuring, once with kAfter after the last response; `run_s` is the time since the run
  // started (negative before it). Unset = no scraping.
  std::function<void(RunPhase phase, double run_s)> server_metrics_hook;
  // Called once after kAfter: a JSON value (text) written as summary.json's "server_metrics".
  // Unset or empty = null.
  std::function<std::string()> server_metrics_json;

  // Where results go as the run goes (the run keeps none): called on the thread running the
  // replay (never an event loop), about every 50 ms with the requests that ended since the last
  // call, and at the end with the rest (an open loop's planned but never sent requests last, in
  // plan order). The callee may move from the elements.
  std::function<void(std::vector<RequestResult>& ended)> on_results;
  // --paired-url: the pairs of the rows whose two requests both ended since the last call
  // (warmup rows have none), on the same thread and schedule as on_results.
  std::function<void(std::vector<PairRecord>& pairs)> on_pairs;
  // Called on the same thread about every 50 ms during the run (for messages of the input).
  std::function<void()> on_tick;
};

// The replay-fidelity certificate (fidelity/certificate.h): with --out and an outcomes sidecar,
// each replayed row and its captured outcome make a pair line in DIR/fidelity-pairs.ndjson, and
// the pairs a certificate (DIR/fidelity.json, summary.json's "fidelity", the console, report.html).
struct FidelityOptions {
  bool enabled = true;  // --no-fidelity: no pairs, no certificate
  // --certify: the exit code says whether the certificate certified the replay (3: not).
  bool certify = false;
  // --fidelity-floor: the fidelity pairs of another replay of the same trace (or of two other
  // replays), the A/A floor (fidelity::FloorRuns).
  std::vector<std::string> floor;
  fidelity::Options options;
};

struct ReplayOptions {
  InputOptions input;
  ScheduleOptions schedule;
  RunOptions run;
  std::vector<report::GoodputConstraint> goodput;  // report::ParseGoodput("ttft:200 itl:20")
  std::string tokenizer = "builtin";               // counts tokens when a response reports no usage
  std::string out_dir;                             // empty = console summary only
  // --paired-url's pair lines (NDJSON): this path; "" = <out_dir>/pairs.ndjson.
  std::string pairs_path;
  // Prometheus endpoint scraped before, every second during and after the run (counter deltas,
  // spec-decode acceptance): a URL, "" = the target's /metrics or /v1/metrics if one answers,
  // "off" = none.
  std::string server_metrics;
  std::string command;  // the command line, for summary.json
  FidelityOptions fidelity;
};

}  // namespace llmtap::replay
