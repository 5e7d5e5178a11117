#include "shadow/pair.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include <simdjson.h>

#include "common/json_escape.h"
#include "tokenizer/tokenizer.h"
#include "trace/record.h"

namespace llmtap::shadow {
namespace {

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

OutputComparison CompareOutputs(std::string_view primary, std::string_view candidate,
                                const tokenizer::Tokenizer* tokenizer) {
  OutputComparison c;
  const int64_t p_len = CodePoints(primary);
  const int64_t c_len = CodePoints(candidate);
  c.length_ratio = p_len > 0    ? static_cast<double>(c_len) / static_cast<double>(p_len)
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
  if (tokenizer != nullptr) {
    std::vector<uint32_t> p, q;
    tokenizer->Encode(primary, &p);
    tokenizer->Encode(candidate, &q);
    const auto [pi, qi] = std::mismatch(p.begin(), p.end(), q.begin(), q.end());
    c.first_diff_token = pi - p.begin();
  }
  return c;
}

RequestTraits ReadRequestTraits(std::string_view body) {
  RequestTraits t;
  simdjson::padded_string padded(body);
  // One parser per thread: a parser's first document allocates its buffers, which cost more
  // than reading a 1 KB body.
  thread_local simdjson::ondemand::parser parser;
  simdjson::ondemand::document doc;
  simdjson::ondemand::object root;
  if (parser.iterate(padded).get(doc) != simdjson::SUCCESS ||
      doc.get_object().get(root) != simdjson::SUCCESS) {
    return t;
  }
  for (auto field : root) {
    std::string_view key;
    if (field.unescaped_key().get(key) != simdjson::SUCCESS) return t;
    if (key == "model") {
      std::string_view model;
      if (field.value().get_string().get(model) == simdjson::SUCCESS) t.model = std::string(model);
    } else if (key == "previous_response_id") {
      std::string_view id;
      if (field.value().get_string().get(id) == simdjson::SUCCESS) {
        t.previous_response_id = std::string(id);
      }
    } else if (key == "temperature") {
      double temperature;
      if (field.value().get_double().get(temperature) == simdjson::SUCCESS) {
        t.temperature = temperature;
      }
    }
  }
  return t;
}

void SetPreviousResponseId(std::string* body, std::string_view id) {
  std::string quoted;
  AppendJsonString(&quoted, id);
  trace::SetTopLevel(body, "previous_response_id", quoted);
}

void AppendPairMembers(const PairKey& key, const ShadowSide& primary, const ShadowSide& candidate,
                       const tokenizer::Tokenizer* tokenizer, std::string* out) {
  out->append("\"request\":");
  AppendInt(static_cast<int64_t>(key.request), out);
  out->append(",\"shadow\":");
  AppendInt(key.shadow, out);
  out->append(",\"candidate_url\":");
  if (key.candidate_url.empty()) {
    out->append("null");
  } else {
    AppendJsonString(out, key.candidate_url);
  }
  out->append(",\"path\":");
  AppendJsonString(out, key.path);
  out->append(",\"model\":");
  if (key.traits != nullptr && key.traits->model) {
    AppendJsonString(out, *key.traits->model);
  } else {
    out->append("null");
  }
  out->append(",\"temperature\":");
  if (key.traits != nullptr && key.traits->temperature && std::isfinite(*key.traits->temperature)) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.9g", *key.traits->temperature);
    out->append(buf);
  } else {
    out->append("null");
  }
  out->append(",\"at_ms\":");
  AppendInt(key.at_ms, out);
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
  const OutputComparison c =
      CompareOutputs(ComparableOutput(primary.outcome.response),
                     ComparableOutput(candidate.outcome.response), tokenizer);
  out->append(c.equal ? "{\"equal\":true" : "{\"equal\":false");
  out->append(",\"first_diff_char\":");
  AppendCount(c.first_diff_char, out);
  out->append(",\"first_diff_token\":");
  AppendCount(c.first_diff_token, out);
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

uint64_t HighestRequest(std::string_view lines) {
  simdjson::dom::parser parser;
  uint64_t highest = 0;
  for (size_t end; (end = lines.find('\n')) != std::string_view::npos;
       lines.remove_prefix(end + 1)) {
    simdjson::dom::object line;
    uint64_t request = 0;
    if (parser.parse(lines.data(), end, true).get(line) == simdjson::SUCCESS &&
        line["request"].get(request) == simdjson::SUCCESS) {
      highest = std::max(highest, request);
    }
  }
  return highest;
}

}  // namespace llmtap::shadow
