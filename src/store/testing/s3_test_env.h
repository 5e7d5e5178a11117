// For tests against the real S3 store that tests/lib/with_rgw.sh starts: the test bucket, and
// an assertion that prints a failed Status.
#pragma once

#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "common/status.h"

// Asserts that a Status-returning expression succeeded, printing the expression and the Status.
#define ASSERT_OK(expr)                                               \
  do {                                                                \
    const ::llmtap::Status status_ = (expr);                          \
    ASSERT_TRUE(status_.ok()) << #expr << ": " << status_.ToString(); \
  } while (0)

namespace llmtap::s3test {

// The bucket with_rgw.sh created (LLMTAP_TEST_BUCKET); empty outside with_rgw.sh.
inline std::string Bucket() {
  const char* bucket = std::getenv("LLMTAP_TEST_BUCKET");
  return bucket != nullptr ? bucket : "";
}

}  // namespace llmtap::s3test
