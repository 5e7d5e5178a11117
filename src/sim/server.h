// SimServer: the OpenAI-compatible simulated inference server behind `llmtap sim`, as a library
// so that tests and the proxy can run it in-process (for example on 127.0.0.1 port 0).
//
// Endpoints: POST /v1/chat/completions, POST /v1/completions (streaming and not), GET /v1/models,
// GET /health, GET /v1/metrics (and /metrics), in the shapes OpenAI and vLLM use.
//
// Threads: Start() and Stop() from one controlling thread; port() and engine() from any thread
// after Start() succeeded. The server runs `options.threads` event-loop threads of its own; each
// connection lives on one of them for its whole life, so a connection's handlers never run
// concurrently (the loop is the connection's strand).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "sim/options.h"

namespace llmtap::sim {

class Engine;

// What the server answers to, for its start-up line: "model llmtap-sim", "models a, b", or
// "any model".
std::string DescribeModels(const SimOptions& options);

class SimServer {
 public:
  explicit SimServer(SimOptions options);
  ~SimServer();  // Stops if running.
  SimServer(const SimServer&) = delete;
  SimServer& operator=(const SimServer&) = delete;

  // Binds, listens and starts the threads. Returns false with a reason in *error (for example
  // the address is in use); the server is then not running.
  bool Start(std::string* error);
  // Closes the listeners and every connection (in-flight responses are cut), joins the threads.
  // Idempotent.
  void Stop();

  // The bound port (the chosen one when options.port was 0). Valid after Start() succeeded.
  uint16_t port() const;
  Engine& engine();

  struct Impl;  // Implementation detail, opaque outside server.cc.

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace llmtap::sim
