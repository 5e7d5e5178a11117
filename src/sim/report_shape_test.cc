// The sim's report on its own work in each engine's shape (--server-report): llama.cpp's timings
// and vLLM's per-request speculative-decoding metrics, on whole bodies and on the stream chunks
// the engines put them on, their numbers equal to usage's and, summed over requests, to the
// /v1/metrics counters. The server runs in-process on 127.0.0.1:0.
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "common/testing/http_client.h"
#include "sim/engine.h"
#include "sim/server.h"
#include "sim/testdata/fast_options.h"
#include "sim/testdata/sse_events.h"
#include "sim/testdata/workloads.h"

namespace llmtap::sim {
namespace {

using namespace ::llmtap::testing::http_test_names;
using testing::Events;

class ReportShapeTest : public ::testing::Test {
 protected:
  void Start(ReportShape shape, uint32_t k = 4) {
    SimOptions o = testing::FastSimOptions();
    o.report = shape;
    o.spec.num_spec_tokens = k;
    o.timing.ttft_ms = 3;
    o.timing.prefill_us_per_token = 5;
    o.timing.itl_ms = 0.25;
    server_ = std::make_unique<SimServer>(o);
    std::string error;
    ASSERT_TRUE(server_->Start(&error)) << error;
  }
  const SimMetrics& metrics() { return server_->engine().metrics(); }
  std::unique_ptr<SimServer> server_;
};

json CodeCompletion(int variant, bool stream, bool include_usage) {
  json j = {{"prompt", testing::CodeEditPrompt(variant)}, {"max_tokens", 60}, {"stream", stream}};
  if (include_usage) j["stream_options"] = {{"include_usage", true}};
  return j;
}

json CodeChat(int variant, bool stream, bool include_usage) {
  json j = {{"messages", json::array({{{"role", "user"}, {"content", testing::CodeFile(variant)}},
                                      {{"role", "assistant"}, {"content", testing::CodeFile(0)}},
                                      {{"role", "user"}, {"content", "Again, please."}}})},
            {"max_tokens", 60},
            {"stream", stream}};
  if (include_usage) j["stream_options"] = {{"include_usage", true}};
  return j;
}

// The events of a stream that carry `key`, by index.
std::vector<size_t> With(const std::vector<json>& events, const char* key) {
  std::vector<size_t> out;
  for (size_t i = 0; i < events.size(); ++i) {
    if (events[i].contains(key)) out.push_back(i);
  }
  return out;
}

// The index of the event whose choice finishes (the only one, for n = 1).
size_t FinishEvent(const std::vector<json>& events) {
  for (size_t i = 0; i < events.size(); ++i) {
    if (!events[i]["choices"].empty() && !events[i]["choices"][0]["finish_reason"].is_null()) {
      return i;
    }
  }
  ADD_FAILURE() << "no finish chunk";
  return 0;
}

// llama-server's timings against usage and the timing model (3 ms + 5 us a prompt token to the
// first token; 0.25 ms a decode step, no jitter).
void CheckTimings(const json& t, const json& usage) {
  const int cache_n = t["cache_n"], prompt_n = t["prompt_n"];
  EXPECT_EQ(cache_n + prompt_n, usage["prompt_tokens"].get<int>());
  EXPECT_EQ(cache_n, usage["prompt_tokens_details"]["cached_tokens"].get<int>());
  EXPECT_EQ(t["predicted_n"], usage["completion_tokens"]);
  EXPECT_NEAR(t["prompt_ms"].get<double>(), 3 + 0.005 * prompt_n, 1e-9);
  EXPECT_NEAR(t["prompt_per_token_ms"].get<double>(), t["prompt_ms"].get<double>() / prompt_n,
              1e-9);
  const double steps = t["predicted_ms"].get<double>() / 0.25;
  EXPECT_NEAR(steps, std::round(steps), 1e-6);
  EXPECT_GE(steps, 1);
  EXPECT_LT(steps, t["predicted_n"].get<double>());
}

// llama-server's key order in the raw text (nlohmann::json sorts keys).
void CheckTimingsOrder(const std::string& raw) {
  size_t at = raw.find("\"timings\":{");
  ASSERT_NE(at, std::string::npos) << raw;
  for (const char* key :
       {"cache_n", "prompt_n", "prompt_ms", "prompt_per_token_ms", "prompt_per_second",
        "predicted_n", "predicted_ms", "predicted_per_token_ms", "predicted_per_second", "draft_n",
        "draft_n_accepted"}) {
    const size_t next = raw.find(std::string("\"") + key + "\":", at);
    ASSERT_NE(next, std::string::npos) << key << " after " << at << " in " << raw;
    at = next;
  }
}

TEST_F(ReportShapeTest, NoneSendsNeitherShape) {
  Start(ReportShape::kNone);
  Client c(server_->port());
  json a = json::parse(c.Post("/v1/completions", CodeCompletion(0, false, false)).body);
  EXPECT_FALSE(a.contains("timings"));
  EXPECT_FALSE(a.contains("metrics"));
  EXPECT_TRUE(a["usage"]["prompt_tokens_details"]["cached_tokens"].is_number_integer());
  bool done = false;
  for (const json& e :
       Events(c.Post("/v1/chat/completions", CodeChat(0, true, true)).body, &done)) {
    EXPECT_FALSE(e.contains("timings") || e.contains("metrics")) << e.dump();
  }
}

TEST_F(ReportShapeTest, LlamaCppTimingsOnBodiesAndStreams) {
  Start(ReportShape::kLlamaCpp);
  Client c(server_->port());
  int64_t drafted = 0, accepted = 0;
  auto add_spec = [&](const json& t) {
    if (!t.contains("draft_n")) return;
    drafted += t["draft_n"].get<int64_t>();
    accepted += t["draft_n_accepted"].get<int64_t>();
  };
  // Whole bodies: top-level timings after usage, in llama-server's key order.
  for (const char* path : {"/v1/completions", "/v1/chat/completions"}) {
    const json req = std::string(path) == "/v1/completions" ? CodeCompletion(1, false, false)
                                                            : CodeChat(1, false, false);
    const std::string raw = c.Post(path, req).body;
    CheckTimingsOrder(raw);
    EXPECT_LT(raw.find("\"usage\":"), raw.find("\"timings\":"));
    const json j = json::parse(raw);
    CheckTimings(j["timings"], j["usage"]);
    ASSERT_TRUE(j["timings"].contains("draft_n")) << raw;  // code editing drafts
    EXPECT_GT(j["timings"]["draft_n_accepted"].get<int>(), 0);
    EXPECT_LE(j["timings"]["draft_n_accepted"], j["timings"]["draft_n"]);
    add_spec(j["timings"]);
  }
  // The same prompt again: cache_n grows, as usage's cached_tokens.
  const json again = json::parse(c.Post("/v1/completions", CodeCompletion(1, false, false)).body);
  CheckTimings(again["timings"], again["usage"]);
  EXPECT_GT(again["timings"]["cache_n"].get<int>(), 0);
  add_spec(again["timings"]);

  bool done = false;
  // A chat stream without include_usage: timings on the finish chunk, and no usage anywhere.
  std::vector<json> ev =
      Events(c.Post("/v1/chat/completions", CodeChat(2, true, false)).body, &done);
  EXPECT_TRUE(done);
  EXPECT_EQ(With(ev, "timings"), std::vector<size_t>{FinishEvent(ev)});
  EXPECT_TRUE(With(ev, "usage").empty());
  add_spec(ev[FinishEvent(ev)]["timings"]);
  // With include_usage: on the `choices: []` chunk only, beside usage.
  ev = Events(c.Post("/v1/chat/completions", CodeChat(3, true, true)).body, &done);
  ASSERT_EQ(With(ev, "timings"), std::vector<size_t>{ev.size() - 1});
  EXPECT_TRUE(ev.back()["choices"].empty());
  CheckTimings(ev.back()["timings"], ev.back()["usage"]);
  add_spec(ev.back()["timings"]);
  // A completions stream: usage and timings on the finish chunk, with or without include_usage,
  // and no `choices: []` chunk.
  for (bool include_usage : {false, true}) {
    ev = Events(c.Post("/v1/completions", CodeCompletion(4, true, include_usage)).body, &done);
    const size_t finish = FinishEvent(ev);
    EXPECT_EQ(finish, ev.size() - 1);
    EXPECT_EQ(With(ev, "timings"), std::vector<size_t>{finish});
    EXPECT_EQ(With(ev, "usage"), std::vector<size_t>{finish});
    CheckTimings(ev[finish]["timings"], ev[finish]["usage"]);
    add_spec(ev[finish]["timings"]);
  }
  // Summed over the requests, the drafts are the /v1/metrics counters.
  EXPECT_GT(drafted, 0);
  EXPECT_EQ(metrics().spec_draft_tokens.load(), static_cast<uint64_t>(drafted));
  EXPECT_EQ(metrics().spec_accepted_tokens.load(), static_cast<uint64_t>(accepted));
}

TEST_F(ReportShapeTest, LlamaCppWithoutDraftsHasNoDraftKeys) {
  Start(ReportShape::kLlamaCpp, /*k=*/0);
  Client c(server_->port());
  const json j = json::parse(c.Post("/v1/completions", CodeCompletion(0, false, false)).body);
  CheckTimings(j["timings"], j["usage"]);
  EXPECT_FALSE(j["timings"].contains("draft_n"));
  EXPECT_FALSE(j["timings"].contains("draft_n_accepted"));
}

TEST_F(ReportShapeTest, LlamaCppResponsesStreamHasTimingsBesideTheResponse) {
  Start(ReportShape::kLlamaCpp);
  Client c(server_->port());
  const std::string body = c.Post("/v1/responses", json{{"input", testing::CodeEditPrompt(5)},
                                                        {"max_output_tokens", 40},
                                                        {"stream", true}})
                               .body;
  const size_t at = body.find("event: response.completed\ndata: ");
  ASSERT_NE(at, std::string::npos) << body;
  const size_t begin = body.find("data: ", at) + 6;
  const json done = json::parse(body.substr(begin, body.find("\n\n", begin) - begin));
  ASSERT_TRUE(done.contains("timings")) << done.dump();
  const json& usage = done["response"]["usage"];
  EXPECT_EQ(done["timings"]["cache_n"].get<int>() + done["timings"]["prompt_n"].get<int>(),
            usage["input_tokens"].get<int>());
  EXPECT_EQ(done["timings"]["predicted_n"], usage["output_tokens"]);
  // Not on a whole Responses body (llama-server sends none there).
  const json whole =
      json::parse(c.Post("/v1/responses", json{{"input", "Hello"}, {"max_output_tokens", 4}}).body);
  EXPECT_FALSE(whole.contains("timings"));
}

// vLLM's metrics.speculative_decoding, checked against itself, usage and /v1/metrics.
void CheckVllmSpec(const json& s, uint32_t k, const json& usage) {
  ASSERT_TRUE(s.is_object()) << s.dump();
  const int64_t steps = s["num_spec_steps"], acc = s["num_accepted_draft_tokens"];
  const int64_t drafted = s["num_draft_tokens"];
  EXPECT_EQ(s["num_spec_tokens"], k);
  const json& h = s["acceptance_histogram"];
  ASSERT_EQ(h.size(), k + 1);
  int64_t h_steps = 0, h_accepted = 0;
  for (size_t j = 0; j < h.size(); ++j) {
    h_steps += h[j].get<int64_t>();
    h_accepted += static_cast<int64_t>(j) * h[j].get<int64_t>();
  }
  EXPECT_EQ(h_steps, steps);
  EXPECT_EQ(h_accepted, acc);
  EXPECT_LE(drafted, steps * k);
  ASSERT_GT(steps, 0);
  EXPECT_DOUBLE_EQ(s["mean_acceptance_length"].get<double>(), 1.0 + double(acc) / double(steps));
  EXPECT_DOUBLE_EQ(s["draft_acceptance_rate"].get<double>(), double(acc) / double(drafted));
  // Each step emits its accepted drafts and (but at the very end) one token more; the first
  // token comes from prefill.
  EXPECT_LE(steps + acc, usage["completion_tokens"].get<int64_t>());
}

TEST_F(ReportShapeTest, VllmSpecMetricsOnBodiesAndIncludeUsageChunks) {
  constexpr uint32_t k = 3;
  Start(ReportShape::kVllm, k);
  Client c(server_->port());
  int64_t steps = 0, drafted = 0, accepted = 0;
  std::vector<int64_t> per_pos(k, 0);
  auto add = [&](const json& s) {
    steps += s["num_spec_steps"].get<int64_t>();
    drafted += s["num_draft_tokens"].get<int64_t>();
    accepted += s["num_accepted_draft_tokens"].get<int64_t>();
    // Steps that accepted at least i + 1 drafts: vllm:spec_decode_num_accepted_tokens_per_pos.
    for (uint32_t i = 0; i < k; ++i) {
      for (uint32_t j = i + 1; j <= k; ++j)
        per_pos[i] += s["acceptance_histogram"][j].get<int64_t>();
    }
  };
  for (const char* path : {"/v1/completions", "/v1/chat/completions"}) {
    const json req = std::string(path) == "/v1/completions" ? CodeCompletion(1, false, false)
                                                            : CodeChat(1, false, false);
    const std::string raw = c.Post(path, req).body;
    EXPECT_NE(raw.find("\"metrics\":{\"speculative_decoding\":{\"mean_acceptance_length\":"),
              std::string::npos)
        << raw;
    const json j = json::parse(raw);
    EXPECT_FALSE(j.contains("timings"));
    CheckVllmSpec(j["metrics"]["speculative_decoding"], k, j["usage"]);
    add(j["metrics"]["speculative_decoding"]);
  }
  bool done = false;
  // Streamed: only on the include_usage chunk; nothing without it.
  for (const char* path : {"/v1/completions", "/v1/chat/completions"}) {
    const bool chat = std::string(path) != "/v1/completions";
    std::vector<json> ev = Events(
        c.Post(path, chat ? CodeChat(2, true, false) : CodeCompletion(2, true, false)).body, &done);
    EXPECT_TRUE(With(ev, "metrics").empty());
    ev = Events(c.Post(path, chat ? CodeChat(3, true, true) : CodeCompletion(3, true, true)).body,
                &done);
    ASSERT_EQ(With(ev, "metrics"), std::vector<size_t>{ev.size() - 1});
    EXPECT_TRUE(ev.back()["choices"].empty());
    CheckVllmSpec(ev.back()["metrics"]["speculative_decoding"], k, ev.back()["usage"]);
    add(ev.back()["metrics"]["speculative_decoding"]);
  }
  // The two streams without include_usage drafted too: count them from the counters' change.
  const uint64_t unseen_steps = metrics().spec_drafts.load() - static_cast<uint64_t>(steps);
  EXPECT_GT(unseen_steps, 0u);
  // Four more requests, every one reported: their sums are exactly the counters' growth.
  const uint64_t steps0 = metrics().spec_drafts.load();
  const uint64_t drafted0 = metrics().spec_draft_tokens.load();
  const uint64_t accepted0 = metrics().spec_accepted_tokens.load();
  std::vector<uint64_t> per_pos0(k);
  for (uint32_t i = 0; i < k; ++i) per_pos0[i] = metrics().spec_accepted_per_pos[i].load();
  steps = drafted = accepted = 0;
  per_pos.assign(k, 0);
  for (int v = 4; v < 8; ++v) {
    const json j = json::parse(c.Post("/v1/completions", CodeCompletion(v, false, false)).body);
    CheckVllmSpec(j["metrics"]["speculative_decoding"], k, j["usage"]);
    add(j["metrics"]["speculative_decoding"]);
  }
  EXPECT_EQ(metrics().spec_drafts.load() - steps0, static_cast<uint64_t>(steps));
  EXPECT_EQ(metrics().spec_draft_tokens.load() - drafted0, static_cast<uint64_t>(drafted));
  EXPECT_EQ(metrics().spec_accepted_tokens.load() - accepted0, static_cast<uint64_t>(accepted));
  for (uint32_t i = 0; i < k; ++i) {
    EXPECT_EQ(metrics().spec_accepted_per_pos[i].load() - per_pos0[i],
              static_cast<uint64_t>(per_pos[i]))
        << "position " << i;
  }
}

TEST_F(ReportShapeTest, VllmNullForSeveralChoicesAndAbsentWithoutSpeculation) {
  Start(ReportShape::kVllm);
  Client c(server_->port());
  json req = CodeCompletion(0, false, false);
  req["n"] = 2;
  const std::string raw = c.Post("/v1/completions", req).body;
  EXPECT_NE(raw.find("\"metrics\":{\"speculative_decoding\":null}"), std::string::npos) << raw;
  server_.reset();
  Start(ReportShape::kVllm, /*k=*/0);
  Client c2(server_->port());
  EXPECT_FALSE(json::parse(c2.Post("/v1/completions", CodeCompletion(0, false, false)).body)
                   .contains("metrics"));
}

}  // namespace
}  // namespace llmtap::sim
