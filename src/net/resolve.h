// Blocking name resolution for a client about to connect: the proxy's upstream, the replay's
// target. Any thread may call these; each call owns its own io_context.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include <boost/asio/ip/tcp.hpp>

namespace llmtap::net {

// Every address of host:port, in the resolver's order. False with the resolver's message in
// *why when there is none.
bool ResolveAll(const std::string& host, uint16_t port,
                std::vector<boost::asio::ip::tcp::endpoint>* out, std::string* why);

// One address of host:port to connect to: "localhost" may resolve to ::1 and 127.0.0.1 with the
// server on only one of them, so this takes the first address that accepts a TCP connection
// within `probe_timeout` (the first address when none does: connects then fail as such). False
// with the resolver's message in *why when there is no address.
bool ResolveReachable(const std::string& host, uint16_t port, boost::asio::ip::tcp::endpoint* out,
                      std::string* why,
                      std::chrono::milliseconds probe_timeout = std::chrono::seconds(3));

}  // namespace llmtap::net
