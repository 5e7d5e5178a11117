// A small blocking HTTP/1.1 GET (Boost.Beast) for scraping a server's /metrics: one connection
// per call, the whole exchange bounded by a deadline. Plain http:// only. Any thread may call it;
// each call owns its own io_context.
#pragma once

#include <chrono>
#include <cstddef>
#include <string>
#include <vector>

namespace llmtap::report {

struct HttpUrl {
  std::string host;
  std::string port;    // "80" when the URL gives none
  std::string target;  // path and query, "/" when empty
};

// Splits `http://host[:port][/path]` (IPv6 hosts in brackets). False, with a reason in *error,
// for anything else (https, a missing host, a bad port).
bool ParseHttpUrl(const std::string& url, HttpUrl* out, std::string* error);

// `http://host:port` of a URL (its scheme and authority), or "" when it does not parse.
std::string HttpOrigin(const std::string& url);

struct HttpGetResult {
  int status = 0;  // 0 when no response was read
  std::string body;
  std::string error;  // empty on a complete response (of any status)
};

// The default largest body HttpGet accepts.
constexpr size_t kHttpGetMaxBodyBytes = 64u << 20;

// GET `url`. The connect, the request and the response together must finish within `timeout`;
// bodies over `max_body_bytes` are an error. `headers` are extra "Name: value" fields (one
// without a colon is skipped; callers validate them first).
HttpGetResult HttpGet(const std::string& url, std::chrono::milliseconds timeout,
                      size_t max_body_bytes = kHttpGetMaxBodyBytes,
                      const std::vector<std::string>& headers = {});

}  // namespace llmtap::report
