// Shared by the AnonymizeTrace tests: generated traffic and the AnonymizeTest fixture.
#pragma once

#include "anonymize/anonymize.h"

#include <gtest/gtest.h>

#include <openssl/sha.h>
#include <sys/stat.h>
#include <cstdlib>

#include <nlohmann/json.hpp>
#include <random>
#include <set>
#include <sstream>

#include "anonymize/testing/fake_tokenizer.h"
#include "trace/split.h"
#include "trace/trace_test_util.h"
#include "trace/validate.h"

namespace llmtap::anonymize::anonymize_test_util {

using nlohmann::json;
using testing::FakeTokenizer;
using trace::testing::Lines;
using trace::testing::ReadAll;
using trace::testing::TempDir;

// Requests as a capture would hold them: shared system prompts, multi-turn conversations whose
// later turns extend earlier ones, random completions prompts and prefixes of them.
struct Traffic {
  std::vector<json> bodies;
  std::set<std::string> words;  // every word in any prompt

  std::string Mooncake() const {
    std::string out;
    for (size_t i = 0; i < bodies.size(); ++i) {
      out += json{{"timestamp", i * 7}, {"payload", bodies[i]}}.dump() + "\n";
    }
    return out;
  }
  std::string Raw() const {
    std::string out;
    for (const json& b : bodies) out += b.dump() + "\n";
    return out;
  }
};

inline Traffic Generate(uint64_t seed, size_t conversations = 12, size_t randoms = 40) {
  std::mt19937_64 rng(seed);
  auto pick = [&](size_t n) { return static_cast<size_t>(rng() % n); };
  // Output rows are spelled with these keys only; a prompt word inside one of them could not
  // be told apart from the key.
  const std::string keys = "timestamp input_length output_length hash_ids";
  std::vector<std::string> vocab;
  while (vocab.size() < 300) {
    std::string w;
    size_t len = 4 + pick(6);
    for (size_t i = 0; i < len; ++i) w.push_back(static_cast<char>('a' + pick(26)));
    if (keys.find(w) == std::string::npos) vocab.push_back(w);
  }
  Traffic t;
  auto text = [&](size_t n) {
    std::string s;
    for (size_t i = 0; i < n; ++i) {
      const std::string& w = vocab[pick(vocab.size())];
      t.words.insert(w);
      s += (i ? " " : "") + w;
    }
    return s;
  };
  std::vector<std::string> systems = {text(30), text(21), text(9)};
  struct Conv {
    json messages;
    size_t turns;
  };
  std::vector<Conv> convs;
  for (size_t c = 0; c < conversations; ++c) {
    json m = json::array();
    m.push_back({{"role", "system"}, {"content", systems[pick(systems.size())]}});
    convs.push_back({m, 1 + pick(5)});
  }
  std::vector<json> pending;  // completions prompts, some repeated as prefixes
  for (size_t i = 0; i < randoms; ++i) {
    json body = {{"model", "m"}, {"prompt", text(3 + pick(40))}};
    if (pick(3) == 0) body["max_tokens"] = 10 + pick(100);
    if (pick(9) == 0) body["prompt"] = json::array({body["prompt"], text(1 + pick(5))});
    pending.push_back(body);
    if (pick(6) == 0) pending.push_back(body);  // a retried request
    if (pick(4) == 0 && body["prompt"].is_string()) {
      std::string p = body["prompt"];
      size_t cut = p.rfind(' ', p.size() / 2 + 3);
      if (cut != std::string::npos && cut > 0) pending.push_back({{"prompt", p.substr(0, cut)}});
    }
  }
  // Interleave: each step either advances a random conversation or emits a completions row.
  while (true) {
    std::vector<size_t> live;
    for (size_t c = 0; c < convs.size(); ++c) {
      if (convs[c].turns > 0) live.push_back(c);
    }
    if (live.empty() && pending.empty()) break;
    if (!live.empty() && (pending.empty() || pick(2) == 0)) {
      Conv& c = convs[live[pick(live.size())]];
      c.messages.push_back({{"role", "user"}, {"content", text(2 + pick(15))}});
      json body = {{"model", "m"}, {"messages", c.messages}, {"stream", true}};
      if (pick(2) == 0) body["max_completion_tokens"] = 50 + pick(500);
      t.bodies.push_back(body);
      c.messages.push_back({{"role", "assistant"}, {"content", text(1 + pick(20))}});
      --c.turns;
    } else {
      t.bodies.push_back(pending.front());
      pending.erase(pending.begin());
    }
  }
  return t;
}

inline std::vector<uint32_t> Tokens(const json& body, const tokenizer::Tokenizer& tok) {
  std::vector<uint32_t> ids;
  std::string error;
  EXPECT_TRUE(tok.EncodeRequest(body.dump(), &ids, &error)) << error;
  return ids;
}

struct RunResult {
  AnonymizeReport report;
  std::vector<json> rows;
  std::string text;
};

class AnonymizeTest : public ::testing::Test {
 protected:
  AnonymizeOptions Options(const std::string& in, const std::string& out_name = "out.jsonl") {
    AnonymizeOptions o;
    o.path = in;
    o.out = dir_.File(out_name);
    o.tokenizer = &tokenizer_;
    o.key = key_.get();
    o.block_size = 8;  // small blocks: short prompts span several (llmtap replay's sizes)
    o.replayer = Replayer::kLlmtap;
    o.threads = 4;
    o.batch_lines = 5;
    return o;
  }
  // As the output is made for AIPerf: its 512-token blocks (the only size it replays).
  AnonymizeOptions AiperfOptions(const std::string& in, const std::string& out_name) {
    AnonymizeOptions o = Options(in, out_name);
    o.block_size = kAiperfBlockSize;
    o.replayer = Replayer::kAiperf;
    return o;
  }
  // The AIPerf-rules validation (trace/validate.h) of `in` anonymized for AIPerf.
  trace::ValidateReport ValidateForAiperf(const std::string& in, const std::string& out_name) {
    RunResult run = Anonymize(AiperfOptions(in, out_name));
    EXPECT_EQ(run.report.exit_code(), 0) << run.report.io.ToString();
    trace::ValidateOptions v;
    v.path = run.report.out;
    return trace::ValidateTrace(v);
  }
  RunResult Anonymize(const AnonymizeOptions& o) {
    RunResult run;
    run.report = AnonymizeTrace(o);
    if (run.report.io.ok()) {
      run.text = ReadAll(run.report.out);
      for (const std::string& l : Lines(run.text)) run.rows.push_back(json::parse(l));
    }
    return run;
  }
  // Anonymizes generated traffic with `tok` (block size 16) and checks the prefix property,
  // that no prompt word is left and that the output loads in AIPerf.
  void CheckEndToEnd(const tokenizer::Tokenizer& tok, uint64_t seed, const std::string& name);

  TempDir dir_;
  FakeTokenizer tokenizer_;
  std::unique_ptr<BlockKey> key_ = BlockKey::FromBytes(std::string(32, 'k'));
};

// For any two rows and any block index k both have: id k is equal exactly when the tokens up
// to the end of block k are (a partial last block only matches the same partial block).
// Returns {blocks shared, partial blocks shared}.
inline std::pair<size_t, size_t> CheckPrefixProperty(const Traffic& t, const RunResult& run,
                                                     const tokenizer::Tokenizer& tok,
                                                     uint32_t block) {
  EXPECT_EQ(run.rows.size(), t.bodies.size());
  if (run.rows.size() != t.bodies.size()) return {0, 0};
  std::vector<std::vector<uint32_t>> tokens;
  for (size_t i = 0; i < t.bodies.size(); ++i) {
    tokens.push_back(Tokens(t.bodies[i], tok));
    EXPECT_EQ(run.rows[i]["input_length"], tokens[i].size());
    EXPECT_EQ(run.rows[i]["hash_ids"].size(), (tokens[i].size() + block - 1) / block);
    EXPECT_EQ(run.rows[i]["timestamp"], i * 7);
  }
  size_t shared = 0, partial_shared = 0;
  for (size_t a = 0; a < tokens.size(); ++a) {
    for (size_t b = a + 1; b < tokens.size(); ++b) {
      const json& ia = run.rows[a]["hash_ids"];
      const json& ib = run.rows[b]["hash_ids"];
      for (size_t k = 0; k < std::min(ia.size(), ib.size()); ++k) {
        size_t end_a = std::min(tokens[a].size(), (k + 1) * block);
        size_t end_b = std::min(tokens[b].size(), (k + 1) * block);
        bool same_tokens =
            end_a == end_b &&
            std::equal(tokens[a].begin(), tokens[a].begin() + end_a, tokens[b].begin());
        EXPECT_EQ(ia[k] == ib[k], same_tokens)
            << "block " << block << " rows " << a << "," << b << " block index " << k;
        if ((ia[k] == ib[k]) != same_tokens) return {shared, partial_shared};
        if (same_tokens) {
          ++shared;
          if (end_a % block != 0) ++partial_shared;
        }
      }
    }
  }
  return {shared, partial_shared};
}

inline void AnonymizeTest::CheckEndToEnd(const tokenizer::Tokenizer& tok, uint64_t seed,
                                         const std::string& name) {
  Traffic t = Generate(seed);
  AnonymizeOptions o = Options(dir_.Write(name + ".jsonl", t.Mooncake()), name + ".out.jsonl");
  o.tokenizer = &tok;
  o.block_size = 16;
  RunResult run = Anonymize(o);
  ASSERT_EQ(run.report.exit_code(), 0) << run.report.io.ToString();
  auto [shared, partial_shared] = CheckPrefixProperty(t, run, tok, 16);
  EXPECT_GT(shared, 50u);
  EXPECT_GT(partial_shared, 0u);
  for (const std::string& w : t.words) ASSERT_EQ(run.text.find(w), std::string::npos) << w;
  trace::ValidateReport vr = ValidateForAiperf(o.path, name + ".512.jsonl");
  EXPECT_TRUE(vr.ok()) << trace::RenderValidateText(vr);
}

}  // namespace llmtap::anonymize::anonymize_test_util
