// One replayed request's record as the load generator fills it in. When the request ends it
// becomes a report::RequestResult (a requests.jsonl line, src/report/summary.h), whose values make
// every statistic (replay/summary.h computes them as src/report does), so a single run and merged
// shards are computed the same way. Plain data; any thread may call ErrorKindName.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

#include "api/endpoints.h"
#include "api/server_report.h"
#include "replay/chains.h"

namespace llmtap::replay {

enum class ErrorKind {
  kNone,
  kConnect,
  kTls,  // the TLS handshake failed (certificate, protocol) on a new connection
  kTimeout,
  kHttp4xx,
  kHttp5xx,
  kProtocol,
  kCancelled
};
// "connect", "tls", "timeout", "http_4xx", "http_5xx", "protocol", "cancelled" ("" for kNone).
std::string_view ErrorKindName(ErrorKind kind);

// Times are ms after the run's start.
struct RequestResult {
  uint64_t index = 0;  // row index in the trace
  api::Endpoint endpoint = api::Endpoint::kChat;
  bool stream = false;
  // A Responses row continuing another response: how its previous_response_id was sent.
  ChainLink chain = ChainLink::kNone;
  // It named a previous_response_id and the target answered HTTP 400 naming it (a server that
  // keeps no responses: --responses-chain inline replays such chains).
  bool previous_id_refused = false;
  bool warmup = false;
  bool sent = false;  // false: the run ended before its turn
  double scheduled_ms = 0;
  double sent_ms = 0;
  double done_ms = 0;
  double held_ms = 0;  // held back by --max-concurrency
  // A turn of a session (the row has a session_id) replayed causally (sessions.h):
  // scheduled_ms is then its causal due time, `causal_shift_ms` how far that lies past its plan
  // time, and `captured_latency` whether the outcomes sidecar gave its captured latency (else
  // the turn after it gets no think time).
  bool session_turn = false;
  double causal_shift_ms = 0;
  bool captured_latency = false;
  int status = 0;  // HTTP status, 0 without a response
  ErrorKind error = ErrorKind::kNone;
  std::optional<double> ttft_ms, ttst_ms, itl_ms, max_chunk_gap_ms;
  uint32_t chunks = 0;  // SSE events that carried generated tokens
  std::optional<uint64_t> input_tokens, output_tokens;
  bool tokens_from_usage = false;
  bool tokens_from_timings = false;  // no usage; the server's timings (llama.cpp) gave them
  // What the server reported of its own work (api/server_report.h).
  api::ServerReport server;
  std::string finish_reason;  // choice 0's, "" when none was given
  // Replay fidelity: the row's line and timestamp, and what TraceRequest holds of it.
  uint64_t line = 0;
  std::optional<double> timestamp_ms;
  std::string_view captured_side;
  std::optional<std::string> model;
  std::optional<double> temperature;
  int64_t turn = -1;
  std::vector<float> gaps_ms;  // between successive token-carrying chunks

  double lag_ms() const { return sent_ms - scheduled_ms; }
  double latency_ms() const { return done_ms - sent_ms; }
  bool ok() const { return sent && error == ErrorKind::kNone; }
};

}  // namespace llmtap::replay
