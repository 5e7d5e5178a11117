#include "sim/server.h"

#include <string>
#include <utility>

#include "common/asio_types.h"
#include "net/server_loops.h"
#include "sim/connection.h"

namespace llmtap::sim {

std::string DescribeModels(const SimOptions& options) {
  if (options.any_model) return "any model";
  if (options.served_model_names.size() <= 1) {
    return "model " + std::string(options.FirstServedName());
  }
  std::string out = "models ";
  for (const std::string& name : options.served_model_names) {
    if (&name != &options.served_model_names.front()) out.append(", ");
    out.append(name);
  }
  return out;
}

using namespace llmtap::asio_types;

struct SimServer::Impl {
  explicit Impl(SimOptions o)
      : shared(std::move(o)),
        loops(net::ServerLoopsOptions{
            .threads = shared.options.threads,
            .logger = shared.options.logger,
            .log_prefix = "llmtap sim",
        }) {}

  SimShared shared;
  net::ServerLoops loops;
  bool running = false;
};

SimServer::SimServer(SimOptions options) : impl_(std::make_unique<Impl>(std::move(options))) {}

SimServer::~SimServer() { Stop(); }

bool SimServer::Start(std::string* error) {
  Impl& s = *impl_;
  if (s.running) return true;
  const SimOptions& o = s.shared.options;
  error_code ec;
  const std::string host = o.host == "localhost" ? "127.0.0.1" : o.host;
  const asio::ip::address address = asio::ip::make_address(host, ec);
  if (ec) {
    *error = "invalid listen address '" + o.host + "' (want an IP address)";
    return false;
  }
  net::ListenStep failed;
  if (!s.loops.Listen(tcp::endpoint(address, o.port), &failed, &ec)) {
    *error = std::string(failed == net::ListenStep::kOpen ? "cannot open a socket for"
                                                          : "cannot listen on") +
             " " + o.host + ":" + std::to_string(o.port) + ": " + ec.message();
    return false;
  }
  s.loops.Start([shared = &s.shared](Socket socket, size_t) {
    return RunConnection(shared, std::move(socket));
  });
  s.running = true;
  return true;
}

void SimServer::Stop() {
  Impl& s = *impl_;
  if (!s.running) return;
  s.running = false;
  s.shared.limiter.Close();
  // In-flight responses are cut: destroying the loops destroys every suspended connection.
  s.loops.StopAndJoin();
  s.loops.DestroyLoops();
}

uint16_t SimServer::port() const { return impl_->loops.port(); }

Engine& SimServer::engine() { return impl_->shared.engine; }

}  // namespace llmtap::sim
