// The request path's allocation promises: nothing when capture is off or the path does not
// match; and, once warm, nothing per recorded request either (record buffers are recycled).
#include <string>
#include <thread>

#include <gtest/gtest.h>

#include "capture/capture.h"
#include "common/testing/alloc_counter.h"
#include "common/testing/fault_env.h"
#include "common/testing/temp_files.h"

namespace llmtap {
namespace {

class CaptureAllocTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!testing::AllocationCountingEnabled()) {
      GTEST_SKIP() << "allocation counting is off under sanitizers";
    }
    options_.config.path = dir_.File("requests.jsonl");
    options_.logger = &logger_;
  }

  testing::TempDir dir_;
  testing::CapturingLogger logger_;
  CaptureOptions options_;
};

constexpr std::string_view kBody =
    R"({"model": "m", "messages": [{"role": "user", "content": "hello"}], "max_tokens": 8})";

TEST_F(CaptureAllocTest, OffAndNotMatchedAllocateNothing) {
  CaptureOptions off = options_;
  off.enabled = false;
  Capture disabled(off);
  Capture capture(options_);
  ASSERT_TRUE(capture.Start().ok());
  capture.Offer("/v1/models?x=1", kBody);  // warms this thread's path cache
  const int64_t before = testing::ThreadAllocations();
  for (int i = 0; i < 1000; ++i) {
    EXPECT_EQ(disabled.Offer("/v1/chat/completions", kBody), OfferDecision::kDisabled);
    EXPECT_EQ(capture.Offer("/v1/models?x=1", kBody), OfferDecision::kNotMatched);
  }
  EXPECT_EQ(testing::ThreadAllocations() - before, 0);
  capture.Stop();
}

TEST_F(CaptureAllocTest, RecordedRequestsReuseBuffersOnceWarm) {
  Capture capture(options_);
  ASSERT_TRUE(capture.Start().ok());
  // Warm up: the writer hands written buffers back; give it time to write each one.
  for (int i = 0; i < 64; ++i) {
    ASSERT_EQ(capture.Offer("/v1/chat/completions", kBody), OfferDecision::kQueued);
    while (capture.counters().queued_records > 0) std::this_thread::yield();
  }
  const int64_t before = testing::ThreadAllocations();
  for (int i = 0; i < 200; ++i) {
    ASSERT_EQ(capture.Offer("/v1/chat/completions", kBody), OfferDecision::kQueued);
    while (capture.counters().queued_records > 0) std::this_thread::yield();
  }
  // The queue's vector may grow now and then; per-request buffers must not be allocated.
  EXPECT_LE(testing::ThreadAllocations() - before, 4);
  capture.Stop();
  EXPECT_EQ(capture.counters().recorded, 264u);
}

}  // namespace
}  // namespace llmtap
