// AnonymizeTrace on sessions (anonymize.h "Sessions"): a later turn that continues its
// session's previous one is written as its new content (the length AIPerf adds to the
// conversation so far), and any other turn starts a new part of its session, written whole.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "anonymize/anonymize.h"
#include "anonymize/anonymize_test_util.h"

namespace llmtap::anonymize {
namespace {

using namespace anonymize_test_util;
using nlohmann::json;

// A chat conversation as a capture holds it: turn k's request carries every earlier message.
struct Conversation {
  json messages = json::array();
  std::vector<json> bodies;  // one request per turn

  explicit Conversation(const std::string& system) {
    messages.push_back({{"role", "system"}, {"content", system}});
  }
  // The next turn: `user` asked, `answer` the reply that goes into the history afterwards.
  void Turn(const std::string& user, const std::string& answer, int max_tokens) {
    messages.push_back({{"role", "user"}, {"content", user}});
    bodies.push_back({{"model", "m"}, {"messages", messages}, {"max_tokens", max_tokens}});
    messages.push_back({{"role", "assistant"}, {"content", answer}});
  }
};

std::string Words(const std::string& stem, int n) {
  std::string s;
  for (int i = 0; i < n; ++i) s += (i ? " " : "") + stem + std::to_string(i);
  return s;
}

std::string Row(int timestamp, const json& body, const std::string& session) {
  return "{\"timestamp\":" + std::to_string(timestamp) + ",\"payload\":" + body.dump() +
         ",\"session_id\":\"" + session + "\"}\n";
}

class AnonymizeSessionsTest : public AnonymizeTest {
 protected:
  size_t Length(const json& body) { return Tokens(body, tokenizer_).size(); }
};

// Each later turn's input_length is its prompt's tokens less the previous turn's prompt and
// output_length: the conversation so far (earlier prompts, and answers of output_length tokens,
// which AIPerf asks the server for) plus the new content has the captured length, turn by turn.
TEST_F(AnonymizeSessionsTest, LaterTurnsAreWrittenAsTheirNewContent) {
  Conversation c(Words("sys", 20));
  c.Turn(Words("first", 13), Words("reply", 5), 5);
  c.Turn(Words("second", 30), Words("answer", 7), 7);
  c.Turn(Words("third", 3), Words("end", 2), 2);
  c.Turn(Words("fourth", 9), "", 4);
  std::string cap;
  for (size_t k = 0; k < c.bodies.size(); ++k) {
    cap += Row(static_cast<int>(10 * k), c.bodies[k], "chat-1");
    // Another session with the very same conversation, interleaved.
    cap += Row(static_cast<int>(10 * k + 5), c.bodies[k], "chat-2");
  }
  auto session_key = BlockKey::FromBytes(std::string(32, 's'));
  const std::string in = dir_.Write("conv.jsonl", cap);
  AnonymizeOptions o = Options(in);
  o.session_key = session_key.get();
  RunResult run = Anonymize(o);
  ASSERT_EQ(run.report.exit_code(), 0) << run.report.io.ToString();
  ASSERT_EQ(run.rows.size(), 8u);

  BlockHasher hasher(*session_key);
  uint64_t history = 0;  // what AIPerf sends before turn k: earlier prompts and answers
  for (size_t k = 0; k < c.bodies.size(); ++k) {
    const json& row = run.rows[2 * k];
    const uint64_t captured = Length(c.bodies[k]);
    const uint64_t written = row["input_length"];
    EXPECT_EQ(history + written, captured) << "turn " << k;
    EXPECT_EQ(row["output_length"], c.bodies[k]["max_tokens"]);
    EXPECT_EQ(row["hash_ids"].size(), (written + 7) / 8) << "turn " << k;
    EXPECT_EQ(row["session_id"], hasher.SessionId("chat-1"));
    EXPECT_EQ(run.rows[2 * k + 1]["session_id"], hasher.SessionId("chat-2"));
    // The same whole prompt, the same new content: the same ids in both sessions.
    EXPECT_EQ(run.rows[2 * k + 1]["hash_ids"], row["hash_ids"]) << "turn " << k;
    EXPECT_EQ(run.rows[2 * k + 1]["input_length"], row["input_length"]);
    history += written + static_cast<uint64_t>(row["output_length"]);
  }
  // Turn 0 is whole (its blocks of the capture); a later turn's ids are its own new ones.
  EXPECT_EQ(run.rows[0]["input_length"], Length(c.bodies[0]));
  std::set<uint64_t> ids;
  for (size_t k = 0; k < c.bodies.size(); ++k) {
    for (uint64_t id : run.rows[2 * k]["hash_ids"]) EXPECT_TRUE(ids.insert(id).second) << id;
  }
  // Dense numbering in first-seen order, gap-free.
  EXPECT_EQ(*ids.rbegin() + 1, ids.size());

  const AnonymizeReport& r = run.report;
  EXPECT_EQ(r.turns_as_new_content, 6u);
  EXPECT_EQ(r.session_parts, 0u);
  EXPECT_EQ(r.sessions, 2u);
  EXPECT_EQ(r.with_session, 8u);
  EXPECT_EQ(r.completions_turns, 0u);
  EXPECT_TRUE(r.warnings.empty());
  uint64_t captured_tokens = 0, new_tokens = 0;
  for (size_t k = 0; k < c.bodies.size(); ++k) {
    captured_tokens += 2 * Length(c.bodies[k]);
    if (k > 0) new_tokens += 2 * static_cast<uint64_t>(run.rows[2 * k]["input_length"]);
  }
  // The summary describes the captured prompts, whole; the ids written are fewer.
  EXPECT_EQ(r.tokens, captured_tokens);
  EXPECT_EQ(r.new_content_tokens, new_tokens);
  EXPECT_LT(r.ids_written, r.blocks);
  std::string text = RenderAnonymizeText(r, "t", "k");
  EXPECT_NE(text.find("session turns: 6 later turns written as their new content (" +
                      std::to_string(new_tokens) + " tokens;"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("(of the captured prompts; hash_ids written: " +
                      std::to_string(r.ids_written) + ")"),
            std::string::npos)
      << text;
  trace::ValidateReport vr = ValidateForAiperf(in, "conv.512.jsonl");
  EXPECT_EQ(vr.exit_code(), 0) << trace::RenderValidateText(vr);
}

// A turn that does not continue the previous one (history cut or edited), or adds no more
// tokens than the previous output_length (a retry; an answer whose reasoning the client
// dropped), starts a new part: written whole under the part's id, and the turns after it
// continue the part.
TEST_F(AnonymizeSessionsTest, ATurnThatDoesNotContinueStartsANewPartWrittenWhole) {
  Conversation c(Words("sys", 6));
  c.Turn(Words("ask", 10), Words("reply", 4), 4);   // 0
  c.Turn(Words("more", 10), Words("long", 3), 50);  // 1: adds 16 tokens, 12 new
  json edited = c.bodies[1];
  edited["messages"][1]["content"] = Words("changed", 10);  // 2: history edited
  c.Turn(Words("next", 8), Words("x", 2), 2);               // 3: continues 1, but 1's output 50
  std::string cap = Row(0, c.bodies[0], "s") + Row(1, c.bodies[1], "s") + Row(2, edited, "s") +
                    Row(3, c.bodies[2], "s") + Row(4, c.bodies[2], "s");  // 4: a retry of 3
  auto session_key = BlockKey::FromBytes(std::string(32, 's'));
  AnonymizeOptions o = Options(dir_.Write("parts.jsonl", cap));
  o.session_key = session_key.get();
  RunResult run = Anonymize(o);
  ASSERT_EQ(run.report.exit_code(), 0) << run.report.io.ToString();
  ASSERT_EQ(run.rows.size(), 5u);
  BlockHasher hasher(*session_key);
  const std::string id = hasher.SessionId("s");
  EXPECT_EQ(run.rows[0]["session_id"], id);
  EXPECT_EQ(run.rows[1]["session_id"], id);
  EXPECT_EQ(run.rows[1]["input_length"], Length(c.bodies[1]) - Length(c.bodies[0]) - 4);
  // Edited: part 1, whole.
  EXPECT_EQ(run.rows[2]["session_id"], hasher.SessionPart(id, 1));
  EXPECT_EQ(run.rows[2]["input_length"], Length(edited));
  // Continues turn 1's text, not the edited part 1: part 2, whole.
  EXPECT_EQ(run.rows[3]["session_id"], hasher.SessionPart(id, 2));
  EXPECT_EQ(run.rows[3]["input_length"], Length(c.bodies[2]));
  // The retry adds nothing: part 3.
  EXPECT_EQ(run.rows[4]["session_id"], hasher.SessionPart(id, 3));
  EXPECT_EQ(run.rows[4]["input_length"], Length(c.bodies[2]));
  EXPECT_NE(hasher.SessionPart(id, 1), hasher.SessionPart(id, 2));
  EXPECT_EQ(run.report.session_parts, 3u);
  EXPECT_EQ(run.report.turns_as_new_content, 1u);
  EXPECT_EQ(run.report.session_part_reasons,
            (std::map<std::string, uint64_t>{
                {"it adds no more tokens than the previous turn's output_length", 1},
                {"its prompt does not continue the previous turn's", 2}}));
  std::string text = RenderAnonymizeText(run.report, "t", "k");
  EXPECT_NE(text.find("3 started a new part of their session, written whole (it adds no more "
                      "tokens than the previous turn's output_length: 1, its prompt does not "
                      "continue the previous turn's: 2)"),
            std::string::npos)
      << text;

  // A whole part's ids are the capture's blocks: the same as without a session.
  std::string plain = Row(0, edited, "x");
  plain.erase(plain.find(",\"session_id\""), std::string(",\"session_id\":\"x\"").size());
  AnonymizeOptions p = Options(dir_.Write("plain.jsonl", plain), "plain.out.jsonl");
  RunResult alone = Anonymize(p);
  ASSERT_EQ(alone.rows.size(), 1u);
  EXPECT_EQ(alone.rows[0]["input_length"], run.rows[2]["input_length"]);
  EXPECT_EQ(alone.rows[0]["hash_ids"].size(), run.rows[2]["hash_ids"].size());
}

// A long turn whose prompt differs from the previous one only in its last kContinuationSlack
// tokens (a chat template that renders the generation prompt otherwise once the answer follows
// it) still continues; one that differs earlier does not.
TEST_F(AnonymizeSessionsTest, AGenerationPromptRenderedOtherwiseStillContinues) {
  const std::string head = Words("w", 80);
  auto prompt = [](const std::string& s) {
    return json{{"model", "m"}, {"prompt", s}, {"max_tokens", 3}};
  };
  // Turn 1 drops turn 0's last 20 words (within the slack) and adds 100 words.
  const std::string tail = Words("t", 20);
  std::string cap = Row(0, prompt(head + " " + tail), "g") +
                    Row(1, prompt(head + " " + Words("n", 100)), "g") +
                    // Turn 2 drops 40 of turn 1's last words: beyond the slack.
                    Row(2, prompt(head + " " + Words("n", 60) + " " + Words("z", 200)), "g");
  RunResult run = Anonymize(Options(dir_.Write("near.jsonl", cap)));
  ASSERT_EQ(run.report.exit_code(), 0) << run.report.io.ToString();
  ASSERT_EQ(run.rows.size(), 3u);
  EXPECT_EQ(run.rows[1]["input_length"], 180 - 100 - 3);
  EXPECT_EQ(run.rows[1]["session_id"], run.rows[0]["session_id"]);
  EXPECT_EQ(run.rows[2]["input_length"], 80 + 60 + 200);
  EXPECT_NE(run.rows[2]["session_id"], run.rows[0]["session_id"]);
  // Completions turns: AIPerf's completions endpoint fails a session's later turns; said.
  EXPECT_EQ(run.report.completions_turns, 1u);
  ASSERT_FALSE(run.report.warnings.empty());
  EXPECT_NE(run.report.warnings.back().find(
                "1 later session turns are completions requests: AIPerf (0.11) sends"),
            std::string::npos)
      << run.report.warnings.back();
}

}  // namespace
}  // namespace llmtap::anonymize
