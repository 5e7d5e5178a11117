// Causal replay's scheduler (SessionGate, sessions.h) turn by turn on a made-up clock, and the
// shard assignment that keeps a session's rows in one process.
#include "replay/sessions.h"

#include <map>
#include <set>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "replay/input.h"
#include "replay/schedule.h"

namespace llmtap::replay {
namespace {

using Gate = SessionGate<std::string>;

// A turn that holds `ticket` arrives at its plan time: sent (due time) or held (nullopt).
std::optional<double> ArriveWith(Gate& gate, const std::string& session, uint64_t ticket,
                                 double scheduled, const std::string& name) {
  std::string turn = name;
  double due = -1;
  if (!gate.Arrive(session, ticket, scheduled, &turn, &due)) return std::nullopt;
  EXPECT_EQ(turn, name);
  return due;
}

// A turn taken from the plan and arriving at its plan time, before any later turn of its
// session.
std::optional<double> Arrive(Gate& gate, const std::string& session, double scheduled,
                             const std::string& name) {
  return ArriveWith(gate, session, gate.Reserve(session), scheduled, name);
}

// `session`'s turn in flight ends at `ended`: its next turn, `name`, is released, due at `due`.
void ExpectReleased(Gate& gate, const std::string& session, double ended,
                    std::optional<double> captured_end, const std::string& name, double due) {
  std::optional<Gate::Next> next = gate.Ended(session, ended, captured_end);
  ASSERT_TRUE(next);
  EXPECT_EQ(next->turn, name);
  EXPECT_DOUBLE_EQ(next->due_ms, due);
}

// The runner's workers wait for their rows' times apart: turn 2 may reach the gate before turn
// 1 (its worker held up longer than the 10 ms between them). Turn 2 waits for turn 1 to arrive,
// go and end, and then goes as it would have: turns go in plan order.
TEST(SessionGateTest, ATurnThatArrivesBeforeTheTurnBeforeItWaitsForItsEnd) {
  Gate gate;
  const uint64_t first = gate.Reserve("a");
  const uint64_t second = gate.Reserve("a");
  EXPECT_EQ(ArriveWith(gate, "a", second, 10, "a2"), std::nullopt);
  EXPECT_EQ(gate.waiting(), 1u);
  EXPECT_EQ(ArriveWith(gate, "a", first, 0, "a1"), 0.0);  // late, due on its schedule
  // a1 ends at 60, captured at 5: a2 (captured 5 ms after it) is due at 65.
  ExpectReleased(gate, "a", 60, 5.0, "a2", 65);
  EXPECT_EQ(gate.waiting(), 0u);
  // A third turn reserved before a2 ended arrives after a1's end but waits for a2's.
  const uint64_t third = gate.Reserve("a");
  EXPECT_EQ(ArriveWith(gate, "a", third, 20, "a3"), std::nullopt);
  ExpectReleased(gate, "a", 90, std::nullopt, "a3", 90);
  EXPECT_FALSE(gate.Ended("a", 95, std::nullopt));
  EXPECT_EQ(gate.sessions(), 0u);
}

// A turn reserved, whose predecessor ended before it arrived, goes at once on arrival and
// inherits the predecessor's late end; the session is not forgotten in between.
TEST(SessionGateTest, AReservedTurnKeepsItsSessionUntilItArrives) {
  Gate gate(1);  // idle sessions forgotten after 1 ms
  ASSERT_EQ(Arrive(gate, "a", 0, "a1"), 0.0);
  const uint64_t second = gate.Reserve("a");
  EXPECT_FALSE(gate.Ended("a", 300, 100.0));           // 200 ms late
  EXPECT_FALSE(gate.Ended("b", 10000, std::nullopt));  // the clock moves on
  EXPECT_EQ(gate.sessions(), 1u);
  // Captured 50 ms after a1's captured end: due 50 ms after a1's real end.
  EXPECT_EQ(ArriveWith(gate, "a", second, 150, "a2"), 350.0);
}

TEST(SessionGateTest, ATurnWhoseTimeComesWhileItsPredecessorRunsIsHeldUntilItEnds) {
  Gate gate;
  EXPECT_EQ(Arrive(gate, "a", 0, "a1"), 0.0);
  // Captured: a1 took 100 ms, a2 came 400 ms later (think time 300 ms). Here a1 is still
  // running at 400.
  EXPECT_EQ(Arrive(gate, "a", 400, "a2"), std::nullopt);
  EXPECT_EQ(gate.waiting(), 1u);
  // a1 ends at 900 (captured end 100): a2 is due at 900 + 300.
  std::optional<Gate::Next> next = gate.Ended("a", 900, 100.0);
  ASSERT_TRUE(next);
  EXPECT_EQ(next->turn, "a2");
  EXPECT_DOUBLE_EQ(next->due_ms, 1200);
  EXPECT_EQ(gate.waiting(), 0u);
}

TEST(SessionGateTest, ThinkTimeAfterALateEndEvenWhenTheNextTurnArrivesLater) {
  Gate gate;
  ASSERT_EQ(Arrive(gate, "a", 0, "a1"), 0.0);
  // a1 ended at 250, 150 ms later than captured (100): a2 (plan 400, think 300) is due at 550.
  EXPECT_FALSE(gate.Ended("a", 250, 100.0));
  EXPECT_EQ(gate.sessions(), 1u);  // the shift is remembered for the next turn
  EXPECT_EQ(Arrive(gate, "a", 400, "a2"), 550.0);
  // a2 ended at 580, before its own captured end (600): nothing to remember, a3 goes on its
  // schedule.
  EXPECT_FALSE(gate.Ended("a", 580, 600.0));
  EXPECT_EQ(gate.sessions(), 0u);
  EXPECT_EQ(Arrive(gate, "a", 700, "a3"), 700.0);
}

TEST(SessionGateTest, AnEarlyEndKeepsTheSchedule) {
  Gate gate;
  ASSERT_EQ(Arrive(gate, "a", 0, "a1"), 0.0);
  EXPECT_FALSE(gate.Ended("a", 60, 100.0));  // faster than captured
  EXPECT_EQ(gate.sessions(), 0u);
  EXPECT_EQ(Arrive(gate, "a", 400, "a2"), 400.0);
}

TEST(SessionGateTest, WithoutACapturedLatencyTheThinkTimeIsZero) {
  Gate gate;
  ASSERT_EQ(Arrive(gate, "a", 0, "a1"), 0.0);
  EXPECT_EQ(Arrive(gate, "a", 400, "a2"), std::nullopt);
  std::optional<Gate::Next> next = gate.Ended("a", 900, std::nullopt);
  ASSERT_TRUE(next);
  EXPECT_DOUBLE_EQ(next->due_ms, 900);  // at its predecessor's end, no think time
  // Ended with no latency known: any later turn arrives after that end, on its schedule.
  EXPECT_FALSE(gate.Ended("a", 950, std::nullopt));
  EXPECT_EQ(gate.sessions(), 0u);
}

TEST(SessionGateTest, OverlappingCapturedTurnsGetNoNegativeThinkTime) {
  Gate gate;
  ASSERT_EQ(Arrive(gate, "a", 0, "a1"), 0.0);
  // Captured: a2 came at 50, before a1's captured end (100).
  EXPECT_EQ(Arrive(gate, "a", 50, "a2"), std::nullopt);
  std::optional<Gate::Next> next = gate.Ended("a", 300, 100.0);
  ASSERT_TRUE(next);
  EXPECT_DOUBLE_EQ(next->due_ms, 300);
}

TEST(SessionGateTest, AFailedTurnReleasesTheNextAndTurnsQueueInOrder) {
  Gate gate;
  ASSERT_EQ(Arrive(gate, "a", 0, "a1"), 0.0);
  EXPECT_EQ(Arrive(gate, "a", 10, "a2"), std::nullopt);
  EXPECT_EQ(Arrive(gate, "a", 20, "a3"), std::nullopt);
  // a1 failed (a timeout, an error: the runner calls Ended whatever the outcome) at 5000.
  std::optional<Gate::Next> next = gate.Ended("a", 5000, std::nullopt);
  ASSERT_TRUE(next);
  EXPECT_EQ(next->turn, "a2");
  EXPECT_DOUBLE_EQ(next->due_ms, 5000);
  // a3 waits for a2, not for a1.
  next = gate.Ended("a", 5100, 10.0);
  ASSERT_TRUE(next);
  EXPECT_EQ(next->turn, "a3");
  // Captured think time of a3 after a2's captured end (10): 20 - 10.
  EXPECT_DOUBLE_EQ(next->due_ms, 5110);
  EXPECT_FALSE(gate.Ended("a", 5200, std::nullopt));
  EXPECT_EQ(gate.sessions(), 0u);
}

TEST(SessionGateTest, SessionsRunConcurrently) {
  Gate gate;
  ASSERT_EQ(Arrive(gate, "a", 0, "a1"), 0.0);
  ASSERT_EQ(Arrive(gate, "b", 1, "b1"), 1.0);
  EXPECT_EQ(Arrive(gate, "a", 5, "a2"), std::nullopt);
  EXPECT_EQ(Arrive(gate, "c", 6, "c1"), 6.0);  // a's wait holds nobody else
  EXPECT_FALSE(gate.Ended("b", 7, std::nullopt));
  EXPECT_EQ(Arrive(gate, "b", 8, "b2"), 8.0);
  ASSERT_TRUE(gate.Ended("a", 9, std::nullopt));
}

TEST(SessionGateTest, IdleSessionsAreForgottenAfterTheIdleTime) {
  Gate gate(1000);
  ASSERT_EQ(Arrive(gate, "a", 0, "a1"), 0.0);
  EXPECT_FALSE(gate.Ended("a", 500, 100.0));  // late: remembered
  ASSERT_EQ(Arrive(gate, "b", 600, "b1"), 600.0);
  EXPECT_EQ(gate.sessions(), 2u);
  EXPECT_FALSE(gate.Ended("b", 1600, 700.0));  // a idle since 500: forgotten at 1600
  EXPECT_EQ(gate.sessions(), 1u);
  // a's next turn goes on its schedule (its predecessor ended long before).
  EXPECT_EQ(Arrive(gate, "a", 1700, "a2"), 1700.0);
}

TEST(SessionGateTest, TakeWaitingEmptiesTheGate) {
  Gate gate;
  ASSERT_EQ(Arrive(gate, "a", 0, "a1"), 0.0);
  EXPECT_EQ(Arrive(gate, "a", 1, "a2"), std::nullopt);
  EXPECT_EQ(Arrive(gate, "a", 2, "a3"), std::nullopt);
  std::deque<std::string> waiting = gate.TakeWaiting();
  EXPECT_EQ(waiting, (std::deque<std::string>{"a2", "a3"}));
  EXPECT_EQ(gate.sessions(), 0u);
  EXPECT_FALSE(gate.Ended("a", 10, std::nullopt));  // the turn in flight ends after
}

TEST(SessionShardTest, EveryRowOfASessionInOneShardAndSessionlessRowsByIndex) {
  ScheduleOptions o;
  o.shard_count = 3;
  std::vector<TraceRequest> rows;
  for (int i = 0; i < 300; ++i) {
    TraceRequest r;
    r.index = static_cast<uint64_t>(i);
    r.line = r.index + 1;
    r.timestamp_ms = i * 10.0;
    if (i % 4 != 0) r.session_id = "conversation-" + std::to_string(i % 37);
    rows.push_back(r);
  }
  std::map<std::string, std::set<uint32_t>> shards_of;
  size_t planned = 0;
  for (uint32_t shard = 0; shard < 3; ++shard) {
    o.shard_index = shard;
    Plan plan;
    std::string error;
    ASSERT_TRUE(BuildPlan(rows, o, 0, &plan, &error)) << error;
    planned += plan.items.size();
    for (const PlannedRequest& p : plan.items) {
      const TraceRequest& r = rows[p.request];
      EXPECT_DOUBLE_EQ(p.scheduled_ms, *r.timestamp_ms);  // the whole trace's schedule
      if (r.session_id.empty()) {
        EXPECT_EQ(r.index % 3, shard);
      } else {
        shards_of[r.session_id].insert(shard);
        EXPECT_EQ(SessionShard(r.session_id, 3), shard);
      }
    }
  }
  EXPECT_EQ(planned, rows.size());  // every row in exactly one shard
  EXPECT_EQ(shards_of.size(), 37u);
  std::set<uint32_t> used;
  for (const auto& [id, shards] : shards_of) {
    EXPECT_EQ(shards.size(), 1u) << id;
    used.insert(*shards.begin());
  }
  EXPECT_EQ(used.size(), 3u);  // 37 sessions spread over the three
  // Fixed values: every machine and build shards alike.
  EXPECT_EQ(SessionShard("", 7), 14695981039346656037ull % 7);
  EXPECT_EQ(SessionShard("a", 1000), 12638187200555641996ull % 1000);
}

}  // namespace
}  // namespace llmtap::replay
