// JsonCompactor's API and the corpus: error names, outcomes, sizes, output, allocation, simdjson
// path.
#include "capture/json_compact.h"
#include "capture/json_compact_internal.h"
#include "common/testing/alloc_counter.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <new>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>
#include "capture/json_compact_test_util.h"

namespace llmtap {

// Testing hooks defined in json_compact.cc: one fast path alone, without the reference
// fallback. Each appends and returns true when it accepts the body, else leaves *out alone.

namespace {

using json_compact_internal::TryCompactSimdjsonForTest;
using namespace json_compact_test_util;

TEST(CompactErrorNameTest, NamesMatchTheCorpusManifest) {
  EXPECT_EQ(CompactErrorName(CompactError::kOk), "ok");
  EXPECT_EQ(CompactErrorName(CompactError::kEmpty), "empty");
  EXPECT_EQ(CompactErrorName(CompactError::kInvalidJson), "invalid_json");
  EXPECT_EQ(CompactErrorName(CompactError::kNotAnObject), "not_an_object");
  EXPECT_EQ(CompactErrorName(CompactError::kTooDeep), "too_deep");
  EXPECT_EQ(CompactErrorName(CompactError::kNonStandardJson), "non_standard_json");
}

// ---------------------------------------------------------------------------------------------
// Corpus of real request bodies.

TEST(CorpusTest, ManifestListsEveryFile) {
  const std::map<std::string, std::string> expected = ReadManifest();
  ASSERT_GE(expected.size(), 20u) << "corpus not found under " << CorpusDir();
  std::set<std::string> on_disk;
  for (const auto& entry : std::filesystem::directory_iterator(CorpusDir())) {
    const std::string name = entry.path().filename().string();
    if (name != "EXPECTED.tsv") on_disk.insert(name);
  }
  std::set<std::string> listed;
  for (const auto& [name, outcome] : expected) {
    listed.insert(name);
    EXPECT_TRUE(outcome == "ok" || outcome == "empty" || outcome == "invalid_json" ||
                outcome == "not_an_object" || outcome == "too_deep" ||
                outcome == "non_standard_json")
        << name << ": " << outcome;
  }
  EXPECT_EQ(on_disk, listed);
}

TEST(CorpusTest, EveryFileGivesItsExpectedOutcome) {
  JsonCompactor compactor;
  const std::map<std::string, std::string> manifest = ReadManifest();
  ASSERT_GE(manifest.size(), 20u);
  for (const auto& [name, outcome] : manifest) {
    SCOPED_TRACE(name);
    const std::string body = ReadFile(CorpusDir() / name);
    const Outcome ref = CheckAllPathsAgree(body, compactor);
    EXPECT_EQ(CompactErrorName(ref.error), outcome);
    std::string out;
    EXPECT_EQ(CompactErrorName(ThreadLocalJsonCompactor().Compact(body, &out)), outcome);
  }
}

TEST(CorpusTest, OkFilesKeepTheirValueAndKeyOrder) {
  int ok_files = 0;
  for (const auto& [name, outcome] : ReadManifest()) {
    if (outcome != "ok") continue;
    ++ok_files;
    SCOPED_TRACE(name);
    const std::string body = ReadFile(CorpusDir() / name);
    std::string out = "prefix\n";
    ASSERT_EQ(ThreadLocalJsonCompactor().Compact(body, &out), CompactError::kOk);
    ASSERT_EQ(out.substr(0, 7), "prefix\n");
    out.erase(0, 7);

    // One line: no newline, no other control byte.
    EXPECT_EQ(out.find('\n'), std::string::npos);
    EXPECT_FALSE(HasControlByte(out));
    // Only insignificant whitespace removed, found without the implementation.
    EXPECT_EQ(out, StripInsignificantWhitespace(body));
    EXPECT_LE(out.size(), body.size());

    // Same value, same key order. nlohmann rejects numbers that overflow a double (1e400);
    // then it must reject the output alike.
    const auto in_value = nlohmann::ordered_json::parse(body, nullptr, false);
    const auto out_value = nlohmann::ordered_json::parse(out, nullptr, false);
    EXPECT_EQ(in_value.is_discarded(), out_value.is_discarded());
    if (!in_value.is_discarded()) {
      EXPECT_TRUE(out_value.is_object());
      EXPECT_EQ(in_value, out_value);
      EXPECT_EQ(in_value.dump(), out_value.dump());  // key order included
    }
  }
  EXPECT_GE(ok_files, 10);
}

TEST(CorpusTest, PrettyPrintedCrlfBodyBecomesOneLine) {
  const std::string body = ReadFile(CorpusDir() / "chat_pretty_crlf.json");
  ASSERT_NE(body.find("\r\n\t"), std::string::npos);
  std::string out;
  ASSERT_EQ(ThreadLocalJsonCompactor().Compact(body, &out), CompactError::kOk);
  EXPECT_EQ(out.find_first_of("\r\n\t"), std::string::npos);
  // Spaces inside strings stay.
  EXPECT_NE(out.find("List three   primes.\\tUse spaces  inside strings:  they must stay."),
            std::string::npos);
  EXPECT_EQ(out.rfind(R"({"model":"meta/llama-3.1-70b-instruct","messages":[{"role":)", 0), 0u);
}

TEST(CorpusTest, EscapesStayAsWritten) {
  const std::string body = ReadFile(CorpusDir() / "chat_escapes.json");
  std::string out;
  ASSERT_EQ(ThreadLocalJsonCompactor().Compact(body, &out), CompactError::kOk);
  EXPECT_EQ(out, body);  // already compact: byte-identical
  for (std::string_view escape : {R"(\/)", R"(\u0000)", R"(\u00e9)", R"(\u00C9)", R"(\ud83d\ude00)",
                                  R"(\uD83D\uDE00)", R"(\\\")"}) {
    EXPECT_NE(out.find(escape), std::string::npos) << escape;
  }
}

// ---------------------------------------------------------------------------------------------
// Sizes around the default max_request_bytes.

// A chat body of exactly `size` bytes, with whitespace and escapes spread over it.
std::string ChatBodyOfSize(size_t size) {
  const std::string head =
      "{\n  \"model\": \"meta/llama-3.1-8b-instruct\",\n  \"messages\": [\n    {\"role\": "
      "\"user\", \"content\": \"";
  const std::string tail = "\"}\n  ],\n  \"max_tokens\": 16\n}\n";
  const std::string words = "Lorem ipsum \\\"dolor\\\" sit amet,\\n caf\xc3\xa9 \\u00e9 ";
  std::string body = head;
  while (body.size() + words.size() + tail.size() <= size) body += words;
  body += std::string(size - tail.size() - body.size(), ' ');  // inside the string
  return body + tail;
}

TEST(SizeTest, AroundOneMebibyte) {
  JsonCompactor compactor;
  for (size_t size : {kMiB - 1, kMiB, kMiB + 1}) {
    const std::string body = ChatBodyOfSize(size);
    ASSERT_EQ(body.size(), size);
    const Outcome ref = CheckAllPathsAgree(body, compactor);
    EXPECT_EQ(ref.error, CompactError::kOk) << size;
  }
}

// ---------------------------------------------------------------------------------------------
// API behaviour.

TEST(JsonCompactorTest, AppendsToExistingContent) {
  JsonCompactor compactor;
  std::string out = R"({"timestamp":0,"payload":)";
  ASSERT_EQ(compactor.Compact(" { \"a\" : 1 } ", &out), CompactError::kOk);
  EXPECT_EQ(out, R"({"timestamp":0,"payload":{"a":1})");
  out += "}";
  ASSERT_EQ(compactor.Compact(R"({"b":[]})", &out), CompactError::kOk);
  EXPECT_EQ(out, R"({"timestamp":0,"payload":{"a":1}}{"b":[]})");
}

TEST(JsonCompactorTest, ErrorLeavesOutputUntouched) {
  JsonCompactor compactor;
  for (const std::string& bad : {std::string(""), std::string("[1]"), std::string("{\"a\":\"\n\"}"),
                                 std::string(1025, '['), ChatBodyOfSize(100000) + "x"}) {
    std::string out = "kept";
    EXPECT_NE(compactor.Compact(bad, &out), CompactError::kOk);
    EXPECT_EQ(out, "kept");
    std::string ref_out = "kept";
    EXPECT_NE(CompactJsonReference(bad, &ref_out), CompactError::kOk);
    EXPECT_EQ(ref_out, "kept");
  }
}

TEST(JsonCompactorTest, ThreadLocalCompactorIsPerThread) {
  JsonCompactor* mine = &ThreadLocalJsonCompactor();
  EXPECT_EQ(mine, &ThreadLocalJsonCompactor());
  JsonCompactor* other = nullptr;
  std::thread([&other] {
    other = &ThreadLocalJsonCompactor();
    std::string out;
    EXPECT_EQ(other->Compact("{}", &out), CompactError::kOk);
  }).join();
  EXPECT_NE(mine, other);
}

TEST(JsonCompactorTest, SteadyStateDoesNotAllocate) {
  if (!llmtap::testing::AllocationCountingEnabled()) {
    GTEST_SKIP() << "allocation counting is off under sanitizers";
  }
  const std::string body = ChatBodyOfSize(64 * 1024);
  std::string out;
  out.reserve(2 * body.size());
  JsonCompactor compactor;
  ASSERT_EQ(compactor.Compact(body, &out), CompactError::kOk);
  ASSERT_TRUE(TryCompactSimdjsonForTest(body, &out));
  const int64_t before = llmtap::testing::TotalAllocations();
  for (int i = 0; i < 20; ++i) {
    out.clear();
    EXPECT_EQ(compactor.Compact(body, &out), CompactError::kOk);
    out.clear();
    EXPECT_TRUE(TryCompactSimdjsonForTest(body, &out));
    out.clear();
    EXPECT_EQ(compactor.Compact(body.substr(0, 1000), &out), CompactError::kInvalidJson);
  }
  // The substr() above allocates once per iteration; nothing else may.
  EXPECT_EQ(llmtap::testing::TotalAllocations() - before, 20);
}

// ---------------------------------------------------------------------------------------------
// simdjson: which checks it does itself (found by experiment; the fast path relies on them on
// CPUs without the AVX-512 kernel), and where it differs from RFC 8259.

TEST(SimdjsonPathTest, RejectsWhatTheContractRejects) {
  for (const EdgeCase& c : EdgeCases()) {
    if (c.error == CompactError::kOk) continue;
    std::string out;
    EXPECT_FALSE(TryCompactSimdjsonForTest(c.body, &out)) << c.name;
  }
}

TEST(SimdjsonPathTest, RejectsValidNumbersItCannotRepresentSoCompactFallsBack) {
  JsonCompactor compactor;
  for (std::string_view body : {R"({"a":123456789012345678901234567890})", R"({"a":1e400})",
                                R"({"a":18446744073709551616})"}) {
    std::string out;
    EXPECT_FALSE(TryCompactSimdjsonForTest(body, &out)) << body;
    EXPECT_EQ(compactor.Compact(body, &out), CompactError::kOk) << body;
    EXPECT_EQ(out, body);
  }
}

}  // namespace
}  // namespace llmtap
