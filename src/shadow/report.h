// `llmtap shadow report`: the offline paired comparison of shadow pair lines (pair.h). Each line
// is one request answered by the primary and by a candidate; the report says, per metric (TTFT,
// ITL, latency, output length) and per group (all pairs, each path, each model, each shadow),
// whether the candidate is worse, better or indistinguishable from the primary, with a paired
// bootstrap confidence interval of the ratio of means, and how often the two outputs match.
//
// The verdict rule (Verdict below, also in README "Reading the report" and the command's --help),
// for a threshold t (default 5 %) and the 95 % CI [lo, hi] of the ratio candidate / primary:
//   1. the CI excludes 1 and the ratio is at least t/2 away from 1: worse (ratio > 1) or better
//      (longer / shorter for the output length), unless the CI lies within the A/A noise floor's
//      band, 1 ± band (then "within noise floor");
//   2. otherwise, the CI lies inside (1 - t, 1 + t): no detectable difference (with the note
//      "significant but below the threshold" when the CI excludes 1);
//   3. otherwise: inconclusive (more pairs needed).
// Why not "worse only when the CI leaves (1 - t, 1 + t)": a candidate exactly t slower then gets
// "no detectable difference" whenever its estimate falls below 1 + t minus the CI's half-width,
// a few percent of runs; with rule 1 it is "worse" whenever the estimate reaches 1 + t/2.
//
// Values and pure functions: any thread, one object at a time. The bootstrap is seeded: the same
// pairs, options and seed give the same report, byte for byte.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace llmtap::shadow {

// One side of a pair as the report uses it.
struct PairSideValues {
  std::optional<int> status;
  std::optional<std::string> error;  // the line's "error" (null: none)
  std::optional<double> ttft_ms, itl_p50_ms, latency_ms, completion_tokens;
  // 2xx with no error: only such sides enter the timing metrics.
  bool ok() const { return status && *status >= 200 && *status < 300 && !error; }
};

// One pair line, parsed.
struct PairRecord {
  std::optional<uint64_t> request;  // absent in lines written before "request" existed
  int shadow = 0;
  std::string candidate_url;  // "" when the line has none (written before it existed, or null)
  std::string path;
  std::optional<std::string> model;
  std::optional<double> temperature;
  std::optional<int64_t> at_ms;
  PairSideValues primary, candidate;
  bool has_output = false;  // "output" not null
  bool output_equal = false;
  std::optional<int64_t> first_diff_char, first_diff_token;
  size_t file = 0;  // index in PairSet::files (the A/A join is per file)
};

// Parses one pair line. False with `error` ("not JSON", "\"primary\" is not an object", ...) when
// the line cannot be used; unknown members are ignored, missing optional ones are unknown.
bool ParsePairLine(std::string_view line, PairRecord* out, std::string* error);

// The pairs of one or more files, and what was skipped.
struct PairSet {
  std::vector<PairRecord> pairs;
  std::vector<std::string> files;
  uint64_t lines = 0;      // non-blank lines read
  uint64_t malformed = 0;  // lines skipped
  // "FILE:LINE: reason" of the first kMaxMessages skipped lines.
  static constexpr size_t kMaxMessages = 20;
  std::vector<std::string> messages;

  // Adds one line of `file` (1-based `number`), the last of `files`; blank lines are ignored.
  void AddLine(std::string_view file, uint64_t number, std::string_view line);
};

// Reads every line of `path` (a file, "-", s3:// or .zst, as every trace tool reads them) into
// `set`. False with `error` when the file cannot be read at all.
bool ReadPairsFile(const std::string& path, PairSet* set, std::string* error);

// Where the A/A noise floor comes from.
enum class AaMode {
  kAuto,     // kShadows when shadows 0 and 1 both occur, else none
  kNone,     // no noise floor
  kShadows,  // shadows 0 and 1 are the same candidate: shadow 1 over shadow 0 is the floor
  kPrimary,  // shadow 0 is a copy of the primary (its pairs are the floor); shadow 1 is the
             // candidate
};
bool ParseAaMode(std::string_view text, AaMode* mode);
const char* AaModeName(AaMode mode);

// "5%" or "0.05": a finite number, as a fraction (no range checked). False for anything else.
bool ParseFraction(std::string_view text, double* fraction);
// "5%" or "0.05": a fraction in (0, 1). False for anything else.
bool ParseThreshold(std::string_view text, double* threshold);

struct ReportOptions {
  double threshold = 0.05;  // the smallest relative difference that matters
  uint64_t seed = 1;        // of the bootstrap
  int resamples = 2000;     // bootstrap resamples
  AaMode aa = AaMode::kAuto;
  // Below this many pairs with both values a metric gets "insufficient data".
  size_t min_pairs = 10;
};

// The paired ratio of means of one metric, with its bootstrap CI.
struct RatioEstimate {
  size_t n = 0;
  double mean_primary = 0, mean_candidate = 0;
  std::optional<double> ratio, ci_low, ci_high;  // nullopt: no pairs, or a zero primary mean
  std::optional<double> median_delta;            // of candidate - primary
};

// `primary[i]` and `candidate[i]` are the two values of pair i. The interval: the 2.5th and
// 97.5th percentiles of the ratio over `resamples` resamples of the pair indices (with
// replacement), drawn from a SplitMix64 stream seeded with `seed`.
RatioEstimate PairedRatio(const std::vector<double>& primary, const std::vector<double>& candidate,
                          int resamples, uint64_t seed);

enum class Verdict {
  kInsufficientData,
  kNoDifference,
  kWorse,   // "longer" for the output length
  kBetter,  // "shorter" for the output length
  kInconclusive,
  kWithinNoise,
};
// The rule at the top of this file. `noise_band`: the A/A CI's largest distance from 1, or
// nullopt without a noise floor. `note` gets the explanation of the verdict.
Verdict Decide(const RatioEstimate& e, double threshold, std::optional<double> noise_band,
               size_t min_pairs, std::string* note);
// "worse", "no detectable difference", ...; `length`: the output length's words.
const char* VerdictName(Verdict v, bool length);

// The whole report as JSON (the document --json writes; the console and HTML renderings read
// it): inputs, options, the noise floor, and per compared shadow its candidate URLs (the
// distinct "candidate_url" of its lines, sorted; empty when none says) and its groups.
nlohmann::json BuildReport(const PairSet& set, const ReportOptions& options);

// The per-pair deltas the HTML plots draw, of the compared shadow of `report`: seconds since the
// first pair (at_ms) and candidate - primary of TTFT, ITL and latency (both sides ok), at most
// `max_points` evenly spaced pairs.
nlohmann::json BuildPlotSeries(const PairSet& set, const nlohmann::json& report,
                               size_t max_points = 100000);

// The console rendering of BuildReport's document.
std::string RenderReportText(const nlohmann::json& report);

}  // namespace llmtap::shadow
