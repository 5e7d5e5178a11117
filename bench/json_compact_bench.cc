// JsonCompactor benchmarks: validate + compact realistic chat bodies of 1 KB, 4 KB and 64 KB,
// compact and pretty-printed. Peers in the same run: the reference implementation, the
// simdjson path (what CPUs without the AVX-512 kernel use) and memcpy (the bandwidth floor).
// Goal: a 4 KB body in well under 2 us (>= 2 GB/s) including the enqueue around it.
#include <benchmark/benchmark.h>

#include <cstring>
#include <string>
#include <string_view>

#include "capture/json_compact.h"
#include "capture/json_compact_internal.h"

namespace llmtap {

// Testing hooks defined in json_compact_avx512.cc and json_compact_simdjson.cc.

namespace {

// A multi-turn chat body of about `size` bytes: prose with newlines, quotes and a little
// non-ASCII in the content, as chat clients send it. `pretty` indents it like
// json.dumps(indent=2); otherwise it has Python SDK separators (", " and ": ").
std::string ChatBody(size_t size, bool pretty) {
  static const char* const kParagraphs[] = {
      "Summarize the attached quarterly report for the board. Focus on revenue growth, "
      "operating margin and the \\\"one-off\\\" items; keep it under 200 words.\\n\\n",
      "Sure. Revenue grew 12% year over year to $4.2B, driven by cloud services (+31%).\\n"
      "- Operating margin: 18.5% (up 1.2 pts)\\n- One-off items: a $120M restructuring charge.\\n",
      "Can you also translate the key points into German? Die Umsätze stiegen um 12 %.\\n",
      "def moving_average(xs, n):\\n    \\\"\\\"\\\"Return the n-point moving "
      "average.\\\"\\\"\\\"\\n"
      "    return [sum(xs[i:i + n]) / n for i in range(len(xs) - n + 1)]\\n",
  };
  const std::string nl = pretty ? "\n" : "";
  const std::string in1 = pretty ? "  " : "";
  const std::string in2 = pretty ? "    " : "";
  const std::string in3 = pretty ? "      " : "";
  const std::string sep = pretty ? "," : ", ";
  std::string body = "{" + nl + in1 + R"("model": "meta/llama-3.1-8b-instruct")" + sep + nl + in1 +
                     R"("messages": [)" + nl + in2 + "{" + nl + in3 + R"("role": "system")" + sep +
                     nl + in3 + R"("content": "You are a helpful assistant.")" + nl + in2 + "}";
  const std::string tail = nl + in1 + "]" + sep + nl + in1 + R"("max_tokens": 512)" + sep + nl +
                           in1 + R"("temperature": 0.7)" + sep + nl + in1 + R"("stream": true)" +
                           nl + "}";
  for (size_t turn = 0; body.size() + tail.size() < size; ++turn) {
    body += sep + nl + in2 + "{" + nl + in3 + R"("role": ")" +
            (turn % 2 == 0 ? "user" : "assistant") + "\"" + sep + nl + in3 + R"("content": ")";
    for (size_t k = 0; k < 3; ++k) body += kParagraphs[(turn + k) % std::size(kParagraphs)];
    body += "\"" + nl + in2 + "}";
  }
  return body + tail;
}

void SetUp(benchmark::State& state, std::string* body) {
  const bool pretty = state.range(1) != 0;
  *body = ChatBody(static_cast<size_t>(state.range(0)), pretty);
  state.SetLabel(std::string(pretty ? "pretty" : "compact") + " " + std::to_string(body->size()) +
                 "B");
}

void BM_Compact(benchmark::State& state) {
  std::string body;
  SetUp(state, &body);
  JsonCompactor& compactor = ThreadLocalJsonCompactor();
  std::string out;
  for (auto _ : state) {
    out.clear();
    if (compactor.Compact(body, &out) != CompactError::kOk) state.SkipWithError("not ok");
    benchmark::DoNotOptimize(out.data());
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * body.size()));
  state.counters["avx512"] = json_compact_internal::HasAvx512Kernel() ? 1 : 0;
}

// As on the request path: a fresh record string per call (one allocation).
void BM_CompactFreshString(benchmark::State& state) {
  std::string body;
  SetUp(state, &body);
  JsonCompactor& compactor = ThreadLocalJsonCompactor();
  for (auto _ : state) {
    std::string out;
    if (compactor.Compact(body, &out) != CompactError::kOk) state.SkipWithError("not ok");
    benchmark::DoNotOptimize(out.data());
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * body.size()));
}

void BM_Reference(benchmark::State& state) {
  std::string body;
  SetUp(state, &body);
  std::string out;
  for (auto _ : state) {
    out.clear();
    if (CompactJsonReference(body, &out) != CompactError::kOk) state.SkipWithError("not ok");
    benchmark::DoNotOptimize(out.data());
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * body.size()));
}

void BM_SimdjsonPath(benchmark::State& state) {
  std::string body;
  SetUp(state, &body);
  std::string out;
  for (auto _ : state) {
    out.clear();
    if (!json_compact_internal::TryCompactSimdjsonForTest(body, &out)) {
      state.SkipWithError("not accepted");
    }
    benchmark::DoNotOptimize(out.data());
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * body.size()));
}

void BM_Memcpy(benchmark::State& state) {
  std::string body;
  SetUp(state, &body);
  std::string out(body.size(), '\0');
  for (auto _ : state) {
    std::memcpy(out.data(), body.data(), body.size());
    benchmark::DoNotOptimize(out.data());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * body.size()));
}

void Sizes(benchmark::internal::Benchmark* b) {
  b->ArgNames({"bytes", "pretty"})->ArgsProduct({{1024, 4096, 65536}, {0, 1}});
}

BENCHMARK(BM_Compact)->Apply(Sizes);
BENCHMARK(BM_CompactFreshString)->Apply(Sizes);
BENCHMARK(BM_SimdjsonPath)->Apply(Sizes);
BENCHMARK(BM_Reference)->Apply(Sizes);
BENCHMARK(BM_Memcpy)->Apply(Sizes);

}  // namespace
}  // namespace llmtap

BENCHMARK_MAIN();
