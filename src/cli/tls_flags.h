// The TLS client flags of the commands that connect to an https:// server (`llmtap replay`
// --url, `llmtap proxy` --upstream): --cacert, --insecure, --cert, --key,
// --no-tls-session-reuse, worded the same everywhere.
#pragma once

#include <string>

#include <CLI/CLI.hpp>

#include "net/tls_options.h"

namespace llmtap::cli {

// `peer` names what the flags are about in --help ("the server", "the upstream"); `prefix` goes
// after the dashes ("shadow-": --shadow-cacert, ...).
void AddTlsClientFlags(CLI::App* cmd, net::TlsClientOptions* tls, const std::string& peer,
                       const std::string& prefix = "");

// Prints `who`'s warning on stderr when --insecure (the flag named `flag`) is set ("llmtap
// replay: WARNING: ...").
void WarnIfInsecure(const char* who, const net::TlsClientOptions& tls, const std::string& peer,
                    const char* flag = "--insecure");

}  // namespace llmtap::cli
