#include "cli/tls_flags.h"

#include <cstdio>

namespace llmtap::cli {

void AddTlsClientFlags(CLI::App* cmd, net::TlsClientOptions* tls, const std::string& peer,
                       const std::string& prefix) {
  const std::string p = "--" + prefix;
  cmd->add_option(p + "cacert", tls->ca_file,
                  "https: trust the CA certificates in this PEM file (instead of the system's) "
                  "to verify " +
                      peer)
      ->check(CLI::ExistingFile);
  cmd->add_flag(p + "insecure", tls->insecure,
                "https: do not verify " + peer +
                    "'s certificate or host name (a warning says so; for tests only)");
  cmd->add_option(p + "cert", tls->cert_file,
                  "https: client certificate chain (PEM, leaf first) for " + peer +
                      "s that require one (mutual TLS)")
      ->check(CLI::ExistingFile);
  cmd->add_option(p + "key", tls->key_file,
                  "https: the private key of " + p + "cert (default: " + p + "cert's file)")
      ->check(CLI::ExistingFile);
  cmd->add_flag_callback(
      p + "no-tls-session-reuse", [tls] { tls->session_reuse = false; },
      "https: a full handshake on every new connection (default: resume the previous "
      "connection's session)");
}

void WarnIfInsecure(const char* who, const net::TlsClientOptions& tls, const std::string& peer,
                    const char* flag) {
  if (!tls.insecure) return;
  std::fprintf(stderr,
               "%s: WARNING: %s: %s's certificate and host name are not verified; anyone on the "
               "path can read and change the traffic\n",
               who, flag, peer.c_str());
}

}  // namespace llmtap::cli
