// `llmtap split` with an outcomes sidecar and with sessions (the basics are in tools_test.cc).
#include <gtest/gtest.h>

#include <filesystem>

#include "trace/split.h"
#include "trace/trace_test_util.h"

namespace llmtap::trace {
namespace {

using testing::Lines;
using testing::ReadAll;
using testing::TempDir;

std::string Chat(int ts, const std::string& extra = "") {
  return "{\"timestamp\":" + std::to_string(ts) +
         ",\"payload\":{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}" + extra + "}\n";
}
std::string Completion(int ts, const std::string& extra = "") {
  return "{\"timestamp\":" + std::to_string(ts) + ",\"payload\":{\"prompt\":\"hi\"}" + extra +
         "}\n";
}
std::string Outcome(int line, int ts, int tokens) {
  return "{\"line\":" + std::to_string(line) + ",\"timestamp\":" + std::to_string(ts) +
         ",\"status\":200,\"ttft_ms\":1.5,\"completion_tokens\":" + std::to_string(tokens) +
         ",\"finish_reason\":\"stop\"}\n";
}

// A row or outcome line as a file holds it, without its '\n'.
std::string Line(std::string row) {
  row.pop_back();
  return row;
}

TEST(SplitOutcomes, EachOutputGetsItsRowsOutcomesRenumbered) {
  TempDir dir;
  std::string in = dir.Write(
      "cap.jsonl", Chat(0) + Completion(10) + Chat(20) + "not json\n" + Completion(40) + Chat(50));
  // Completion order, not line order; line 4 has no row; line 6's timestamp was altered.
  dir.Write("cap.jsonl.outcomes.ndjson", Outcome(2, 10, 200) + Outcome(1, 0, 100) +
                                             Outcome(5, 40, 500) + Outcome(4, 30, 400) +
                                             Outcome(3, 20, 300) + Outcome(6, 51, 600));
  SplitOptions o;
  o.path = in;
  o.rebase = true;
  SplitReport r = SplitTrace(o);
  ASSERT_TRUE(r.io.ok()) << r.io.ToString();
  EXPECT_EQ(r.exit_code(), 1);  // the line that is not JSON
  EXPECT_EQ(r.outcomes_in, 6u);
  EXPECT_EQ(r.outcomes_written, 4u);
  EXPECT_EQ(r.outcomes_mismatched, 1u);
  EXPECT_EQ(r.outcomes_unrouted, 1u);
  ASSERT_EQ(r.outputs.size(), 2u);
  EXPECT_EQ(r.outputs[0].outcomes_path, dir.File("cap.chat.jsonl.outcomes.ndjson"));
  EXPECT_EQ(r.outputs[0].outcomes, 2u);
  // Chat rows 1, 3, 6 at 0, 20, 50 become lines 1, 2, 3 at 0, 20, 50 (first is 0 already).
  EXPECT_EQ(Lines(ReadAll(dir.File("cap.chat.jsonl.outcomes.ndjson"))),
            (std::vector<std::string>{Line(Outcome(1, 0, 100)), Line(Outcome(2, 20, 300))}));
  // Completion rows 2, 5 at 10, 40 become lines 1, 2 at 0, 30 (rebased).
  EXPECT_EQ(Lines(ReadAll(dir.File("cap.completions.jsonl.outcomes.ndjson"))),
            (std::vector<std::string>{Line(Outcome(1, 0, 200)), Line(Outcome(2, 30, 500))}));
  std::string text = RenderSplitText(r);
  EXPECT_NE(text.find("2 outcomes -> " + dir.File("cap.chat.jsonl.outcomes.ndjson")),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("outcomes: 4 of 6 carried from " + in +
                      ".outcomes.ndjson (dropped: 1 "
                      "timestamp differs from the row's, 1 row not routed or absent)"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("line 6: timestamp 51 in the sidecar, 50 in the capture"), std::string::npos);

  // --no-outcomes: none written; existing ones are not overwritten without --force.
  o.no_outcomes = true;
  o.out_dir = dir.File("plain");
  SplitReport plain = SplitTrace(o);
  EXPECT_TRUE(plain.io.ok());
  EXPECT_FALSE(std::filesystem::exists(dir.File("plain/cap.chat.jsonl.outcomes.ndjson")));
  o.no_outcomes = false;
  o.out_dir.clear();
  std::filesystem::remove(dir.File("cap.chat.jsonl"));
  std::filesystem::remove(dir.File("cap.completions.jsonl"));
  SplitReport again = SplitTrace(o);
  EXPECT_EQ(again.exit_code(), 2);
  EXPECT_NE(again.io.message().find("cap.chat.jsonl.outcomes.ndjson"), std::string::npos);
}

TEST(SplitOutcomes, AnotherFilesSidecarFailsTheRunAndLeavesNoOutputs) {
  TempDir dir;
  std::string in = dir.Write("part.jsonl", Chat(5) + Chat(7));
  std::string other =
      dir.Write("full.outcomes.ndjson", Outcome(1, 5, 1) + Outcome(2, 7, 2) + Outcome(3, 9, 3));
  SplitOptions o;
  o.path = in;
  o.outcomes_path = other;
  SplitReport r = SplitTrace(o);
  EXPECT_EQ(r.exit_code(), 2);
  EXPECT_NE(r.io.message().find(other + " does not belong to " + in), std::string::npos)
      << r.io.ToString();
  EXPECT_FALSE(std::filesystem::exists(dir.File("part.chat.jsonl")));
  EXPECT_FALSE(std::filesystem::exists(dir.File("part.chat.jsonl.outcomes.ndjson")));

  o.outcomes_path = dir.File("missing.jsonl");
  EXPECT_EQ(SplitTrace(o).exit_code(), 2);
}

TEST(SplitOutcomes, RawRowsJoinByLineAndKeepTheSidecarsTimestamps) {
  TempDir dir;
  std::string in = dir.Write("raw.jsonl", "{\"prompt\":\"a\"}\n{\"messages\":[]}\n");
  dir.Write("raw.jsonl.outcomes.ndjson", Outcome(2, 70, 2) + Outcome(1, 0, 1));
  SplitOptions o;
  o.path = in;
  SplitReport r = SplitTrace(o);
  ASSERT_EQ(r.exit_code(), 0) << r.io.ToString();
  EXPECT_EQ(Lines(ReadAll(dir.File("raw.chat.jsonl.outcomes.ndjson"))),
            (std::vector<std::string>{Line(Outcome(1, 70, 2))}));
}

TEST(SplitSessions, ASessionStaysInOrderInTheFileOfItsFirstRowAndMixingIsRefused) {
  TempDir dir;
  auto sid = [](const char* id) { return std::string(",\"session_id\":\"") + id + "\""; };
  std::string in = dir.Write("cap.jsonl", Chat(0, sid("alice")) +            // 1
                                              Completion(1, sid("bob")) +    // 2
                                              Chat(2, sid("alice")) +        // 3
                                              Completion(3, sid("alice")) +  // 4: mixes: refused
                                              "{\"timestamp\":4,\"payload\":{\"input\":\"e\"}" +
                                              sid("alice") + "}\n" +       // 5: other
                                              Completion(5, sid("bob")) +  // 6
                                              Chat(6) +                    // 7: no session
                                              Chat(7, sid("bob")) +        // 8: mixes: refused
                                              Chat(8, sid("alice")));      // 9
  dir.Write("cap.jsonl.outcomes.ndjson", Outcome(4, 3, 40) + Outcome(9, 8, 90));
  SplitOptions o;
  o.path = in;
  SplitReport r = SplitTrace(o);
  ASSERT_TRUE(r.io.ok()) << r.io.ToString();
  EXPECT_EQ(r.exit_code(), 1);
  EXPECT_EQ(r.mixed_sessions, 2u);
  EXPECT_EQ(r.mixed_session_rows, 2u);
  ASSERT_EQ(r.skipped.kept.size(), 2u);
  EXPECT_EQ(r.skipped.kept[0].line, 4u);
  EXPECT_NE(r.skipped.kept[0].reason.find(
                "a completions row in a session whose first row (line 1) is chat: not routed"),
            std::string::npos)
      << r.skipped.kept[0].reason;
  EXPECT_EQ(r.skipped.kept[1].line, 8u);
  EXPECT_NE(r.skipped.kept[1].reason.find("(line 2) is completions"), std::string::npos);
  ASSERT_EQ(r.outputs.size(), 3u);
  EXPECT_EQ(r.outputs[0].sessions, 1u);  // alice
  EXPECT_EQ(r.outputs[1].sessions, 1u);  // bob
  EXPECT_EQ(Lines(ReadAll(dir.File("cap.chat.jsonl"))),
            (std::vector<std::string>{Line(Chat(0, sid("alice"))), Line(Chat(2, sid("alice"))),
                                      Line(Chat(6)), Line(Chat(8, sid("alice")))}));
  EXPECT_EQ(Lines(ReadAll(dir.File("cap.completions.jsonl"))).size(), 2u);
  EXPECT_EQ(Lines(ReadAll(dir.File("cap.other.jsonl"))).size(), 1u);
  // The refused row's outcome is not carried; the session's last row's is, renumbered.
  EXPECT_EQ(Lines(ReadAll(dir.File("cap.chat.jsonl.outcomes.ndjson"))),
            (std::vector<std::string>{Line(Outcome(4, 8, 90))}));
  EXPECT_EQ(r.outcomes_unrouted, 1u);
  std::string text = RenderSplitText(r);
  EXPECT_NE(text.find("2 sessions mix chat and completions rows"), std::string::npos) << text;
  EXPECT_EQ(text.find("alice"), std::string::npos) << "session ids are never printed";
}

// Rows of a bare file that a Messages server would take as well as a chat one go to chat, counted
// and reported with the line of the first (llmtap's capture names the API: no such report).
TEST(SplitApis, RowsThatCouldBeChatOrMessagesGoToChatAndAreReported) {
  TempDir dir;
  const std::string either =
      R"({"timestamp":1,"payload":{"model":"m","max_tokens":9,"messages":[{"role":"user","content":"hi"}]}})"
      "\n";
  const std::string text = Chat(0) + either + Completion(2);
  SplitOptions o;
  o.path = dir.Write("bare.jsonl", text);
  SplitReport r = SplitTrace(o);
  ASSERT_TRUE(r.io.ok()) << r.io.ToString();
  EXPECT_EQ(r.exit_code(), 0);
  EXPECT_EQ(r.chat_or_messages.rows, 1u);
  EXPECT_EQ(Lines(ReadAll(dir.File("bare.chat.jsonl"))).size(), 2u);
  std::string out = RenderSplitText(r);
  EXPECT_NE(out.find("1 row (the first on line 2) could be chat or Anthropic Messages requests"),
            std::string::npos)
      << out;
  EXPECT_NE(out.find("routed to the chat file"), std::string::npos) << out;
  o.path = dir.Write("cap.jsonl", text);
  dir.Write("cap.jsonl.manifest.json", R"({"format":"mooncake_payload"})");
  EXPECT_EQ(SplitTrace(o).chat_or_messages.rows, 0u);
}

// A raw_payload capture by llmtap counts its rows by API in its manifest ("file"."apis"): it
// decides the rows a body alone leaves between chat and Messages, for the lines it counted.
TEST(SplitApis, RawCaptureManifestCountsDecideChatOrMessages) {
  TempDir dir;
  const std::string either =
      R"({"model":"m","max_tokens":9,"messages":[{"role":"user","content":"hi"}]})"
      "\n";
  // A Messages request whose body has a key the shape rules do not know (no guess is counted):
  // Messages by its path.
  const std::string messages_keys =
      R"({"model":"m","max_tokens":9,"thinking":{"type":"enabled","budget_tokens":4},)"
      R"("messages":[{"role":"user","content":"hi"}]})"
      "\n";
  auto split = [&](const std::string& name, const std::string& rows, const std::string& apis) {
    SplitOptions o;
    o.path = dir.Write(name + ".jsonl", rows);
    if (!apis.empty()) {
      dir.Write(name + ".jsonl.manifest.json",
                R"({"format":"raw_payload","file":{"records":3,"apis":)" + apis + "}}");
    }
    SplitReport r = SplitTrace(o);
    EXPECT_TRUE(r.io.ok()) << r.io.ToString();
    return r;
  };
  auto rows_in = [&](const SplitReport& r, Endpoint e) {
    for (const SplitOutput& out : r.outputs) {
      if (out.endpoint == e) return out.rows;
    }
    return uint64_t{0};
  };

  // Chat only: no guess, no warning.
  SplitReport chat = split("chat", either + either + either, R"({"chat":3})");
  EXPECT_EQ(chat.chat_or_messages.rows, 0u);
  EXPECT_EQ(rows_in(chat, Endpoint::kChat), 3u);
  EXPECT_EQ(RenderSplitText(chat).find("could be chat"), std::string::npos);

  // Messages only: every row read as chat is Messages.
  SplitReport messages = split("msg", either + messages_keys + either, R"({"messages":3})");
  EXPECT_EQ(messages.chat_or_messages.rows, 0u);
  EXPECT_EQ(rows_in(messages, Endpoint::kMessages), 3u);
  EXPECT_EQ(rows_in(messages, Endpoint::kChat), 0u);
  EXPECT_EQ(Lines(ReadAll(dir.File("msg.messages.jsonl")))[1], Line(messages_keys));

  // Both: as before, by the body, and the warning says why the manifest could not tell.
  SplitReport both = split("both", either + either + either, R"({"chat":2,"messages":1})");
  EXPECT_EQ(both.chat_or_messages.rows, 3u);
  EXPECT_EQ(rows_in(both, Endpoint::kChat), 3u);
  EXPECT_NE(RenderSplitText(both).find("the capture's manifest counts 2 chat and 1 /v1/messages "
                                       "requests in this file"),
            std::string::npos)
      << RenderSplitText(both);

  // An older manifest (no "apis"), or none: a guess, as before.
  SplitOptions older;
  older.path = dir.Write("older.jsonl", either + either);
  dir.Write("older.jsonl.manifest.json", R"({"format":"raw_payload","file":{"records":2}})");
  EXPECT_EQ(SplitTrace(older).chat_or_messages.rows, 2u);
  EXPECT_EQ(split("none", either, "").chat_or_messages.rows, 1u);

  // Lines written after the manifest's last count (a running capture): a guess.
  SplitReport later = split("later", either + either + either, R"({"chat":2})");
  EXPECT_EQ(later.chat_or_messages.rows, 1u);
  EXPECT_EQ(later.chat_or_messages.first_line, 3u);
  EXPECT_NE(RenderSplitText(later).find("counts only its first 2 rows"), std::string::npos);
}

}  // namespace
}  // namespace llmtap::trace
