#include "common/prometheus.h"

#include <cassert>
#include <charconv>

namespace llmtap {

namespace {

bool NameChar(char c, bool first, bool colon) {
  if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_') return true;
  if (colon && c == ':') return true;
  return !first && c >= '0' && c <= '9';
}

bool ValidName(std::string_view name, bool colon) {
  if (name.empty()) return false;
  for (size_t i = 0; i < name.size(); ++i) {
    if (!NameChar(name[i], i == 0, colon)) return false;
  }
  return true;
}

}  // namespace

bool IsValidPromMetricName(std::string_view name) { return ValidName(name, true); }

bool IsValidPromLabelName(std::string_view name) {
  return ValidName(name, false) && !name.starts_with("__");
}

void AppendPromLabelValue(std::string* out, std::string_view value) {
  size_t start = 0;
  for (size_t i = 0; i < value.size(); ++i) {
    const char c = value[i];
    if (c != '\\' && c != '"' && c != '\n') continue;
    out->append(value.data() + start, i - start);
    start = i + 1;
    out->append(c == '\\' ? "\\\\" : c == '"' ? "\\\"" : "\\n");
  }
  out->append(value.data() + start, value.size() - start);
}

void PromWriter::Header(std::string_view name, PromType type, std::string_view help) {
  assert(IsValidPromMetricName(name));
  out_->append("# HELP ").append(name).push_back(' ');
  size_t start = 0;
  for (size_t i = 0; i < help.size(); ++i) {
    const char c = help[i];
    if (c != '\\' && c != '\n') continue;
    out_->append(help.data() + start, i - start);
    start = i + 1;
    out_->append(c == '\\' ? "\\\\" : "\\n");
  }
  out_->append(help.data() + start, help.size() - start);
  out_->append("\n# TYPE ").append(name);
  out_->append(type == PromType::kCounter ? " counter\n"
               : type == PromType::kGauge ? " gauge\n"
                                          : " histogram\n");
}

void PromWriter::Histogram(std::string_view name, std::string_view help,
                           std::span<const double> bounds, std::span<const uint64_t> counts,
                           double sum) {
  Header(name, PromType::kHistogram, help);
  HistogramLines(name, nullptr, bounds, counts, sum);
}

void PromWriter::HistogramSeries(std::string_view name, PromLabel label,
                                 std::span<const double> bounds, std::span<const uint64_t> counts,
                                 double sum) {
  HistogramLines(name, label.name.empty() ? nullptr : &label, bounds, counts, sum);
}

void PromWriter::HistogramLines(std::string_view name, const PromLabel* label,
                                std::span<const double> bounds, std::span<const uint64_t> counts,
                                double sum) {
  assert(counts.size() == bounds.size() + 1);
  const std::string bucket = std::string(name) + "_bucket";
  auto sample = [&](std::string_view n, std::string_view le, uint64_t v) {
    if (label == nullptr) {
      le.empty() ? SampleInt(n, {}, v) : SampleInt(n, {{"le", le}}, v);
    } else {
      le.empty() ? SampleInt(n, {*label}, v) : SampleInt(n, {*label, {"le", le}}, v);
    }
  };
  uint64_t cumulative = 0;
  char le[32];
  for (size_t i = 0; i < bounds.size(); ++i) {
    cumulative += counts[i];
    const auto r = std::to_chars(le, le + sizeof le, bounds[i]);
    sample(bucket, std::string_view(le, static_cast<size_t>(r.ptr - le)), cumulative);
  }
  cumulative += counts[bounds.size()];
  sample(bucket, "+Inf", cumulative);
  if (label == nullptr) {
    AppendNameAndLabels(std::string(name) + "_sum", {});
  } else {
    AppendNameAndLabels(std::string(name) + "_sum", {*label});
  }
  const auto r = std::to_chars(le, le + sizeof le, sum);
  out_->append(le, r.ptr).push_back('\n');
  sample(std::string(name) + "_count", {}, cumulative);
}

void PromWriter::AppendNameAndLabels(std::string_view name,
                                     std::initializer_list<PromLabel> labels) {
  assert(IsValidPromMetricName(name));
  out_->append(name);
  if (labels.size() == 0) {
    out_->push_back(' ');
    return;
  }
  char sep = '{';
  for (const PromLabel& l : labels) {
    assert(IsValidPromLabelName(l.name));
    out_->push_back(sep);
    sep = ',';
    out_->append(l.name).append("=\"");
    AppendPromLabelValue(out_, l.value);
    out_->push_back('"');
  }
  out_->append("} ");
}

template <class Int>
void PromWriter::SampleInt(std::string_view name, std::initializer_list<PromLabel> labels, Int v) {
  AppendNameAndLabels(name, labels);
  char buf[24];
  const auto r = std::to_chars(buf, buf + sizeof buf, v);
  out_->append(buf, r.ptr).push_back('\n');
}

template void PromWriter::SampleInt(std::string_view, std::initializer_list<PromLabel>, uint64_t);
template void PromWriter::SampleInt(std::string_view, std::initializer_list<PromLabel>, int64_t);

}  // namespace llmtap
