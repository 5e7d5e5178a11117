#include "report/prometheus.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <limits>
#include <optional>

#include "common/ascii.h"

namespace llmtap::report {
namespace {

bool IsNameStart(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c == ':';
}
bool IsNameChar(char c) { return IsNameStart(c) || (c >= '0' && c <= '9'); }
bool IsSpace(char c) { return c == ' ' || c == '\t'; }

void SkipSpaces(std::string_view s, size_t* i) {
  while (*i < s.size() && IsSpace(s[*i])) ++*i;
}

// A metric or label name at s[*i]; empty when there is none.
std::string_view ReadName(std::string_view s, size_t* i) {
  size_t start = *i;
  if (*i < s.size() && IsNameStart(s[*i])) {
    ++*i;
    while (*i < s.size() && IsNameChar(s[*i])) ++*i;
  }
  return s.substr(start, *i - start);
}

std::optional<double> ParseValue(std::string_view v) {
  if (v.empty()) return std::nullopt;
  bool negative = false;
  std::string_view body = v;
  if (body[0] == '+' || body[0] == '-') {
    negative = body[0] == '-';
    body.remove_prefix(1);
  }
  if (AsciiEqualsIgnoreCase(body, "inf")) {
    return negative ? -std::numeric_limits<double>::infinity()
                    : std::numeric_limits<double>::infinity();
  }
  if (AsciiEqualsIgnoreCase(body, "nan")) return std::numeric_limits<double>::quiet_NaN();
  double out = 0;
  auto [end, ec] = std::from_chars(body.data(), body.data() + body.size(), out);
  if (ec != std::errc() || end != body.data() + body.size() || body.empty()) return std::nullopt;
  return negative ? -out : out;
}

// `{name="value",...}` at s[*i] (the opening brace). False on any malformation.
bool ReadLabels(std::string_view s, size_t* i,
                std::vector<std::pair<std::string, std::string>>* labels) {
  ++*i;  // '{'
  while (true) {
    SkipSpaces(s, i);
    if (*i >= s.size()) return false;
    if (s[*i] == '}') {
      ++*i;
      return true;
    }
    std::string_view key = ReadName(s, i);
    if (key.empty()) return false;
    SkipSpaces(s, i);
    if (*i >= s.size() || s[*i] != '=') return false;
    ++*i;
    SkipSpaces(s, i);
    if (*i >= s.size() || s[*i] != '"') return false;
    ++*i;
    std::string value;
    bool closed = false;
    while (*i < s.size()) {
      char c = s[(*i)++];
      if (c == '"') {
        closed = true;
        break;
      }
      if (c == '\\') {
        if (*i >= s.size()) return false;
        char e = s[(*i)++];
        value.push_back(e == 'n' ? '\n' : e);  // \\ and \" keep the escaped byte
      } else {
        value.push_back(c);
      }
    }
    if (!closed) return false;
    labels->emplace_back(std::string(key), std::move(value));
    SkipSpaces(s, i);
    if (*i < s.size() && s[*i] == ',') ++*i;  // a trailing comma is allowed
  }
}

std::optional<PromType> ParseTypeName(std::string_view t) {
  if (t == "counter") return PromType::kCounter;
  if (t == "gauge") return PromType::kGauge;
  if (t == "histogram" || t == "gaugehistogram") return PromType::kHistogram;
  if (t == "summary") return PromType::kSummary;
  if (t == "untyped" || t == "unknown" || t == "info" || t == "stateset") {
    return PromType::kUntyped;
  }
  return std::nullopt;
}

void ParseComment(std::string_view line, PromText* out) {
  size_t i = 1;  // after '#'
  SkipSpaces(line, &i);
  size_t kw_start = i;
  while (i < line.size() && !IsSpace(line[i])) ++i;
  std::string_view keyword = line.substr(kw_start, i - kw_start);
  if (keyword != "TYPE") return;  // HELP, EOF, UNIT and free comments carry nothing we use
  SkipSpaces(line, &i);
  std::string_view family = ReadName(line, &i);
  SkipSpaces(line, &i);
  size_t t_start = i;
  while (i < line.size() && !IsSpace(line[i])) ++i;
  std::optional<PromType> type = ParseTypeName(line.substr(t_start, i - t_start));
  if (family.empty() || !type) {
    ++out->bad_lines;
    return;
  }
  out->types[std::string(family)] = *type;
}

void ParseSampleLine(std::string_view line, PromText* out) {
  size_t i = 0;
  PromSample sample;
  std::string_view name = ReadName(line, &i);
  if (name.empty()) {
    ++out->bad_lines;
    return;
  }
  sample.name = std::string(name);
  size_t before_space = i;
  SkipSpaces(line, &i);
  if (i < line.size() && line[i] == '{') {
    if (!ReadLabels(line, &i, &sample.labels)) {
      ++out->bad_lines;
      return;
    }
    before_space = i;
    SkipSpaces(line, &i);
  }
  if (i == before_space) {  // the value must be separated by white space
    ++out->bad_lines;
    return;
  }
  size_t v_start = i;
  while (i < line.size() && !IsSpace(line[i])) ++i;
  std::optional<double> value = ParseValue(line.substr(v_start, i - v_start));
  if (!value) {
    ++out->bad_lines;
    return;
  }
  // An optional timestamp (and an OpenMetrics exemplar after '#') may follow; ignored.
  sample.value = *value;
  std::sort(sample.labels.begin(), sample.labels.end());
  out->samples.push_back(std::move(sample));
}

std::string_view StripFamilySuffix(std::string_view name) {
  for (std::string_view suffix : {"_total", "_created", "_count", "_sum", "_bucket"}) {
    if (name.size() > suffix.size() && name.substr(name.size() - suffix.size()) == suffix) {
      return name.substr(0, name.size() - suffix.size());
    }
  }
  return name;
}

bool EndsWith(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

}  // namespace

const char* PromTypeName(PromType type) {
  switch (type) {
    case PromType::kCounter:
      return "counter";
    case PromType::kGauge:
      return "gauge";
    case PromType::kHistogram:
      return "histogram";
    case PromType::kSummary:
      return "summary";
    case PromType::kUntyped:
      break;
  }
  return "untyped";
}

const std::string* PromSample::Label(std::string_view key) const {
  for (const auto& [k, v] : labels) {
    if (k == key) return &v;
  }
  return nullptr;
}

PromText ParsePrometheusText(std::string_view text) {
  PromText out;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t end = text.find('\n', pos);
    if (end == std::string_view::npos) end = text.size();
    std::string_view line = text.substr(pos, end - pos);
    pos = end + 1;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    size_t i = 0;
    SkipSpaces(line, &i);
    line.remove_prefix(i);
    if (line.empty()) continue;
    if (line[0] == '#') {
      ParseComment(line, &out);
    } else {
      ParseSampleLine(line, &out);
    }
  }
  return out;
}

PromType SampleType(const PromText& text, std::string_view sample_name) {
  if (auto it = text.types.find(std::string(sample_name)); it != text.types.end()) {
    return it->second;
  }
  std::string_view family = StripFamilySuffix(sample_name);
  if (family.size() != sample_name.size()) {
    if (auto it = text.types.find(std::string(family)); it != text.types.end()) return it->second;
  }
  return PromType::kUntyped;
}

bool IsCumulativeSample(const PromText& text, std::string_view name, bool include_buckets) {
  if (EndsWith(name, "_created")) return false;  // the creation time of a counter, not a count
  switch (SampleType(text, name)) {
    case PromType::kCounter:
      return true;
    case PromType::kHistogram:
    case PromType::kSummary:
      return EndsWith(name, "_count") || EndsWith(name, "_sum") ||
             (include_buckets && EndsWith(name, "_bucket"));
    case PromType::kGauge:
      return false;
    case PromType::kUntyped:
      return EndsWith(name, "_total");
  }
  return false;
}

std::string LabelKey(const std::vector<std::pair<std::string, std::string>>& labels) {
  if (labels.empty()) return "";
  std::string out = "{";
  for (size_t i = 0; i < labels.size(); ++i) {
    if (i) out.push_back(',');
    out += labels[i].first;
    out += "=\"";
    for (char c : labels[i].second) {
      if (c == '\\' || c == '"') {
        out.push_back('\\');
        out.push_back(c);
      } else if (c == '\n') {
        out += "\\n";
      } else {
        out.push_back(c);
      }
    }
    out.push_back('"');
  }
  out.push_back('}');
  return out;
}

}  // namespace llmtap::report
