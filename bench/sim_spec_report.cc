// sim_spec_report: the speculative-decoding and prefix-cache models of `llmtap sim` on two
// workloads (repetitive code editing, free chat), through the same Engine the server uses.
// Deterministic: prints the same numbers on every run.
#include <cstdio>
#include <string>
#include <vector>

#include "sim/engine.h"
#include "sim/testdata/workloads.h"

namespace {

using llmtap::sim::Engine;
using llmtap::sim::Plan;
using llmtap::sim::SimOptions;
using llmtap::sim::SimRequest;

void Report(const char* name, const std::vector<std::string>& prompts) {
  SimOptions options;  // the defaults of `llmtap sim`
  Engine engine(options);
  uint64_t tokens = 0, steps = 0, prompt_tokens = 0, cached = 0;
  for (int round = 0; round < 2; ++round) {  // the second round meets a warm prefix cache
    for (const std::string& p : prompts) {
      SimRequest r;
      r.prompt_text = p;
      r.max_tokens = 256;
      const Plan plan = engine.MakePlan(r);
      engine.RecordFinished(plan);
      tokens += plan.completion_tokens();
      steps += plan.steps();
      prompt_tokens += plan.prompt_tokens;
      cached += plan.cached_tokens;
    }
  }
  const auto& m = engine.metrics();
  const double drafted = static_cast<double>(m.spec_draft_tokens.load());
  std::printf(
      "%-13s requests %3zu  drafts %6llu  draft tokens %6llu  accepted %6llu  acceptance %.2f  "
      "tokens/step %.2f  prefix-cache hit rate %.2f\n",
      name, 2 * prompts.size(), static_cast<unsigned long long>(m.spec_drafts.load()),
      static_cast<unsigned long long>(m.spec_draft_tokens.load()),
      static_cast<unsigned long long>(m.spec_accepted_tokens.load()),
      drafted > 0 ? m.spec_accepted_tokens.load() / drafted : 0.0,
      static_cast<double>(tokens) / static_cast<double>(steps),
      static_cast<double>(cached) / static_cast<double>(prompt_tokens));
}

}  // namespace

int main() {
  std::vector<std::string> code;
  for (int v = 0; v < 16; ++v) code.push_back(llmtap::sim::testing::CodeEditPrompt(v));
  std::vector<std::string> chat;
  for (int i = 0; i < 4; ++i) {
    for (const std::string& p : llmtap::sim::testing::ChatPrompts()) {
      const size_t end = p.find("<|im_end|>");
      chat.push_back(p.substr(0, end) + " (variant " + std::to_string(i) + ")" + p.substr(end));
    }
  }
  std::printf("256 output tokens per request; --spec-tokens 5, n-grams 2..4, defaults otherwise\n");
  Report("code editing", code);
  Report("free chat", chat);
  return 0;
}
