// AnonymizeTrace per row: output lengths, outcomes, session ids, bad and raw rows, refusals.
#include "anonymize/anonymize.h"

#include <gtest/gtest.h>

#include <openssl/sha.h>
#include <sys/stat.h>
#include <cstdlib>

#include <nlohmann/json.hpp>
#include <random>
#include <set>
#include <sstream>

#include "anonymize/anonymize_internal.h"
#include "anonymize/anonymize_test_util.h"
#include "anonymize/testing/fake_tokenizer.h"
#include "trace/split.h"
#include "trace/trace_test_util.h"
#include "trace/validate.h"

namespace llmtap::anonymize {
namespace {

using namespace anonymize_test_util;
using nlohmann::json;

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
  dir_.Write("cap.jsonl.outcomes.ndjson",
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
  EXPECT_EQ(run.report.outcomes_path, in + ".outcomes.ndjson");
  ASSERT_EQ(run.report.warnings.size(), 1u);
  EXPECT_NE(run.report.warnings[0].find("1 lines are not outcome objects"), std::string::npos);

  // --no-outcomes: the request's own limits, then the default.
  o.no_outcomes = true;
  o.out = dir_.File("no_outcomes.ndjson");
  RunResult plain = Anonymize(o);
  got.clear();
  for (const json& row : plain.rows) got.push_back(row["output_length"]);
  EXPECT_EQ(got, (std::vector<uint64_t>{11, 22, 77, 44, 77, 66}));
  EXPECT_TRUE(plain.report.outcomes_path.empty());

  // An explicit sidecar that does not exist is an error.
  o.no_outcomes = false;
  o.outcomes_path = dir_.File("missing.outcomes.ndjson");
  o.out = dir_.File("x.jsonl");
  EXPECT_EQ(Anonymize(o).report.exit_code(), 2);
}

// AIPerf refuses output_length 0 (its Turn's max_tokens must be >= 1, and one such row fails
// the whole file): whatever gave the 0, the row is written with 1, and counted by source.
TEST_F(AnonymizeTest, OutputLengthZeroIsWrittenAsOneAndCounted) {
  std::string in = dir_.Write(
      "zero.jsonl",
      "{\"timestamp\":0,\"payload\":{\"prompt\":\"one\",\"max_tokens\":0}}\n"  // 1
      "{\"timestamp\":1,\"payload\":{\"prompt\":\"two\",\"max_tokens\":9}}\n"  // 2
      "{\"timestamp\":2,\"payload\":{\"prompt\":\"three\"}}\n"                 // 3
      "{\"timestamp\":3,\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],"
      "\"output_length\":0}\n"  // 4
      "{\"timestamp\":4,\"payload\":{\"prompt\":\"five\",\"max_completion_tokens\":0}}\n");
  dir_.Write("zero.jsonl.outcomes.ndjson",
             "{\"line\":2,\"timestamp\":1,\"status\":200,\"completion_tokens\":0}\n");
  AnonymizeOptions o = Options(in);
  o.default_output_length = 0;
  RunResult run = Anonymize(o);
  ASSERT_EQ(run.report.exit_code(), 0) << run.report.io.ToString();
  for (const json& row : run.rows) EXPECT_EQ(row["output_length"], 1) << row;
  EXPECT_EQ(run.report.output_raised, 5u);
  EXPECT_EQ(run.report.output_raised_from,
            (std::map<std::string, uint64_t>{{"--default-output-length 0", 1},
                                             {"completion_tokens 0 in the outcome", 1},
                                             {"max_tokens 0 in the request", 3}}));
  std::string text = RenderAnonymizeText(run.report, "t", "k");
  EXPECT_NE(text.find("output_length 0 written as 1 (AIPerf refuses 0): 5 rows "
                      "(--default-output-length 0: 1, completion_tokens 0 in the outcome: 1, "
                      "max_tokens 0 in the request: 3)"),
            std::string::npos)
      << text;
  // Nothing raised, nothing said.
  o.default_output_length = 256;
  o.no_outcomes = true;
  o.out = dir_.File("none.jsonl");
  std::string plain =
      dir_.Write("plain.jsonl", "{\"timestamp\":0,\"payload\":{\"prompt\":\"a\"}}\n");
  o.path = plain;
  RunResult none = Anonymize(o);
  EXPECT_EQ(none.report.output_raised, 0u);
  EXPECT_EQ(RenderAnonymizeText(none.report, "t", "k").find("written as 1"), std::string::npos);
}

// AIPerf replays a mooncake_trace with 512-token blocks only (it refuses --isl-block-size with
// --input-file): another block size is refused unless the output is for llmtap replay.
TEST_F(AnonymizeTest, BlockSizeOtherThanAiperfsIsRefusedUnlessForLlmtapReplay) {
  std::string in = dir_.Write("b.jsonl", "{\"timestamp\":0,\"payload\":{\"prompt\":\"a b\"}}\n");
  AnonymizeOptions o = Options(in);
  o.replayer = Replayer::kAiperf;
  o.block_size = 16;
  RunResult refused = Anonymize(o);
  EXPECT_EQ(refused.report.exit_code(), 2);
  EXPECT_NE(refused.report.io.message().find(
                "--block-size 16: AIPerf (0.11) rebuilds a mooncake_trace's prompts from hash_ids "
                "in blocks of 512 tokens and refuses --isl-block-size with --input-file"),
            std::string::npos)
      << refused.report.io.message();
  EXPECT_NE(refused.report.io.message().find("--replayer llmtap"), std::string::npos);
  EXPECT_NE(refused.report.io.message().find("llmtap replay --block-size 16"), std::string::npos);
  struct stat st;
  EXPECT_NE(::stat(o.out.c_str(), &st), 0);  // nothing written
  o.block_size = kAiperfBlockSize;
  EXPECT_EQ(Anonymize(o).report.exit_code(), 0);
  o.replayer = Replayer::kLlmtap;
  o.block_size = 16;
  o.force = true;
  EXPECT_EQ(Anonymize(o).report.exit_code(), 0);
  EXPECT_EQ(AnonymizeOptions().block_size, 512u);
  EXPECT_EQ(AnonymizeOptions().replayer, Replayer::kAiperf);
}

// An integer beyond 64 bits (a client's "seed") does not cost the row: AIPerf's reader takes it
// as a double and loads the row, and so does anonymize. A number too large even for a double
// is refused by both.
TEST_F(AnonymizeTest, ARowWithAnIntegerBeyond64BitsIsKept) {
  std::string in = dir_.Write(
      "big.jsonl",
      "{\"timestamp\":0,\"payload\":{\"prompt\":\"a b c\",\"seed\":123456789012345678901234,"
      "\"max_tokens\":7}}\n"
      "{\"timestamp\":1,\"payload\":{\"prompt\":\"d e\",\"max_tokens\":18446744073709551616}}\n"
      "{\"timestamp\":2,\"payload\":{\"prompt\":\"f\",\"x\":1e400}}\n");
  AnonymizeOptions o = Options(in);
  o.default_output_length = 5;
  RunResult run = Anonymize(o);
  EXPECT_EQ(run.report.exit_code(), 1);
  ASSERT_EQ(run.rows.size(), 2u);
  EXPECT_EQ(run.rows[0]["input_length"], 3);
  EXPECT_EQ(run.rows[0]["output_length"], 7);
  EXPECT_EQ(run.rows[1]["input_length"], 2);
  EXPECT_EQ(run.rows[1]["output_length"], 5);  // a max_tokens beyond 2^64 is no count
  EXPECT_EQ(run.report.rows_big_integers, 2u);
  EXPECT_EQ(run.report.skipped.total, 1u);
  ASSERT_EQ(run.report.skipped.kept.size(), 1u);
  EXPECT_EQ(run.report.skipped.kept[0].line, 3u);
  EXPECT_NE(
      RenderAnonymizeText(run.report, "t", "k")
          .find("2 rows hold an integer beyond 64 bits: read as a double, as AIPerf reads it"),
      std::string::npos);
}

// One agent conversation (system prompt, a question, a tool call, its result) sent as chat, as a
// Responses request and as an Anthropic Messages request: the same tokens, so the same
// input_length and hash_ids; max_output_tokens is the Responses request's output length.
TEST_F(AnonymizeTest, EveryGenerationApiTokenizesAsItsChatRendering) {
  const std::string chat =
      R"({"model":"m","messages":[{"role":"system","content":"be brief"},{"role":"user","content":"weather in oslo"},)"
      R"({"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function","function":{"name":"get_weather","arguments":"{\"city\":\"oslo\"}"}}]},)"
      R"({"role":"tool","tool_call_id":"c1","content":"cold and windy"}],"max_tokens":7})";
  const std::string responses =
      R"({"model":"m","instructions":"be brief","input":[{"role":"user","content":[{"type":"input_text","text":"weather in oslo"}]},)"
      R"({"type":"function_call","call_id":"c1","name":"get_weather","arguments":"{\"city\":\"oslo\"}"},)"
      R"({"type":"function_call_output","call_id":"c1","output":"cold and windy"}],"max_output_tokens":7})";
  const std::string messages =
      R"({"model":"m","system":"be brief","max_tokens":7,"messages":[{"role":"user","content":"weather in oslo"},)"
      R"({"role":"assistant","content":[{"type":"tool_use","id":"c1","name":"get_weather","input":{"city":"oslo"}}]},)"
      R"({"role":"user","content":[{"type":"tool_result","tool_use_id":"c1","content":"cold and windy"}]}]})";
  std::string in = dir_.Write(
      "apis.jsonl",
      "{\"timestamp\":0,\"payload\":" + chat + "}\n{\"timestamp\":1,\"payload\":" + responses +
          ",\"endpoint_type\":\"responses\"}\n{\"timestamp\":2,\"payload\":" + messages +
          ",\"endpoint_type\":\"messages\"}\n" +
          R"({"timestamp":3,"payload":{"model":"m","input":"embed"},"endpoint_type":"embeddings"})"
          "\n");
  RunResult run = Anonymize(Options(in));
  ASSERT_EQ(run.rows.size(), 3u) << RenderAnonymizeText(run.report, "t", "k");
  EXPECT_GT(run.rows[0]["input_length"], 10);
  for (size_t i = 1; i < 3; ++i) {
    EXPECT_EQ(run.rows[i]["input_length"], run.rows[0]["input_length"]) << i;
    EXPECT_EQ(run.rows[i]["hash_ids"], run.rows[0]["hash_ids"]) << i;
    EXPECT_EQ(run.rows[i]["output_length"], 7) << i;
  }
  // The embeddings request generates nothing: left out, and said so.
  EXPECT_EQ(run.report.skipped.total, 1u);
  EXPECT_NE(RenderAnonymizeText(run.report, "t", "k").find("embeddings request"), std::string::npos)
      << RenderAnonymizeText(run.report, "t", "k");
}

TEST(PrefixHashes, EqualTheStepByStepHash) {
  using namespace anonymize_internal;
  std::vector<uint32_t> tokens = {0, 7, 0xffffffffu, 3, 128000, 1, 2, 9, 4};
  for (size_t n = 0; n <= tokens.size(); ++n) {
    std::vector<uint64_t> out(n);
    PrefixHashes(std::span<const uint32_t>(tokens.data(), n), out.data());
    uint64_t h = kPrefixSeed;
    for (size_t i = 0; i < n; ++i) EXPECT_EQ(out[i], h = PrefixStep(h, tokens[i])) << n << " " << i;
  }
  // Sequences that differ anywhere differ in their hash.
  std::vector<uint64_t> a(3), b(3);
  PrefixHashes(std::vector<uint32_t>{1, 2, 3}, a.data());
  PrefixHashes(std::vector<uint32_t>{1, 3, 2}, b.data());
  EXPECT_EQ(a[0], b[0]);
  EXPECT_NE(a[1], b[1]);
  EXPECT_NE(a[2], b[2]);
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
  std::string full_sidecar = dir_.Write("full.jsonl.outcomes.ndjson", sidecar);
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
  dir_.Write("full.jsonl.outcomes.ndjson", altered);
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
  dir_.Write("cap.jsonl.outcomes.ndjson", sidecar);
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
  std::map<std::string, std::string> prompts;  // a session's later turn extends its earlier one
  for (size_t i = 0; i < ids.size(); ++i) {
    std::string& p = prompts[ids[i]];
    p += (p.empty() ? "" : " ") + std::string("turn ") + std::to_string(i) + " more words";
    cap += "{\"timestamp\":" + std::to_string(i) + ",\"payload\":{\"prompt\":\"" + p + "\"}" +
           (ids[i].empty() ? "" : ",\"session_id\":\"" + ids[i] + "\"") + "}\n";
    if (ids[i].empty()) p.clear();
  }
  cap += "{\"timestamp\":9,\"payload\":{\"prompt\":\"x\"},\"session_id\":42}\n";
  std::string in = dir_.Write("sess.jsonl", cap);
  auto session_key = BlockKey::FromBytes(std::string(32, 's'));
  AnonymizeOptions o = Options(in, "s1.jsonl");
  o.default_output_length = 1;
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
  AnonymizeOptions other = Options(in, "s2.jsonl");
  other.default_output_length = 1;
  RunResult again = Anonymize(other);
  AnonymizeOptions same = Options(in, "s3.jsonl");
  same.default_output_length = 1;
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
