// Helpers shared by the long-running server subcommands (`llmtap sim`, `llmtap proxy`): the
// --listen HOST:PORT value, the listening URL, and waiting for SIGINT/SIGTERM.
#pragma once

#include <csignal>
#include <cstdint>
#include <string>

#include <CLI/CLI.hpp>

namespace llmtap::cli {

// --listen HOST:PORT; `*listen` holds the default.
void AddListenOption(CLI::App* cmd, std::string* listen);

// Splits "HOST:PORT" ("[V6]:PORT" too; an empty host means 0.0.0.0). False if malformed, after
// saying so on stderr as `who` ("llmtap sim").
bool SplitListen(const char* who, const std::string& listen, std::string* host, uint16_t* port);

// "SCHEME://HOST:PORT" ("http" or "https"), with an IPv6 host in brackets.
std::string ListenUrl(const std::string& host, unsigned port, const char* scheme = "http");

// Blocks SIGINT and SIGTERM (and SIGHUP when asked) in the calling thread (and so in every
// thread it starts afterwards) and ignores SIGPIPE. Call before starting threads; then Wait()
// returns the next of those signals.
class StopSignals {
 public:
  explicit StopSignals(bool with_hangup = false);
  int Wait();

 private:
  sigset_t set_;
};

}  // namespace llmtap::cli
