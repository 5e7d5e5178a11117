// The certificate's statistics on synthetic pairs (a true 10 % TTFT shift is caught, identical
// distributions are certified, each in at least 19 of 20 seeds), its verdicts on tokens, cache,
// failures and the floor, and the pair line's round trip.
#include "fidelity/certificate.h"

#include <cmath>
#include <random>

#include <gtest/gtest.h>

#include "fidelity/pairs.h"

namespace llmtap::fidelity {
namespace {

using nlohmann::json;

// n greedy chat pairs of one multi-turn workload: each row has a true TTFT (20-300 ms), latency
// and server times; each side sees them with independent lognormal noise (sd `noise`), the
// replayed side's TTFT multiplied by `ttft_shift`.
PairFile Synthetic(uint64_t seed, size_t n, double ttft_shift, double noise = 0.15) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> base(20, 300);
  std::normal_distribution<double> z(0, noise);
  PairFile f;
  f.path = "synthetic";
  for (size_t i = 0; i < n; ++i) {
    Pair p;
    p.request = i;
    p.api = "chat";
    p.model = "m";
    p.temperature = 0;
    p.turn = static_cast<int64_t>(i % 3);
    const double ttft = base(rng), decode = base(rng) * 3;
    for (Side* s : {&p.captured, &p.replayed}) {
      const double shift = s == &p.replayed ? ttft_shift : 1.0;
      s->status = 200;
      s->ttft_ms = ttft * shift * std::exp(z(rng));
      s->latency_ms = *s->ttft_ms + decode * std::exp(z(rng));
      s->itl_ms = (*s->latency_ms - *s->ttft_ms) / 31;
      s->prompt_tokens = 500 + static_cast<int64_t>(i);
      s->completion_tokens = 32;
      s->finish_reason = "length";
      s->cached_tokens = p.turn > 0 ? 400 : 0;
      s->server_prompt_ms = ttft * 0.8 * std::exp(z(rng));
      s->server_decode_ms = decode * 0.9 * std::exp(z(rng));
    }
    f.pairs.push_back(p);
  }
  return f;
}

const json& Metric(const json& doc, const std::string& group, const std::string& metric) {
  for (const json& g : doc["groups"]) {
    if (g["group"] != group) continue;
    for (const json& m : g["metrics"]) {
      if (m["metric"] == metric) return m;
    }
  }
  static const json none;
  return none;
}

TEST(FidelityStatistics, TenPercentTtftShiftCaughtInNineteenOfTwentySeeds) {
  int caught = 0;
  for (uint64_t seed = 1; seed <= 20; ++seed) {
    const PairFile f = Synthetic(seed, 200, 1.10);
    Options o;
    o.seed = seed;
    const json doc = BuildCertificate(f, {}, o);
    const json& m = Metric(doc, "all", "ttft_ms");
    if (m["verdict"] == "not reproduced" && m["direction"] == "higher" && !doc["certified"]) {
      ++caught;
    }
  }
  EXPECT_GE(caught, 19);
}

TEST(FidelityStatistics, IdenticalDistributionsCertifiedInNineteenOfTwentySeeds) {
  int certified = 0;
  for (uint64_t seed = 101; seed <= 120; ++seed) {
    const PairFile f = Synthetic(seed, 200, 1.0);
    Options o;
    o.seed = seed;
    const json doc = BuildCertificate(f, {}, o);
    certified += doc["certified"].get<bool>();
    if (!doc["certified"].get<bool>()) ADD_FAILURE() << doc["moved"] << doc["unknown"];
  }
  EXPECT_GE(certified, 19);
}

TEST(FidelityCertificate, FloorWidensTheTimingTolerance) {
  // The replay is 30 % slower than the capture, and a second replay differs from the first by as
  // much: within the floor, so reproduced; without the floor, not.
  const PairFile a = Synthetic(7, 200, 1.3, 0.05);
  PairFile b = Synthetic(7, 200, 1.3, 0.05);
  for (Pair& p : b.pairs) *p.replayed.ttft_ms *= 1.4;
  Options o;
  const json without = BuildCertificate(a, {}, o);
  EXPECT_EQ(Metric(without, "all", "ttft_ms")["verdict"], "not reproduced");
  const json with = BuildCertificate(a, {&b, "runB"}, o);
  EXPECT_EQ(with["floor"]["source"], "replay");
  EXPECT_EQ(with["floor"]["joined"], 200);
  EXPECT_EQ(Metric(with, "all", "ttft_ms")["verdict"], "reproduced");
  EXPECT_GT(with["groups"][0]["timing"]["ttft_ms"]["floor_band"].get<double>(), 0.2);
}

TEST(FidelityCertificate, FloorOfTwoOtherReplays) {
  // A run to a different server (TTFT 30 % higher) judged with the floor of two replays of the
  // usual one (5 % apart): not reproduced. Its own difference to one of them would make a floor
  // of that very difference.
  const PairFile other = Synthetic(9, 200, 1.3, 0.05);
  const PairFile a = Synthetic(9, 200, 1.0, 0.05);
  PairFile b = Synthetic(9, 200, 1.0, 0.05);
  for (Pair& p : b.pairs) *p.replayed.ttft_ms *= 1.05;
  FloorRuns two;
  Floor floor{&b, "a vs b", &a};
  const json doc = BuildCertificate(other, floor, Options());
  EXPECT_EQ(doc["floor"]["of"], "two other replays");
  EXPECT_EQ(doc["floor"]["joined"], 200);
  EXPECT_EQ(Metric(doc, "all", "ttft_ms")["verdict"], "not reproduced");
  EXPECT_LT(doc["groups"][0]["timing"]["ttft_ms"]["floor_band"].get<double>(), 0.1);
  EXPECT_GT(
      BuildCertificate(other, {&a, "a"}, Options())["groups"][0]["timing"]["ttft_ms"]["floor_band"]
          .get<double>(),
      0.2);
  std::string error;
  EXPECT_FALSE(two.Load({"x", "y", "z"}, &error));
  EXPECT_NE(error.find("3 given"), std::string::npos);
  EXPECT_FALSE(two.Load({"/nonexistent/run"}, &error));
  EXPECT_NE(error.find("/nonexistent/run"), std::string::npos);
}

TEST(FidelityCertificate, TokensCacheAndFailuresJudged) {
  PairFile f = Synthetic(3, 200, 1.0, 0.02);
  // Three completions differ on greedy rows, one finish reason; the cache drops by 10 points on
  // later turns; one replayed request fails.
  for (int i = 0; i < 3; ++i) f.pairs[i].replayed.completion_tokens = 31;
  f.pairs[5].replayed.finish_reason = "stop";
  for (Pair& p : f.pairs) {
    if (p.turn > 0) p.replayed.cached_tokens = 300;
  }
  f.pairs[9].replayed.status = 500;
  const json doc = BuildCertificate(f, {}, Options());
  EXPECT_FALSE(doc["certified"]);
  EXPECT_EQ(Metric(doc, "all", "prompt_tokens")["verdict"], "reproduced");
  EXPECT_EQ(Metric(doc, "all", "completion_tokens")["verdict"], "not reproduced");
  EXPECT_EQ(Metric(doc, "all", "finish_reason")["verdict"], "reproduced");  // 1 of 199: >= 99 %
  EXPECT_EQ(Metric(doc, "all", "cache_hit_rate")["verdict"], "not reproduced");
  EXPECT_EQ(Metric(doc, "all", "cache_hit_rate")["direction"], "lower");
  EXPECT_EQ(Metric(doc, "all", "failures")["verdict"], "reproduced");  // 1 of 200
  EXPECT_EQ(Metric(doc, "all", "spec_acceptance")["verdict"], "n/a");
  EXPECT_EQ(doc["groups"][0]["errors"]["replayed"]["http_5xx"], 1);
  // The turn groups: the first turns keep their (zero) cache rate.
  EXPECT_EQ(Metric(doc, "turn:first", "cache_hit_rate")["verdict"], "reproduced");
  EXPECT_EQ(Metric(doc, "turn:later", "cache_hit_rate")["verdict"], "not reproduced");
  const std::string text = RenderCertificateText(doc);
  EXPECT_NE(text.find("fidelity: not certified"), std::string::npos) << text;
  EXPECT_NE(text.find("later turns"), std::string::npos) << text;
  // Sampled rows are not judged on their completions.
  for (Pair& p : f.pairs) p.temperature = 0.7;
  const json sampled = BuildCertificate(f, {}, Options());
  EXPECT_EQ(Metric(sampled, "all", "completion_tokens")["verdict"], "n/a");
  // Gates: only the tokens and failures.
  Options gated;
  gated.gates = {"prompt_tokens", "failures"};
  EXPECT_TRUE(BuildCertificate(f, {}, gated)["certified"]);
}

TEST(FidelityCertificate, TooFewPairsAreUnknown) {
  const json doc = BuildCertificate(Synthetic(1, 5, 1.0), {}, Options());
  EXPECT_EQ(Metric(doc, "all", "ttft_ms")["verdict"], "unknown");
  EXPECT_FALSE(doc["certified"]);
  EXPECT_FALSE(doc["unknown"].empty());
}

TEST(FidelityPairs, LineRoundTrips) {
  report::RequestResult r;
  r.index = 4;
  r.endpoint = "chat";
  r.sent_ms = 10;
  r.lag_ms = 0.25;
  r.status = 200;
  r.ttft_ms = 12.5;
  r.itl_ms = 1.5;
  r.latency_ms = 60;
  r.input_tokens = 600;
  r.output_tokens = 33;
  r.finish_reason = "length";
  r.cached_tokens = 512;
  r.server = {{"prompt_n", 88},
              {"cache_n", 512},
              {"prompt_ms", 9.1},
              {"decode_n", 33},
              {"decode_ms", 40.2}};
  const std::optional<std::string> model = "tiny";
  std::string line;
  AppendPairLine({.line = 5,
                  .timestamp_ms = 1000,
                  .path = "/v1/chat/completions",
                  .model = &model,
                  .temperature = 0,
                  .turn = 2},
                 R"({"status":200,"ttft_ms":11,"itl_ms":1.4,"latency_ms":58,"prompt_tokens":600,)"
                 R"("completion_tokens":33,"finish_reason":"length","error":null,)"
                 R"("cached_tokens":500,"server":{"prompt_ms":9.5,"decode_ms":41},"spec":null})",
                 r, &line);
  Pair p;
  std::string error;
  ASSERT_TRUE(ParsePairLine(line, &p, &error)) << error << "\n" << line;
  EXPECT_EQ(p.request, 4u);
  EXPECT_EQ(p.api, "chat");
  EXPECT_EQ(p.model, "tiny");
  EXPECT_TRUE(p.greedy());
  EXPECT_EQ(p.turn, 2);
  EXPECT_EQ(p.captured.cached_tokens, 500);
  EXPECT_EQ(p.replayed.cached_tokens, 512);
  EXPECT_EQ(p.replayed.finish_reason, "length");
  EXPECT_DOUBLE_EQ(*p.replayed.server_prompt_ms, 9.1);
  EXPECT_DOUBLE_EQ(*p.captured.server_decode_ms, 41);
  EXPECT_TRUE(p.captured.ok() && p.replayed.ok());
  EXPECT_FALSE(p.stream);  // r.stream's default: a whole body has no first token to compare
  EXPECT_FALSE(p.captured.ttft_ms || p.captured.itl_ms || p.replayed.ttft_ms);
  EXPECT_DOUBLE_EQ(*p.replayed.latency_ms, 60);
  r.stream = true;
  std::string streamed;
  const PairKey key{};
  AppendPairLine(key, R"({"status":200,"ttft_ms":11,"itl_ms":1.4})", r, &streamed);
  Pair q;
  ASSERT_TRUE(ParsePairLine(streamed, &q, &error)) << error;
  EXPECT_TRUE(q.stream);
  EXPECT_DOUBLE_EQ(*q.captured.ttft_ms, 11);
  EXPECT_DOUBLE_EQ(*q.replayed.ttft_ms, 12.5);
  const json j = json::parse(line);
  EXPECT_TRUE(j["output"].is_null());
  EXPECT_EQ(line.rfind("{\"request\":4,\"line\":5,", 0), 0u) << line;
  EXPECT_FALSE(ParsePairLine("{\"request\":1}", &p, &error));
  EXPECT_NE(error.find("primary"), std::string::npos);
  EXPECT_FALSE(ParsePairLine("nope", &p, &error));
}

}  // namespace
}  // namespace llmtap::fidelity
