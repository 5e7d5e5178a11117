// The outcomes sidecar reader and its safe join (trace/outcomes.h).
#include "trace/outcomes.h"

#include <gtest/gtest.h>

#include "capture/file_names.h"
#include "trace/record.h"
#include "trace/trace_io.h"
#include "trace/trace_test_util.h"

namespace llmtap::trace {
namespace {

using testing::TempDir;

std::string OutcomeLine(uint64_t line, int64_t timestamp, const std::string& rest = "") {
  return "{\"line\":" + std::to_string(line) + ",\"timestamp\":" + std::to_string(timestamp) +
         ",\"status\":200,\"latency_ms\":12.5,\"completion_tokens\":" + std::to_string(line * 10) +
         rest + "}\n";
}

TEST(OutcomeTableTest, LoadsInAnyOrderKeepsTheLastOfDuplicatesAndCountsBadLines) {
  TempDir dir;
  std::string path = dir.Write(
      "s.jsonl", OutcomeLine(3, 30) + OutcomeLine(1, 10) + "not json\n" +
                     "{\"line\":2}\n" +  // no timestamp: cannot be joined safely
                     "{\"line\":2,\"timestamp\":20,\"status\":200,\"completion_tokens\":5,"
                     "\"cancelled\":true}\n" +
                     "{\"line\":4,\"timestamp\":40.0,\"status\":502,\"error\":null}\n" +
                     "{\"line\":1,\"timestamp\":10,\"completion_tokens\":7,\"error\":\"reset\"}\n" +
                     "\n");
  OutcomeTable t;
  bool loaded = false;
  ASSERT_TRUE(t.Load(path, {.keep_text = true}, &loaded).ok());
  ASSERT_TRUE(loaded);
  EXPECT_EQ(t.size(), 4u);
  EXPECT_EQ(t.bad_lines(), 2u);
  EXPECT_EQ(t.duplicate_lines(), 1u);
  EXPECT_EQ(t.max_line(), 4u);
  const Outcome* one = t.Find(1);
  ASSERT_NE(one, nullptr);  // the later of the two
  EXPECT_EQ(one->unusable, Unusable::kUpstreamError);
  EXPECT_EQ(one->completion_tokens, 7u);
  EXPECT_FALSE(one->usable_tokens());
  EXPECT_EQ(t.Text(*one),
            "{\"line\":1,\"timestamp\":10,\"completion_tokens\":7,\"error\":\"reset\"}");
  EXPECT_EQ(t.Find(2)->unusable, Unusable::kCancelled);
  const Outcome* three = t.Find(3);
  EXPECT_EQ(three->usable_tokens(), 30u);
  EXPECT_EQ(three->latency_ms, 12.5);
  EXPECT_EQ(three->status, 200);
  EXPECT_EQ(three->timestamp, 30);
  EXPECT_EQ(t.Find(4)->unusable, Unusable::kHttpStatus);
  EXPECT_EQ(t.Find(4)->timestamp, 40);
  EXPECT_EQ(t.Find(5), nullptr);

  OutcomeTable missing;
  ASSERT_TRUE(missing.Load(dir.File("none.jsonl"), &loaded).ok());
  EXPECT_FALSE(loaded);
}

// Responses and Messages answers' ids (`response_id`, after "error"), kept when asked for: replay
// links Responses chains by them.
TEST(OutcomeTableTest, KeepsResponseIdsWhenAsked) {
  TempDir dir;
  const std::string path =
      dir.Write("s.jsonl", OutcomeLine(2, 20, ",\"error\":null,\"response_id\":\"resp_b\"") +
                               OutcomeLine(1, 10, ",\"error\":null,\"response_id\":\"resp_a\"") +
                               OutcomeLine(3, 30) + OutcomeLine(4, 40, ",\"response_id\":\"\"") +
                               OutcomeLine(5, 50, ",\"error\":null,\"response_id\":\"msg_c\""));
  OutcomeTable t;
  bool loaded = false;
  ASSERT_TRUE(t.Load(path, {.response_ids = true}, &loaded).ok());
  ASSERT_TRUE(loaded);
  EXPECT_EQ(t.ResponseId(*t.Find(1)), "resp_a");
  EXPECT_EQ(t.ResponseId(*t.Find(2)), "resp_b");
  EXPECT_EQ(t.ResponseId(*t.Find(3)), "");
  EXPECT_EQ(t.ResponseId(*t.Find(4)), "");
  EXPECT_EQ(t.ResponseId(*t.Find(5)), "msg_c");
  OutcomeTable without;
  ASSERT_TRUE(without.Load(path, &loaded).ok());
  EXPECT_EQ(without.ResponseId(*without.Find(1)), "");
}

TEST(OutcomeTableTest, KeepsTheServersCacheReportWhenItHasBothCounts) {
  TempDir dir;
  const std::string path =
      dir.Write("s.jsonl", OutcomeLine(1, 10, ",\"prompt_tokens\":120,\"cached_tokens\":96") +
                               OutcomeLine(2, 20, ",\"prompt_tokens\":120,\"cached_tokens\":null") +
                               OutcomeLine(3, 30, ",\"cached_tokens\":5") +
                               OutcomeLine(4, 40, ",\"prompt_tokens\":4,\"cached_tokens\":5") +
                               OutcomeLine(5, 50, ",\"prompt_tokens\":0,\"cached_tokens\":0"));
  OutcomeTable t;
  bool loaded = false;
  ASSERT_TRUE(t.Load(path, &loaded).ok());
  EXPECT_EQ(t.Find(1)->prompt_tokens, 120u);
  EXPECT_EQ(t.Find(1)->cached_tokens, 96u);
  // Not reported, one count only, or more cached than prompted: no cache report.
  for (uint64_t line : {2, 3, 4}) {
    EXPECT_EQ(t.Find(line)->prompt_tokens, Outcome::kNoCache) << line;
    EXPECT_EQ(t.Find(line)->cached_tokens, Outcome::kNoCache) << line;
  }
  EXPECT_EQ(t.Find(5)->cached_tokens, 0u);
}

TEST(OutcomeTableTest, LoadForFindsTheSidecarBesideTheCaptureOrTheOneNamed) {
  TempDir dir;
  std::string cap = dir.Write("cap.jsonl", "");
  std::vector<std::string> warnings;
  OutcomeTable none;
  bool loaded = true;
  ASSERT_TRUE(none.LoadFor(cap, "", false, {}, &loaded, &warnings).ok());
  EXPECT_FALSE(loaded);  // no sidecar beside it: not an error
  EXPECT_EQ(none.LoadFor(cap, dir.File("x.jsonl"), false, {}, &loaded, &warnings).code(),
            Status::Code::kNotFound);

  dir.Write("cap.jsonl.outcomes.ndjson", OutcomeLine(1, 0) + "junk\n");
  OutcomeTable beside;
  ASSERT_TRUE(beside.LoadFor(cap, "", false, {}, &loaded, &warnings).ok());
  EXPECT_TRUE(loaded);
  EXPECT_EQ(beside.path(), cap + ".outcomes.ndjson");
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_NE(warnings[0].find("1 lines are not outcome objects"), std::string::npos);

  OutcomeTable off;
  ASSERT_TRUE(off.LoadFor(cap, "", true, {}, &loaded, &warnings).ok());
  EXPECT_FALSE(loaded);
}

// A compressed segment's sidecar, as the uploader stores it: X.jsonl.zst has
// X.jsonl.outcomes.ndjson, plain or compressed.
TEST(OutcomeTableTest, LoadForFindsACompressedSegmentsSidecar) {
  TempDir dir;
  std::string cap = dir.File("seg.jsonl.zst");
  OutputFile f;
  ASSERT_TRUE(f.Open(dir.File("seg.jsonl.outcomes.ndjson.zst"), false).ok());
  f.WriteLine(TrimJsonWhitespace(OutcomeLine(1, 0)));
  ASSERT_TRUE(f.Close().ok());
  std::vector<std::string> warnings;
  OutcomeTable zst;
  bool loaded = false;
  ASSERT_TRUE(zst.LoadFor(cap, "", false, {}, &loaded, &warnings).ok());
  ASSERT_TRUE(loaded);
  EXPECT_EQ(zst.path(), dir.File("seg.jsonl.outcomes.ndjson.zst"));
  EXPECT_EQ(zst.Find(1)->usable_tokens(), 10u);

  dir.Write("seg.jsonl.outcomes.ndjson", OutcomeLine(1, 0) + OutcomeLine(2, 5));
  OutcomeTable plain;  // the plain one first
  ASSERT_TRUE(plain.LoadFor(cap, "", false, {}, &loaded, &warnings).ok());
  EXPECT_EQ(plain.path(), dir.File("seg.jsonl.outcomes.ndjson"));
  EXPECT_EQ(plain.size(), 2u);
}

// A capture written by an earlier build has its sidecar under the old name (X.jsonl.outcomes.jsonl,
// compressed or not): still found, after the current name.
TEST(OutcomeTableTest, LoadForFindsTheSidecarUnderItsEarlierName) {
  TempDir dir;
  std::string cap = dir.Write("old.jsonl", "");
  dir.Write("old.jsonl.outcomes.jsonl", OutcomeLine(1, 0));
  std::vector<std::string> warnings;
  bool loaded = false;
  OutcomeTable legacy;
  ASSERT_TRUE(legacy.LoadFor(cap, "", false, {}, &loaded, &warnings).ok());
  ASSERT_TRUE(loaded);
  EXPECT_EQ(legacy.path(), cap + ".outcomes.jsonl");

  dir.Write("old.jsonl.outcomes.ndjson", OutcomeLine(1, 0) + OutcomeLine(2, 5));
  OutcomeTable current;
  ASSERT_TRUE(current.LoadFor(cap, "", false, {}, &loaded, &warnings).ok());
  EXPECT_EQ(current.path(), cap + ".outcomes.ndjson");
  EXPECT_EQ(current.size(), 2u);

  for (const char* name : {"a.jsonl.outcomes.ndjson", "a.jsonl.outcomes.ndjson.zst",
                           "a.jsonl.outcomes.jsonl", "a.jsonl.outcomes.jsonl.zst"}) {
    EXPECT_TRUE(IsOutcomesName(name)) << name;
  }
  for (const char* name : {"a.jsonl", "a.jsonl.zst", "a.jsonl.manifest.json", "outcomes.jsonl"}) {
    EXPECT_FALSE(IsOutcomesName(name)) << name;
  }
}

class OutcomeJoinTest : public ::testing::Test {
 protected:
  // A sidecar with outcomes for lines 1..n at timestamp 100 * line.
  void Sidecar(uint64_t n) {
    std::string text;
    for (uint64_t i = 1; i <= n; ++i) text += OutcomeLine(i, static_cast<int64_t>(i * 100));
    bool loaded;
    ASSERT_TRUE(table_.Load(dir_.Write("s.jsonl", text), &loaded).ok());
  }

  TempDir dir_;
  OutcomeTable table_;
};

TEST_F(OutcomeJoinTest, OneMismatchedRowIsSkippedAndCounted) {
  Sidecar(4);
  OutcomeJoin join(&table_, "cap.jsonl");
  EXPECT_NE(join.Join(1, 100.0), nullptr);
  EXPECT_EQ(join.Join(2, 201.0), nullptr);  // altered: not this row's outcome
  EXPECT_NE(join.Join(3, 300.0), nullptr);
  EXPECT_NE(join.Join(4, std::nullopt), nullptr);  // raw row: by line alone
  EXPECT_EQ(join.Join(5, 500.0), nullptr);         // no outcome: neither
  EXPECT_TRUE(join.Finish(5).ok());
  EXPECT_EQ(join.matched(), 2u);
  EXPECT_EQ(join.mismatched(), 1u);
  EXPECT_EQ(join.unchecked(), 1u);
  EXPECT_NE(join.MismatchSummary().find("line 2: timestamp 200 in the sidecar, 201 in the capture"),
            std::string::npos);

  // A single mismatch never refuses, even when it is the only row checked.
  OutcomeJoin lone(&table_, "cap.jsonl");
  EXPECT_EQ(lone.Join(1, 7.0), nullptr);
  EXPECT_TRUE(lone.Finish(4).ok());
}

TEST_F(OutcomeJoinTest, AnOutcomePastTheLastLineRefusesTheSidecarNamingBothFiles) {
  Sidecar(5);
  OutcomeJoin join(&table_, "part.jsonl");
  for (uint64_t i = 1; i <= 3; ++i) EXPECT_NE(join.Join(i, i * 100.0), nullptr);
  Status s = join.Finish(3);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find(table_.path()), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("part.jsonl"), std::string::npos);
  EXPECT_NE(s.message().find("line 5, past the capture's last line (3)"), std::string::npos);
}

TEST_F(OutcomeJoinTest, MostRowsMismatchingRefusesEarlyOrAtTheEnd) {
  Sidecar(40);
  OutcomeJoin join(&table_, "chat.jsonl");
  uint64_t line = 1;
  // Every other row matches for a while: no verdict, more matched than mismatched.
  for (; line <= 10; ++line) join.Join(line, line % 2 ? line * 100.0 : 1.0);
  EXPECT_FALSE(join.refused());
  for (; !join.refused() && line <= 40; ++line) join.Join(line, 1.0);
  EXPECT_TRUE(join.refused());
  EXPECT_EQ(line, 17u);                               // 16 checked, 11 mismatched: refused there
  EXPECT_EQ(join.Join(line, line * 100.0), nullptr);  // nothing is joined once refused
  EXPECT_NE(join.RefusedStatus().message().find("11 of 16 outcomes checked so far"),
            std::string::npos)
      << join.RefusedStatus().message();
  EXPECT_FALSE(join.Finish(40).ok());

  // Under kEarlyRows rows, at the end: two of three mismatched.
  OutcomeJoin few(&table_, "chat.jsonl");
  few.Join(1, 100.0);
  few.Join(2, 1.0);
  few.Join(3, 1.0);
  EXPECT_FALSE(few.refused());
  Status s = few.Finish(40);
  EXPECT_NE(s.message().find("2 of 3 outcomes checked name a row whose timestamp differs"),
            std::string::npos)
      << s.message();
}

}  // namespace
}  // namespace llmtap::trace
