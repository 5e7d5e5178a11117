// --responses-chain inline (inline.h): a Responses row continuing a response of the trace goes
// without previous_response_id, its input the conversation so far: the earlier turns' input items
// and outputs (captured, else the target's), then its own items.
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "replay/inline.h"
#include "replay/input.h"

namespace llmtap::replay {
namespace {

using nlohmann::json;

// A row of a chain as the Lookahead hands it over: linked when it names a predecessor.
TraceRequest Row(std::string body, std::string own_id, std::string previous_id = "",
                 std::optional<std::string> captured_text = std::nullopt) {
  TraceRequest r;
  r.endpoint = api::Endpoint::kResponses;
  r.body = std::move(body);
  r.response_id = std::move(own_id);
  r.previous_response_id = std::move(previous_id);
  r.chain = r.previous_response_id.empty() ? ChainLink::kNone : ChainLink::kLinked;
  if (captured_text) {
    r.captured_output.emplace();
    r.captured_output->text = *captured_text;
  }
  return r;
}

ChainLink Send(ChainInliner& in, TraceRequest& r, double now_ms = 0) {
  return in.Compose(r, &r.body, now_ms);
}

json User(const std::string& text) {
  return {{"type", "message"}, {"role", "user"}, {"content", text}};
}
json Assistant(const std::string& text) {
  return {{"type", "message"},
          {"role", "assistant"},
          {"content", json::array({{{"type", "output_text"}, {"text", text}}})}};
}

TEST(ChainInlinerTest, StringInputChainOfThreeTurnsWithCapturedOutputs) {
  ChainInliner in;
  TraceRequest t1 = Row(R"({"model":"m","input":"one","instructions":"be brief"})", "resp_1", "",
                        std::string("A1"));
  EXPECT_EQ(Send(in, t1), ChainLink::kNone);
  EXPECT_EQ(json::parse(t1.body)["input"], "one");  // a root goes as captured
  in.Answered("resp_1", nullptr, 1);                // failed here: the captured text still stands
  TraceRequest t2 = Row(R"({"previous_response_id":"resp_1","model":"m","input":"two"})", "resp_2",
                        "resp_1", std::string("A2 \"quoted\""));
  EXPECT_EQ(Send(in, t2), ChainLink::kInlinedCaptured);
  json b2 = json::parse(t2.body);
  EXPECT_FALSE(b2.contains("previous_response_id"));
  EXPECT_FALSE(b2.contains("instructions"));  // not inherited
  EXPECT_EQ(b2["model"], "m");
  EXPECT_EQ(b2["input"], json::array({User("one"), Assistant("A1"), User("two")}));
  TraceRequest t3 =
      Row(R"({"model":"m","input":"three","previous_response_id":"resp_2"})", "resp_3", "resp_2");
  EXPECT_EQ(Send(in, t3), ChainLink::kInlinedCaptured);
  EXPECT_EQ(json::parse(t3.body),
            json({{"model", "m"},
                  {"input", json::array({User("one"), Assistant("A1"), User("two"),
                                         Assistant("A2 \"quoted\""), User("three")})}}));
}

TEST(ChainInlinerTest, ArrayInputItemsKeptAndTypedAndToolCallsBecomeItems) {
  ChainInliner in;
  TraceRequest t1 =
      Row(R"({"model":"m","input":[{"role":"system","content":"sys"},)"
          R"({"role":"user","content":[{"type":"input_text","text":"hi"}]}],"stream":true})",
          "resp_1");
  EXPECT_EQ(Send(in, t1), ChainLink::kNone);
  // No captured text: the target's answer (text and a tool call) is what the next turn carries.
  ResponseText answer;
  answer.text = "calling";
  answer.tool_calls.push_back({0, "get_weather", R"({"city":"Paris"})"});
  in.Answered("resp_1", &answer, 10);
  TraceRequest t2 =
      Row(R"({"model":"m","previous_response_id":"resp_1","input":[{"type":"function_call_output",)"
          R"("call_id":"call_abc","output":"sunny"}],"stream":true})",
          "resp_2", "resp_1");
  EXPECT_EQ(Send(in, t2, 20), ChainLink::kInlinedReplayed);
  json b2 = json::parse(t2.body);
  EXPECT_TRUE(b2["stream"].get<bool>());
  const json want = json::array(
      {{{"role", "system"}, {"content", "sys"}, {"type", "message"}},
       {{"role", "user"},
        {"content", json::array({{{"type", "input_text"}, {"text", "hi"}}})},
        {"type", "message"}},
       Assistant("calling"),
       {{"type", "function_call"},
        {"call_id", "call_abc"},  // the id the row's function_call_output names
        {"name", "get_weather"},
        {"arguments", R"({"city":"Paris"})"}},
       {{"type", "function_call_output"}, {"call_id", "call_abc"}, {"output", "sunny"}}});
  EXPECT_EQ(b2["input"], want);
}

TEST(ChainInlinerTest, BranchesShareTheirPredecessorsConversation) {
  ChainInliner in;
  TraceRequest root = Row(R"({"input":"q"})", "resp_r", "", std::string("A"));
  Send(in, root);
  TraceRequest left =
      Row(R"({"input":"left","previous_response_id":"resp_r"})", "resp_l", "resp_r");
  TraceRequest right =
      Row(R"({"input":"right","previous_response_id":"resp_r"})", "resp_x", "resp_r");
  EXPECT_EQ(Send(in, left), ChainLink::kInlinedCaptured);
  EXPECT_EQ(Send(in, right), ChainLink::kInlinedCaptured);
  EXPECT_EQ(json::parse(left.body)["input"],
            json::array({User("q"), Assistant("A"), User("left")}));
  EXPECT_EQ(json::parse(right.body)["input"],
            json::array({User("q"), Assistant("A"), User("right")}));
  // Each branch goes on with its own conversation.
  ResponseText l;
  l.text = "L";
  in.Answered("resp_l", &l, 5);
  TraceRequest after = Row(R"({"input":"more","previous_response_id":"resp_l"})", "", "resp_l");
  EXPECT_EQ(Send(in, after), ChainLink::kInlinedReplayed);
  EXPECT_EQ(json::parse(after.body)["input"],
            json::array({User("q"), Assistant("A"), User("left"), Assistant("L"), User("more")}));
}

TEST(ChainInlinerTest, WithoutThePredecessorsOutputTheRowGoesAsCaptured) {
  ChainInliner in;
  TraceRequest t1 = Row(R"({"input":"one"})", "resp_1");
  Send(in, t1);
  const std::string captured = R"({"input":"two","previous_response_id":"resp_1"})";
  // Not answered yet, and no captured text.
  TraceRequest early = Row(captured, "resp_2", "resp_1");
  EXPECT_EQ(Send(in, early), ChainLink::kPredecessorUnanswered);
  EXPECT_EQ(early.body, captured);
  // Failed in this run, and no captured text.
  in.Answered("resp_1", nullptr, 1);
  TraceRequest t2 = Row(captured, "resp_2", "resp_1");
  EXPECT_EQ(Send(in, t2), ChainLink::kPredecessorFailed);
  EXPECT_EQ(t2.body, captured);
  // Its successor cannot be inlined either (its conversation is on no server here).
  ResponseText a2;
  a2.text = "A2";
  in.Answered("resp_2", &a2, 2);
  TraceRequest t3 = Row(R"({"input":"three","previous_response_id":"resp_2"})", "resp_3", "resp_2");
  EXPECT_EQ(Send(in, t3), ChainLink::kPredecessorFailed);
  // A row whose predecessor is not in the trace is left alone.
  TraceRequest stray = Row(R"({"input":"x","previous_response_id":"resp_zz"})", "", "resp_zz");
  stray.chain = ChainLink::kNotInTrace;
  EXPECT_EQ(Send(in, stray), ChainLink::kNotInTrace);
  EXPECT_EQ(stray.body, R"({"input":"x","previous_response_id":"resp_zz"})");
}

TEST(ChainInlinerTest, IdleChainsAreForgotten) {
  ChainInliner in(/*idle_ms=*/100);
  TraceRequest t1 = Row(R"({"input":"one"})", "resp_1", "", std::string("A"));
  Send(in, t1, 0);
  TraceRequest t2 = Row(R"({"input":"two","previous_response_id":"resp_1"})", "resp_2", "resp_1");
  EXPECT_EQ(Send(in, t2, 50), ChainLink::kInlinedCaptured);
  EXPECT_EQ(in.size(), 2u);
  // resp_1 was used at 50 (t2 inlined it): still there at 120.
  TraceRequest other = Row(R"({"input":"z"})", "resp_z");
  Send(in, other, 120);
  EXPECT_EQ(in.size(), 3u);
  TraceRequest late = Row(R"({"input":"x"})", "resp_y");
  Send(in, late, 400);  // everything else idle for more than 100 ms
  EXPECT_EQ(in.size(), 1u);
}

TEST(ChainInlinerTest, CapturedResponseMemberParsed) {
  ResponseText t;
  ASSERT_TRUE(ParseCapturedResponse(
      R"({"text":"hi","reasoning":"r","tool_calls":[{"name":"f","arguments":"{}"}],)"
      R"("truncated":false})",
      &t));
  EXPECT_EQ(t.text, "hi");
  EXPECT_EQ(t.reasoning, "r");
  ASSERT_EQ(t.tool_calls.size(), 1u);
  EXPECT_EQ(t.tool_calls[0].name, "f");
  EXPECT_FALSE(ParseCapturedResponse(R"({"text":"h","truncated":true})", &t));
  EXPECT_FALSE(ParseCapturedResponse("null", &t));
}

TEST(ChainInlinerTest, RemoveTopLevelKeepsTheRest) {
  for (const auto& [in, out] : std::vector<std::pair<std::string, std::string>>{
           {R"({"previous_response_id":"a","x":1})", R"({"x":1})"},
           {R"({"x":1, "previous_response_id" : "a" })", R"({"x":1 })"},
           {R"({"previous_response_id":"a"})", R"({})"},
           {R"({"x":{"previous_response_id":"a"}})", R"({"x":{"previous_response_id":"a"}})"}}) {
    std::string s = in;
    trace::RemoveTopLevel(&s, "previous_response_id");
    EXPECT_EQ(s, out) << in;
  }
}

}  // namespace
}  // namespace llmtap::replay
