// The replay-fidelity certificate: how closely a replay reproduced what the capture saw, request
// by request. `llmtap replay` pairs each replayed request with its captured outcome (the outcomes
// sidecar) and writes the pairs (pairs.h: the shadow pair line, primary = captured, candidate =
// replayed); this file reads such pairs and judges them, per group (all requests, each API, each
// model, the first turn of a session vs later turns):
//   - arrival: the replay's schedule lag, and the turns causality moved;
//   - tokens: the share of pairs with equal prompt tokens, and, over greedy requests (temperature
//     0 on the request), equal completion tokens and finish reason (sampled requests are counted
//     apart: they are not expected to match);
//   - server: the server's prompt cache hit rate (cached / prompt tokens) captured vs replayed, in
//     points, and its speculative-decoding acceptance where both sides reported it;
//   - timing: the paired ratio of means replayed / captured of TTFT, ITL (per request, AIPerf's
//     (latency - TTFT) / (output tokens - 1)), latency, and of the server's own prompt and decode
//     time, with the shadow report's paired bootstrap CI (shadow::PairedRatio);
//   - errors by kind on each side, and the share of pairs where one side failed and not the other.
// Each metric gets a verdict: reproduced, not reproduced (with its direction: "higher" or "lower",
// the replay's value against the capture's), unknown (too few pairs, only one side reporting it,
// or a CI too wide to tell), or n/a (neither side reported it: not judged). Shares: reproduced at
// or above the share required. Points (cache, spec: 0-1 rates in the document, their difference
// replayed - captured in points of 100): reproduced within the tolerance. Timing: the shadow
// report's rule (shadow::Decide) with tolerance t = max(Options::timing, the floor's band) and the
// band as its noise floor: not reproduced when the CI excludes 1 and the ratio is at least t/2
// from 1, unless the CI lies within the band; reproduced when the CI lies inside 1 +- t; unknown
// otherwise.
//
// The noise floor: the pairs of a second replay of the same trace (an A/A run against the same
// configuration). Joined by trace row, the second replay over the first gives, per timing metric, a
// CI whose largest distance from 1 is the floor's band; a timing metric is then judged against
// max(threshold, band), and the cache and spec points against max(points, the floor's own
// difference, |second - first| in points). Without a floor the thresholds alone judge.
//
// Values and pure functions: any thread, one object at a time. Seeded: the same pairs, floor and
// options give the same document, byte for byte.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace llmtap::fidelity {

// One side of a fidelity pair line (the values the certificate uses; unknown: nullopt).
struct Side {
  std::optional<int> status;
  std::optional<std::string> error;  // the side's "error" (null: none)
  std::optional<double> ttft_ms, itl_ms, latency_ms;
  std::optional<int64_t> prompt_tokens, completion_tokens, cached_tokens;
  std::optional<std::string> finish_reason;
  std::optional<double> server_prompt_ms, server_decode_ms;
  std::optional<int64_t> spec_drafted, spec_accepted;
  // 2xx and no error.
  bool ok() const { return status && *status >= 200 && *status < 300 && !error; }
  // "ok", or the error's kind: the error text, else "http_4xx" / "http_5xx" / "no_response".
  std::string Kind() const;
};

// One pair line, parsed.
struct Pair {
  uint64_t request = 0;  // the trace row (0-based): the join key of a floor
  std::string api;       // "chat", "completions", ... ("" unknown)
  std::optional<std::string> model;
  std::optional<double> temperature;
  std::optional<int64_t> turn;  // position in its session (0: first); nullopt: no session
  // The request asked for a stream (absent: unknown, taken as streamed). A whole body has no
  // first token: the capture's ttft_ms is its first byte, the replay has none, so neither TTFT
  // nor ITL is judged on such a pair.
  bool stream = true;
  std::optional<double> lag_ms, causal_shift_ms;
  Side captured, replayed;  // the line's "primary" and "candidate"
  // Greedy: temperature 0 on the request (no temperature: the server's default, sampled).
  bool greedy() const { return temperature && *temperature == 0; }
};

// Parses one pair line. False with `error` when it cannot be used (not JSON, no "request", a side
// that is not an object); unknown members are ignored.
bool ParsePairLine(std::string_view line, Pair* out, std::string* error);

// The pairs of one file, and what was skipped.
struct PairFile {
  std::string path;
  std::vector<Pair> pairs;
  uint64_t lines = 0, malformed = 0;
  std::vector<std::string> messages;  // "FILE:LINE: reason", the first 20
};
// Reads every line of `path` (a file, .zst or s3://). False with `error` when it cannot be read.
bool ReadPairFile(const std::string& path, PairFile* out, std::string* error);

struct Options {
  // Timing metrics: reproduced when the CI of replayed / captured lies within 1 +- max(timing,
  // the floor's band).
  double timing = 0.10;
  // Cache hit rate and spec acceptance: reproduced within this many points (of 100).
  double points = 2.0;
  // Prompt tokens equal on at least this share of pairs; completion tokens and finish reason
  // on at least `equal_share` of greedy pairs; one side failing where the other did not on at
  // most 1 - equal_share of pairs.
  double prompt_equal_share = 1.0;
  double equal_share = 0.99;
  size_t min_pairs = 10;  // fewer pairs with a value: unknown
  uint64_t seed = 1;
  int resamples = 2000;
  // The metrics --certify requires reproduced (names as in the document: "prompt_tokens",
  // "completion_tokens", "finish_reason", "failures", "cache_hit_rate", "spec_acceptance",
  // "server_prompt_ms", "server_decode_ms", "ttft_ms", "itl_ms", "latency_ms"); empty: all.
  // A gated metric that is n/a (neither side reports it) does not count against the gate.
  std::vector<std::string> gates;
};

// The metric names, in the document's order.
const std::vector<std::string>& MetricNames();

// The pairs of a floor given as a replay's --out directory (its fidelity-pairs.ndjson) or as a
// pairs file itself. False with `error` naming the path.
bool ReadFloor(const std::string& path, PairFile* out, std::string* error);

// The A/A floor: two replays of the same trace against the same configuration, joined by trace
// row; the second over the first is the noise. The first is the run judged itself, or `first`
// (to judge a run against a different server with the floor of two replays of the usual one).
struct Floor {
  const PairFile* pairs = nullptr;  // the second replay's pairs; null: no floor
  std::string label;                // e.g. the run directories it came from
  const PairFile* first = nullptr;  // the first replay's pairs; null: the run judged
};

// A floor read from one path (the run judged and that replay) or two (two other replays), each a
// run directory or a pairs file (ReadFloor). floor() points into this object.
class FloorRuns {
 public:
  bool Load(const std::vector<std::string>& paths, std::string* error);
  const Floor& floor() const { return floor_; }

 private:
  PairFile first_, second_;
  Floor floor_;
};

// The certificate document (fidelity.json; summary.json's "fidelity"):
// {"version":1,"pairs_file":..,"pairs":N,"malformed":N,
//  "floor":{"source":"none"} | {"source":"replay","label":..,"of":"this run and another replay"|
//           "two other replays","pairs":N,"joined":N},
//  "options":{"timing":0.1,"points":2,"prompt_equal_share":1,"equal_share":0.99,"min_pairs":10,
//             "gates":[..]},
//  "certified":bool, "verdict":"certified"|"not certified",
//  "reproduced":N, "gated":N,       (gated metrics of group "all" that are not n/a)
//  "moved":["cache_hit_rate: -12.4 points (captured 61.0 %, replayed 48.6 %)", ...],
//  "unknown":["spec_acceptance: ..."],
//  "groups":[{"group":"all","label":"all requests","pairs":N,
//     "arrival":{"lag_ms":{"p50":..,"p99":..}|null,"causal_moved":N,"causal_shift_ms":{"p50":..,"max":..}|null},
//     "tokens":{"compared":N,"greedy":N,"sampled":N,"prompt_equal":x|null,
//               "completion_equal":x|null,"finish_equal":x|null},
//     "server":{"cache":{"pairs":N,"captured":x,"replayed":x,"points":x,"floor_points":x|null}|null,
//               "spec":{... the same ...}|null},
//     "errors":{"captured":{"http_4xx":N,..},"replayed":{..},"one_side_failed":N},
//     "timing":{"ttft_ms":{"n":N,"mean_captured":x,"mean_replayed":x,"ratio":x|null,
//                          "ci_low":x|null,"ci_high":x|null,"floor_band":x|null,"tolerance":x},
//               "itl_ms":..,"latency_ms":..,"server_prompt_ms":..,"server_decode_ms":..},
//     "metrics":[{"metric":"ttft_ms","side":"client"|"server"|"tokens"|"errors",
//                 "verdict":"reproduced"|"not reproduced"|"unknown"|"n/a",
//                 "direction":"higher"|"lower"|null,"value":x|null,"detail":"..."}, ...],
//     "client_vs_server":"..."|null}, ...]}
// Group "all" is always first (groups[0]); after it "api:chat", ..., "model:...", "turn:first",
// "turn:later" (each present only when it has pairs; api and model groups only when there is more
// than one of them). Errors by kind list the failed sides only (no "ok").
nlohmann::json BuildCertificate(const PairFile& pairs, const Floor& floor, const Options& options);

// The console rendering of the document: the verdict, then per group one line per metric.
std::string RenderCertificateText(const nlohmann::json& certificate);

// "10%" or "0.1" (timing) and "2" (points): parsers for the command-line options. False on
// anything else.
bool ParseShare(std::string_view text, double* share);

}  // namespace llmtap::fidelity
