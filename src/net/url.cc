#include "net/url.h"

namespace llmtap::net {

namespace {

bool AllDigits(std::string_view s) { return s.find_first_not_of("0123456789") == s.npos; }

}  // namespace

UrlError ParseHttpUrl(std::string_view url, HttpUrl* out, const UrlRules& rules) {
  *out = HttpUrl();
  constexpr std::string_view kHttps = "https://";
  constexpr std::string_view kHttp = "http://";
  std::string_view rest;
  if (url.starts_with(kHttps)) {
    if (!rules.allow_https) return UrlError::kTls;
    out->tls = true;
    out->port = 443;
    rest = url.substr(kHttps.size());
  } else if (url.starts_with(kHttp)) {
    rest = url.substr(kHttp.size());
  } else {
    return UrlError::kNotHttp;
  }
  if (rules.origin_only) {
    if (rest.ends_with('/')) rest.remove_suffix(1);
    if (rest.empty() || rest.find_first_of("/?#@") != rest.npos) return UrlError::kNotOrigin;
  }
  const size_t slash = rest.find('/');
  std::string_view authority = rest.substr(0, slash);
  out->authority = std::string(authority);
  out->target = slash == rest.npos ? "/" : std::string(rest.substr(slash));
  if (!rules.lenient_authority && authority.find('@') != authority.npos) {
    return UrlError::kCredentials;
  }

  std::string_view host = authority;
  std::string_view port;
  bool has_port = false;  // a ':' after the host
  if (authority.starts_with('[')) {
    const size_t close = authority.find(']');
    if (close == authority.npos) return UrlError::kUnterminatedIpv6;
    host = authority.substr(1, close - 1);
    const std::string_view after = authority.substr(close + 1);
    if (after.starts_with(':')) {
      has_port = true;
      port = after.substr(1);
    } else if (!after.empty() && !rules.lenient_authority) {
      return UrlError::kJunkAfterIpv6;
    }
  } else if (const size_t colon = authority.rfind(':'); colon != authority.npos) {
    host = authority.substr(0, colon);
    has_port = true;
    port = authority.substr(colon + 1);
  }
  out->host = std::string(host);

  if (has_port && !(port.empty() && !rules.empty_port_is_error)) {
    uint32_t v = 0;
    bool ok = !port.empty() && AllDigits(port) && (rules.lenient_authority || port.size() <= 5);
    for (size_t i = 0; ok && i < port.size(); ++i) {
      v = v * 10 + static_cast<uint32_t>(port[i] - '0');
      ok = v <= 65535;
    }
    if (!ok || v == 0) return UrlError::kBadPort;
    out->port = static_cast<uint16_t>(v);
  }
  if (host.empty()) return UrlError::kNoHost;
  return UrlError::kNone;
}

std::string_view UrlErrorText(UrlError error) {
  switch (error) {
    case UrlError::kNone:
      return "";
    case UrlError::kTls:
      return "https is not supported";
    case UrlError::kNotHttp:
      return "not an http:// URL";
    case UrlError::kNotOrigin:
      return "not http://HOST[:PORT]";
    case UrlError::kCredentials:
      return "credentials in the URL are not supported";
    case UrlError::kUnterminatedIpv6:
      return "unterminated IPv6 address";
    case UrlError::kJunkAfterIpv6:
      return "junk after the IPv6 address";
    case UrlError::kBadPort:
      return "bad port";
    case UrlError::kNoHost:
      return "no host";
  }
  return "bad URL";
}

namespace {

// "host", or "[v6]" for an IPv6 literal. (Appends: g++ 12 warns, falsely, on "[" + host + "]".)
void AppendHost(std::string* out, const std::string& host) {
  const bool v6 = host.find(':') != std::string::npos;
  if (v6) out->push_back('[');
  out->append(host);
  if (v6) out->push_back(']');
}

}  // namespace

std::string HostHeader(const HttpUrl& url) {
  std::string h;
  AppendHost(&h, url.host);
  if (url.port != (url.tls ? 443 : 80)) h.append(":").append(std::to_string(url.port));
  return h;
}

std::string Origin(const HttpUrl& url) {
  std::string o = url.tls ? "https://" : "http://";
  AppendHost(&o, url.host);
  o.append(":").append(std::to_string(url.port));
  return o;
}

}  // namespace llmtap::net
