// ParseRequest on bodies holding integers beyond 64 bits: valid JSON, which simdjson alone
// refuses whole (NUMBER_ERROR, or BIGINT_ERROR). Ignored where the sim does not read them; a read
// field out of range is refused with a message naming it.
#include "sim/request.h"

#include <string>

#include <gtest/gtest.h>

namespace llmtap::sim {
namespace {

constexpr char kBig[] = "123456789012345678901234567890";

// A chat body with `extra` among its members.
std::string Chat(const std::string& extra) {
  return R"({"model":"m","messages":[{"role":"user","content":"Hi 99999999999999999999999"}],)" +
         extra + "}";
}

TEST(ParseRequestBigIntegers, IgnoredWhereUnread) {
  SimRequest r;
  RequestError e;
  const std::string big = kBig;
  ASSERT_TRUE(ParseRequest(Endpoint::kChatCompletions,
                           Chat(R"("max_tokens":5,"extra":)" + big + R"(,"deep":{"a":[-)" + big +
                                R"(,"\")" + big + R"(\""]})"),
                           {}, &r, &e))
      << e.message;
  EXPECT_EQ(r.max_tokens, 5u);
  EXPECT_FALSE(r.seed);
  // The strings are left as they are.
  EXPECT_NE(r.prompt_text.find("Hi 99999999999999999999999"), std::string::npos);

  // The largest seeds in range are integers still.
  ASSERT_TRUE(ParseRequest(Endpoint::kChatCompletions,
                           Chat(R"("extra":)" + big + R"(,"seed":9223372036854775807)"), {}, &r,
                           &e));
  EXPECT_EQ(r.seed, INT64_MAX);
  ASSERT_TRUE(ParseRequest(Endpoint::kCompletions,
                           R"({"prompt":"x","extra":)" + big + R"(,"seed":-9223372036854775808})",
                           {}, &r, &e));
  EXPECT_EQ(r.seed, INT64_MIN);
}

TEST(ParseRequestBigIntegers, OutOfRangeFieldsAreNamed) {
  SimRequest r;
  RequestError e;
  const std::string big = kBig;
  EXPECT_FALSE(ParseRequest(Endpoint::kChatCompletions, Chat(R"("seed":)" + big), {}, &r, &e));
  EXPECT_EQ(e.param, "seed");
  EXPECT_EQ(e.message, "'seed' must be less than or equal to 9223372036854775807.");
  EXPECT_FALSE(ParseRequest(Endpoint::kChatCompletions, Chat(R"("seed":-)" + big), {}, &r, &e));
  EXPECT_EQ(e.message, "'seed' must be greater than or equal to -9223372036854775808.");
  EXPECT_FALSE(
      ParseRequest(Endpoint::kChatCompletions, Chat(R"("seed":-9223372036854775809)"), {}, &r, &e));
  EXPECT_EQ(e.message, "'seed' must be greater than or equal to -9223372036854775808.");
  // Within 64 bits but past int64_t (simdjson reads it as a uint64_t).
  EXPECT_FALSE(
      ParseRequest(Endpoint::kChatCompletions, Chat(R"("seed":18446744073709551615)"), {}, &r, &e));
  EXPECT_EQ(e.message, "'seed' must be less than or equal to 9223372036854775807.");
  EXPECT_FALSE(ParseRequest(Endpoint::kChatCompletions, Chat(R"("seed":1.5)"), {}, &r, &e));
  EXPECT_EQ(e.message, "'seed' must be an integer.");

  for (const char* key : {"max_tokens", "max_completion_tokens", "n"}) {
    EXPECT_FALSE(ParseRequest(Endpoint::kChatCompletions,
                              Chat("\"" + std::string(key) + "\":" + big), {}, &r, &e));
    EXPECT_EQ(e.param, key);
    EXPECT_NE(e.message.find("is more than this server's maximum"), std::string::npos) << e.message;
  }
  EXPECT_FALSE(ParseRequest(Endpoint::kChatCompletions, Chat(R"("n":-)" + big), {}, &r, &e));
  EXPECT_EQ(e.message, "'n' must be a positive integer.");

  // Not JSON stays not JSON.
  EXPECT_FALSE(ParseRequest(Endpoint::kChatCompletions, Chat(R"("x":)" + big + ","), {}, &r, &e));
  EXPECT_NE(e.message.find("not valid JSON"), std::string::npos) << e.message;
}

}  // namespace
}  // namespace llmtap::sim
