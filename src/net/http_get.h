// One blocking HTTP/1.1 GET (Boost.Beast) for one-off requests: the report's server-metrics
// scrapes and the replay's model probe. One connection per call, the whole exchange bounded by a
// deadline. Plain http:// only (net/url.h, default rules: "http://h:" is port 80).
//
// Threads: any thread may call these; each HttpGet call owns its own io_context.
#pragma once

#include <chrono>
#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace llmtap::net {

struct HttpGetResult {
  int status = 0;  // 0 when no response was read
  std::string body;
  std::string error;  // empty on a complete response (of any status)
};

// The default largest body HttpGet accepts.
constexpr size_t kHttpGetMaxBodyBytes = 64u << 20;

// GET `url`. The connect, the request and the response together must finish within `timeout`;
// bodies over `max_body_bytes` are an error. `headers` are extra "Name: value" fields (one
// without a colon is skipped; callers validate them first). The Host header is the URL's host
// alone (no port), as the report has always sent it.
HttpGetResult HttpGet(const std::string& url, std::chrono::milliseconds timeout,
                      size_t max_body_bytes = kHttpGetMaxBodyBytes,
                      const std::vector<std::string>& headers = {});

// Why HttpGet refuses `url` ("only http:// URLs are supported: URL", "bad port in URL", ...), or
// "" when it takes it.
std::string HttpGetUrlProblem(std::string_view url);

// `http://host:port` of a URL (its scheme and authority, the port always written), or "" when it
// does not parse.
std::string HttpOrigin(std::string_view url);

}  // namespace llmtap::net
