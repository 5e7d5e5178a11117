// One blocking HTTP/1.1 GET for one-off requests: the report's server-metrics scrapes and the
// replay's model probe; and the replay's TLS pre-flight check. One connection per call, the whole
// exchange bounded by a deadline. http:// and https:// (net/url.h, default rules: "http://h:" is
// the scheme's default port).
//
// Threads: any thread may call these; each HttpGet call owns its own io_context.
#pragma once

#include <chrono>
#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace llmtap::net {

class TlsClientContext;

struct HttpGetResult {
  int status = 0;  // 0 when no response was read
  std::string body;
  std::string error;  // empty on a complete response (of any status)
};

// The default largest body HttpGet accepts.
constexpr size_t kHttpGetMaxBodyBytes = 64u << 20;

// GET `url`. The connect, the request and the response together must finish within `timeout`;
// bodies over `max_body_bytes` are an error. `headers` are extra "Name: value" fields (one
// without a colon is skipped; callers validate them first). The Host header is the URL's
// authority (net::HostHeader). An https:// URL is checked with `tls`, or with the system's
// trust store when `tls` is null (built per call: callers that scrape often pass one).
HttpGetResult HttpGet(const std::string& url, std::chrono::milliseconds timeout,
                      size_t max_body_bytes = kHttpGetMaxBodyBytes,
                      const std::vector<std::string>& headers = {},
                      const TlsClientContext* tls = nullptr);

// For an https:// URL: connects and shakes hands, within `timeout`, and says why that failed:
// "TLS handshake with https://h:p failed: certificate has expired (...)", "... timed out after
// 10 s", or "" when it succeeded, when the URL is http://, or when no TCP connection could be
// made (what fails there fails the requests too, in their own words).
std::string ProbeTls(const std::string& url, const TlsClientContext& tls,
                     std::chrono::milliseconds timeout);

// Why HttpGet refuses `url` ("only http:// and https:// URLs are supported: URL", "bad port in
// URL", ...), or "" when it takes it.
std::string HttpGetUrlProblem(std::string_view url);

// `http://host:port` or `https://host:port` of a URL (its scheme and authority, the port always
// written), or "" when it does not parse.
std::string HttpOrigin(std::string_view url);

}  // namespace llmtap::net
