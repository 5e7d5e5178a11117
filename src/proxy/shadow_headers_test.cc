// The pure pieces of shadow traffic (shadow_pair.h): the candidate's header rules applied to a
// parsed request, body timing, the output comparison and the pair line's members.
#include "proxy/shadow_headers.h"

#include <string>
#include <string_view>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <boost/asio/buffer.hpp>
#include <boost/beast/core/flat_buffer.hpp>

#include "proxy/http_message.h"

namespace llmtap::proxy {
namespace {

// The head the candidate gets for `request` under `rules`.
std::string CandidateHead(std::string_view request, const ShadowHeaderRules& rules) {
  RequestReader reader;
  reader.Begin(4096, 4096);
  boost::beast::flat_buffer buffer;
  buffer.commit(boost::asio::buffer_copy(buffer.prepare(request.size()),
                                         boost::asio::buffer(request.data(), request.size())));
  EXPECT_EQ(reader.Feed(buffer), RequestReader::State::kDone);
  std::string head;
  reader.BuildUpstreamHead("candidate:9000", &head, &rules.skipped(), rules.extra_fields());
  return head;
}

constexpr std::string_view kRequest =
    "POST /v1/chat/completions HTTP/1.1\r\n"
    "Host: proxy:8001\r\n"
    "Authorization: Bearer sk-primary\r\n"
    "X-Secret: s\r\n"
    "x-keep: k\r\n"
    "Content-Type: application/json\r\n"
    "Connection: keep-alive, X-Hop\r\n"
    "X-Hop: h\r\n"
    "Content-Length: 2\r\n"
    "\r\n"
    "{}";

TEST(ShadowHeaderRules, ReplacesDropsAndKeepsTheRest) {
  ShadowHeaderRules rules;
  std::string error;
  ASSERT_TRUE(rules.AddSet("Authorization:  Bearer sk-candidate ", &error)) << error;
  ASSERT_TRUE(rules.AddSet("X-Added: yes", &error)) << error;
  ASSERT_TRUE(rules.AddDrop("x-SECRET", &error)) << error;
  EXPECT_EQ(CandidateHead(kRequest, rules),
            "POST /v1/chat/completions HTTP/1.1\r\n"
            "x-keep: k\r\n"
            "Content-Type: application/json\r\n"
            "Authorization: Bearer sk-candidate\r\n"
            "X-Added: yes\r\n"
            "Host: candidate:9000\r\n"
            "Content-Length: 2\r\n"
            "\r\n");
}

TEST(ShadowHeaderRules, NoRulesIsTheUpstreamHead) {
  const ShadowHeaderRules rules;
  const std::string head = CandidateHead(kRequest, rules);
  EXPECT_NE(head.find("Authorization: Bearer sk-primary\r\n"), std::string::npos);
  EXPECT_NE(head.find("X-Secret: s\r\n"), std::string::npos);
  EXPECT_EQ(head.find("X-Hop"), std::string::npos);  // named by Connection: hop-by-hop
  EXPECT_EQ(head.find("proxy:8001"), std::string::npos);
}

TEST(ShadowHeaderRules, RefusesBadSpecsWithoutEchoingTheValue) {
  ShadowHeaderRules rules;
  std::string error;
  EXPECT_FALSE(rules.AddSet("no colon here", &error));
  EXPECT_FALSE(rules.AddSet(": sk-secret", &error));
  EXPECT_EQ(error.find("sk-secret"), std::string::npos);
  EXPECT_FALSE(rules.AddSet("Bad Name: v", &error));
  EXPECT_FALSE(rules.AddSet("X-A: sk-secret\r\nX-Injected: 1", &error));
  EXPECT_EQ(error.find("sk-secret"), std::string::npos);
  EXPECT_FALSE(rules.AddSet("Host: elsewhere", &error));
  EXPECT_FALSE(rules.AddSet("Content-Length: 5", &error));
  EXPECT_FALSE(rules.AddDrop("two words", &error));
  EXPECT_FALSE(rules.AddDrop("", &error));
  EXPECT_TRUE(rules.skipped().empty());
  EXPECT_TRUE(rules.extra_fields().empty());
}

}  // namespace
}  // namespace llmtap::proxy
