#include "net/resolve.h"

#include <boost/asio/io_context.hpp>
#include <boost/beast/core/tcp_stream.hpp>

namespace llmtap::net {

namespace asio = boost::asio;
namespace beast = boost::beast;
using tcp = asio::ip::tcp;
using boost::system::error_code;

namespace {

bool Lookup(asio::io_context& ioc, const std::string& host, uint16_t port,
            tcp::resolver::results_type* results, std::string* why) {
  tcp::resolver resolver(ioc);
  error_code ec;
  *results = resolver.resolve(host, std::to_string(port), ec);
  if (ec || results->empty()) {
    *why = ec.message();
    return false;
  }
  return true;
}

}  // namespace

bool ResolveAll(const std::string& host, uint16_t port, std::vector<tcp::endpoint>* out,
                std::string* why) {
  asio::io_context ioc;
  tcp::resolver::results_type results;
  if (!Lookup(ioc, host, port, &results, why)) return false;
  out->clear();
  for (const auto& r : results) out->push_back(r.endpoint());
  return true;
}

bool ResolveReachable(const std::string& host, uint16_t port, tcp::endpoint* out, std::string* why,
                      std::chrono::milliseconds probe_timeout) {
  asio::io_context ioc;
  tcp::resolver::results_type results;
  if (!Lookup(ioc, host, port, &results, why)) return false;
  *out = results.begin()->endpoint();
  beast::tcp_stream probe(ioc);
  probe.expires_after(probe_timeout);
  probe.async_connect(results, [&](error_code connect_ec, const tcp::endpoint& connected) {
    if (!connect_ec) *out = connected;
  });
  ioc.run();
  return true;
}

}  // namespace llmtap::net
