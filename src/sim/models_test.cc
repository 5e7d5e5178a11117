// The timing, prefix-cache and speculative-decoding models, without the HTTP server.
#include <cmath>
#include <numeric>
#include <string>

#include <gtest/gtest.h>

#include "sim/engine.h"
#include "sim/generator.h"
#include "sim/prefix_cache.h"
#include "sim/testdata/workloads.h"
#include "sim/text.h"
#include "sim/timing_model.h"

namespace llmtap::sim {
namespace {

// ---- timing model ----

TEST(TimingModel, PrefillIsBasePlusPerTokenCost) {
  TimingOptions o;
  o.ttft_ms = 30;
  o.prefill_us_per_token = 50;
  TimingModel m(o);
  EXPECT_DOUBLE_EQ(m.PrefillSeconds(0), 0.030);
  EXPECT_NEAR(m.PrefillSeconds(1000), 0.080, 1e-12);
}

TEST(TimingModel, StepsHaveTheConfiguredMeanAndStayWithinTheJitter) {
  TimingOptions o;
  o.itl_ms = 10;
  o.itl_jitter_ms = 4;
  TimingModel m(o);
  Rng rng(7);
  const int n = 20000;
  double sum = 0, sum_sq = 0;
  for (int i = 0; i < n; ++i) {
    const double s = m.StepSeconds(rng) * 1e3;
    ASSERT_GE(s, 6.0 - 1e-9);
    ASSERT_LE(s, 14.0 + 1e-9);
    sum += s;
    sum_sq += s * s;
  }
  const double mean = sum / n;
  const double var = sum_sq / n - mean * mean;
  // Uniform on [6, 14]: mean 10, variance 16/3. Standard error of the mean ~0.016 ms.
  EXPECT_NEAR(mean, 10.0, 0.1);
  EXPECT_NEAR(var, 16.0 / 3.0, 0.3);
}

TEST(TimingModel, OutputLengthIsTheRequestLimitOrTheDistribution) {
  TimingOptions o;
  o.output_tokens_mean = 200;
  o.output_tokens_stddev = 50;
  o.output_tokens_max = 300;
  TimingModel m(o);
  Rng rng(1);
  bool capped = false;
  EXPECT_EQ(m.OutputTokens(17u, rng, &capped), 17u);
  EXPECT_TRUE(capped);
  double sum = 0;
  const int n = 20000;
  for (int i = 0; i < n; ++i) {
    const uint32_t t = m.OutputTokens(std::nullopt, rng, &capped);
    ASSERT_FALSE(capped);
    ASSERT_GE(t, 1u);
    ASSERT_LE(t, 300u);
    sum += t;
  }
  // Normal(200, 50) clamped at 300 (2 sigma): the mean drops by about 0.4; loose bound.
  EXPECT_NEAR(sum / n, 199.6, 2.0);
}

// ---- prefix cache ----

std::vector<uint64_t> Tokens(const std::string& text) {
  std::vector<uint64_t> h;
  ApproxTokenize(text, &h, nullptr);
  return h;
}

TEST(PrefixCache, ChainedHashesShareOnlyTheCommonPrefix) {
  std::vector<uint64_t> a(100), b(100);
  std::iota(a.begin(), a.end(), 1);
  std::iota(b.begin(), b.end(), 1);
  b[40] = 999;  // block 2 (tokens 32..47) differs
  const auto ha = ChainedBlockHashes(a, 16), hb = ChainedBlockHashes(b, 16);
  ASSERT_EQ(ha.size(), 6u);  // 100 / 16: the partial block is not hashed
  EXPECT_EQ(ha[0], hb[0]);
  EXPECT_EQ(ha[1], hb[1]);
  for (size_t i = 2; i < 6; ++i) EXPECT_NE(ha[i], hb[i]) << i;  // chained: all later ones differ
}

TEST(PrefixCache, HitsLeadingBlocksOnlyAndCountsThem) {
  PrefixCache cache(100);
  const std::vector<uint64_t> first = {1, 2, 3, 4};
  EXPECT_EQ(cache.LookupAndInsert(first, 10), 0u);
  EXPECT_EQ(cache.LookupAndInsert(first, 10), 4u);
  EXPECT_EQ(cache.LookupAndInsert(first, 3), 3u);  // limited by max_hit_blocks
  const std::vector<uint64_t> other = {1, 2, 9, 4};
  EXPECT_EQ(cache.LookupAndInsert(other, 10), 2u);  // stops at the first miss
  EXPECT_EQ(cache.hit_blocks(), 4u + 3u + 2u);
  EXPECT_EQ(cache.miss_blocks(), 4u + 1u + 2u);
  EXPECT_EQ(cache.size(), 5u);
}

TEST(PrefixCache, EvictsLeastRecentlyUsed) {
  PrefixCache cache(4);
  cache.LookupAndInsert(std::vector<uint64_t>{1, 2}, 10);
  cache.LookupAndInsert(std::vector<uint64_t>{3, 4}, 10);
  cache.LookupAndInsert(std::vector<uint64_t>{1}, 10);     // 1 is fresh again
  cache.LookupAndInsert(std::vector<uint64_t>{5, 6}, 10);  // evicts 2 and 3
  EXPECT_EQ(cache.size(), 4u);
  EXPECT_EQ(cache.evicted_blocks(), 2u);
  EXPECT_EQ(cache.LookupAndInsert(std::vector<uint64_t>{1}, 10), 1u);
  EXPECT_EQ(cache.LookupAndInsert(std::vector<uint64_t>{2}, 10), 0u);
}

TEST(PrefixCache, OffMeansAlwaysMiss) {
  PrefixCache cache(0);
  EXPECT_EQ(cache.LookupAndInsert(std::vector<uint64_t>{1, 2}, 10), 0u);
  EXPECT_EQ(cache.LookupAndInsert(std::vector<uint64_t>{1, 2}, 10), 0u);
  EXPECT_EQ(cache.size(), 0u);
  EXPECT_EQ(cache.miss_blocks(), 4u);
}

SimRequest Req(const std::string& prompt, uint32_t max_tokens = 16) {
  SimRequest r;
  r.endpoint = Endpoint::kCompletions;
  r.prompt_text = prompt;
  r.max_tokens = max_tokens;
  return r;
}

TEST(Engine, RepeatedPromptIsCachedExceptItsLastBlockAndPrefillShrinks) {
  SimOptions o;
  o.cache.block_tokens = 16;
  Engine engine(o);
  const std::string prompt = testing::CodeEditPrompt(1);
  const Plan a = engine.MakePlan(Req(prompt));
  const Plan b = engine.MakePlan(Req(prompt));
  ASSERT_GT(a.prompt_tokens, 100u);
  EXPECT_EQ(a.cached_tokens, 0u);
  EXPECT_EQ(b.cached_tokens, (b.prompt_tokens - 1) / 16 * 16);
  EXPECT_LT(b.prefill_s, a.prefill_s);
  // A prompt that shares the file but not the tail hits only the shared blocks.
  const Plan c = engine.MakePlan(Req(prompt.substr(0, prompt.size() / 2) + " something else"));
  EXPECT_GT(c.cached_tokens, 0u);
  EXPECT_LT(c.cached_tokens, b.cached_tokens);
  const SimMetrics& m = engine.metrics();
  EXPECT_EQ(m.cache_query_tokens.load(),
            uint64_t{a.prompt_tokens} + b.prompt_tokens + c.prompt_tokens);
  EXPECT_EQ(m.cache_hit_tokens.load(), uint64_t{b.cached_tokens} + c.cached_tokens);
  const std::string text = engine.MetricsText();
  EXPECT_NE(text.find("vllm:prefix_cache_hits_total{model_name=\"llmtap-sim\"} " +
                      std::to_string(b.cached_tokens + c.cached_tokens) + "\n"),
            std::string::npos)
      << text;
}

TEST(Engine, SmallCacheEvicts) {
  SimOptions o;
  o.cache.block_tokens = 16;
  o.cache.blocks = 4;  // far smaller than one prompt
  Engine engine(o);
  const std::string prompt = testing::CodeEditPrompt(1);
  engine.MakePlan(Req(prompt));
  const Plan b = engine.MakePlan(Req(prompt));
  EXPECT_EQ(b.cached_tokens, 0u);  // the prompt's first blocks were evicted by its last ones
  EXPECT_GT(engine.cache().evicted_blocks(), 0u);
}

// ---- generation and speculative decoding ----

struct Gen {
  std::string prompt;
  std::vector<uint64_t> hashes;
  std::vector<uint32_t> offsets;
  Generation g;
};

Gen RunGen(const std::string& prompt, uint32_t n, uint64_t seed, const SpecDecodeOptions& spec) {
  Gen r;
  r.prompt = prompt;
  ApproxTokenize(r.prompt, &r.hashes, &r.offsets);
  r.g = Generate(r.prompt, r.hashes, r.offsets, n, seed, spec);
  return r;
}

TEST(Generate, IsDeterministicAndConsistent) {
  SpecDecodeOptions spec;
  const std::string prompt = testing::CodeEditPrompt(3);
  const Gen a = RunGen(prompt, 300, 42, spec), b = RunGen(prompt, 300, 42, spec);
  const Gen c = RunGen(prompt, 300, 43, spec);
  EXPECT_EQ(a.g.text, b.g.text);
  EXPECT_EQ(a.g.step_ends, b.g.step_ends);
  EXPECT_NE(a.g.text, c.g.text);
  EXPECT_EQ(a.g.tokens, 300u);
  ASSERT_FALSE(a.g.step_ends.empty());
  EXPECT_EQ(a.g.step_ends.back(), a.g.text.size());
  for (size_t i = 1; i < a.g.step_ends.size(); ++i)
    EXPECT_LT(a.g.step_ends[i - 1], a.g.step_ends[i]);
  // Every step emits its accepted tokens plus one, except that a last step whose draft ran to
  // the end of the output counts all of it accepted and its own token falls past the end (vLLM
  // counts acceptance before its stop check trims that token).
  const uint64_t emitted = a.g.step_ends.size() + a.g.spec.accepted_tokens;
  EXPECT_TRUE(emitted == a.g.tokens || emitted == a.g.tokens + 1) << emitted;
  uint64_t per_pos = 0;
  for (uint64_t v : a.g.spec.accepted_per_pos) per_pos += v;
  EXPECT_EQ(per_pos, a.g.spec.accepted_tokens);
  EXPECT_LE(a.g.spec.draft_tokens, a.g.spec.drafts * spec.num_spec_tokens);
  // A shorter generation is a prefix of a longer one.
  const Gen short_run = RunGen(prompt, 100, 42, spec);
  EXPECT_EQ(a.g.text.compare(0, short_run.g.text.size(), short_run.g.text), 0);
}

TEST(Generate, WithoutSpeculationEveryStepIsOneToken) {
  SpecDecodeOptions spec;
  spec.num_spec_tokens = 0;
  const Gen a = RunGen(testing::CodeEditPrompt(1), 64, 1, spec);
  EXPECT_EQ(a.g.step_ends.size(), 64u);
  EXPECT_EQ(a.g.spec.drafts, 0u);
  // The text does not depend on the speculation settings.
  EXPECT_EQ(a.g.text, RunGen(testing::CodeEditPrompt(1), 64, 1, SpecDecodeOptions{}).g.text);
}

TEST(Generate, CodeEditingAcceptsFarMoreDraftsThanFreeChat) {
  SpecDecodeOptions spec;
  uint64_t code_drafted = 0, code_accepted = 0, code_tokens = 0, code_steps = 0;
  for (int v = 0; v < 4; ++v) {
    const Gen r = RunGen(testing::CodeEditPrompt(v), 256, v, spec);
    code_drafted += r.g.spec.draft_tokens;
    code_accepted += r.g.spec.accepted_tokens;
    code_tokens += r.g.tokens;
    code_steps += r.g.step_ends.size();
  }
  uint64_t chat_drafted = 0, chat_accepted = 0, chat_tokens = 0, chat_steps = 0;
  int v = 0;
  for (const std::string& p : testing::ChatPrompts()) {
    const Gen r = RunGen(p, 256, v++, spec);
    chat_drafted += r.g.spec.draft_tokens;
    chat_accepted += r.g.spec.accepted_tokens;
    chat_tokens += r.g.tokens;
    chat_steps += r.g.step_ends.size();
  }
  const double code_rate = static_cast<double>(code_accepted) / std::max<uint64_t>(1, code_drafted);
  const double chat_rate = static_cast<double>(chat_accepted) / std::max<uint64_t>(1, chat_drafted);
  const double code_speedup = static_cast<double>(code_tokens) / code_steps;
  const double chat_speedup = static_cast<double>(chat_tokens) / chat_steps;
  RecordProperty("code_acceptance", std::to_string(code_rate));
  RecordProperty("chat_acceptance", std::to_string(chat_rate));
  EXPECT_GT(code_rate, 0.5) << code_accepted << "/" << code_drafted;
  EXPECT_LT(chat_rate, 0.2) << chat_accepted << "/" << chat_drafted;
  EXPECT_GT(code_speedup, 2.0);
  EXPECT_LT(chat_speedup, 1.3);
}

// `llmtap specdec --tokenizer sim` re-tokenizes captured text with ApproxTokenize: the
// generated text must split back into exactly the tokens the simulator generated (a copied span
// never runs into the token before or after it), or its counters and specdec's would differ.
TEST(Generate, TextSplitsBackIntoItsOwnTokens) {
  SpecDecodeOptions spec;
  spec.num_spec_tokens = 0;  // every step one token: step_ends are the token ends
  std::vector<std::string> prompts = testing::ChatPrompts();
  for (int v = 0; v < 8; ++v) prompts.push_back(testing::CodeEditPrompt(v));
  prompts.push_back("a\n\n  b\t\tc 123456 7 89 <|im_start|>x\n\nabcdefghijklmn\n\n\nxyz 12ab34");
  uint64_t seed = 0;
  for (const std::string& p : prompts) {
    for (int rep = 0; rep < 4; ++rep) {
      spec.copy_scale = rep == 0 ? 1.5 : 20.0;  // copy far more often than code editing does
      const Gen r = RunGen(p, 400, ++seed, spec);
      std::vector<uint32_t> begins;
      ApproxTokenize(r.g.text, nullptr, &begins);
      for (size_t i = 1; i < std::min<size_t>(begins.size(), r.g.tokens); ++i) {
        const size_t from = i >= 3 ? r.g.step_ends[i - 3] : 0;
        ASSERT_EQ(begins[i], r.g.step_ends[i - 1])
            << "seed " << seed << ", token " << i << " near \""
            << r.g.text.substr(from, r.g.step_ends[std::min<size_t>(i + 1, r.g.tokens - 1)] - from)
            << "\"";
      }
      ASSERT_EQ(begins.size(), r.g.tokens) << "seed " << seed << ", copied " << r.g.copied_tokens;
    }
  }
}

TEST(Repetitiveness, SeparatesCodeFromChat) {
  EXPECT_GT(Repetitiveness(Tokens(testing::CodeEditPrompt(0))), 0.4);
  for (const std::string& p : testing::ChatPrompts())
    EXPECT_LT(Repetitiveness(Tokens(p)), 0.1) << p;
}

TEST(Engine, AcceptedTokensShortenGeneration) {
  SimOptions with, without;
  without.spec.num_spec_tokens = 0;
  Engine a(with), b(without);
  SimRequest r = Req(testing::CodeEditPrompt(2), 200);
  const Plan pa = a.MakePlan(r), pb = b.MakePlan(r);
  EXPECT_EQ(pa.choices[0].gen.text, pb.choices[0].gen.text);
  EXPECT_LT(pa.choices[0].gen.step_ends.size() * 2, pb.choices[0].gen.step_ends.size());
  a.RecordFinished(pa);
  const SimMetrics& m = a.metrics();
  EXPECT_EQ(m.spec_drafts.load(), pa.choices[0].gen.spec.drafts);
  EXPECT_EQ(m.spec_draft_tokens.load(), pa.choices[0].gen.spec.draft_tokens);
  EXPECT_EQ(m.spec_accepted_tokens.load(), pa.choices[0].gen.spec.accepted_tokens);
  EXPECT_EQ(m.generation_tokens.load(), 200u);
  const std::string text = a.MetricsText();
  EXPECT_NE(text.find("vllm:spec_decode_num_accepted_tokens_total{model_name=\"llmtap-sim\"} " +
                      std::to_string(pa.choices[0].gen.spec.accepted_tokens) + "\n"),
            std::string::npos);
  EXPECT_NE(text.find("vllm:spec_decode_num_drafts_total{"), std::string::npos);
  EXPECT_NE(text.find("vllm:spec_decode_num_draft_tokens_total{"), std::string::npos);
}

// n choices: choice 0 is what n=1 gives, the others differ; one prefill, shared steps until the
// longest ends; each choice counts as a finished request.
TEST(Engine, ChoicesAreGeneratedSideBySide) {
  Engine single{SimOptions{}}, several{SimOptions{}};
  SimRequest r = Req(testing::ChatPrompts()[0], 40);
  const Plan one = single.MakePlan(r);
  r.n = 3;
  const Plan three = several.MakePlan(r);
  ASSERT_EQ(three.choices.size(), 3u);
  EXPECT_EQ(three.choices[0].gen.text, one.choices[0].gen.text);
  EXPECT_NE(three.choices[1].gen.text, three.choices[0].gen.text);
  EXPECT_NE(three.choices[2].gen.text, three.choices[1].gen.text);
  EXPECT_EQ(three.prompt_tokens, one.prompt_tokens);
  EXPECT_EQ(three.prefill_s, one.prefill_s);
  EXPECT_EQ(three.completion_tokens(), 120u);
  size_t longest = 0;
  for (const Choice& c : three.choices) {
    EXPECT_TRUE(c.length_capped);
    longest = std::max(longest, c.gen.step_ends.size());
  }
  EXPECT_EQ(three.steps(), longest);
  several.RecordFinished(three);
  EXPECT_EQ(several.metrics().requests_ok_length.load(), 3u);
  EXPECT_EQ(several.metrics().generation_tokens.load(), 120u);
}

TEST(Engine, MetricsEscapeTheModelLabelAsPrometheusDoes) {
  // The text format escapes backslash, double quote and line feed in label values, and nothing
  // else. The page used JSON escaping before, which also wrote a tab as \t and a control byte
  // as \u00XX: escapes Prometheus' parser refuses.
  SimOptions o;
  o.model = "a\\b \"q\"\nnext\ttab\x01";
  Engine e(o);
  const std::string text = e.MetricsText();
  EXPECT_NE(
      text.find("vllm:num_requests_running{model_name=\"a\\\\b \\\"q\\\"\\nnext\ttab\x01\"} 0\n"),
      std::string::npos)
      << text;
  EXPECT_EQ(text.find("\\t"), std::string::npos) << text;
  EXPECT_EQ(text.find("\\u00"), std::string::npos) << text;
}

}  // namespace
}  // namespace llmtap::sim
