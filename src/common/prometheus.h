// PromWriter: the project's one writer of the Prometheus text exposition format (version 0.0.4),
// for the /metrics pages of the proxy, its capture observer and the simulator. It appends
// "# HELP" / "# TYPE" lines and samples to a std::string the caller owns, escaping label values
// (backslash, double quote, newline) and HELP text (backslash, newline) as the format asks.
//
// Threads: a PromWriter is a plain value over the caller's string; use one per thread (each
// /metrics request builds its own page). The free functions are pure; any thread may call them.
#pragma once

#include <concepts>
#include <cstdint>
#include <initializer_list>
#include <span>
#include <string>
#include <string_view>

namespace llmtap {

enum class PromType { kCounter, kGauge, kHistogram };

struct PromLabel {
  std::string_view name;   // [a-zA-Z_][a-zA-Z0-9_]*
  std::string_view value;  // any bytes; escaped on output
};

// Metric names: [a-zA-Z_:][a-zA-Z0-9_:]*. Label names: [a-zA-Z_][a-zA-Z0-9_]*, not starting
// with "__" (reserved). The writer asserts these in debug builds; callers pass literals.
bool IsValidPromMetricName(std::string_view name);
bool IsValidPromLabelName(std::string_view name);

// Appends `value` escaped as the inside of a label value: `\` -> `\\`, `"` -> `\"`, newline ->
// `\n`; every other byte as is.
void AppendPromLabelValue(std::string* out, std::string_view value);

class PromWriter {
 public:
  explicit PromWriter(std::string* out) : out_(out) {}

  // "# HELP name help\n# TYPE name counter|gauge\n". `help` is escaped (backslash, newline).
  void Header(std::string_view name, PromType type, std::string_view help);

  // A histogram: its header, a cumulative `name_bucket{le="b"}` line per bound (counts[i]:
  // observations <= bounds[i], not cumulative; counts has bounds.size() + 1 entries, the last for
  // those above every bound), `le="+Inf"`, `name_sum` and `name_count`.
  void Histogram(std::string_view name, std::string_view help, std::span<const double> bounds,
                 std::span<const uint64_t> counts, double sum);
  // The same lines without the header, each with `label` before `le` (several series of one
  // histogram, e.g. one per candidate: Header once, then one HistogramSeries each). A label
  // with an empty name: none.
  void HistogramSeries(std::string_view name, PromLabel label, std::span<const double> bounds,
                       std::span<const uint64_t> counts, double sum);

  // "name{l1="v1",l2="v2"} value\n" ("name value\n" without labels).
  template <std::integral T>
  void Sample(std::string_view name, std::initializer_list<PromLabel> labels, T value) {
    if constexpr (std::is_signed_v<T>) {
      SampleInt(name, labels, static_cast<int64_t>(value));
    } else {
      SampleInt(name, labels, static_cast<uint64_t>(value));
    }
  }
  template <std::integral T>
  void Sample(std::string_view name, T value) {
    Sample(name, {}, value);
  }

  // A metric with one sample: Header, then Sample.
  template <std::integral T>
  void Counter(std::string_view name, std::string_view help, T value,
               std::initializer_list<PromLabel> labels = {}) {
    Header(name, PromType::kCounter, help);
    Sample(name, labels, value);
  }
  template <std::integral T>
  void Gauge(std::string_view name, std::string_view help, T value,
             std::initializer_list<PromLabel> labels = {}) {
    Header(name, PromType::kGauge, help);
    Sample(name, labels, value);
  }

 private:
  template <class Int>  // int64_t or uint64_t (instantiated in prometheus.cc)
  void SampleInt(std::string_view name, std::initializer_list<PromLabel> labels, Int v);
  void AppendNameAndLabels(std::string_view name, std::initializer_list<PromLabel> labels);
  void HistogramLines(std::string_view name, const PromLabel* label, std::span<const double> bounds,
                      std::span<const uint64_t> counts, double sum);

  std::string* out_;
};

}  // namespace llmtap
