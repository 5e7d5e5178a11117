#include "cli/listen.h"

#include <pthread.h>

#include <cstdio>

namespace llmtap::cli {
namespace {

bool ParseHostPort(const std::string& listen, std::string* host, uint16_t* port) {
  const size_t colon = listen.rfind(':');
  if (colon == std::string::npos || colon + 1 == listen.size()) return false;
  std::string h = listen.substr(0, colon);
  if (h.size() >= 2 && h.front() == '[' && h.back() == ']') h = h.substr(1, h.size() - 2);
  const std::string p = listen.substr(colon + 1);
  if (p.find_first_not_of("0123456789") != std::string::npos || p.size() > 5) return false;
  const unsigned long v = std::stoul(p);
  if (v > 65535) return false;
  *host = h.empty() ? "0.0.0.0" : h;
  *port = static_cast<uint16_t>(v);
  return true;
}

}  // namespace

void AddListenOption(CLI::App* cmd, std::string* listen) {
  cmd->add_option("--listen", *listen, "HOST:PORT to listen on; port 0 picks a free port")
      ->capture_default_str();
}

bool SplitListen(const char* who, const std::string& listen, std::string* host, uint16_t* port) {
  if (ParseHostPort(listen, host, port)) return true;
  std::fprintf(stderr, "%s: --listen wants HOST:PORT, got '%s'\n", who, listen.c_str());
  return false;
}

std::string ListenUrl(const std::string& host, unsigned port, const char* scheme) {
  const bool v6 = host.find(':') != std::string::npos;
  return std::string(scheme) + "://" + (v6 ? "[" + host + "]" : host) + ":" + std::to_string(port);
}

StopSignals::StopSignals(bool with_hangup) {
  sigemptyset(&set_);
  sigaddset(&set_, SIGINT);
  sigaddset(&set_, SIGTERM);
  if (with_hangup) sigaddset(&set_, SIGHUP);
  pthread_sigmask(SIG_BLOCK, &set_, nullptr);
  std::signal(SIGPIPE, SIG_IGN);
}

int StopSignals::Wait() {
  int sig = 0;
  sigwait(&set_, &sig);
  return sig;
}

}  // namespace llmtap::cli
