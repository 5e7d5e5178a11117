// ServerReport (api/server_report.h): writing it into outcome and replay lines, and reading the
// members servers send it in from one JSON document of an answer.
#include "api/server_report.h"

#include <algorithm>
#include <cmath>

#include "api/document_internal.h"
#include "common/json_number.h"

namespace llmtap::api {

using namespace std::string_view_literals;

std::string_view SpecEngineName(SpecEngine engine) {
  switch (engine) {
    case SpecEngine::kLlamaCpp:
      return "llamacpp";
    case SpecEngine::kVllm:
      return "vllm";
    case SpecEngine::kSglang:
      return "sglang";
    case SpecEngine::kNone:
      break;
  }
  return "";
}

void MergeServerReport(const ServerReport& newer, ServerReport* into) {
  auto keep = [](int64_t v, int64_t* to) {
    if (v >= 0) *to = v;
  };
  keep(newer.cached_tokens, &into->cached_tokens);
  const ServerTimings& t = newer.timings;
  keep(t.prompt_n, &into->timings.prompt_n);
  keep(t.cache_n, &into->timings.cache_n);
  keep(t.decode_n, &into->timings.decode_n);
  keep(t.prompt_us, &into->timings.prompt_us);
  keep(t.decode_us, &into->timings.decode_us);
  if (newer.spec.known()) into->spec = newer.spec;
}

bool FillFromTimings(int64_t* prompt_tokens, int64_t* completion_tokens, ServerReport* r) {
  const ServerTimings& t = r->timings;
  bool filled = false;
  if (*prompt_tokens < 0 && t.prompt_n >= 0 && t.cache_n >= 0) {
    *prompt_tokens = t.prompt_n + t.cache_n;
    filled = true;
  }
  if (*completion_tokens < 0 && t.decode_n >= 0) {
    *completion_tokens = t.decode_n;
    filled = true;
  }
  if (r->cached_tokens < 0 && t.cache_n >= 0) r->cached_tokens = t.cache_n;
  return filled;
}

void AppendServerReportMembers(const ServerReport& r, std::string* out) {
  out->append(",\"cached_tokens\":");
  AppendJsonCountOrNull(r.cached_tokens, out);
  const ServerTimings& t = r.timings;
  if (!t.known()) {
    out->append(",\"server\":null");
  } else {
    out->append(",\"server\":{\"prompt_n\":");
    AppendJsonCountOrNull(t.prompt_n, out);
    out->append(",\"cache_n\":");
    AppendJsonCountOrNull(t.cache_n, out);
    out->append(",\"prompt_ms\":");
    AppendJsonMillisOrNull(t.prompt_us, out);
    out->append(",\"decode_n\":");
    AppendJsonCountOrNull(t.decode_n, out);
    out->append(",\"decode_ms\":");
    AppendJsonMillisOrNull(t.decode_us, out);
    out->push_back('}');
  }
  const SpecDecodeCounts& s = r.spec;
  if (!s.known()) {
    out->append(",\"spec\":null");
    return;
  }
  out->append(",\"spec\":{\"engine\":\"");
  out->append(SpecEngineName(s.engine));
  out->append("\",\"num_draft_tokens\":");
  AppendJsonCountOrNull(s.num_draft_tokens, out);
  out->append(",\"num_accepted_draft_tokens\":");
  AppendJsonCountOrNull(s.num_accepted_draft_tokens, out);
  out->append(",\"num_spec_steps\":");
  AppendJsonCountOrNull(s.num_spec_steps, out);
  out->append(",\"num_spec_tokens\":");
  AppendJsonCountOrNull(s.num_spec_tokens, out);
  out->append(",\"acceptance_histogram\":");
  if (s.histogram_size == 0) {
    out->append("null}");
    return;
  }
  // Sparse, as AIPerf writes its record: the accepted counts that occurred.
  out->push_back('{');
  bool first = true;
  for (int j = 0; j < s.histogram_size; ++j) {
    if (s.histogram[j] == 0) continue;
    if (!first) out->push_back(',');
    first = false;
    out->push_back('"');
    AppendJsonInt(j, out);
    out->append("\":");
    AppendJsonInt(s.histogram[j], out);
  }
  out->append("}}");
}

namespace document {
namespace {

// o[key] as a non-negative duration in milliseconds, in whole microseconds; -1 when absent or
// not a non-negative number.
int64_t MillisAsMicros(const simdjson::dom::object& o, std::string_view key) {
  double ms = 0;
  if (o.at_key(key).get(ms) != simdjson::SUCCESS || !(ms >= 0) || ms > 9.2e15) return -1;
  return std::llround(ms * 1000);
}

// A dense histogram (index j: steps that accepted exactly j drafts) into s; longer than
// kMaxHistogram, or holding anything but counts: not kept.
void ReadDenseHistogram(const simdjson::dom::object& o, std::string_view key, SpecDecodeCounts* s) {
  simdjson::dom::array a;
  if (!Array(o, key, &a) || a.size() > SpecDecodeCounts::kMaxHistogram) return;
  int n = 0;
  int64_t values[SpecDecodeCounts::kMaxHistogram];
  for (simdjson::dom::element e : a) {
    int64_t v = 0;
    if (e.get(v) != simdjson::SUCCESS || v < 0) return;
    values[n++] = v;
  }
  s->histogram_size = n;
  std::copy(values, values + n, s->histogram);
}

void Set(std::optional<int64_t> v, int64_t* to) {
  if (v) *to = *v;
}

// Where an engine's per-request speculation object names each count ("" for one it lacks).
struct SpecKeys {
  SpecEngine engine;
  std::string_view drafted, accepted, steps, spec_tokens, histogram;
};

// The drafted and accepted counts of `spec` (both, or the report is left as it was), and the
// verify steps, k and dense histogram it has.
void ReadSpec(const simdjson::dom::object& spec, const SpecKeys& keys, ServerReport* r) {
  const auto drafted = Count(spec, keys.drafted);
  const auto accepted = Count(spec, keys.accepted);
  if (!drafted || !accepted) return;
  r->spec = SpecDecodeCounts{};
  r->spec.engine = keys.engine;
  r->spec.num_draft_tokens = *drafted;
  r->spec.num_accepted_draft_tokens = *accepted;
  if (!keys.steps.empty()) Set(Count(spec, keys.steps), &r->spec.num_spec_steps);
  if (!keys.spec_tokens.empty()) Set(Count(spec, keys.spec_tokens), &r->spec.num_spec_tokens);
  if (!keys.histogram.empty()) ReadDenseHistogram(spec, keys.histogram, &r->spec);
}

}  // namespace

void ReadServerReport(const simdjson::dom::object& o, ServerReport* r) {
  // One pass over the document's members: this runs on every event of every response, and most
  // have none of the three.
  for (const simdjson::dom::key_value_pair field : o) {
    const std::string_view key = field.key;
    simdjson::dom::object t, spec;
    if ((key.size() != 7 && key.size() != 6) || field.value.get(t) != simdjson::SUCCESS) continue;
    if (key == "timings") {
      // llama.cpp: at the top level (a Responses stream's response.completed: beside
      // "response"). Its draft counts are there only when the request drafted something.
      ServerTimings& st = r->timings;
      Set(Count(t, "prompt_n"), &st.prompt_n);
      Set(Count(t, "cache_n"), &st.cache_n);
      Set(Count(t, "predicted_n"), &st.decode_n);
      if (int64_t us = MillisAsMicros(t, "prompt_ms"); us >= 0) st.prompt_us = us;
      if (int64_t us = MillisAsMicros(t, "predicted_ms"); us >= 0) st.decode_us = us;
      ReadSpec(t, {SpecEngine::kLlamaCpp, "draft_n", "draft_n_accepted", "", "", ""}, r);
    } else if (key == "metrics" && Object(t, "speculative_decoding", &spec)) {
      // vLLM (--per-request-spec-decode-metrics).
      ReadSpec(spec,
               {SpecEngine::kVllm, "num_draft_tokens", "num_accepted_draft_tokens",
                "num_spec_steps", "num_spec_tokens", "acceptance_histogram"},
               r);
    } else if (key == "sglext" && Object(t, "spec_tokens_details", &spec)) {
      // SGLang (return_spec_tokens_details).
      ReadSpec(spec,
               {SpecEngine::kSglang, "spec_num_proposed_drafts", "spec_num_correct_drafts",
                "spec_verify_ct", "", "spec_correct_drafts_histogram"},
               r);
    }
  }
}

void ReadCachedTokens(const simdjson::dom::object& usage, std::string_view details,
                      ServerReport* r) {
  simdjson::dom::object d;
  if (Object(usage, details, &d)) Set(Count(d, "cached_tokens"), &r->cached_tokens);
}

}  // namespace document
}  // namespace llmtap::api
