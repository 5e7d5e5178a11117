// A parser for the Prometheus text exposition format (version 0.0.4, and the OpenMetrics text
// that servers such as vLLM and SGLang emit through prometheus_client): `# HELP` / `# TYPE`
// comments, samples `name{label="value",...} value [timestamp]`, label-value escapes
// (\\, \", \n), and the special values +Inf, -Inf and NaN.
//
// The input comes from a server we do not control, so parsing never throws and never crashes:
// a malformed line is counted in `bad_lines` and skipped, the rest is kept. Pure functions;
// any thread may call them.
#pragma once

#include <cstddef>
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace llmtap::report {

enum class PromType { kUntyped, kCounter, kGauge, kHistogram, kSummary };

const char* PromTypeName(PromType type);

struct PromSample {
  std::string name;
  // Sorted by label name, so that equal label sets compare equal.
  std::vector<std::pair<std::string, std::string>> labels;
  double value = 0;

  // The value of label `key`, or nullptr.
  const std::string* Label(std::string_view key) const;
};

struct PromText {
  std::vector<PromSample> samples;
  // `# TYPE family type` lines, by family name.
  std::map<std::string, PromType> types;
  size_t bad_lines = 0;
};

PromText ParsePrometheusText(std::string_view text);

// The type of the family a sample belongs to: its own name's `# TYPE`, else the name without
// a `_total`, `_created`, `_count`, `_sum` or `_bucket` suffix, else kUntyped.
PromType SampleType(const PromText& text, std::string_view sample_name);

// True for samples that only ever grow between resets, so that a difference between two
// scrapes means something: counters (not their `_created` timestamps), histograms' and
// summaries' `_count`, `_sum` (and `_bucket` when `include_buckets`), and untyped samples
// named `*_total`.
bool IsCumulativeSample(const PromText& text, std::string_view sample_name, bool include_buckets);

// `{a="x",b="y"}` in label-name order with the exposition escapes, or "" without labels: a
// stable key for one series of a metric name.
std::string LabelKey(const std::vector<std::pair<std::string, std::string>>& labels);

}  // namespace llmtap::report
