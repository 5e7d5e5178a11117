// The load generator of `llmtap replay`: sends the requests of a Lookahead (the streamed, planned
// trace) to an OpenAI-compatible server over HTTP/1.1 keep-alive connections (TLS for https://,
// each event loop resuming its previous session) and measures every
// response as it streams.
//
// Threads: RunPlan blocks its caller. Inside, `threads` event loops (one thread each, Boost.Asio
// with C++20 coroutines) own the connections. In an open loop each event loop takes the next
// planned row from the Lookahead (rows come out in due order) and paces it itself: it serves its
// connections until the row's due time (a timer with 1 us slack, optionally then a short spin),
// and writes the request on an idle keep-alive connection right there, so no thread hand-off sits
// between the clock and the socket. A turn of a session (a row with a session_id, open loop,
// RunOptions::causal_sessions) goes through a SessionGate (sessions.h) at that moment: sent, or
// put on a timer of the same event loop until its causal due time, or left in the gate until the
// turn before it ends, when the event loop that ran that turn sends it. A closed loop runs N
// coroutines that send one row after another. The calling thread hands finished requests to
// RunOptions::on_results, prints progress, calls the server-metrics hook and handles Ctrl-C /
// SIGTERM (which cancel the requests in flight and end the run).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "replay/input.h"
#include "replay/lookahead.h"
#include "replay/metrics.h"
#include "replay/options.h"
#include "replay/schedule.h"
#include "tokenizer/tokenizer.h"

namespace llmtap::replay {

// http[s]://host[:port][/base]; a trailing "/v1" or "/" is dropped from the base.
struct Target {
  std::string host;  // IPv6 literals without brackets
  uint16_t port = 80;
  bool tls = false;         // https://
  std::string base_path;    // "" or "/prefix"
  std::string host_header;  // host[:port]
  std::string origin;       // scheme://host:port (net::Origin)
};
bool ParseUrl(std::string_view url, Target* target, std::string* error);

// "Name: value" -> validated header line ("Name: value\r\n"); false for a bad header.
bool HeaderLine(std::string_view header, std::string* line, std::string* error);

// GET {base}/v1/models and the first model's id; nullopt when the server does not answer
// with one within `timeout_s`. `tls` checks an https:// target (null: the system's trust).
std::optional<std::string> FetchFirstModel(const Target& target,
                                           const std::vector<std::string>& headers,
                                           double timeout_s,
                                           const net::TlsClientContext* tls = nullptr);

// Raises the soft RLIMIT_NOFILE to the hard limit (many connections at once); returns it.
uint64_t RaiseFileLimit();

struct RunOutcome {
  int64_t started_at_unix_ms = 0;  // wall-clock time of the run's time 0
  double duration_s = 0;           // time 0 to the last response
  uint64_t violations = 0;         // requests held back by --max-concurrency
  double held_ms_total = 0;
  bool interrupted = false;  // Ctrl-C / SIGTERM
  std::string server_metrics_json;
};

// Sends `input`'s rows (started, and best primed: Lookahead::WaitPrimed) until it ends, the
// run is interrupted or --duration passes. Every request reaches options.on_results once: when
// it ended, or (open loop) at the end of the run when it was planned but never sent. Cancels
// `input` before returning. False with *error for a bad URL, header or timeout (nothing sent).
bool RunPlan(Lookahead& input, const RunOptions& options, const tokenizer::Tokenizer* tok,
             RunOutcome* out, std::string* error);

}  // namespace llmtap::replay
