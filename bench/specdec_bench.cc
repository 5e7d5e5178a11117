// Throughput of the n-gram speculative-decoding replay (src/specdec, issue #21) on synthetic
// requests, in tokens (prompt + response) replayed per second on one core:
//   - code editing: a Zipf-distributed "source file" as the prompt, and a response that copies
//     spans of it (10-100 tokens) with small edits between them, as a model rewriting a file;
//   - chat: Zipf-distributed prose as the prompt and an unrelated Zipf response.
// BM_Replay uses NgramProposer::Simulate (the incremental index, reused across requests as a
// worker thread would). BM_ReplayOneShot re-runs the one-shot Propose(context) at every step,
// an O(context) pass like vLLM's, to show why the replay keeps an index. Every run reports the
// acceptance length, so a change that alters the answer is visible next to the speed.
// The goal behind it: `llmtap specdec` at >= 20 MB/s of captured text per core including
// tokenization, i.e. roughly 5M tokens/s at ~4 bytes a token.
//
// Suffix decoding (specdec/suffix.h) keeps a cache of earlier responses across requests, so its
// cases replay a STREAM: 32 distinct requests of the kind (seeds 1..32; seed 1 is the request of
// BM_Replay) in turn, one proposer for the whole run, as a capture's replay would. BM_NgramStream
// replays the same stream with the n-gram proposer, for a comparison on the same inputs. The
// stream's requests are alike (same generator, same vocabulary law), so responses share short
// spans, as real ones do; each response is new to the cache the first time round only, and the
// cache holds at most max_cached_requests of them (FIFO), so after the first 32 requests the
// global tree sees each response again: the acceptance of later rounds is an upper bound, and
// the speed includes the eviction of one response per request once the cache is full (Args:
// cached requests).
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <random>
#include <vector>

#include "specdec/ngram.h"
#include "specdec/suffix.h"

namespace llmtap::specdec {
namespace {

using Tokens = std::vector<uint32_t>;

// Token ids drawn from a Zipf(1.1) law over a 32k vocabulary (a few very common ids, as
// whitespace and punctuation are in real tokenizations, and a long tail).
class Zipf {
 public:
  explicit Zipf(uint32_t vocab = 32000, double s = 1.1) : cdf_(vocab) {
    double sum = 0;
    for (uint32_t i = 0; i < vocab; ++i) cdf_[i] = sum += 1.0 / std::pow(i + 1, s);
    for (double& c : cdf_) c /= sum;
  }
  uint32_t operator()(std::mt19937_64& rng) const {
    const double u = std::uniform_real_distribution<double>(0, 1)(rng);
    return static_cast<uint32_t>(std::lower_bound(cdf_.begin(), cdf_.end(), u) - cdf_.begin());
  }

 private:
  std::vector<double> cdf_;
};

struct Request {
  Tokens prompt, response;
};

Request CodeEdit(size_t prompt_tokens, size_t response_tokens, uint64_t seed) {
  std::mt19937_64 rng(seed);
  const Zipf zipf;
  Request r;
  for (size_t i = 0; i < prompt_tokens; ++i) r.prompt.push_back(zipf(rng));
  while (r.response.size() < response_tokens) {
    const size_t len = 10 + rng() % 91;
    const size_t from = rng() % (prompt_tokens - len);
    r.response.insert(r.response.end(), r.prompt.begin() + from, r.prompt.begin() + from + len);
    for (size_t e = rng() % 6; e > 0; --e) r.response.push_back(zipf(rng));
  }
  r.response.resize(response_tokens);
  return r;
}

Request Chat(size_t prompt_tokens, size_t response_tokens, uint64_t seed) {
  std::mt19937_64 rng(seed);
  const Zipf zipf;
  Request r;
  for (size_t i = 0; i < prompt_tokens; ++i) r.prompt.push_back(zipf(rng));
  for (size_t i = 0; i < response_tokens; ++i) r.response.push_back(zipf(rng));
  return r;
}

NgramOptions Options(const benchmark::State& state) {
  NgramOptions o;
  o.min_n = static_cast<uint32_t>(state.range(2));
  o.max_n = static_cast<uint32_t>(state.range(3));
  o.k = 5;
  return o;
}

void Report(benchmark::State& state, const Request& r, const SpecStats& st) {
  const double tokens = static_cast<double>(r.prompt.size() + r.response.size());
  state.counters["tokens/s"] = benchmark::Counter(tokens * static_cast<double>(state.iterations()),
                                                  benchmark::Counter::kIsRate);
  state.counters["accept_len"] = st.AcceptanceLength();
  state.counters["tok/step"] = st.TokensPerStep();
}

// Args: kind (0 code editing, 1 chat), prompt tokens, min_n, max_n; responses of 1000 tokens.
void BM_Replay(benchmark::State& state) {
  const Request r =
      state.range(0) == 0 ? CodeEdit(state.range(1), 1000, 1) : Chat(state.range(1), 1000, 1);
  NgramProposer proposer(Options(state));
  SpecStats st;
  for (auto _ : state) {
    st = proposer.Simulate(r.prompt, r.response);
    benchmark::DoNotOptimize(st.accepted_tokens);
  }
  Report(state, r, st);
}

void BM_ReplayOneShot(benchmark::State& state) {
  const Request r =
      state.range(0) == 0 ? CodeEdit(state.range(1), 1000, 1) : Chat(state.range(1), 1000, 1);
  const NgramProposer proposer(Options(state));
  SpecStats st;
  Tokens ctx, draft;
  for (auto _ : state) {
    // The same replay as Simulate (no max_model_len), with a full pass per step.
    st = SpecStats{};
    st.tokens = r.response.size();
    ctx = r.prompt;
    ctx.push_back(r.response[0]);
    size_t pos = 1;
    while (pos < r.response.size()) {
      ++st.steps;
      proposer.Propose(ctx, &draft);
      size_t a = 0;
      while (a < draft.size() && pos + a < r.response.size() && draft[a] == r.response[pos + a]) {
        ++a;
      }
      if (!draft.empty()) ++st.drafts;
      st.accepted_tokens += a;
      const size_t end = std::min(pos + a + 1, r.response.size());
      ctx.insert(ctx.end(), r.response.begin() + pos, r.response.begin() + end);
      pos = end;
    }
    benchmark::DoNotOptimize(st.accepted_tokens);
  }
  Report(state, r, st);
}

constexpr int kStream = 32;

std::vector<Request> Stream(int64_t kind, int64_t prompt) {
  std::vector<Request> v;
  for (int i = 1; i <= kStream; ++i) {
    v.push_back(kind == 0 ? CodeEdit(prompt, 1000, i) : Chat(prompt, 1000, i));
  }
  return v;
}

void ReportStream(benchmark::State& state, const std::vector<Request>& stream,
                  const SpecStats& st) {
  double tokens = 0;
  for (const Request& r : stream)
    tokens += static_cast<double>(r.prompt.size() + r.response.size());
  tokens /= static_cast<double>(stream.size());
  state.counters["tokens/s"] = benchmark::Counter(tokens * static_cast<double>(state.iterations()),
                                                  benchmark::Counter::kIsRate);
  state.counters["accept_len"] = st.AcceptanceLength();
  state.counters["tok/step"] = st.TokensPerStep();
}

// Args: kind, prompt tokens, min_n, max_n (k = 5, as BM_Replay).
void BM_NgramStream(benchmark::State& state) {
  const std::vector<Request> stream = Stream(state.range(0), state.range(1));
  NgramProposer proposer(Options(state));
  SpecStats total;
  size_t i = 0;
  for (auto _ : state) {
    const Request& r = stream[i++ % stream.size()];
    total.Add(proposer.Simulate(r.prompt, r.response));
  }
  ReportStream(state, stream, total);
}

// Args: kind, prompt tokens, max_tree_depth, max_cached_requests, prompt_scan_work (0: every
// prompt tree built; else llmtap's default, walks read off the context until that work);
// vLLM's other defaults (num_speculative_tokens = depth, factor 1, min_token_prob 0.1).
void BM_SuffixStream(benchmark::State& state) {
  const std::vector<Request> stream = Stream(state.range(0), state.range(1));
  SuffixOptions o;
  o.max_tree_depth = static_cast<uint32_t>(state.range(2));
  o.max_cached_requests = static_cast<uint64_t>(state.range(3));
  if (state.range(4) == 0) o.prompt_scan_work = 0;
  SuffixProposer proposer(o);
  SpecStats total;
  size_t i = 0;
  for (auto _ : state) {
    const Request& r = stream[i++ % stream.size()];
    total.Add(proposer.Simulate(r.prompt, r.response));
  }
  ReportStream(state, stream, total);
  state.counters["cache_MB"] = static_cast<double>(proposer.GlobalMemoryBytes()) / 1e6;
  const double held = static_cast<double>(std::max<size_t>(proposer.GlobalTokens(), 1));
  state.counters["nodes/tok"] = static_cast<double>(proposer.GlobalNodes()) / held;
  state.counters["B/tok"] = static_cast<double>(proposer.GlobalMemoryBytes()) / held;
}

// Multi-turn conversations, as captures of chat and agent traffic hold them: 8 conversations of
// 8 turns, interleaved turn by turn; a turn's prompt is the conversation so far (every earlier
// prompt and response) and a new message of 200 tokens, its response 300 tokens that copy spans
// of the conversation (kind 0) or are new text (kind 1). Prompts grow to about 4,000 tokens.
// Suffix decoding with and without keeping prompt trees for the next turn (SuffixOptions::
// reuse_bytes; the drafts are the same), and the n-gram proposer, on the same stream.
std::vector<Request> Conversations(int64_t kind) {
  constexpr int kConversations = 8, kTurns = 8;
  std::mt19937_64 rng(11);
  const Zipf zipf;
  std::vector<Tokens> context(kConversations);
  std::vector<Request> v;
  for (int turn = 0; turn < kTurns; ++turn) {
    for (int c = 0; c < kConversations; ++c) {
      Request r;
      r.prompt = context[c];
      for (int i = 0; i < 200; ++i) r.prompt.push_back(zipf(rng));
      while (r.response.size() < 300) {
        if (kind == 0) {
          const size_t len = 10 + rng() % 41;
          const size_t from = rng() % (r.prompt.size() - len);
          r.response.insert(r.response.end(), r.prompt.begin() + static_cast<ptrdiff_t>(from),
                            r.prompt.begin() + static_cast<ptrdiff_t>(from + len));
        }
        for (size_t e = kind == 0 ? rng() % 6 : 300; e > 0; --e) r.response.push_back(zipf(rng));
      }
      r.response.resize(300);
      context[c] = r.prompt;
      context[c].insert(context[c].end(), r.response.begin(), r.response.end());
      v.push_back(std::move(r));
    }
  }
  return v;
}

// Args: kind, prompt trees (0: built for every request; 1: built, and kept for the next turn
// (SuffixOptions::reuse_bytes); 2: llmtap's default, walks read off the context).
void BM_SuffixConversations(benchmark::State& state) {
  const std::vector<Request> stream = Conversations(state.range(0));
  SuffixOptions o;
  if (state.range(1) < 2) o.prompt_scan_work = 0;
  if (state.range(1) == 0) o.reuse_bytes = 0;
  SpecStats total;
  std::unique_ptr<SuffixProposer> proposer;
  size_t i = 0;
  for (auto _ : state) {
    // Each pass over the stream starts afresh, as a new capture would.
    if (i % stream.size() == 0) proposer = std::make_unique<SuffixProposer>(o);
    const Request& r = stream[i++ % stream.size()];
    total.Add(proposer->Simulate(r.prompt, r.response));
  }
  ReportStream(state, stream, total);
}

void BM_NgramConversations(benchmark::State& state) {
  const std::vector<Request> stream = Conversations(state.range(0));
  NgramProposer proposer(Options(state));
  SpecStats total;
  size_t i = 0;
  for (auto _ : state) {
    const Request& r = stream[i++ % stream.size()];
    total.Add(proposer.Simulate(r.prompt, r.response));
  }
  ReportStream(state, stream, total);
}

void ReplayArgs(benchmark::internal::Benchmark* b) {
  for (int64_t prompt : {2000, 8000, 32000}) {
    b->Args({0, prompt, 5, 5});  // vLLM's defaults
    b->Args({0, prompt, 2, 5});
  }
  for (int64_t prompt : {1000, 8000}) {
    b->Args({1, prompt, 5, 5});
    b->Args({1, prompt, 2, 5});
  }
}

BENCHMARK(BM_Replay)->Apply(ReplayArgs)->ArgNames({"chat", "prompt", "min", "max"});
BENCHMARK(BM_NgramStream)
    ->Args({0, 2000, 5, 5})
    ->Args({0, 8000, 5, 5})
    ->Args({1, 1000, 5, 5})
    ->ArgNames({"chat", "prompt", "min", "max"});
void SuffixStreamArgs(benchmark::internal::Benchmark* b) {
  for (int64_t scan : {0, 1}) {
    b->Args({0, 2000, 24, 10000, scan});  // vLLM's defaults
    b->Args({0, 8000, 24, 10000, scan});
    b->Args({0, 2000, 24, 8, scan});  // a cache smaller than the stream: every response is new
    b->Args({0, 2000, 64, 10000, scan});
    b->Args({1, 1000, 24, 10000, scan});
    b->Args({1, 1000, 24, 8, scan});
  }
}

BENCHMARK(BM_SuffixStream)
    ->Apply(SuffixStreamArgs)
    ->ArgNames({"chat", "prompt", "depth", "cached", "scan"});
BENCHMARK(BM_NgramConversations)
    ->Args({0, 0, 5, 5})
    ->Args({1, 0, 5, 5})
    ->ArgNames({"chat", "", "min", "max"});
BENCHMARK(BM_SuffixConversations)
    ->Args({0, 0})
    ->Args({0, 1})
    ->Args({0, 2})
    ->Args({1, 0})
    ->Args({1, 1})
    ->Args({1, 2})
    ->ArgNames({"chat", "trees"});
BENCHMARK(BM_ReplayOneShot)
    ->Args({0, 2000, 2, 5})
    ->Args({0, 8000, 2, 5})
    ->Args({0, 32000, 2, 5})
    ->ArgNames({"chat", "prompt", "min", "max"});

}  // namespace
}  // namespace llmtap::specdec

BENCHMARK_MAIN();
