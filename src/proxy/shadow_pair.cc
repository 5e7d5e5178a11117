#include "proxy/shadow_pair.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "common/ascii.h"
#include "common/json_escape.h"

namespace llmtap::proxy {
namespace {

bool IsTokenChar(char c) {
  if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9')) return true;
  return std::string_view("!#$%&'*+-.^_`|~").find(c) != std::string_view::npos;
}

bool IsToken(std::string_view s) { return !s.empty() && std::all_of(s.begin(), s.end(), IsTokenChar); }

std::string_view TrimOws(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

std::string Lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = AsciiLower(c);
  return out;
}

// Code points of UTF-8 text (continuation bytes are not counted).
int64_t CodePoints(std::string_view s) {
  int64_t n = 0;
  for (char c : s) n += (static_cast<unsigned char>(c) & 0xC0) != 0x80;
  return n;
}

void AppendInt(int64_t v, std::string* out) { out->append(std::to_string(v)); }

void AppendCount(int64_t v, std::string* out) {
  if (v < 0) {
    out->append("null");
  } else {
    AppendInt(v, out);
  }
}

// A signed difference of microseconds as milliseconds with three decimals; null when either side
// is unknown.
void AppendDelta(int64_t candidate_us, int64_t primary_us, std::string* out) {
  if (candidate_us < 0 || primary_us < 0) {
    out->append("null");
    return;
  }
  const int64_t d = candidate_us - primary_us;
  if (d < 0) out->push_back('-');
  AppendMillisOrNull(d < 0 ? -d : d, out);
}

void AppendSide(const ShadowSide& s, std::string* out) {
  out->append("{\"status\":");
  AppendInt(s.outcome.status, out);
  out->append(",\"ttft_ms\":");
  AppendMillisOrNull(s.timing.ttft_us(), out);
  out->append(",\"itl_p50_ms\":");
  AppendMillisOrNull(s.timing.itl_p50_us(), out);
  out->append(",\"itl_max_ms\":");
  AppendMillisOrNull(s.timing.itl_max_us(), out);
  out->append(",\"latency_ms\":");
  AppendMillisOrNull(s.timing.latency_us(), out);
  AppendUsageMembers(s.outcome, out);
  AppendErrorMember(s.outcome, out);
  out->push_back('}');
}

// Whether a side's output can be compared: it ended without an error, with a readable body.
bool Comparable(const ShadowSide& s) {
  return s.outcome.error == nullptr && s.outcome.has_response && s.outcome.status / 100 == 2;
}

}  // namespace

bool ShadowHeaderRules::AddSet(std::string_view spec, std::string* error) {
  const size_t colon = spec.find(':');
  const std::string_view name = colon == std::string_view::npos ? spec : spec.substr(0, colon);
  if (colon == std::string_view::npos || !IsToken(name)) {
    *error = "must be 'Name: value' with a header field name before the colon";
    return false;
  }
  const std::string_view value = TrimOws(spec.substr(colon + 1));
  if (value.find_first_of("\r\n") != std::string_view::npos || value.find('\0') != value.npos) {
    *error = "the value of " + std::string(name) + " holds a line break or NUL";
    return false;
  }
  const std::string lower = Lower(name);
  if (lower == "host" || lower == "content-length" || lower == "transfer-encoding" ||
      lower == "connection") {
    *error = std::string(name) + " is set by the proxy";
    return false;
  }
  skipped_.push_back(lower);
  extra_.append(name).append(": ").append(value).append("\r\n");
  return true;
}

bool ShadowHeaderRules::AddDrop(std::string_view name, std::string* error) {
  if (!IsToken(name)) {
    *error = "'" + std::string(name) + "' is not a header field name";
    return false;
  }
  skipped_.push_back(Lower(name));
  return true;
}

void BodyTiming::OnBody(Clock::time_point at) {
  if (ttft_us_ < 0) {
    ttft_us_ = Micros(at - start_);
  } else {
    const int64_t gap = Micros(at - last_);
    max_gap_us_ = std::max(max_gap_us_, gap);
    ++gaps_seen_;
    if (gaps_us_.size() < kMaxGaps) gaps_us_.push_back(gap);
  }
  last_ = at;
}

int64_t BodyTiming::itl_p50_us() const {
  if (gaps_us_.empty()) return -1;
  std::vector<int64_t> g = gaps_us_;
  const size_t mid = g.size() / 2;
  std::nth_element(g.begin(), g.begin() + mid, g.end());
  if (g.size() % 2 == 1) return g[mid];
  const int64_t upper = g[mid];
  const int64_t lower = *std::max_element(g.begin(), g.begin() + mid);
  return (lower + upper) / 2;
}

std::string ComparableOutput(const ResponseText& r) {
  std::string out = r.text;
  for (const ResponseToolCall& call : r.tool_calls) {
    out.append(call.name).append(call.arguments);
  }
  return out;
}

OutputComparison CompareOutputs(std::string_view primary, std::string_view candidate) {
  OutputComparison c;
  const int64_t p_len = CodePoints(primary);
  const int64_t c_len = CodePoints(candidate);
  c.length_ratio = p_len > 0 ? static_cast<double>(c_len) / static_cast<double>(p_len)
                   : c_len == 0 ? 1.0
                                : -1.0;
  if (primary == candidate) {
    c.equal = true;
    return c;
  }
  const size_t n = std::min(primary.size(), candidate.size());
  size_t i = 0;
  while (i < n && primary[i] == candidate[i]) ++i;
  // Back to the start of the character the difference falls in.
  while (i > 0 && i < primary.size() && (static_cast<unsigned char>(primary[i]) & 0xC0) == 0x80) {
    --i;
  }
  c.first_diff_char = CodePoints(primary.substr(0, i));
  return c;
}

void AppendPairMembers(std::string_view path, int64_t at_ms, const ShadowSide& primary,
                       const ShadowSide& candidate, std::string* out) {
  out->append("\"path\":");
  AppendJsonString(out, path);
  out->append(",\"at_ms\":");
  AppendInt(at_ms, out);
  out->append(",\"primary\":");
  AppendSide(primary, out);
  out->append(",\"candidate\":");
  AppendSide(candidate, out);
  out->append(",\"delta\":{\"ttft_ms\":");
  AppendDelta(candidate.timing.ttft_us(), primary.timing.ttft_us(), out);
  out->append(",\"itl_p50_ms\":");
  AppendDelta(candidate.timing.itl_p50_us(), primary.timing.itl_p50_us(), out);
  out->append(",\"latency_ms\":");
  AppendDelta(candidate.timing.latency_us(), primary.timing.latency_us(), out);
  out->append("},\"output\":");
  if (!Comparable(primary) || !Comparable(candidate)) {
    out->append("null");
    return;
  }
  const OutputComparison c = CompareOutputs(ComparableOutput(primary.outcome.response),
                                            ComparableOutput(candidate.outcome.response));
  out->append(c.equal ? "{\"equal\":true" : "{\"equal\":false");
  out->append(",\"first_diff_char\":");
  AppendCount(c.first_diff_char, out);
  out->append(",\"length_ratio\":");
  if (c.length_ratio < 0) {
    out->append("null");
  } else {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.4f", c.length_ratio);
    out->append(buf);
  }
  const bool truncated = primary.outcome.response.truncated || candidate.outcome.response.truncated;
  out->append(truncated ? ",\"truncated\":true}" : ",\"truncated\":false}");
}

}  // namespace llmtap::proxy
