#include "trace/record.h"

#include <charconv>
#include <cmath>

#include "capture/json_compact.h"

namespace llmtap::trace {

std::string_view TraceFormatName(TraceFormat format) {
  switch (format) {
    case TraceFormat::kMooncake:
      return "mooncake_trace";
    case TraceFormat::kRaw:
      return "raw_payload";
    case TraceFormat::kUnknown:
      break;
  }
  return "unknown";
}

std::optional<TraceFormat> ParseTraceFormat(std::string_view name) {
  if (name == "mooncake_trace" || name == "mooncake_payload" || name == "mooncake") {
    return TraceFormat::kMooncake;
  }
  if (name == "raw_payload" || name == "raw") return TraceFormat::kRaw;
  return std::nullopt;
}

std::string_view EndpointName(Endpoint endpoint) {
  switch (endpoint) {
    case Endpoint::kChat:
      return "chat";
    case Endpoint::kCompletions:
      return "completions";
    case Endpoint::kAny:
      return "any";
    case Endpoint::kOther:
      break;
  }
  return "other";
}

namespace {

bool Has(simdjson::dom::object obj, std::string_view key) {
  return obj.at_key(key).error() == simdjson::SUCCESS;
}

// Present and not null (AIPerf's models treat an explicit null as absent).
bool HasNonNull(simdjson::dom::object obj, std::string_view key) {
  auto v = obj.at_key(key);
  return v.error() == simdjson::SUCCESS && !v.value_unsafe().is_null();
}

}  // namespace

TraceFormat RowFormat(simdjson::dom::object row) {
  static constexpr std::string_view kMooncakeKeys[] = {"timestamp",  "payload",   "input_length",
                                                       "text_input", "hash_ids",  "output_length",
                                                       "delay",      "session_id"};
  // Captured rows start with "timestamp"; check the first key before a full search.
  for (auto field : row) {
    for (std::string_view k : kMooncakeKeys) {
      if (field.key == k) return TraceFormat::kMooncake;
    }
  }
  return TraceFormat::kRaw;
}

std::optional<simdjson::dom::object> RowRequest(simdjson::dom::object row, TraceFormat format) {
  if (format == TraceFormat::kRaw) return row;
  simdjson::dom::object payload;
  if (row.at_key("payload").get(payload) == simdjson::SUCCESS) return payload;
  return std::nullopt;
}

static Endpoint RequestEndpoint(simdjson::dom::object request) {
  if (Has(request, "messages")) return Endpoint::kChat;
  if (Has(request, "prompt")) return Endpoint::kCompletions;
  return Endpoint::kOther;
}

Endpoint RowEndpoint(simdjson::dom::object row, TraceFormat format) {
  if (auto request = RowRequest(row, format)) return RequestEndpoint(*request);
  if (HasNonNull(row, "messages")) return Endpoint::kChat;
  if (HasNonNull(row, "input_length") || HasNonNull(row, "text_input")) return Endpoint::kAny;
  return Endpoint::kOther;
}

std::optional<double> RowTimestamp(simdjson::dom::object row) {
  auto v = row.at_key("timestamp");
  if (v.error() != simdjson::SUCCESS) return std::nullopt;
  double d;
  if (v.value_unsafe().get_double().get(d) != simdjson::SUCCESS) return std::nullopt;
  return d;
}

std::string_view TrimJsonWhitespace(std::string_view s) {
  auto ws = [](char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; };
  while (!s.empty() && ws(s.front())) s.remove_prefix(1);
  while (!s.empty() && ws(s.back())) s.remove_suffix(1);
  return s;
}

const ParsedRow& RowParser::Parse(std::string_view line) {
  row_.error.clear();
  if (TrimJsonWhitespace(line).empty()) {
    row_.status = ParseStatus::kBlank;
    return row_;
  }
  simdjson::dom::element root;
  simdjson::error_code err = parser_.parse(line.data(), line.size(), false).get(root);
  if (err != simdjson::SUCCESS) {
    if (err == simdjson::NUMBER_ERROR || err == simdjson::NUMBER_OUT_OF_RANGE) {
      std::string scratch;
      if (CompactJsonReference(line, &scratch) == CompactError::kOk) {
        row_.status = ParseStatus::kNumberOutOfRange;
        row_.error =
            "holds a number outside the 64-bit range (like 1e400 or an integer beyond 2^64); "
            "llmtap cannot check or rewrite this row";
        return row_;
      }
    }
    row_.status = ParseStatus::kInvalidJson;
    row_.error = std::string("invalid JSON: ") + simdjson::error_message(err);
    return row_;
  }
  if (root.get(row_.object) != simdjson::SUCCESS) {
    row_.status = ParseStatus::kNotObject;
    row_.error = "not a JSON object";
    return row_;
  }
  row_.status = ParseStatus::kOk;
  return row_;
}

namespace {

bool IsWs(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

// `s[i]` is '"'; returns the index one past the closing quote.
size_t SkipString(std::string_view s, size_t i) {
  ++i;
  while (i < s.size()) {
    char c = s[i];
    if (c == '\\') {
      i += 2;
    } else if (c == '"') {
      return i + 1;
    } else {
      ++i;
    }
  }
  return s.size();
}

size_t SkipValue(std::string_view s, size_t i) {
  if (i >= s.size()) return i;
  char c = s[i];
  if (c == '"') return SkipString(s, i);
  if (c == '{' || c == '[') {
    int depth = 0;
    while (i < s.size()) {
      c = s[i];
      if (c == '"') {
        i = SkipString(s, i);
        continue;
      }
      if (c == '{' || c == '[') ++depth;
      if (c == '}' || c == ']') {
        if (--depth == 0) return i + 1;
      }
      ++i;
    }
    return i;
  }
  while (i < s.size() && s[i] != ',' && s[i] != '}' && s[i] != ']' && !IsWs(s[i])) ++i;
  return i;
}

size_t SkipWs(std::string_view s, size_t i) {
  while (i < s.size() && IsWs(s[i])) ++i;
  return i;
}

}  // namespace

std::optional<Span> FindTopLevelValue(std::string_view line, std::string_view key) {
  size_t i = SkipWs(line, 0);
  if (i >= line.size() || line[i] != '{') return std::nullopt;
  ++i;
  for (;;) {
    i = SkipWs(line, i);
    if (i >= line.size() || line[i] != '"') return std::nullopt;
    size_t key_end = SkipString(line, i);
    std::string_view k = line.substr(i + 1, key_end - i - 2);
    i = SkipWs(line, key_end);
    if (i >= line.size() || line[i] != ':') return std::nullopt;
    i = SkipWs(line, i + 1);
    size_t value_end = SkipValue(line, i);
    if (k == key) return Span{i, value_end};
    i = SkipWs(line, value_end);
    if (i >= line.size() || line[i] != ',') return std::nullopt;
    ++i;
  }
}

void AppendNumber(double value, std::string* out) {
  char buf[64];
  std::to_chars_result r;
  if (std::isfinite(value) && std::trunc(value) == value && std::fabs(value) < 9.0e15) {
    r = std::to_chars(buf, buf + sizeof(buf), static_cast<int64_t>(value));
  } else {
    r = std::to_chars(buf, buf + sizeof(buf), value);
  }
  out->append(buf, r.ptr);
}

bool AppendWithTimestamp(std::string_view line, double timestamp, std::string* out) {
  std::optional<Span> span;
  static constexpr std::string_view kPrefix = "{\"timestamp\":";
  if (line.starts_with(kPrefix)) {
    // The captured layout: the number follows directly.
    size_t end = SkipValue(line, kPrefix.size());
    span = Span{kPrefix.size(), end};
  } else {
    span = FindTopLevelValue(line, "timestamp");
  }
  if (!span) return false;
  out->append(line.data(), span->begin);
  AppendNumber(timestamp, out);
  out->append(line.data() + span->end, line.size() - span->end);
  return true;
}

}  // namespace llmtap::trace
