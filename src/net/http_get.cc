#include "net/http_get.h"

#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http.hpp>

#include "common/version.h"
#include "net/url.h"

namespace llmtap::net {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;

namespace {

// The wording of the client's URL errors (the report's, since it had the client first).
std::string UrlProblem(std::string_view url, UrlError e, const HttpUrl& u) {
  const std::string s(url);
  switch (e) {
    case UrlError::kNone:
      return "";
    case UrlError::kTls:
    case UrlError::kNotHttp:
    case UrlError::kNotOrigin:
      return "only http:// URLs are supported: " + s;
    case UrlError::kCredentials:
      return "credentials in the URL are not supported";
    case UrlError::kUnterminatedIpv6:
      return "unterminated IPv6 address in " + s;
    case UrlError::kJunkAfterIpv6:
      return "bad authority in " + s;
    case UrlError::kBadPort:
      // The host is checked first here: "http://:x" has no host.
      return (u.host.empty() ? "no host in " : "bad port in ") + s;
    case UrlError::kNoHost:
      return "no host in " + s;
  }
  return "bad URL " + s;
}

}  // namespace

std::string HttpGetUrlProblem(std::string_view url) {
  HttpUrl u;
  return UrlProblem(url, ParseHttpUrl(url, &u), u);
}

std::string HttpOrigin(std::string_view url) {
  HttpUrl u;
  if (ParseHttpUrl(url, &u) != UrlError::kNone) return "";
  return Origin(u);
}

HttpGetResult HttpGet(const std::string& url, std::chrono::milliseconds timeout,
                      size_t max_body_bytes, const std::vector<std::string>& headers) {
  HttpGetResult result;
  HttpUrl u;
  if (const UrlError e = ParseHttpUrl(url, &u); e != UrlError::kNone) {
    result.error = UrlProblem(url, e, u);
    return result;
  }

  // Asynchronous operations on one io_context run to completion here: tcp_stream's deadline
  // applies only to asynchronous operations, and it bounds the whole exchange.
  asio::io_context ioc;
  tcp::resolver resolver(ioc);
  beast::tcp_stream stream(ioc);
  beast::flat_buffer buffer;
  http::request<http::empty_body> req{http::verb::get, u.target, 11};
  req.set(http::field::host, u.host);
  req.set(http::field::user_agent, std::string("llmtap/") + kVersion);
  req.set(http::field::accept, "text/plain");
  req.set(http::field::connection, "close");
  for (const std::string& h : headers) {
    const size_t colon = h.find(':');
    if (colon == std::string::npos) continue;
    std::string_view value = std::string_view(h).substr(colon + 1);
    while (!value.empty() && (value.front() == ' ' || value.front() == '\t'))
      value.remove_prefix(1);
    req.set(beast::string_view(h.data(), colon), beast::string_view(value.data(), value.size()));
  }
  http::response_parser<http::string_body> parser;
  parser.body_limit(max_body_bytes);
  beast::error_code failure;
  const char* stage = "";

  auto fail = [&](const char* where, beast::error_code ec) {
    stage = where;
    failure = ec;
  };
  resolver.async_resolve(
      u.host, std::to_string(u.port), [&](beast::error_code ec, tcp::resolver::results_type r) {
        if (ec) return fail("resolve", ec);
        stream.expires_after(timeout);
        stream.async_connect(r, [&](beast::error_code ec, const tcp::endpoint&) {
          if (ec) return fail("connect", ec);
          http::async_write(stream, req, [&](beast::error_code ec, size_t) {
            if (ec) return fail("write", ec);
            http::async_read(stream, buffer, parser, [&](beast::error_code ec, size_t) {
              if (ec) return fail("read", ec);
              result.status = parser.get().result_int();
              result.body = std::move(parser.get().body());
              beast::error_code ignored;
              stream.socket().shutdown(tcp::socket::shutdown_both, ignored);
            });
          });
        });
      });
  // The resolver has no deadline of its own: bound it by running the loop for `timeout`.
  ioc.run_for(timeout + std::chrono::milliseconds(100));
  if (!ioc.stopped()) {
    resolver.cancel();
    stream.cancel();
    ioc.restart();
    ioc.run();  // let the cancelled handlers finish before their captures go out of scope
    if (!failure) {
      stage = "resolve";
      failure = asio::error::timed_out;
    }
  }
  if (failure) {
    result.status = 0;
    result.body.clear();
    result.error =
        std::string(stage) + " " + url + ": " +
        (failure == beast::error::timeout ? std::string("timed out") : failure.message());
  }
  return result;
}

}  // namespace llmtap::net
