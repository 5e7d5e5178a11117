// The project's one parser of HTTP URLs, "http://host[:port][/path][?query]", for the replay's
// --url, the report's metrics URLs and the proxy's --upstream. No caller speaks TLS yet:
// "https://" is told apart (UrlError::kTls) so each caller can say so in its own words, unless
// the caller asks for it (UrlRules::allow_https, the first step of the TLS issue: the URL's parts
// and its scheme-aware Host header and origin). Callers format their own messages from the
// UrlError (UrlErrorText gives a default wording).
//
// The callers grew different leniencies over time and keep them (no behaviour change): UrlRules
// names each one; the defaults are the report's rules. net/url_test.cc pins every difference.
//
// Threads: pure functions over values; any thread may call them.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace llmtap::net {

struct HttpUrl {
  std::string host;       // IPv6 literals without their brackets
  uint16_t port = 80;     // when the URL gives none: 80, or 443 for https
  bool tls = false;       // "https://" (only with UrlRules::allow_https)
  std::string authority;  // host[:port] as written (brackets kept)
  std::string target;     // path and query as written, "/" when there is none
};

enum class UrlError : uint8_t {
  kNone,
  kTls,               // "https://" without UrlRules::allow_https
  kNotHttp,           // any other scheme, or none
  kNotOrigin,         // UrlRules::origin_only: a path, query, fragment or user part, or no host
  kCredentials,       // "user@" in the authority
  kUnterminatedIpv6,  // "[" without "]"
  kJunkAfterIpv6,     // "[v6]x": neither ":port" nor the end after the "]"
  kBadPort,           // not 1-65535 in at most 5 digits (see UrlRules)
  kNoHost,
};

struct UrlRules {
  // "http://h:" (and "[v6]:") is a bad port rather than port 80. The replay and the proxy.
  bool empty_port_is_error = false;
  // The authority as the replay has always read it: an "@" stays in the host, anything after a
  // "]" other than ":port" is ignored, and the port may have any number of digits ("000080").
  bool lenient_authority = false;
  // Only "http://host[:port]" with at most a "/" after it: any other path, a query, a fragment or
  // a user part is kNotOrigin (checked before the host and port). The proxy's --upstream.
  bool origin_only = false;
  // "https://" parses as "http://" does, with tls set and 443 as the default port, instead of
  // being kTls. For the callers that speak TLS; none does yet.
  bool allow_https = false;
};

// The parts of `url`, or kNone's opposite in *error (out is then filled as far as parsing got:
// a kBadPort URL has its host). Faults are found in this order: scheme, origin_only shape,
// credentials, IPv6 brackets, port, host.
UrlError ParseHttpUrl(std::string_view url, HttpUrl* out, const UrlRules& rules = {});

// A default wording for an error ("bad port", "no host", ...), without the URL.
std::string_view UrlErrorText(UrlError error);

// "host" or "[v6]", then ":port" unless the port is the scheme's default (80, or 443 for https):
// the Host header of a request to `url`.
std::string HostHeader(const HttpUrl& url);

// "http://host:port" ("https://" for tls; "[v6]" in brackets), the port always written: two URLs
// with the same origin reach the same server.
std::string Origin(const HttpUrl& url);

}  // namespace llmtap::net
