// net::HttpGet's URL handling (the report's rules and wording) and a request to a local server.
#include "net/http_get.h"

#include <gtest/gtest.h>

#include <string>
#include <thread>

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/read_until.hpp>
#include <boost/asio/streambuf.hpp>
#include <boost/asio/write.hpp>

#include "net/url.h"

namespace llmtap::net {
namespace {

// Moved from tests/report/server_metrics_test.cc (HttpGetTest.UrlParsing) with the parser.
TEST(HttpGetTest, UrlParsing) {
  HttpUrl u;
  ASSERT_EQ(ParseHttpUrl("http://example:8000/v1/metrics?x=1", &u), UrlError::kNone);
  EXPECT_EQ(u.host, "example");
  EXPECT_EQ(u.port, 8000);
  EXPECT_EQ(u.target, "/v1/metrics?x=1");
  ASSERT_EQ(ParseHttpUrl("http://[::1]/", &u), UrlError::kNone);
  EXPECT_EQ(u.host, "::1");
  EXPECT_EQ(u.port, 80);
  EXPECT_NE(ParseHttpUrl("https://x/", &u), UrlError::kNone);
  EXPECT_NE(ParseHttpUrl("http://:80/", &u), UrlError::kNone);
  EXPECT_NE(ParseHttpUrl("http://x:99999/", &u), UrlError::kNone);
  EXPECT_NE(ParseHttpUrl("http://x:8a/", &u), UrlError::kNone);
  EXPECT_EQ(HttpOrigin("http://h:8000/v1"), "http://h:8000");
  EXPECT_EQ(HttpOrigin("http://h"), "http://h:80");
}

TEST(HttpGetTest, UrlProblemsInTheReportsWords) {
  EXPECT_EQ(HttpGetUrlProblem("http://h:8000/metrics"), "");
  EXPECT_EQ(HttpGetUrlProblem("http://h:/metrics"), "");  // port 80
  EXPECT_EQ(HttpOrigin("http://h:/metrics"), "http://h:80");
  EXPECT_EQ(HttpOrigin("http://[::1]:9/x"), "http://[::1]:9");
  EXPECT_EQ(HttpOrigin("http://h:x"), "");
  EXPECT_EQ(HttpGetUrlProblem("https://h/"), "");
  EXPECT_EQ(HttpOrigin("https://h/metrics"), "https://h:443");
  EXPECT_EQ(HttpGetUrlProblem("ftp://h/"),
            "only http:// and https:// URLs are supported: ftp://h/");
  EXPECT_EQ(HttpGetUrlProblem("http://u@h/"), "credentials in the URL are not supported");
  EXPECT_EQ(HttpGetUrlProblem("http://[::1/"), "unterminated IPv6 address in http://[::1/");
  EXPECT_EQ(HttpGetUrlProblem("http://[::1]x/"), "bad authority in http://[::1]x/");
  EXPECT_EQ(HttpGetUrlProblem("http://h:0/"), "bad port in http://h:0/");
  EXPECT_EQ(HttpGetUrlProblem("http:///"), "no host in http:///");
  // The host was checked before the port, and still is in these words.
  EXPECT_EQ(HttpGetUrlProblem("http://:x/"), "no host in http://:x/");
  HttpGetResult r = HttpGet("http://h:0/", std::chrono::milliseconds(100));
  EXPECT_EQ(r.status, 0);
  EXPECT_EQ(r.error, "bad port in http://h:0/");
}

TEST(HttpGetTest, GetsABodyWithHeaders) {
  namespace asio = boost::asio;
  asio::io_context ioc;
  asio::ip::tcp::acceptor acceptor(ioc, {asio::ip::make_address("127.0.0.1"), 0});
  const uint16_t port = acceptor.local_endpoint().port();
  std::string head;
  std::thread server([&] {
    asio::ip::tcp::socket s(ioc);
    acceptor.accept(s);
    asio::streambuf buf;
    asio::read_until(s, buf, "\r\n\r\n");
    head.assign(asio::buffers_begin(buf.data()), asio::buffers_end(buf.data()));
    asio::write(s, asio::buffer(std::string(
                       "HTTP/1.1 200 OK\r\nContent-Length: 5\r\nConnection: close\r\n\r\nhello")));
  });
  const HttpGetResult r = HttpGet("http://127.0.0.1:" + std::to_string(port) + "/v1/models?a=1",
                                  std::chrono::seconds(120), kHttpGetMaxBodyBytes,
                                  {"Authorization: Bearer k", "no colon"});
  server.join();
  EXPECT_EQ(r.error, "");
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.body, "hello");
  EXPECT_TRUE(head.starts_with("GET /v1/models?a=1 HTTP/1.1\r\n")) << head;
  // The Host header names the port too (RFC 9110 7.2: it is not the scheme's default).
  EXPECT_NE(head.find("Host: 127.0.0.1:" + std::to_string(port) + "\r\n"), std::string::npos)
      << head;
  EXPECT_NE(head.find("Authorization: Bearer k\r\n"), std::string::npos) << head;
}

}  // namespace
}  // namespace llmtap::net
