// JsonCompactor's kernels on edge cases: every path and alignment, long scalars, nesting depth.
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

using namespace json_compact_test_util;

class EdgeCaseTest : public ::testing::TestWithParam<EdgeCase> {};

TEST_P(EdgeCaseTest, GivesExpectedOutcomeOnEveryPath) {
  const EdgeCase& c = GetParam();
  JsonCompactor compactor;
  const Outcome ref = CheckAllPathsAgree(c.body, compactor);
  EXPECT_EQ(CompactErrorName(ref.error), CompactErrorName(c.error));
  EXPECT_EQ(ref.out, c.out);
}

// Every case again with the interesting bytes moved across the 64-byte block boundaries of
// the fast path, by leading whitespace of every length up to two blocks.
TEST_P(EdgeCaseTest, SameOutcomeAtEveryAlignment) {
  const EdgeCase& c = GetParam();
  if (c.error == CompactError::kEmpty) return;
  JsonCompactor compactor;
  for (size_t pad = 1; pad <= 130; ++pad) {
    for (const std::string& body :
         {std::string(pad, ' ') + c.body, c.body + std::string(pad, '\n')}) {
      const Outcome ref = CheckAllPathsAgree(body, compactor);
      EXPECT_EQ(CompactErrorName(ref.error), CompactErrorName(c.error)) << "pad " << pad;
      EXPECT_EQ(ref.out, c.out) << "pad " << pad;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(JsonCompact, EdgeCaseTest, ::testing::ValuesIn(EdgeCases()),
                         [](const ::testing::TestParamInfo<EdgeCase>& info) {
                           return info.param.name;
                         });

// Found by fuzz/capture_line_fuzz: a scalar token that fills a whole 64-byte block made the
// AVX-512 kernel take ctz(0), which is undefined. Long tokens at every alignment, valid (long
// integers and fractions) and not (a run of letters, high bytes).
TEST(LongScalarTest, TokensSpanningWholeBlocksAtEveryAlignment) {
  JsonCompactor compactor;
  for (size_t len : {63u, 64u, 65u, 127u, 128u, 129u, 200u}) {
    const std::string tokens[] = {std::string(len, '7'), "1." + std::string(len, '5'),
                                  std::string(len, 'x'), "+0" + std::string(len, '\xca')};
    for (const std::string& token : tokens) {
      for (size_t pad = 0; pad < 66; ++pad) {
        const std::string body = R"({"k":)" + std::string(pad, ' ') + "[" + token + "]}";
        CheckAllPathsAgree(body, compactor);
      }
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Nesting limit: 1024 levels ({} is one).

std::string NestedArrays(size_t depth, std::string_view inner = "0") {
  // {"a": + (depth - 1) arrays.
  return R"({"a":)" + std::string(depth - 1, '[') + std::string(inner) +
         std::string(depth - 1, ']') + "}";
}

std::string NestedObjects(size_t depth) {
  std::string s;
  for (size_t i = 0; i < depth; ++i) s += R"({"k":)";
  s += "1";
  s += std::string(depth, '}');
  return s;
}

TEST(DepthTest, AcceptsExactly1024Levels) {
  JsonCompactor compactor;
  for (const std::string& body : {NestedArrays(1024), NestedObjects(1024)}) {
    EXPECT_EQ(CheckAllPathsAgree(body, compactor).error, CompactError::kOk);
  }
  for (const std::string& body : {NestedArrays(1025), NestedObjects(1025), NestedArrays(5000)}) {
    EXPECT_EQ(CheckAllPathsAgree(body, compactor).error, CompactError::kTooDeep);
  }
}

TEST(DepthTest, FirstErrorWins) {
  JsonCompactor compactor;
  // Too deep before anything else is wrong: too deep, even if truncated or not an object.
  EXPECT_EQ(CheckAllPathsAgree(std::string(1025, '['), compactor).error, CompactError::kTooDeep);
  EXPECT_EQ(CheckAllPathsAgree(R"({"a":)" + std::string(1024, '[') + "x", compactor).error,
            CompactError::kTooDeep);
  // A syntax error before the 1025th level: invalid.
  EXPECT_EQ(CheckAllPathsAgree(R"({"a":01,"b":)" + std::string(1024, '['), compactor).error,
            CompactError::kInvalidJson);
  // Not too deep, not an object.
  EXPECT_EQ(CheckAllPathsAgree(std::string(1024, '[') + std::string(1024, ']'), compactor).error,
            CompactError::kNotAnObject);
}

TEST(DepthTest, DeepInputDoesNotExhaustTheStack) {
  // 8 MiB of '[': a recursive parser would overflow a thread stack.
  JsonCompactor compactor;
  std::string out;
  EXPECT_EQ(compactor.Compact(std::string(8 * kMiB, '['), &out), CompactError::kTooDeep);
  EXPECT_EQ(compactor.Compact("{\"a\":" + std::string(8 * kMiB, '['), &out),
            CompactError::kTooDeep);
}

}  // namespace
}  // namespace llmtap
