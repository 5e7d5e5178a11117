#include "net/http_get.h"

#include <cstdio>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/connect.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/string_body.hpp>

#include "common/asio_types.h"
#include "common/version.h"
#include "net/stream_io.h"
#include "net/tls.h"
#include "net/url.h"

namespace llmtap::net {

namespace beast = boost::beast;
namespace http = beast::http;

namespace {

using Resolver = asio::ip::basic_resolver<tcp, Executor>;

// The wording of the client's URL errors (the report's, since it had the client first).
std::string UrlProblem(std::string_view url, UrlError e, const HttpUrl& u) {
  const std::string s(url);
  switch (e) {
    case UrlError::kNone:
      return "";
    case UrlError::kTls:
    case UrlError::kNotHttp:
    case UrlError::kNotOrigin:
      return "only http:// and https:// URLs are supported: " + s;
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

constexpr UrlRules kRules{.allow_https = true};

// One connection of a one-off client, on its own io_context: resolve, connect and, for https,
// the handshake. `stage` names the step that failed.
struct OneOff {
  asio::io_context ioc;
  Resolver resolver{ioc.get_executor()};
  Socket socket{ioc.get_executor()};
  std::unique_ptr<TlsSocket> tls;
  const char* stage = "";
  error_code ec;

  awaitable<bool> Open(const HttpUrl& u, const TlsClientContext* context) {
    stage = "resolve";
    const auto endpoints = co_await resolver.async_resolve(u.host, std::to_string(u.port),
                                                           asio::redirect_error(use_awaitable, ec));
    if (ec) co_return false;
    stage = "connect";
    co_await asio::async_connect(socket, endpoints, asio::redirect_error(use_awaitable, ec));
    if (ec || context == nullptr) co_return !ec;
    stage = "tls";
    ec = co_await ClientHandshake(socket, *context, u.host, nullptr, &tls);
    co_return !ec;
  }

  // Runs what was spawned for at most `timeout`; then cancels it and says it timed out.
  void RunFor(std::chrono::milliseconds timeout) {
    ioc.run_for(timeout);
    if (ioc.stopped()) return;
    resolver.cancel();
    error_code ignored;
    socket.close(ignored);
    ioc.restart();
    ioc.run();  // let the cancelled coroutine finish before its state goes
    ec = asio::error::timed_out;
  }

  // Why the step failed: "timed out", the TLS failure in words, or the socket's error.
  std::string Why() const {
    if (ec == asio::error::timed_out) return "timed out";
    if (std::string_view(stage) == "tls" && tls != nullptr && !tls->failure().empty()) {
      return tls->failure();
    }
    return ec.message();
  }

  // "<stage> <what>: <why>" once something failed, else "".
  std::string Problem(const std::string& what) const {
    return ec ? std::string(stage) + " " + what + ": " + Why() : "";
  }
};

awaitable<void> Get(OneOff& x, const HttpUrl& u, const TlsClientContext* context,
                    const std::string& request, http::response_parser<http::string_body>& parser) {
  const bool open = co_await x.Open(u, context);
  if (!open) co_return;
  x.stage = "write";
  const std::array<asio::const_buffer, 1> pieces{asio::buffer(request)};
  co_await WriteAll(x.socket, x.tls.get(), pieces, x.ec);
  if (x.ec) co_return;
  x.stage = "read";
  beast::flat_buffer buffer;
  co_await ReadHttpMessage(x.socket, x.tls.get(), buffer, parser, x.ec);
}

awaitable<void> Probe(OneOff& x, const HttpUrl& u, const TlsClientContext* context) {
  const bool open = co_await x.Open(u, context);
  if (open) x.tls->ShutdownSend();
}

std::string RequestHead(const HttpUrl& u, const std::vector<std::string>& headers) {
  std::string head = "GET " + u.target + " HTTP/1.1\r\nHost: " + HostHeader(u) +
                     "\r\nUser-Agent: llmtap/" + kVersion +
                     "\r\nAccept: text/plain\r\nConnection: close\r\n";
  for (const std::string& h : headers) {
    const size_t colon = h.find(':');
    if (colon == std::string::npos) continue;
    std::string_view value = std::string_view(h).substr(colon + 1);
    while (!value.empty() && (value.front() == ' ' || value.front() == '\t')) {
      value.remove_prefix(1);
    }
    head.append(h, 0, colon).append(": ").append(value).append("\r\n");
  }
  return head.append("\r\n");
}

}  // namespace

std::string HttpGetUrlProblem(std::string_view url) {
  HttpUrl u;
  return UrlProblem(url, ParseHttpUrl(url, &u, kRules), u);
}

std::string HttpOrigin(std::string_view url) {
  HttpUrl u;
  if (ParseHttpUrl(url, &u, kRules) != UrlError::kNone) return "";
  return Origin(u);
}

HttpGetResult HttpGet(const std::string& url, std::chrono::milliseconds timeout,
                      size_t max_body_bytes, const std::vector<std::string>& headers,
                      const TlsClientContext* tls) {
  HttpGetResult result;
  HttpUrl u;
  if (const UrlError e = ParseHttpUrl(url, &u, kRules); e != UrlError::kNone) {
    result.error = UrlProblem(url, e, u);
    return result;
  }
  std::shared_ptr<const TlsClientContext> system;
  if (u.tls && tls == nullptr) {
    system = TlsClientContext::Make({}, &result.error);
    if (system == nullptr) return result;
    tls = system.get();
  }
  OneOff x;
  const std::string request = RequestHead(u, headers);
  http::response_parser<http::string_body> parser;
  parser.body_limit(max_body_bytes);
  asio::co_spawn(x.ioc, Get(x, u, u.tls ? tls : nullptr, request, parser), asio::detached);
  x.RunFor(timeout);
  result.error = x.Problem(url);
  if (result.error.empty()) {
    result.status = parser.get().result_int();
    result.body = std::move(parser.get().body());
  }
  return result;
}

std::string ProbeTls(const std::string& url, const TlsClientContext& tls,
                     std::chrono::milliseconds timeout) {
  HttpUrl u;
  if (const UrlError e = ParseHttpUrl(url, &u, kRules); e != UrlError::kNone) {
    return UrlProblem(url, e, u);
  }
  if (!u.tls) return "";
  OneOff x;
  asio::co_spawn(x.ioc, Probe(x, u, &tls), asio::detached);
  x.RunFor(timeout);
  // Only the handshake's failures: a server that does not answer at all fails each request as
  // plain http:// would.
  if (!x.ec || std::string_view(x.stage) != "tls") return "";
  if (x.ec == asio::error::timed_out) {
    char seconds[32];
    std::snprintf(seconds, sizeof seconds, "%g", timeout.count() / 1000.0);
    return "TLS handshake with " + Origin(u) + " timed out after " + seconds + " s";
  }
  return "TLS handshake with " + Origin(u) + " failed: " + x.Why();
}

}  // namespace llmtap::net
