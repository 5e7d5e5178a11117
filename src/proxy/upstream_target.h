// UpstreamTarget: a server the proxy connects to (the upstream of --upstream, the candidate of
// --shadow), parsed, resolved and with its TLS client context: what a connection to it needs.
//
// Internal to src/proxy: made by ProxyServer::Start (server.cc) and by Shadow::Start, read-only
// afterwards by every event loop.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/asio_types.h"
#include "net/tls.h"
#include "net/tls_options.h"

namespace llmtap::proxy {

using namespace llmtap::asio_types;

struct UpstreamTarget {
  std::string authority;  // the Host field sent to it
  std::string host;       // the name its certificate must carry (SNI)
  std::vector<tcp::endpoint> endpoints;
  std::shared_ptr<const net::TlsClientContext> tls;  // null for http://
};

// Parses `url` ("http[s]://HOST[:PORT][/]"), makes the TLS context of an https:// one from `tls`
// (any TLS setting with an http:// URL is refused) and resolves the host. `what` names the flag's
// target in messages ("upstream", "shadow"). False with a reason in *error.
bool ResolveUpstreamTarget(const std::string& url, const net::TlsClientOptions& tls,
                           std::string_view what, UpstreamTarget* out, std::string* error);

class Pipe;

// Connects `up` to the first of `endpoints` that accepts, trying the next one after each failure
// unless `give_up()` says to stop (a deadline passed, the client left); a connected socket gets
// TCP_NODELAY and non-blocking mode. The last connect's error; {} once connected.
awaitable<error_code> ConnectFirst(Pipe& up, const std::vector<tcp::endpoint>& endpoints,
                                   const std::function<bool()>& give_up);

}  // namespace llmtap::proxy
