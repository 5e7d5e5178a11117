// A shadow pair: one request answered by two servers (the primary and a candidate), and the
// line that records it. The proxy's mirror (`llmtap proxy --shadow`, src/proxy/shadow.h) and
// replay's `--paired-url` both write these lines; `llmtap shadow report` reads them.
//
// Here: the timing of a response's body (TTFT, and ITL from the gaps between its reads), what a
// request says of its sampling (model, temperature), the comparison of the two outputs (by
// character, and by token with a tokenizer), and the members of a pair's line.
//
// Values and pure functions: any thread, one object at a time.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "capture/outcome.h"

namespace llmtap::tokenizer {
class Tokenizer;
}

namespace llmtap::shadow {

// A response body's timing, from the instant both requests were ready to go (the primary's body
// read whole): the first body bytes (TTFT) and the gaps between later reads of the body (ITL:
// each read carries one or more stream events).
class BodyTiming {
 public:
  using Clock = std::chrono::steady_clock;
  static constexpr size_t kMaxGaps = 16384;  // kept for the median; the maximum sees all

  explicit BodyTiming(Clock::time_point start = Clock::now()) : start_(start) {}
  // The clock starts again at `at` (before the first OnBody): when the request was written.
  void Restart(Clock::time_point at) { start_ = at; }
  void OnBody(Clock::time_point at);
  void OnEnd(Clock::time_point at) { end_us_ = Micros(at - start_); }

  int64_t ttft_us() const { return ttft_us_; }  // -1: no body
  int64_t latency_us() const { return end_us_; }
  // The median and largest gap, -1 with fewer than two reads of the body.
  int64_t itl_p50_us() const;
  int64_t itl_max_us() const { return gaps_seen_ > 0 ? max_gap_us_ : -1; }

 private:
  static int64_t Micros(Clock::duration d) {
    return std::chrono::duration_cast<std::chrono::microseconds>(d).count();
  }
  Clock::time_point start_;
  Clock::time_point last_{};
  int64_t ttft_us_ = -1;
  int64_t end_us_ = -1;
  int64_t max_gap_us_ = 0;
  uint64_t gaps_seen_ = 0;
  std::vector<int64_t> gaps_us_;
};

// The decoded text kept of each side's output for the comparison (both writers of pairs).
inline constexpr size_t kMaxCompareBytes = size_t{1} << 20;

// The text a response's output is compared by: choice 0's content, then each tool call's name
// and arguments (reasoning is left out: engines differ in what they show of it).
std::string ComparableOutput(const ResponseText& response);

struct OutputComparison {
  bool equal = false;
  // The first differing character (Unicode code point, from 0), -1 when equal. When one output
  // is a prefix of the other: the shorter one's length.
  int64_t first_diff_char = -1;
  // The same in tokens of the outputs encoded by the tokenizer given; -1 when equal or without
  // one.
  int64_t first_diff_token = -1;
  // The candidate's length over the primary's, in characters; 1 when both are empty, -1
  // (unknown) when only the primary is.
  double length_ratio = 1.0;
};
OutputComparison CompareOutputs(std::string_view primary, std::string_view candidate,
                                const tokenizer::Tokenizer* tokenizer = nullptr);

// What a request body says of how it is sampled: its top-level "model" and "temperature" (absent,
// or not a string / a number: nullopt). An exact output match is only expected from greedy
// requests (temperature 0) on both sides.
struct RequestTraits {
  std::optional<std::string> model;
  std::optional<double> temperature;
  std::string previous_response_id;  // a Responses API request's ("" for none)
};
RequestTraits ReadRequestTraits(std::string_view body);

// A Responses API request continuing the response `id` of its server: `body` with its
// previous_response_id set to `id`.
void SetPreviousResponseId(std::string* body, std::string_view id);

// What identifies a pair: the request's path, its traits, when its mirror started, which request
// it was (`request`: the same on the pairs of one request when it goes to several candidates) and
// which candidate answered (`shadow`: 0 for the first --shadow, 1 for the second; `candidate_url`:
// its URL, the --shadow or --paired-url given, which the report names it by).
struct PairKey {
  std::string_view path;
  int64_t at_ms = 0;  // Unix milliseconds
  uint64_t request = 0;
  int shadow = 0;
  const RequestTraits* traits = nullptr;  // null: both unknown
  std::string_view candidate_url;         // "": unknown (null in the line)
};

// One side of a pair: how its response ended (status, error, tokens, finish reason, the output
// text it kept) and its timing.
struct ShadowSide {
  ResponseOutcome outcome;  // its ttft_us and total_us are unused: `timing` holds them
  BodyTiming timing;
};

// The members of a pair's line (see ResponseOutcome::shadow_pair), without braces:
//   "request":<n>,"shadow":<i>,"candidate_url":"http://..."|null,"path":"/v1/chat/completions",
//   "model":"..."|null,
//   "temperature":<number>|null,"at_ms":<Unix ms the mirror started>,
//   "primary":{"status":200,"ttft_ms":..,"itl_p50_ms":..,"itl_max_ms":..,"latency_ms":..,
//              "prompt_tokens":..,"completion_tokens":..,"finish_reason":"..","error":null},
//   "candidate":{...the same...},
//   "delta":{"ttft_ms":..,"itl_p50_ms":..,"latency_ms":..}   (candidate minus primary),
//   "output":{"equal":true,"first_diff_char":null,"first_diff_token":null,"length_ratio":1.0,
//             "truncated":false}
// Unknown values are null; "output" is null when either side has no output to compare (an error,
// or a body that was neither JSON nor an event stream). first_diff_token needs `tokenizer`.
void AppendPairMembers(const PairKey& key, const ShadowSide& primary, const ShadowSide& candidate,
                       const tokenizer::Tokenizer* tokenizer, std::string* out);

// The highest "request" among the pair lines in `lines` (whole lines, '\n'-terminated; others and
// lines without a whole-number "request" are passed over); 0 when there is none.
uint64_t HighestRequest(std::string_view lines);

}  // namespace llmtap::shadow
