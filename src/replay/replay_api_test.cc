// Replay of every API (issue #34): each row routed to its own API's path with its own body
// rewrite, each API's answer measured by its own rules, and Responses chains (chains.h): rows
// linked to their predecessor's session, and previous_response_id remapped to the replayed id.
#include <chrono>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "common/testing/temp_files.h"
#include "replay/chains.h"
#include "replay/input.h"
#include "replay/response.h"

namespace llmtap::replay {
namespace {

using llmtap::testing::TempFile;
using nlohmann::json;
using std::chrono::milliseconds;

// One row of each API, as a capture writes them (endpoint_type after the payload for the APIs
// whose body alone may not tell), and one raw Messages body told by its shape.
const char* const kSixApis =
    R"({"timestamp":0,"payload":{"model":"m","messages":[{"role":"user","content":"a"}]}})"
    "\n"
    R"({"timestamp":1,"payload":{"model":"m","prompt":"b"}})"
    "\n"
    R"({"timestamp":2,"payload":{"model":"m","input":"c","previous_response_id":"resp_1"},"endpoint_type":"responses"})"
    "\n"
    R"({"timestamp":3,"payload":{"model":"m","max_tokens":5,"messages":[{"role":"user","content":"d"}]},"endpoint_type":"messages"})"
    "\n"
    R"({"timestamp":4,"payload":{"model":"m","input":"e"},"endpoint_type":"embeddings"})"
    "\n"
    R"({"timestamp":5,"payload":{"model":"m","query":"q","documents":["x","y"]},"endpoint_type":"cohere_rankings"})"
    "\n"
    R"({"model":"m","system":"s","max_tokens":5,"messages":[{"role":"user","content":"f"}]})"
    "\n";

TEST(ReplayApisTest, EachRowGoesToItsApiWithItsOwnRewrite) {
  TempFile file(kSixApis);
  LoadOptions o;
  o.input.path = file.path();
  o.input.stream = true;  // --stream
  std::string error;
  LoadedTrace t;
  ASSERT_TRUE(LoadTrace(o, &t, &error)) << error;
  ASSERT_EQ(t.requests.size(), 7u);
  EXPECT_EQ(t.skipped, 0u);
  const std::vector<std::string> paths = {
      "/v1/chat/completions", "/v1/completions", "/v1/responses", "/v1/messages",
      "/v1/embeddings",       "/v1/rerank",      "/v1/messages"};
  for (size_t i = 0; i < paths.size(); ++i) {
    EXPECT_EQ(api::EndpointPath(t.requests[i].endpoint), paths[i]) << i;
  }
  // Usage is asked for in chat and completions streams only; the others report it in their last
  // events, and embeddings and rerank never stream.
  for (size_t i : {0, 1}) {
    EXPECT_TRUE(t.requests[i].stream);
    EXPECT_EQ(json::parse(t.requests[i].body)["stream_options"]["include_usage"], true);
  }
  for (size_t i : {2, 3, 6}) {
    EXPECT_TRUE(t.requests[i].stream);
    const json body = json::parse(t.requests[i].body);
    EXPECT_EQ(body["stream"], true);
    EXPECT_FALSE(body.contains("stream_options")) << t.requests[i].body;
  }
  for (size_t i : {4, 5}) {
    EXPECT_FALSE(t.requests[i].stream);
    EXPECT_FALSE(json::parse(t.requests[i].body).contains("stream")) << t.requests[i].body;
  }
  EXPECT_EQ(t.requests[2].previous_response_id, "resp_1");
  EXPECT_EQ(t.requests[3].previous_response_id, "");
  EXPECT_EQ(t.apis[api::Endpoint::kChat], 1u);
  EXPECT_EQ(t.apis[api::Endpoint::kMessages], 2u);
  EXPECT_EQ(t.apis[api::Endpoint::kRerank], 1u);
  EXPECT_EQ(t.apis.Text(),
            "1 chat, 1 completions, 1 responses, 2 messages, 1 embeddings, 1 rankings");
}

std::string Event(const std::string& data) { return "data: " + data + "\n\n"; }

RequestResult Measure(api::Endpoint endpoint, const std::vector<std::pair<int, std::string>>& body,
                      int done_ms, std::string* response_id = nullptr, bool sse = true) {
  const Clock::time_point t0{};
  api::DocumentReader reader;
  ResponseMeter m;
  m.Begin(t0, endpoint);
  m.OnHead(200, sse);
  for (const auto& [ms, bytes] : body) m.OnBody(bytes, t0 + milliseconds(ms), &reader);
  RequestResult r;
  m.Finish(true, t0 + milliseconds(done_ms), "{}", nullptr, &reader, &r);
  if (response_id) *response_id = m.response_id();
  return r;
}

TEST(ReplayApisTest, ResponsesStreamTimedByItsDeltas) {
  std::string id;
  const RequestResult r = Measure(
      api::Endpoint::kResponses,
      {{2,
        Event(
            R"({"type":"response.created","response":{"id":"resp_new","status":"in_progress"}})")},
       {3,
        Event(
            R"({"type":"response.output_item.added","output_index":0,"item":{"type":"message"}})")},
       {30, Event(R"({"type":"response.output_text.delta","output_index":0,"delta":"Hel"})")},
       {40, Event(R"({"type":"response.output_text.delta","output_index":0,"delta":"lo"})")},
       {55, Event(R"({"type":"response.output_text.delta","output_index":0,"delta":"!"})")},
       {56, Event(R"({"type":"response.output_text.done","output_index":0,"text":"Hello!"})")},
       {57,
        Event(
            R"({"type":"response.completed","response":{"id":"resp_new","status":"completed","usage":{"input_tokens":9,"output_tokens":3}}})")},
       // After the last event: not the answer's.
       {90, Event(R"({"type":"response.output_text.delta","output_index":0,"delta":"x"})")}},
      60, &id);
  EXPECT_EQ(r.error, ErrorKind::kNone);
  EXPECT_EQ(id, "resp_new");
  EXPECT_EQ(r.chunks, 3u);
  EXPECT_DOUBLE_EQ(*r.ttft_ms, 30);
  EXPECT_DOUBLE_EQ(*r.ttst_ms, 10);
  EXPECT_EQ(*r.input_tokens, 9u);
  EXPECT_EQ(*r.output_tokens, 3u);
  EXPECT_TRUE(r.tokens_from_usage);
  EXPECT_DOUBLE_EQ(*r.itl_ms, (60.0 - 30.0) / 2);
}

TEST(ReplayApisTest, MessagesStreamTimedByItsDeltas) {
  std::string id;
  const RequestResult r = Measure(
      api::Endpoint::kMessages,
      {{1,
        "event: message_start\n" +
            Event(
                R"({"type":"message_start","message":{"id":"msg_1","type":"message","usage":{"input_tokens":7,"cache_read_input_tokens":4,"output_tokens":1}}})")},
       {2,
        "event: content_block_start\n" +
            Event(
                R"({"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}})")},
       {3, "event: ping\n" + Event(R"({"type":"ping"})")},
       {20,
        "event: content_block_delta\n" +
            Event(
                R"({"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Hi"}})")},
       {32,
        "event: content_block_delta\n" +
            Event(
                R"({"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":" there"}})")},
       {33, Event(R"({"type":"content_block_stop","index":0})")},
       {34,
        Event(
            R"({"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":2}})")},
       {35, Event(R"({"type":"message_stop"})")}},
      36, &id);
  EXPECT_EQ(r.error, ErrorKind::kNone);
  EXPECT_EQ(id, "msg_1");
  EXPECT_EQ(r.chunks, 2u);
  EXPECT_DOUBLE_EQ(*r.ttft_ms, 20);
  EXPECT_DOUBLE_EQ(*r.ttst_ms, 12);
  EXPECT_EQ(*r.input_tokens, 11u);  // cached tokens are part of the prompt
  EXPECT_EQ(*r.output_tokens, 2u);
}

TEST(ReplayApisTest, WholeBodiesOfEachApi) {
  std::string id;
  RequestResult r = Measure(
      api::Endpoint::kResponses,
      {{5,
        R"({"id":"resp_w","status":"completed","output":[{"type":"message","content":[{"type":"output_text","text":"ok"}]}],"usage":{"input_tokens":4,"output_tokens":1}})"}},
      5, &id, false);
  EXPECT_EQ(r.error, ErrorKind::kNone);
  EXPECT_EQ(id, "resp_w");
  EXPECT_EQ(*r.output_tokens, 1u);
  EXPECT_FALSE(r.ttft_ms);
  r = Measure(
      api::Endpoint::kMessages,
      {{5,
        R"({"id":"msg_w","type":"message","content":[{"type":"text","text":"ok"}],"stop_reason":"end_turn","usage":{"input_tokens":3,"output_tokens":1}})"}},
      5, &id, false);
  EXPECT_EQ(r.error, ErrorKind::kNone);
  EXPECT_EQ(id, "msg_w");
  EXPECT_EQ(*r.input_tokens, 3u);
  r = Measure(
      api::Endpoint::kEmbeddings,
      {{5,
        R"({"object":"list","data":[{"embedding":[0.1]}],"usage":{"prompt_tokens":2,"total_tokens":2}})"}},
      5, nullptr, false);
  EXPECT_EQ(r.error, ErrorKind::kNone);
  EXPECT_EQ(*r.input_tokens, 2u);
  // A Responses stream that failed is an error, as is one that is not JSON.
  r = Measure(api::Endpoint::kResponses,
              {{5, Event(R"({"type":"response.failed","response":{"id":"r","status":"failed"}})")}},
              5);
  EXPECT_EQ(r.error, ErrorKind::kProtocol);
  r = Measure(api::Endpoint::kMessages, {{5, Event("[DONE]")}}, 5);
  EXPECT_EQ(r.error, ErrorKind::kProtocol);  // "[DONE]" is chat's
}

TEST(ChainLinkerTest, ChainsAreSessionsRootedAtTheirFirstResponse) {
  ChainLinker linker(/*have_outcomes=*/true);
  // Each row as the Lookahead reads it: linked before planning, registered once planned.
  auto row = [&](std::string_view previous, std::string_view own, std::string session = "",
                 bool planned = true) {
    const ChainLink link = linker.Link(previous, own, &session);
    if (planned) linker.Planned(own, session);
    return std::pair{link, session};
  };
  EXPECT_EQ(row("", "resp_a"), std::pair(ChainLink::kNone, std::string("resp_a")));
  EXPECT_EQ(row("resp_a", "resp_b"), std::pair(ChainLink::kLinked, std::string("resp_a")));
  // Failed in the capture (no id of its own): still a turn of the chain.
  EXPECT_EQ(row("resp_b", ""), std::pair(ChainLink::kLinked, std::string("resp_a")));
  // Not a response of the trace: sent as captured, and the root of what follows it.
  EXPECT_EQ(row("resp_elsewhere", "resp_c"),
            std::pair(ChainLink::kNotInTrace, std::string("resp_c")));
  // A row's own session is kept, and its successors join it.
  EXPECT_EQ(row("resp_a", "resp_d", "conversation-7"),
            std::pair(ChainLink::kLinked, std::string("conversation-7")));
  EXPECT_EQ(row("resp_d", "resp_e"), std::pair(ChainLink::kLinked, std::string("conversation-7")));
  // A row outside the window is not sent: the row continuing it is not linked to it.
  EXPECT_EQ(row("", "resp_f", "", /*planned=*/false),
            std::pair(ChainLink::kNone, std::string("resp_f")));
  EXPECT_EQ(row("resp_f", "resp_g"), std::pair(ChainLink::kNotInTrace, std::string("resp_g")));
  EXPECT_EQ(linker.chains(), 3u);  // resp_a, resp_c, resp_g

  ChainLinker blind(/*have_outcomes=*/false);
  std::string s;
  EXPECT_EQ(blind.Link("resp_a", "", &s), ChainLink::kNoOutcomes);
  EXPECT_EQ(s, "");
}

TEST(ResponseIdMapTest, RemapsToTheReplayedIdOrSaysWhyNot) {
  ResponseIdMap ids(/*idle_ms=*/1000);
  std::string body = R"({"model":"m","previous_response_id":"resp_old","input":"x"})";
  EXPECT_EQ(ids.Relink("resp_old", &body, 0), ChainLink::kPredecessorUnanswered);
  EXPECT_EQ(body, R"({"model":"m","previous_response_id":"resp_old","input":"x"})");
  ids.Answered("resp_old", "resp_new", 10);
  EXPECT_EQ(ids.Relink("resp_old", &body, 20), ChainLink::kRemapped);
  EXPECT_EQ(body, R"({"model":"m","previous_response_id":"resp_new","input":"x"})");
  // Branches: a second row continuing the same response gets the same id.
  std::string branch = R"({"previous_response_id":"resp_old"})";
  EXPECT_EQ(ids.Relink("resp_old", &branch, 30), ChainLink::kRemapped);
  EXPECT_EQ(branch, R"({"previous_response_id":"resp_new"})");
  ids.Answered("resp_failed", "", 40);
  std::string after_failure = R"({"previous_response_id":"resp_failed"})";
  EXPECT_EQ(ids.Relink("resp_failed", &after_failure, 50), ChainLink::kPredecessorFailed);
  EXPECT_EQ(after_failure, R"({"previous_response_id":"resp_failed"})");
  EXPECT_EQ(ids.size(), 2u);
  // Forgotten once unused for idle_ms.
  ids.Answered("resp_late", "resp_late2", 1500);
  EXPECT_EQ(ids.size(), 1u);
}

}  // namespace
}  // namespace llmtap::replay
