// The replay's target server: --url, --header lines and the model probe (runner.h).
#include <simdjson.h>

#include "net/http_get.h"
#include "net/url.h"
#include "replay/runner.h"

namespace llmtap::replay {

bool ParseUrl(std::string_view url, Target* target, std::string* error) {
  *target = Target();
  net::HttpUrl u;
  const net::UrlError e = net::ParseHttpUrl(
      url, &u, {.empty_port_is_error = true, .lenient_authority = true, .allow_https = true});
  switch (e) {
    case net::UrlError::kNone:
      break;
    case net::UrlError::kUnterminatedIpv6:
      *error = "bad IPv6 address in --url";
      return false;
    case net::UrlError::kBadPort:
      *error = "bad port in --url";
      return false;
    case net::UrlError::kNoHost:
      *error = "--url has no host";
      return false;
    default:  // kNotHttp (the lenient rules give no other)
      *error = "--url must start with http:// or https://";
      return false;
  }
  std::string_view path = u.target;
  while (path.ends_with("/")) path.remove_suffix(1);
  if (path.ends_with("/v1")) path.remove_suffix(3);
  while (path.ends_with("/")) path.remove_suffix(1);
  target->base_path = std::string(path);
  target->host_header = net::HostHeader(u);
  target->origin = net::Origin(u);
  target->host = std::move(u.host);
  target->port = u.port;
  target->tls = u.tls;
  return true;
}

bool HeaderLine(std::string_view header, std::string* line, std::string* error) {
  size_t colon = header.find(':');
  if (colon == 0 || colon == std::string_view::npos ||
      header.find_first_of("\r\n") != std::string_view::npos) {
    *error = "--header must be 'Name: value' on one line";
    return false;
  }
  std::string_view name = header.substr(0, colon);
  for (char c : name) {
    if (c <= ' ' || c >= 127) {
      *error = "--header name holds a space or a control character";
      return false;
    }
  }
  std::string_view value = header.substr(colon + 1);
  while (!value.empty() && (value.front() == ' ' || value.front() == '\t')) value.remove_prefix(1);
  line->assign(name).append(": ").append(value).append("\r\n");
  return true;
}

std::optional<std::string> FetchFirstModel(const Target& target,
                                           const std::vector<std::string>& headers,
                                           double timeout_s, const net::TlsClientContext* tls) {
  const net::HttpGetResult res = net::HttpGet(
      target.origin + target.base_path + "/v1/models",
      std::chrono::milliseconds(static_cast<int64_t>(timeout_s * 1000)), 16u << 20, headers, tls);
  if (res.status != 200) return std::nullopt;
  simdjson::dom::parser parser;
  simdjson::dom::array data;
  std::string_view id;
  if (parser.parse(res.body).at_key("data").get(data) != simdjson::SUCCESS) return std::nullopt;
  for (simdjson::dom::element m : data) {
    if (m.at_key("id").get(id) == simdjson::SUCCESS && !id.empty()) return std::string(id);
  }
  return std::nullopt;
}

}  // namespace llmtap::replay
