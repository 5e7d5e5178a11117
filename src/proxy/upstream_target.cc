#include "proxy/upstream_target.h"

#include <boost/asio/redirect_error.hpp>

#include "net/resolve.h"
#include "net/url.h"
#include "proxy/pipe.h"

namespace llmtap::proxy {
namespace {

// A target URL, "http[s]://HOST[:PORT][/]", with the proxy's own messages.
bool ParseUpstream(const std::string& url, std::string_view what, net::HttpUrl* out,
                   std::string* error) {
  const std::string name(what);
  const net::UrlError e = net::ParseHttpUrl(url, out,
                                            {.empty_port_is_error = true,
                                             .lenient_authority = false,
                                             .origin_only = true,
                                             .allow_https = true});
  switch (e) {
    case net::UrlError::kNone:
      return true;
    case net::UrlError::kTls:
    case net::UrlError::kNotHttp:
      *error = name + " '" + url + "' must start with http:// or https://";
      return false;
    case net::UrlError::kNotOrigin:
    case net::UrlError::kCredentials:
      *error = name + " '" + url + "' must be http[s]://HOST[:PORT] (no path, query or user)";
      return false;
    case net::UrlError::kUnterminatedIpv6:
      *error = name + " '" + url + "': unterminated IPv6 address";
      return false;
    case net::UrlError::kJunkAfterIpv6:
      *error = name + " '" + url + "': junk after the IPv6 address";
      return false;
    case net::UrlError::kBadPort:
      *error = name + " '" + url + "': bad port";
      return false;
    case net::UrlError::kNoHost:
      break;
  }
  *error = name + " '" + url + "': no host";
  return false;
}

}  // namespace

bool ResolveUpstreamTarget(const std::string& url, const net::TlsClientOptions& tls,
                           std::string_view what, UpstreamTarget* out, std::string* error) {
  net::HttpUrl parsed;
  if (!ParseUpstream(url, what, &parsed, error)) return false;
  out->authority = parsed.authority;
  out->host = parsed.host;
  out->tls.reset();
  if (parsed.tls) {
    out->tls = net::TlsClientContext::Make(tls, error);
    if (out->tls == nullptr) return false;
  } else if (const char* flag = tls.first_flag(); flag != nullptr) {
    *error = std::string(flag) + " applies to an https:// " + std::string(what) + "; the " +
             std::string(what) + " is " + url;
    return false;
  }
  std::string why;
  if (!net::ResolveAll(parsed.host, parsed.port, &out->endpoints, &why)) {
    *error = "cannot resolve " + std::string(what) + " host '" + parsed.host + "': " + why;
    return false;
  }
  return true;
}

awaitable<error_code> ConnectFirst(Pipe& up, const std::vector<tcp::endpoint>& endpoints,
                                   const std::function<bool()>& give_up) {
  error_code ec = asio::error::host_not_found;
  for (const tcp::endpoint& endpoint : endpoints) {
    co_await up.socket.async_connect(endpoint, asio::redirect_error(use_awaitable, ec));
    if (!ec || give_up()) break;
    up.Close();
  }
  if (!ec) {
    error_code ignored;
    up.socket.set_option(tcp::no_delay(true), ignored);
    up.socket.non_blocking(true, ignored);
  }
  co_return ec;
}

}  // namespace llmtap::proxy
