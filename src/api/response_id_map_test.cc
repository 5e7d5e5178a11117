// ResponseIdMap (api/response_id_map.h): ids of one server mapped to another's as requests end.
#include "api/response_id_map.h"

#include <string>

#include <gtest/gtest.h>

namespace llmtap::api {
namespace {

TEST(ResponseIdMap, PendingAnsweredFailedUnknownAndExpiry) {
  ResponseIdMap ids(1000);
  std::string to;
  EXPECT_EQ(ids.Find("resp_a", 0, &to), ResponseIdMap::Lookup::kUnknown);
  ids.Pending("resp_a", 0);
  EXPECT_EQ(ids.Find("resp_a", 10, &to), ResponseIdMap::Lookup::kPending);
  ids.Answered("resp_a", "resp_x", 20);
  ASSERT_EQ(ids.Find("resp_a", 30, &to), ResponseIdMap::Lookup::kFound);
  EXPECT_EQ(to, "resp_x");
  ids.Answered("resp_b", "", 40);  // failed there
  EXPECT_EQ(ids.Find("resp_b", 50, &to), ResponseIdMap::Lookup::kFailed);
  ids.Answered("", "resp_y", 50);  // no id: nothing to map
  EXPECT_EQ(ids.size(), 2u);
  // Each lookup keeps an entry alive; one unused for the idle time is gone.
  EXPECT_EQ(ids.Find("resp_a", 1020, &to), ResponseIdMap::Lookup::kFound);
  EXPECT_EQ(ids.Find("resp_b", 1100, &to), ResponseIdMap::Lookup::kUnknown);
  EXPECT_EQ(ids.size(), 1u);
}

}  // namespace
}  // namespace llmtap::api
