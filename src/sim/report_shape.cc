#include "sim/report_shape.h"

#include <cmath>
#include <string_view>

#include "api/json_write.h"
#include "sim/text.h"

namespace llmtap::sim {

using namespace std::string_view_literals;
using api::AppendDouble;

namespace {

// Seconds as milliseconds in whole microseconds (llama-server's resolution).
double Millis(double seconds) { return std::round(seconds * 1e6) / 1e3; }

void AppendFiniteOrNull(double v, std::string* out) {
  if (std::isfinite(v)) {
    AppendDouble(out, v);
  } else {
    out->append("null"sv);
  }
}

// `"<name>_n":n,"<name>_ms":ms,"<name>_per_token_ms":..,"<name>_per_second":..`.
void AppendPhase(std::string_view name, uint64_t n, double ms, std::string* out) {
  const auto key = [&](std::string_view suffix) {
    out->push_back('"');
    out->append(name).append(suffix);
    out->append("\":"sv);
  };
  key("_n"sv);
  AppendUint(out, n);
  out->push_back(',');
  key("_ms"sv);
  AppendDouble(out, ms);
  out->push_back(',');
  key("_per_token_ms"sv);
  AppendFiniteOrNull(ms / static_cast<double>(n), out);
  out->push_back(',');
  key("_per_second"sv);
  AppendFiniteOrNull(1e3 * static_cast<double>(n) / ms, out);
}

}  // namespace

void AppendLlamaCppTimings(const Plan& plan, std::string* out) {
  out->append(",\"timings\":{\"cache_n\":"sv);
  AppendUint(out, plan.cached_tokens);
  out->push_back(',');
  // llama-server's names: "prompt" for the prompt's evaluation, "predicted" for generation.
  AppendPhase("prompt"sv, plan.prompt_tokens - plan.cached_tokens, Millis(plan.prefill_s), out);
  out->push_back(',');
  AppendPhase("predicted"sv, plan.completion_tokens(), Millis(plan.decode_s), out);
  uint64_t drafted = 0, accepted = 0;
  for (const Choice& c : plan.choices) {
    drafted += c.gen.spec.draft_tokens;
    accepted += c.gen.spec.accepted_tokens;
  }
  if (drafted > 0) {
    out->append(",\"draft_n\":"sv);
    AppendUint(out, drafted);
    out->append(",\"draft_n_accepted\":"sv);
    AppendUint(out, accepted);
  }
  out->push_back('}');
}

void AppendVllmSpecMetrics(const Plan& plan, uint32_t k, std::string* out) {
  if (k == 0) return;
  out->append(",\"metrics\":{\"speculative_decoding\":"sv);
  if (plan.choices.size() != 1) {
    out->append("null}"sv);
    return;
  }
  const SpecStats& s = plan.choices[0].gen.spec;
  if (s.drafts == 0) {
    out->append("{\"mean_acceptance_length\":null,\"draft_acceptance_rate\":null"sv);
  } else {
    out->append("{\"mean_acceptance_length\":"sv);
    AppendDouble(out, 1.0 + static_cast<double>(s.accepted_tokens) / static_cast<double>(s.drafts));
    out->append(",\"draft_acceptance_rate\":"sv);
    AppendFiniteOrNull(static_cast<double>(s.accepted_tokens) / static_cast<double>(s.draft_tokens),
                       out);
  }
  // Dense: [j] = steps that accepted exactly j drafts. Drafts are accepted from position 0 on,
  // so the steps that accepted at least j + 1 are accepted_per_pos[j].
  out->append(",\"acceptance_histogram\":["sv);
  uint64_t at_least = s.drafts;  // steps that accepted at least j
  for (uint32_t j = 0; j <= k; ++j) {
    const uint64_t more = j < k && j < s.accepted_per_pos.size() ? s.accepted_per_pos[j] : 0;
    if (j > 0) out->push_back(',');
    AppendUint(out, at_least - more);
    at_least = more;
  }
  out->append("],\"num_spec_steps\":"sv);
  AppendUint(out, s.drafts);
  out->append(",\"num_accepted_draft_tokens\":"sv);
  AppendUint(out, s.accepted_tokens);
  out->append(",\"num_draft_tokens\":"sv);
  AppendUint(out, s.draft_tokens);
  out->append(",\"num_spec_tokens\":"sv);
  AppendUint(out, k);
  out->append("}}"sv);
}

}  // namespace llmtap::sim
