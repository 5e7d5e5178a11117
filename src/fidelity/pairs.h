// A replay-fidelity pair: one trace row as the capture saw it (its outcome line) and as the replay
// saw it (its requests.jsonl record), in the line format of shadow pairs (shadow/pair.h) with
// primary = captured and candidate = replayed. `llmtap replay` writes one per replayed row that
// has an outcome (DIR/fidelity-pairs.ndjson); certificate.h reads them.
//
// Pure functions; any thread.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "report/summary.h"

namespace llmtap::fidelity {

inline constexpr const char* kPairsFile = "fidelity-pairs.ndjson";
inline constexpr const char* kCertificateFile = "fidelity.json";

// What identifies a pair beyond the replayed record: the row's capture line and timestamp, the
// request's path, model and temperature, and its turn in its session (-1: none).
struct PairKey {
  uint64_t line = 0;
  std::optional<double> timestamp_ms;
  std::string_view path;
  const std::optional<std::string>* model = nullptr;  // null: unknown
  std::optional<double> temperature;
  int64_t turn = -1;
};

// Appends one pair line (no trailing newline):
//   {"request":<trace row>,"line":L,"timestamp":T,"path":"/v1/chat/completions","api":"chat",
//    "stream":true,"model":"..."|null,"temperature":x|null,"turn":n|null,"lag_ms":x|null,
//    "causal_shift_ms":x|null,
//    "primary":<captured side, trace::OutcomeTable::Side>,
//    "candidate":{"status":..,"ttft_ms":..,"itl_ms":..,"latency_ms":..,"prompt_tokens":..,
//                 "completion_tokens":..,"finish_reason":..,"error":..,"cached_tokens":..,
//                 "server":..,"spec":..},
//    "output":null}
// The sides share their members' names and meanings (itl_ms: (latency - TTFT) / (completion
// tokens - 1)); the outputs are not compared (null), as shadow pairs without text.
void AppendPairLine(const PairKey& key, std::string_view captured_side,
                    const report::RequestResult& replayed, std::string* out);

}  // namespace llmtap::fidelity
