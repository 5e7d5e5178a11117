// SessionLinker's rule on message-prefix hashes, and InferSessions on small captures: the
// bytes of every row, ids, reports, exit codes and the outcomes join.
#include "sessions/sessions.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "common/testing/temp_files.h"

namespace llmtap::sessions {
namespace {

using Json = nlohmann::json;

// A conversation under construction: message JSON texts, as a client sends them.
struct Msgs {
  std::vector<std::string> m;
  Msgs& sys(const std::string& t) { return add("system", t); }
  Msgs& user(const std::string& t) { return add("user", t); }
  Msgs& asst(const std::string& t) { return add("assistant", t); }
  Msgs& tool(const std::string& t) {
    m.push_back(R"({"role":"tool","tool_call_id":"c1","content":")" + t + "\"}");
    return *this;
  }
  Msgs& calls(const std::string& name) {
    m.push_back(
        R"({"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function","function":{"name":")" +
        name + R"(","arguments":"{}"}}]})");
    return *this;
  }
  Msgs& add(const std::string& role, const std::string& text) {
    m.push_back(R"({"role":")" + role + R"(","content":")" + text + "\"}");
    return *this;
  }
  std::string Array() const {
    std::string s = "[";
    for (size_t i = 0; i < m.size(); ++i) s += (i ? "," : "") + m[i];
    return s + "]";
  }
};

// Drives a linker with message lists.
class LinkerHarness {
 public:
  explicit LinkerHarness(LinkerOptions o = {}) : linker_(o) {}
  TurnResult Add(uint64_t line, double ts, const Msgs& msgs,
                 std::optional<double> end = std::nullopt) {
    std::vector<uint64_t> prefix;
    uint64_t h = kChainSeed;
    for (const std::string& m : msgs.m) prefix.push_back(h = ChainMessage(h, m));
    TurnInput t{.line = line, .timestamp_ms = ts, .response_end_ms = end, .prefix = prefix};
    return linker_.Add(
        t, [&](size_t i) { return msgs.m[i].find("\"assistant\"") != std::string::npos; });
  }
  // With response text: this turn's answer is `answer` (nullopt: not captured; "" with
  // `truncated`: cut), and the key of an assistant message in `msgs` is that of its content
  // between the quotes of Msgs::asst (counted in key_reads()).
  TurnResult AddWithText(uint64_t line, double ts, const Msgs& msgs, double end,
                         std::optional<std::string> answer, bool truncated = false) {
    std::vector<uint64_t> prefix;
    uint64_t h = kChainSeed;
    for (const std::string& m : msgs.m) prefix.push_back(h = ChainMessage(h, m));
    TurnInput t{.line = line, .timestamp_ms = ts, .response_end_ms = end, .prefix = prefix};
    if (truncated) {
      t.answer = trace::AnswerText::kTruncated;
    } else if (answer) {
      t.answer = trace::AnswerText::kWhole;
      t.answer_key = Key(*answer);
    }
    return linker_.Add(
        t, [&](size_t i) { return msgs.m[i].find("\"assistant\"") != std::string::npos; },
        [&](size_t i) -> std::optional<uint64_t> {
          ++key_reads_;
          const std::string& m = msgs.m[i];
          const std::string head = R"("content":")";
          size_t at = m.find(head);
          if (at == std::string::npos) return std::nullopt;
          at += head.size();
          return Key(m.substr(at, m.find('"', at) - at));
        });
  }
  static uint64_t Key(const std::string& text) {
    trace::AnswerKeyHasher k;
    k.Text(text);
    return k.Finish();
  }
  int key_reads() const { return key_reads_; }
  SessionLinker& linker() { return linker_; }

 private:
  SessionLinker linker_;
  int key_reads_ = 0;
};

TEST(SessionLinker, ChatTurnsChainAndCountTurns) {
  LinkerHarness h;
  Msgs c;
  c.sys("S").user("u1");
  TurnResult t0 = h.Add(1, 0, c);
  EXPECT_FALSE(t0.linked);
  EXPECT_EQ(t0.conversation, 1u);
  c.asst("a1").user("u2");
  TurnResult t1 = h.Add(2, 100, c);
  EXPECT_TRUE(t1.linked);
  EXPECT_EQ(t1.conversation, 1u);
  EXPECT_EQ(t1.turn, 1u);
  EXPECT_EQ(t1.gap_ms, 100);
  EXPECT_FALSE(t1.think_ms);
  c.asst("a2").user("u3");
  TurnResult t2 = h.Add(3, 250, c);
  EXPECT_EQ(t2.conversation, 1u);
  EXPECT_EQ(t2.turn, 2u);
  h.linker().CloseAll();
  std::vector<ClosedConversation> closed;
  h.linker().DrainClosed([&](const ClosedConversation& x) { closed.push_back(x); });
  ASSERT_EQ(closed.size(), 1u);
  EXPECT_EQ(closed[0].turns, 3u);
  EXPECT_FALSE(closed[0].first_turn_had_history);
}

TEST(SessionLinker, AgentLoopWithToolCallsAndResults) {
  LinkerHarness h;
  Msgs c;
  c.sys("agent").user("fix the bug");
  h.Add(1, 0, c);
  c.calls("read_file").tool("contents");  // assistant(tool_calls), tool result
  EXPECT_EQ(h.Add(2, 10, c).conversation, 1u);
  c.calls("grep").tool("hits").tool("more hits");  // parallel results
  EXPECT_EQ(h.Add(3, 20, c).conversation, 1u);
  c.asst("done").user("thanks");
  TurnResult t = h.Add(4, 30, c);
  EXPECT_EQ(t.conversation, 1u);
  EXPECT_EQ(t.turn, 3u);
}

TEST(SessionLinker, SharedSystemPromptNeverCrossLinks) {
  LinkerHarness h;
  Msgs a, b;
  a.sys("S").user("ua");
  b.sys("S").user("ub");
  h.Add(1, 0, a);
  h.Add(2, 1, b);
  b.asst("x").user("ub2");
  a.asst("x").user("ua2");  // same answer text: still only its own prefix matches
  EXPECT_EQ(h.Add(3, 5, b).conversation, 2u);
  EXPECT_EQ(h.Add(4, 6, a).conversation, 1u);
}

TEST(SessionLinker, IdenticalFirstTurnsResolvedByResponseEnd) {
  LinkerHarness h;
  Msgs first;
  first.sys("S").user("hi");
  h.Add(1, 0, first, /*end=*/10);
  h.Add(2, 1, first, /*end=*/50);  // same bytes: a new conversation, never a continuation
  Msgs a = first, b = first;
  a.asst("hello").user("a2");
  b.asst("hello").user("b2");
  // At 20 only line 1's response had ended.
  TurnResult ta = h.Add(3, 20, a, 30);
  EXPECT_EQ(ta.conversation, 1u);
  EXPECT_FALSE(ta.ambiguous);
  EXPECT_EQ(*ta.think_ms, 10);
  // Line 1 was continued: only line 2 is left for the other one.
  TurnResult tb = h.Add(4, 60, b);
  EXPECT_EQ(tb.conversation, 2u);
  EXPECT_EQ(*tb.think_ms, 10);
}

TEST(SessionLinker, AmbiguousPicksLatestEndedThenLatestLine) {
  LinkerHarness h;
  Msgs first;
  first.sys("S").user("hi");
  h.Add(1, 0, first, 10);
  h.Add(2, 1, first, 12);
  Msgs next = first;
  next.asst("x").user("y");
  TurnResult t = h.Add(3, 40, next);
  EXPECT_EQ(t.conversation, 2u);  // ended later: the shorter think time
  EXPECT_TRUE(t.ambiguous);
  // Without ends: the later start, then the later line.
  LinkerHarness g;
  g.Add(1, 5, first);
  g.Add(2, 5, first);
  EXPECT_EQ(g.Add(3, 40, next).conversation, 2u);
}

TEST(SessionLinker, ResponseNotEndedYetIsNotAPredecessor) {
  LinkerHarness h;
  Msgs c;
  c.sys("S").user("u");
  h.Add(1, 0, c, /*end=*/1000);
  c.asst("a").user("u2");
  TurnResult t = h.Add(2, 50, c);  // 950 ms before the end: beyond late_ms (100 ms)
  EXPECT_FALSE(t.linked);
  // Inside the clock slack (2 ms) it links, on time.
  LinkerHarness g;
  Msgs d;
  d.sys("S").user("u");
  g.Add(1, 0, d, 100.5);
  d.asst("a").user("u2");
  TurnResult u = g.Add(2, 99, d);
  EXPECT_TRUE(u.linked);
  EXPECT_FALSE(u.late);
  EXPECT_LT(*u.think_ms, 0);
}

// A loaded proxy reads its clock late: the recorded end of a turn can follow the next turn,
// which holds its answer. Within late_ms that turn still continues it (counted late), and the
// longer prefix wins over a look-alike's shorter one that had ended.
TEST(SessionLinker, LateEndLinksWhenNothingEndedQualifies) {
  LinkerHarness h;
  Msgs other;
  other.sys("S").user("u");
  h.Add(1, 0, other, /*end=*/5);  // a look-alike of the first turn, answered and never continued
  Msgs c = other;
  h.Add(2, 1, c, /*end=*/10);
  c.asst("a").user("u2");
  h.Add(3, 20, c, /*end=*/60);
  c.asst("b").user("u3");
  TurnResult t = h.Add(4, 45, c);  // line 3's end (60) recorded 15 ms after this turn
  EXPECT_TRUE(t.linked);
  EXPECT_TRUE(t.late);
  EXPECT_FALSE(t.ambiguous);
  EXPECT_EQ(t.conversation, 2u);
  EXPECT_EQ(t.turn, 2u);
  // Of two late look-alikes, the one that ended first; an on-time one beats both.
  LinkerHarness g;
  Msgs d;
  d.sys("S").user("v");
  g.Add(1, 0, d, 90);
  g.Add(2, 1, d, 70);
  Msgs e = d;
  e.asst("a").user("v2");
  EXPECT_EQ(g.Add(3, 50, e).conversation, 2u);
  LinkerHarness k;
  k.Add(1, 0, d, 90);
  k.Add(2, 1, d, 40);
  TurnResult on_time = k.Add(3, 50, e);
  EXPECT_EQ(on_time.conversation, 2u);
  EXPECT_FALSE(on_time.late);
}

TEST(SessionLinker, RetryAndNonAssistantJoinDoNotLink) {
  LinkerHarness h;
  Msgs c;
  c.sys("S").user("u");
  h.Add(1, 0, c);
  EXPECT_FALSE(h.Add(2, 5, c).linked);  // the same request again: a new conversation
  Msgs d = c;
  d.user("u again");  // no assistant message after the prefix
  EXPECT_FALSE(h.Add(3, 6, d).linked);
}

TEST(SessionLinker, LongestPrefixWins) {
  LinkerHarness h;
  Msgs x;
  x.sys("S").user("u1");
  h.Add(1, 0, x);  // never continued
  Msgs y = x;
  h.Add(2, 1, y);
  y.asst("a1").user("u2");
  EXPECT_EQ(h.Add(3, 10, y).conversation, 2u);  // the later of two look-alikes
  y.asst("a2").user("u3");
  TurnResult t = h.Add(4, 20, y);  // [S,u1] (line 1) is also a prefix; line 3's is longer
  EXPECT_EQ(t.conversation, 2u);
  EXPECT_EQ(t.turn, 2u);
}

TEST(SessionLinker, EditedHistoryStartsANewConversation) {
  LinkerHarness h;
  Msgs c;
  c.sys("S").user("u1");
  h.Add(1, 0, c);
  Msgs fork = c;
  c.asst("a1").user("u2");
  EXPECT_TRUE(h.Add(2, 10, c).linked);
  fork.asst("a1").user("u2 edited");  // continues [S,u1], which line 2 already continued
  EXPECT_FALSE(h.Add(3, 20, fork).linked);
}

TEST(SessionLinker, WindowClosesIdleConversations) {
  LinkerHarness h({.window_ms = 1000});
  Msgs c;
  c.sys("S").user("u");
  h.Add(1, 0, c, 100);
  c.asst("a").user("u2");
  EXPECT_TRUE(h.Add(2, 1099, c).linked);  // 999 ms after the response ended
  c.asst("b").user("u3");
  EXPECT_FALSE(h.Add(3, 2200, c).linked);  // 1101 ms idle: closed
  // Memory: the sweep closed the first conversation and reused its slot.
  Msgs other;
  other.sys("T").user("v");
  h.Add(4, 5000, other);
  EXPECT_EQ(h.linker().open(), 1u);
  std::vector<ClosedConversation> closed;
  h.linker().DrainClosed([&](const ClosedConversation& x) { closed.push_back(x); });
  ASSERT_EQ(closed.size(), 2u);
  EXPECT_EQ(closed[0].turns + closed[1].turns, 3u);
}

TEST(SessionLinker, ManyLookAlikesStayLinearAndNeverShared) {
  // 100,000 open conversations with the same first turn (one conversation replayed over and
  // over, as load tests send it): each continuation takes one of them, never one twice, and the
  // candidate scan is capped (quadratic, this would take minutes).
  LinkerHarness h;
  Msgs first;
  first.sys("S").user("hi");
  constexpr uint64_t kN = 100000;
  for (uint64_t i = 1; i <= kN; ++i) h.Add(i, static_cast<double>(i), first);
  Msgs next = first;
  next.asst("hello").user("again");
  std::set<uint64_t> seen;
  for (uint64_t i = 0; i < kN; ++i) {
    TurnResult t = h.Add(2 * kN + i, 2.0 * kN + static_cast<double>(i), next);
    ASSERT_TRUE(t.linked);
    ASSERT_TRUE(seen.insert(t.conversation).second);
  }
}

// Three conversations open with the same messages; all answers are back before any continues.
// The time rule alone would pick the one answered last (line 3) for every continuation.
TEST(SessionLinker, LookAlikesToldApartByResponseText) {
  LinkerHarness h;
  Msgs first;
  first.sys("S").user("hi");
  h.AddWithText(1, 0, first, 5, "alpha");
  h.AddWithText(2, 1, first, 6, "beta");
  h.AddWithText(3, 2, first, 7, "gamma");
  Msgs a = first, b = first, g = first;
  a.asst("alpha").user("a2");
  b.asst("beta").user("b2");
  g.asst("gamma").user("g2");
  TurnResult tb = h.AddWithText(4, 20, b, 25, "beta 2");
  EXPECT_EQ(tb.conversation, 2u);
  EXPECT_EQ(tb.pick, PickKind::kByAnswer);
  EXPECT_FALSE(tb.ambiguous);
  TurnResult ta = h.AddWithText(5, 21, a, 26, "alpha 2");
  EXPECT_EQ(ta.conversation, 1u);
  EXPECT_EQ(ta.pick, PickKind::kByAnswer);
  EXPECT_EQ(h.key_reads(), 2);
  // The last one is alone: certain without reading the message.
  TurnResult tg = h.AddWithText(6, 22, g, 27, "gamma 2");
  EXPECT_EQ(tg.conversation, 3u);
  EXPECT_EQ(tg.pick, PickKind::kOnly);
  EXPECT_EQ(h.key_reads(), 2);
  // Their next turns: each has a prefix of its own again.
  b.asst("beta 2").user("b3");
  EXPECT_EQ(h.AddWithText(7, 40, b, 45, "beta 3").conversation, 2u);
}

TEST(SessionLinker, WithoutResponseTextTheTimeRuleGuesses) {
  LinkerHarness h;
  Msgs first;
  first.sys("S").user("hi");
  h.AddWithText(1, 0, first, 5, std::nullopt);
  h.AddWithText(2, 1, first, 6, std::nullopt);
  Msgs next = first;
  next.asst("alpha").user("a2");
  TurnResult t = h.AddWithText(3, 20, next, 25, std::nullopt);
  EXPECT_EQ(t.conversation, 2u);  // ended last
  EXPECT_TRUE(t.ambiguous);
  EXPECT_EQ(t.pick, PickKind::kGuessNoText);
  EXPECT_EQ(h.key_reads(), 0);  // no candidate has text: the message is not read
}

TEST(SessionLinker, TruncatedTextFallsBackAndIsCounted) {
  // Both cut: the time rule, without reading the message.
  LinkerHarness h;
  Msgs first;
  first.sys("S").user("hi");
  h.AddWithText(1, 0, first, 5, "", /*truncated=*/true);
  h.AddWithText(2, 1, first, 6, "", true);
  Msgs next = first;
  next.asst("alpha").user("a2");
  TurnResult t = h.AddWithText(3, 20, next, 25, "x");
  EXPECT_EQ(t.conversation, 2u);
  EXPECT_TRUE(t.ambiguous);
  EXPECT_EQ(t.pick, PickKind::kGuessTruncated);
  EXPECT_EQ(h.key_reads(), 0);
  // One cut, two whole that answered otherwise: the cut one, though it ended first.
  LinkerHarness g;
  g.AddWithText(1, 0, first, 5, "", true);
  g.AddWithText(2, 1, first, 6, "beta");
  g.AddWithText(3, 2, first, 7, "gamma");
  TurnResult u = g.AddWithText(4, 20, next, 25, "x");
  EXPECT_EQ(u.conversation, 1u);
  EXPECT_TRUE(u.ambiguous);
  EXPECT_EQ(u.pick, PickKind::kGuessTruncated);
  // One cut, one whole that matches: certain (a whole text is shorter than any cut one).
  LinkerHarness k;
  k.AddWithText(1, 0, first, 5, "", true);
  k.AddWithText(2, 1, first, 4, "alpha");
  TurnResult v = k.AddWithText(3, 20, next, 25, "x");
  EXPECT_EQ(v.conversation, 2u);
  EXPECT_EQ(v.pick, PickKind::kByAnswer);
  EXPECT_FALSE(v.ambiguous);
}

TEST(SessionLinker, SameAnswersAndNoMatchStayGuesses) {
  Msgs first;
  first.sys("S").user("hi");
  Msgs next = first;
  next.asst("alpha").user("a2");
  // A deterministic server: both answered the same.
  LinkerHarness h;
  h.AddWithText(1, 0, first, 6, "alpha");
  h.AddWithText(2, 1, first, 5, "alpha");
  h.AddWithText(3, 2, first, 7, "beta");  // ended last, but answered otherwise
  TurnResult t = h.AddWithText(4, 20, next, 25, "x");
  EXPECT_EQ(t.conversation, 1u);  // of the two that match, the one that ended last
  EXPECT_EQ(t.pick, PickKind::kGuessSameAnswer);
  EXPECT_TRUE(t.ambiguous);
  // Nothing matches (the client edited the answer): the time rule over all.
  LinkerHarness g;
  g.AddWithText(1, 0, first, 5, "beta");
  g.AddWithText(2, 1, first, 6, "gamma");
  TurnResult u = g.AddWithText(3, 20, next, 25, "x");
  EXPECT_EQ(u.conversation, 2u);
  EXPECT_EQ(u.pick, PickKind::kGuessNoMatch);
  EXPECT_TRUE(u.ambiguous);
}

TEST(AnswerKeyHasher, DecodedTextAndToolCallsInOrder) {
  auto key = [](std::string_view text, std::vector<std::pair<std::string, std::string>> calls) {
    trace::AnswerKeyHasher k;
    for (auto& [name, args] : calls) k.ToolCall(name, args);
    k.Text(text);
    return k.Finish();
  };
  trace::AnswerKeyHasher parts;
  parts.Text("hel");
  parts.Text("lo");
  EXPECT_EQ(parts.Finish(), key("hello", {}));
  EXPECT_NE(key("hello", {}), key("hello!", {}));
  EXPECT_NE(key("", {{"f", "{}"}}), key("", {}));
  EXPECT_NE(key("", {{"f", "{}"}, {"g", "{}"}}), key("", {{"g", "{}"}, {"f", "{}"}}));
  EXPECT_NE(key("", {{"f", "{}"}}), key("", {{"f{", "}"}}));
  EXPECT_NE(key("f", {}), key("", {{"f", ""}}));
}

TEST(KeyIndex, AgreesWithAMapUnderCollidingInsertsAndErases) {
  // Keys that share their low bits collide in the table: long probe runs, wrapping around.
  KeyIndex index;
  std::map<uint64_t, uint32_t> reference;
  std::mt19937_64 rng(5);
  for (int step = 0; step < 200000; ++step) {
    uint64_t key = (rng() % 3000) << (rng() % 2 ? 0 : 20);
    if (rng() % 3 == 0) {
      index.Erase(key);
      reference.erase(key);
    } else {
      bool inserted = false;
      *index.Insert(key, &inserted) = static_cast<uint32_t>(step);
      EXPECT_EQ(inserted, reference.count(key) == 0);
      reference[key] = static_cast<uint32_t>(step);
    }
    if (step % 1000 == 0) {
      ASSERT_EQ(index.size(), reference.size());
      for (const auto& [k, v] : reference) {
        const uint32_t* found = index.Find(k);
        ASSERT_NE(found, nullptr);
        EXPECT_EQ(*found, v);
      }
    }
    uint64_t probe = rng() % 6000;
    EXPECT_EQ(index.Find(probe) != nullptr, reference.count(probe) == 1);
  }
}

TEST(ParseWindow, Units) {
  double ms = 0;
  EXPECT_TRUE(ParseWindow("30m", &ms));
  EXPECT_EQ(ms, 1800000);
  EXPECT_TRUE(ParseWindow("90", &ms));
  EXPECT_EQ(ms, 90000);
  EXPECT_TRUE(ParseWindow("1.5h", &ms));
  EXPECT_EQ(ms, 5400000);
  EXPECT_TRUE(ParseWindow("250ms", &ms));
  EXPECT_EQ(ms, 250);
  EXPECT_FALSE(ParseWindow("0", &ms));
  EXPECT_FALSE(ParseWindow("-1s", &ms));
  EXPECT_FALSE(ParseWindow("5 days", &ms));
  EXPECT_FALSE(ParseWindow("", &ms));
}

// ---- InferSessions on files ----

class InferTest : public ::testing::Test {
 protected:
  std::string Write(const std::string& name, const std::string& text) {
    return tmp_.Write(name, text);
  }
  static std::string Read(const std::string& p) {
    std::ifstream f(p);
    std::stringstream s;
    s << f.rdbuf();
    return s.str();
  }
  static std::vector<std::string> Lines(const std::string& text) {
    std::vector<std::string> v;
    std::stringstream s(text);
    for (std::string l; std::getline(s, l);) v.push_back(l);
    return v;
  }
  static std::string Row(int ts, const Msgs& m, const std::string& extra = "") {
    return "{\"timestamp\":" + std::to_string(ts) +
           ",\"payload\":{\"model\":\"m\",\"messages\":" + m.Array() + ",\"max_tokens\":5}" +
           extra + "}\n";
  }
  SessionsReport Run(const std::string& in, SessionsOptions o = {}) {
    o.path = in;
    if (o.out.empty()) o.out = dir_ + "/out.jsonl";
    return InferSessions(o);
  }
  const llmtap::testing::TempDir tmp_;
  const std::string dir_ = tmp_.path();
};

TEST_F(InferTest, IdsAppendedRowsOtherwiseByteEqual) {
  Msgs a, b;
  a.sys("S").user("a");
  b.sys("S").user("b");
  std::string in;
  in += Row(0, a);
  in += Row(1, b);
  in += R"({"timestamp":2,"payload":{"model":"m","prompt":"complete me"}})"
        "\n";
  in += "\n";  // blank: kept, so sidecar line numbers still fit
  a.asst("x").user("a2");
  in += Row(5, a);
  in += Row(6, b, R"(,"session_id":"client-7")");  // named: kept as is, not linked
  b.asst("y").user("b2");
  in += Row(9, b);
  std::string path = Write("cap.jsonl", in);
  SessionsReport r = Run(path);
  ASSERT_TRUE(r.io.ok()) << r.io.ToString();
  EXPECT_EQ(r.exit_code(), 0);
  std::vector<std::string> inl = Lines(in), out = Lines(Read(dir_ + "/out.jsonl"));
  ASSERT_EQ(out.size(), inl.size());
  auto with = [](const std::string& row, const std::string& id) {
    return row.substr(0, row.size() - 1) + ",\"session_id\":\"" + id + "\"}";
  };
  EXPECT_EQ(out[0], with(inl[0], "conv-1"));
  EXPECT_EQ(out[1], with(inl[1], "conv-2"));
  EXPECT_EQ(out[2], inl[2]);
  EXPECT_EQ(out[3], "");
  EXPECT_EQ(out[4], with(inl[4], "conv-1"));
  EXPECT_EQ(out[5], inl[5]);
  EXPECT_EQ(out[6], with(inl[6], "conv-2"));
  for (const std::string& l : out) {
    if (!l.empty()) {
      EXPECT_NO_THROW(Json::parse(l)) << l;
    }
  }
  EXPECT_EQ(r.chat_rows, 4u);
  EXPECT_EQ(r.sessions, 2u);
  EXPECT_EQ(r.linked, 2u);
  EXPECT_EQ(r.named_rows, 1u);
  EXPECT_EQ(r.other_rows, 1u);
  EXPECT_EQ(r.blank, 1u);
  EXPECT_EQ(r.turns.count(), 2u);
  EXPECT_EQ(r.turns.max(), 2u);
  std::string text = RenderSessionsText(r);
  EXPECT_NE(text.find("2 inferred sessions (2 multi-turn, 0 single-turn)"), std::string::npos)
      << text;
  Json j = Json::parse(RenderSessionsJson(r));
  EXPECT_EQ(j["linked"], 2);
  EXPECT_EQ(j["turns_per_session"]["p50"], 2);
}

TEST_F(InferTest, NeverOverwritesWithoutForceAndRefusesSameFile) {
  Msgs a;
  a.sys("S").user("a");
  std::string path = Write("cap.jsonl", Row(0, a));
  Write("out.jsonl", "precious\n");
  SessionsReport r = Run(path);
  EXPECT_EQ(r.exit_code(), 2);
  EXPECT_NE(r.io.ToString().find("--force"), std::string::npos) << r.io.ToString();
  EXPECT_EQ(Read(dir_ + "/out.jsonl"), "precious\n");
  SessionsOptions o;
  o.force = true;
  EXPECT_EQ(Run(path, o).exit_code(), 0);
  o.out = path;
  EXPECT_EQ(Run(path, o).exit_code(), 2);
}

TEST_F(InferTest, BadRowsPassThroughExitOne) {
  Msgs a;
  a.sys("S").user("a");
  std::string in = Row(0, a) + "{not json\n" +
                   R"({"timestamp":1} {"x":2})"
                   "\n" +
                   R"({"timestamp":"x","payload":{"messages":[]}})"
                   "\n";
  a.asst("x").user("b");
  in += Row(3, a);
  in += R"({"timestamp":4,"payload":{"messages":[{"role":"user","content":"torn)";
  std::string path = Write("cap.jsonl", in);
  SessionsReport r = Run(path);
  EXPECT_EQ(r.exit_code(), 1) << RenderSessionsText(r);
  EXPECT_EQ(r.bad.total, 3u);  // not JSON; trailing content; torn last line
  EXPECT_TRUE(r.torn_tail);
  std::vector<std::string> out = Lines(Read(dir_ + "/out.jsonl"));
  ASSERT_EQ(out.size(), 6u);
  EXPECT_EQ(out[1], "{not json");
  EXPECT_NE(out[4].find("\"session_id\":\"conv-1\""), std::string::npos);
  EXPECT_EQ(r.other_rows, 1u);  // empty messages list: nothing to link
  EXPECT_NE(RenderSessionsText(r).find("cap.jsonl:2: invalid JSON"), std::string::npos);
}

TEST_F(InferTest, RawPayloadRefusedWithTheFix) {
  std::string path =
      Write("raw.jsonl", R"({"model":"m","messages":[{"role":"user","content":"x"}]})"
                         "\n");
  SessionsReport r = Run(path);
  EXPECT_EQ(r.exit_code(), 2);
  EXPECT_NE(r.io.ToString().find("llmtap convert"), std::string::npos) << r.io.ToString();
}

TEST_F(InferTest, OutcomesGiveThinkTimeAndSeparateLookAlikes) {
  Msgs first;
  first.sys("S").user("hi");
  Msgs a = first, b = first;
  a.asst("hello").user("a2");
  b.asst("hello").user("b2");
  std::string in = Row(0, first) + Row(1, first) + Row(20, a) + Row(60, b);
  std::string path = Write("cap.jsonl", in);
  Write("cap.jsonl.outcomes.ndjson", R"({"line":2,"timestamp":1,"status":200,"latency_ms":49.0})"
                                     "\n"
                                     R"({"line":1,"timestamp":0,"status":200,"latency_ms":10.0})"
                                     "\n"
                                     R"({"line":3,"timestamp":20,"status":200,"latency_ms":5.0})"
                                     "\n");
  SessionsReport r = Run(path);
  ASSERT_EQ(r.exit_code(), 0) << RenderSessionsText(r);
  EXPECT_EQ(r.outcomes_matched, 3u);
  std::vector<std::string> out = Lines(Read(dir_ + "/out.jsonl"));
  EXPECT_NE(out[2].find("\"conv-1\""), std::string::npos);
  EXPECT_NE(out[3].find("\"conv-2\""), std::string::npos);
  EXPECT_EQ(r.think_ms.count(), 2u);
  EXPECT_EQ(r.think_ms.min(), 10u);
  EXPECT_EQ(r.ambiguous, 0u);
  // Without the sidecar the look-alikes swap (the later first turn is picked first).
  SessionsOptions o;
  o.no_outcomes = true;
  o.force = true;
  SessionsReport n = Run(path, o);
  EXPECT_EQ(n.ambiguous, 1u);
  EXPECT_EQ(n.think_ms.count(), 0u);
}

// Three conversations open with the same messages and their answers (capture_responses) are in
// the sidecar; each continues with the answer as a client sends it back: escaped differently,
// tool calls with their keys in another order, content in text parts.
TEST_F(InferTest, ResponseTextTellsLookAlikesApart) {
  Msgs first;
  first.sys("S").user("hi");
  Msgs a = first, b = first, g = first;
  a.m.push_back(R"({"role":"assistant","content":"\u0061lpha \"q\""})");
  a.user("a2");
  b.m.push_back(R"({"role":"assistant","content":null,"tool_calls":[{"id":"c9","type":"function",)"
                R"("function":{"arguments":"{\"q\":\"x\"}","name":"lookup"}}]})");
  b.tool("result");
  g.m.push_back(
      R"({"content":[{"type":"text","text":"gam"},{"type":"text","text":"ma"}],"role":"assistant"})");
  g.user("g2");
  std::string in =
      Row(0, first) + Row(1, first) + Row(2, first) + Row(20, a) + Row(21, b) + Row(22, g);
  std::string path = Write("cap.jsonl", in);
  auto side = [](int line, int ts, const std::string& response) {
    return R"({"line":)" + std::to_string(line) + R"(,"timestamp":)" + std::to_string(ts) +
           R"(,"status":200,"latency_ms":5.0,"completion_tokens":3,"response":)" + response + "}\n";
  };
  const std::string alpha =
      R"({"text":"alpha \"q\"","reasoning":"hmm","tool_calls":[],"truncated":false})";
  const std::string tool =
      R"({"text":"","reasoning":"","tool_calls":[{"name":"lookup","arguments":"{\"q\":\"x\"}"}],"truncated":false})";
  const std::string gamma = R"({"text":"gamma","reasoning":"","tool_calls":[],"truncated":false})";
  const std::string later = R"({"text":"z","reasoning":"","tool_calls":[],"truncated":false})";
  Write("cap.jsonl.outcomes.ndjson", side(1, 0, alpha) + side(2, 1, tool) + side(3, 2, gamma) +
                                         side(4, 20, later) + side(5, 21, later) +
                                         side(6, 22, later));
  SessionsReport r = Run(path);
  ASSERT_EQ(r.exit_code(), 0) << RenderSessionsText(r);
  std::vector<std::string> out = Lines(Read(dir_ + "/out.jsonl"));
  ASSERT_EQ(out.size(), 6u);
  EXPECT_NE(out[3].find("\"conv-1\""), std::string::npos) << out[3];
  EXPECT_NE(out[4].find("\"conv-2\""), std::string::npos) << out[4];
  EXPECT_NE(out[5].find("\"conv-3\""), std::string::npos) << out[5];
  EXPECT_EQ(r.linked, 3u);
  EXPECT_EQ(r.by_answer, 2u);  // the third was alone by then
  EXPECT_EQ(r.ambiguous, 0u);
  Json j = Json::parse(RenderSessionsJson(r));
  EXPECT_EQ(j["by_response_text"], 2);
  EXPECT_EQ(j["guessed"]["truncated"], 0);
  EXPECT_NE(RenderSessionsText(r).find("2 told from look-alikes by the response text"),
            std::string::npos)
      << RenderSessionsText(r);

  // The first answer cut at max_response_bytes: its continuation falls back (and is right
  // here only because the cut one is the only candidate left whose text is unknown).
  SessionsOptions o;
  o.force = true;
  const std::string cut = R"({"text":"al","reasoning":"","tool_calls":[],"truncated":true})";
  Write("cap.jsonl.outcomes.ndjson", side(1, 0, cut) + side(2, 1, tool) + side(3, 2, gamma));
  SessionsReport c = Run(path, o);
  ASSERT_EQ(c.exit_code(), 0) << RenderSessionsText(c);
  out = Lines(Read(dir_ + "/out.jsonl"));
  EXPECT_NE(out[3].find("\"conv-1\""), std::string::npos) << out[3];
  EXPECT_NE(out[4].find("\"conv-2\""), std::string::npos) << out[4];
  EXPECT_EQ(c.by_answer, 1u);
  EXPECT_EQ(c.ambiguous, 1u);
  EXPECT_EQ(c.guessed_truncated, 1u);
  EXPECT_NE(RenderSessionsText(c).find("1 with response text cut at max_response_bytes"),
            std::string::npos)
      << RenderSessionsText(c);

  // No response text (capture_responses off): the time rule, every pick counted as a guess
  // (the one answered last goes first: all three wrong-footed but the last).
  Write("cap.jsonl.outcomes.ndjson", side(1, 0, "null") + side(2, 1, "null") + side(3, 2, "null"));
  SessionsReport n = Run(path, o);
  ASSERT_EQ(n.exit_code(), 0) << RenderSessionsText(n);
  EXPECT_EQ(n.by_answer, 0u);
  EXPECT_EQ(n.ambiguous, 2u);
  EXPECT_EQ(n.guessed_no_text, 2u);
  out = Lines(Read(dir_ + "/out.jsonl"));
  EXPECT_NE(out[3].find("\"conv-3\""), std::string::npos) << out[3];
}

TEST_F(InferTest, SidecarOfAnotherFileRefused) {
  Msgs a;
  a.sys("S").user("a");
  std::string in;
  for (int i = 0; i < 20; ++i) in += Row(i * 10, a);
  std::string path = Write("cap.jsonl", in);
  std::string side;
  for (int i = 1; i <= 20; ++i) {
    side += "{\"line\":" + std::to_string(i) + ",\"timestamp\":" + std::to_string(i * 7 + 3) +
            ",\"status\":200,\"latency_ms\":1}\n";
  }
  Write("other.outcomes.ndjson", side);
  SessionsOptions o;
  o.outcomes = dir_ + "/other.outcomes.ndjson";
  SessionsReport r = Run(path, o);
  EXPECT_EQ(r.exit_code(), 2);
  EXPECT_NE(r.io.ToString().find("other.outcomes.ndjson"), std::string::npos) << r.io.ToString();
  EXPECT_NE(r.io.ToString().find("cap.jsonl"), std::string::npos);
  EXPECT_NE(access((dir_ + "/out.jsonl").c_str(), F_OK), 0);  // nothing left behind
}

TEST_F(InferTest, WhitespaceCrlfAndKeyOrderTolerated) {
  std::string in =
      "{ \"payload\" : {\"messages\":[{\"content\":\"s\",\"role\":\"system\"},{\"role\":\"user\","
      "\"content\":\"u\"}]}, \"timestamp\" : 0 }  \r\n"
      "{\"timestamp\":5,\"payload\":{\"messages\":[{\"content\":\"s\",\"role\":\"system\"},"
      "{\"role\":\"user\",\"content\":\"u\"},{\"content\":\"a\",\"role\":\"assistant\"},"
      "{\"role\":\"user\",\"content\":\"v\"}]}}\r\n";
  std::string path = Write("cap.jsonl", in);
  SessionsReport r = Run(path);
  ASSERT_EQ(r.exit_code(), 0) << RenderSessionsText(r);
  EXPECT_EQ(r.linked, 1u);
  std::vector<std::string> out = Lines(Read(dir_ + "/out.jsonl"));
  EXPECT_EQ(Json::parse(out[0])["session_id"], "conv-1");
  EXPECT_EQ(Json::parse(out[1])["session_id"], "conv-1");
}

TEST_F(InferTest, TopLevelMessagesRowsAndRepeatedKeys) {
  // AIPerf's mooncake `messages` rows link like payload rows; of a key given twice, the last
  // one counts.
  Msgs c;
  c.sys("S").user("u");
  std::string in = "{\"timestamp\":0,\"messages\":" + c.Array() + "}\n";
  Msgs decoy;
  decoy.sys("other").user("x").asst("y").user("z");
  c.asst("a").user("v");
  in += "{\"timestamp\":3,\"payload\":{\"messages\":" + decoy.Array() +
        ",\"messages\":" + c.Array() + "}}\n";
  std::string path = Write("cap.jsonl", in);
  SessionsReport r = Run(path);
  ASSERT_EQ(r.exit_code(), 0) << RenderSessionsText(r);
  EXPECT_EQ(r.linked, 1u);
  EXPECT_EQ(r.unlinked, 0u);
}

// Responses API rows: linked by previous_response_id to the row whose outcome has that
// response_id, interleaved conversations kept apart; a previous id nobody answered starts a
// session of its own and is counted.
TEST_F(InferTest, ResponsesChainsByPreviousResponseId) {
  auto row = [](int ts, const std::string& previous) {
    std::string p = previous.empty() ? "" : R"(,"previous_response_id":")" + previous + "\"";
    return R"({"timestamp":)" + std::to_string(ts) + R"(,"payload":{"model":"m","input":"x")" + p +
           R"(},"endpoint_type":"responses"})"
           "\n";
  };
  const std::string in = row(0, "") + row(1, "") + row(5, "resp_a") + row(6, "resp_b") +
                         row(9, "resp_a2") + row(10, "resp_gone");
  std::string path = Write("responses.jsonl", in);
  std::string outcomes;
  const char* ids[] = {"resp_a", "resp_b", "resp_a2", "resp_b2", "resp_a3", "resp_x"};
  const int ts[] = {0, 1, 5, 6, 9, 10};
  for (int i = 0; i < 6; ++i) {
    outcomes += R"({"line":)" + std::to_string(i + 1) + R"(,"timestamp":)" + std::to_string(ts[i]) +
                R"(,"status":200,"latency_ms":1.0,"response_id":")" + ids[i] + "\"}\n";
  }
  Write("responses.jsonl.outcomes.ndjson", outcomes);
  SessionsReport r = Run(path);
  ASSERT_EQ(r.exit_code(), 0) << RenderSessionsText(r);
  EXPECT_EQ(r.responses_rows, 6u);
  EXPECT_EQ(r.responses_linked, 3u);
  EXPECT_EQ(r.responses_missing, 1u);
  EXPECT_EQ(r.responses_sessions, 3u);
  std::vector<std::string> out = Lines(Read(dir_ + "/out.jsonl"));
  const char* expected[] = {"conv-1", "conv-2", "conv-1", "conv-2", "conv-1", "conv-6"};
  for (int i = 0; i < 6; ++i) {
    EXPECT_NE(out[i].find(std::string("\"session_id\":\"") + expected[i] + "\""), std::string::npos)
        << out[i];
  }
  EXPECT_NE(RenderSessionsText(r).find("3 linked by previous_response_id; 1 name a response"),
            std::string::npos)
      << RenderSessionsText(r);
}

}  // namespace
}  // namespace llmtap::sessions
