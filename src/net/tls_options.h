// A TLS client's settings (net/tls.h): the replay's flags, and the proxy's towards an https
// upstream. Plain data, so that option structs can hold it without Asio or OpenSSL headers. The
// file names appear in error messages as the flag that gave them.
#pragma once

#include <string>

namespace llmtap::net {

struct TlsClientOptions {
  // --cacert: trust the certificates of this PEM file instead of the system store (as curl does).
  std::string ca_file;
  // --insecure: no certificate and no host-name check (callers warn when it is set).
  bool insecure = false;
  // --cert / --key: a client certificate chain (PEM, leaf first) and its key for mutual TLS; the
  // key defaults to cert_file (one PEM holding both).
  std::string cert_file;
  std::string key_file;
  // Offer the session of the previous connection (TlsSessionSlot) to skip a full handshake.
  bool session_reuse = true;

  // The flag of the first setting that differs from its default ("--cacert", ...), or null
  // when every setting has its default: for the usage error of a TLS flag given with an http://
  // target.
  const char* first_flag() const {
    if (!ca_file.empty()) return "--cacert";
    if (insecure) return "--insecure";
    if (!cert_file.empty()) return "--cert";
    if (!key_file.empty()) return "--key";
    if (!session_reuse) return "--no-tls-session-reuse";
    return nullptr;
  }
};

}  // namespace llmtap::net
