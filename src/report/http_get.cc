#include "report/http_get.h"

#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http.hpp>

#include "common/version.h"

namespace llmtap::report {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;

bool ParseHttpUrl(const std::string& url, HttpUrl* out, std::string* error) {
  const std::string scheme = "http://";
  if (url.compare(0, scheme.size(), scheme) != 0) {
    *error = "only http:// URLs are supported: " + url;
    return false;
  }
  std::string rest = url.substr(scheme.size());
  size_t slash = rest.find('/');
  std::string authority = rest.substr(0, slash);
  out->target = slash == std::string::npos ? "/" : rest.substr(slash);
  if (authority.find('@') != std::string::npos) {
    *error = "credentials in the URL are not supported";
    return false;
  }
  std::string port;
  if (!authority.empty() && authority[0] == '[') {
    size_t close = authority.find(']');
    if (close == std::string::npos) {
      *error = "unterminated IPv6 address in " + url;
      return false;
    }
    out->host = authority.substr(1, close - 1);
    if (close + 1 < authority.size()) {
      if (authority[close + 1] != ':') {
        *error = "bad authority in " + url;
        return false;
      }
      port = authority.substr(close + 2);
    }
  } else {
    size_t colon = authority.rfind(':');
    out->host = authority.substr(0, colon);
    if (colon != std::string::npos) port = authority.substr(colon + 1);
  }
  if (out->host.empty()) {
    *error = "no host in " + url;
    return false;
  }
  if (port.empty()) port = "80";
  if (port.size() > 5 || port.find_first_not_of("0123456789") != std::string::npos ||
      std::stoul(port) == 0 || std::stoul(port) > 65535) {
    *error = "bad port in " + url;
    return false;
  }
  out->port = port;
  return true;
}

std::string HttpOrigin(const std::string& url) {
  HttpUrl u;
  std::string error;
  if (!ParseHttpUrl(url, &u, &error)) return "";
  std::string host = u.host.find(':') != std::string::npos ? "[" + u.host + "]" : u.host;
  return "http://" + host + ":" + u.port;
}

HttpGetResult HttpGet(const std::string& url, std::chrono::milliseconds timeout,
                      size_t max_body_bytes, const std::vector<std::string>& headers) {
  HttpGetResult result;
  HttpUrl u;
  if (!ParseHttpUrl(url, &u, &result.error)) return result;

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
    while (!value.empty() && (value.front() == ' ' || value.front() == '\t')) value.remove_prefix(1);
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
  resolver.async_resolve(u.host, u.port, [&](beast::error_code ec, tcp::resolver::results_type r) {
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

}  // namespace llmtap::report
