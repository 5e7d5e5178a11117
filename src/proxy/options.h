// Options of the capture proxy (`llmtap proxy`). Plain data; every default below is what
// `llmtap proxy` uses when the matching flag is not given.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "net/tls_options.h"

namespace llmtap::tokenizer {
class Tokenizer;
}

namespace llmtap {
class Capture;
class Logger;
}  // namespace llmtap

namespace llmtap::proxy {

// Shadow traffic (`llmtap proxy --shadow URL`): a matched request, once its body has arrived, is
// also sent to a candidate server off the request path; both responses are read and compared,
// and one pair line per mirrored request is written (shadow.h).
struct ShadowOptions {
  // The candidates, "http://HOST:PORT" or "https://HOST[:PORT]" as for the upstream; at most two
  // (--shadow twice: an A/A comparison). Empty: off.
  std::vector<std::string> urls;
  // How an https:// candidate is trusted (--shadow-cacert, --shadow-insecure, ...).
  net::TlsClientOptions tls;
  // Share of matched requests mirrored, in [0, 1].
  double sample_rate = 1.0;
  // RE2 regex searched in the path without query; only POST requests are mirrored.
  std::string endpoint_pattern = "^/v1/(chat/completions|completions|responses|messages)$";
  // Mirrors in flight at once (all event loops together); a matched request beyond it is
  // dropped and counted (reason in_flight_limit), never queued.
  uint32_t max_in_flight = 64;
  // Request header fields for the candidate: "Name: value" replaces (or adds) that field;
  // drop_headers names fields not sent. Values are never logged.
  std::vector<std::string> set_headers;
  std::vector<std::string> drop_headers;
  // Where the pair lines go. With `capture` (on): beside each capture file,
  // "<capture file>.shadow.ndjson", joined to its rows (the capture's outcomes must be on).
  // Without: `pairs_path` (0600), or no pairs file when empty (metrics only).
  Capture* capture = nullptr;
  std::string pairs_path;
  // Seeds the sampling (0: random).
  uint64_t sample_seed = 0;
  // --shadow-tokenizer: the outputs are also compared by token (a pair's first_diff_token).
  // Not owned; null: by character only.
  const tokenizer::Tokenizer* tokenizer = nullptr;
};

struct ProxyOptions {
  // Listen address; port 0 picks a free port (read it back with ProxyServer::port()).
  std::string host = "127.0.0.1";
  uint16_t port = 8001;
  // The upstream server, "http://HOST:PORT" or "https://HOST[:PORT]" (443 by default; a
  // trailing "/" is accepted; no path prefix). Every request is forwarded there with its target
  // unchanged.
  std::string upstream = "http://127.0.0.1:8000";
  // How an https:// upstream is trusted (--cacert, --insecure, --cert, --key,
  // --no-tls-session-reuse); Start() refuses any of them with an http:// upstream.
  net::TlsClientOptions upstream_tls;
  // Event-loop threads. 0 = one per core. Each client connection and the upstream connections
  // it uses live on one thread for their whole life.
  uint32_t threads = 0;
  // Largest request body accepted; larger ones are answered 413 without being forwarded.
  uint64_t max_body_bytes = 64ull << 20;
  // Largest response header block, and largest request head (request line and header fields
  // together). A request's chunk lines and trailer section must each fit in it too, and its
  // chunk extensions and trailer fields together count toward it. Over it: 400.
  uint32_t max_header_bytes = 64 * 1024;
  // Deadlines. connect: opening an upstream connection (with its TLS handshake). read: each wait
  // for upstream bytes (the first response byte, then each following chunk), and reading a request
  // from a client once it started. write: each write to a client or upstream. idle: a keep-alive
  // client connection waiting for its next request, and a pooled upstream connection.
  std::chrono::milliseconds connect_timeout{5000};
  std::chrono::milliseconds read_timeout{300000};
  std::chrono::milliseconds write_timeout{60000};
  std::chrono::milliseconds idle_timeout{60000};
  // Idle upstream connections kept per thread for reuse.
  uint32_t max_idle_upstream_per_thread = 64;
  // Stop(): how long requests in flight may take to finish before they are cut.
  std::chrono::milliseconds grace{10000};
  // GET of exactly this target is answered by the proxy (Prometheus text) and never
  // forwarded. Empty: no metrics endpoint.
  std::string metrics_path = "/llmtap/metrics";
  // TLS on the listener (--tls-cert, --tls-key): the certificate chain (PEM, leaf first) and its
  // key; an empty key file means the key is in the certificate file. Empty cert: plain HTTP.
  std::string tls_cert_file;
  std::string tls_key_file;
  // How long a client has to complete the TLS handshake, from its connection's accept.
  std::chrono::milliseconds tls_handshake_timeout{10000};
  // A listener certificate that expires within this window is warned about, at start and on
  // every reload (one outside its validity period always is, and a reload refuses it).
  std::chrono::seconds tls_cert_warning_window{std::chrono::hours(24 * 14)};
  // A private key file its group or other users can read or write is refused (Start and reload
  // fail) instead of warned about.
  bool strict_key_permissions = false;
  // Shadow traffic to candidate servers (off unless shadow.urls is set).
  ShadowOptions shadow;
  // Not owned; nullptr means Logger::Stderr(). Must outlive the server.
  Logger* logger = nullptr;
};

}  // namespace llmtap::proxy
