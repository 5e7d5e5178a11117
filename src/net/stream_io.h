// Coroutine reads and writes over a connection that may carry TLS: one socket, and a TlsSocket
// (net/tls.h) over it or null for plain TCP, which then behaves exactly as Asio's own
// operations do. With TLS each helper tries its step first and waits for what the step asked
// for (tls->AsyncWant()) only after would_block: Asio's reactor is edge-triggered, so bytes
// OpenSSL already holds would otherwise never wake the wait.
//
// Defined once in stream_io.cc; callers instantiate nothing. A socket and its TlsSocket belong
// to one event loop. As with Asio's operations, at most one read and one write at a time per
// connection, and the buffers, the parser and `ec` must outlive the co_await.
#pragma once

#include <cstddef>
#include <memory>
#include <span>
#include <string_view>

#include <boost/asio/buffer.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http/basic_parser.hpp>

#include "common/asio_types.h"
#include "net/tls.h"

namespace llmtap::net {

// The whole TLS handshake: {} or the failure (tls.failure() says it in words).
awaitable<error_code> Handshake(TlsSocket& tls);

// A client's TLS over the connected `socket`: makes *tls (TlsSocket::Client: `host` for SNI and
// the certificate check, `slot` for resumption, may be null) and runs the handshake. {} or the
// failure, which (*tls)->failure() says in words; asio::error::no_memory, *tls null, when
// OpenSSL cannot allocate.
awaitable<error_code> ClientHandshake(Socket& socket, const TlsClientContext& ctx,
                                      std::string_view host, TlsSessionSlot* slot,
                                      std::unique_ptr<TlsSocket>* tls);

// Some bytes into `buffer`: the count (> 0), or 0 with `ec` set (asio::error::eof at the end).
awaitable<size_t> ReadSome(Socket& socket, TlsSocket* tls, asio::mutable_buffer buffer,
                           error_code& ec);

// All of `pieces`, or `ec` set. With TLS the pieces go as one record sequence.
awaitable<void> WriteAll(Socket& socket, TlsSocket* tls, std::span<const asio::const_buffer> pieces,
                         error_code& ec);

// The rest of a write TlsSocket::WriteNow left pending (write_pending()), or `ec` set; {} at
// once when none is.
awaitable<void> FinishWrite(TlsSocket& tls, error_code& ec);

// One HTTP message into `parser`, as Beast's http::async_read does (eager parsing; bytes after
// the message stay in `buffer` for the next one): `ec` is {} once the parser is done, or the
// parser's error (body_limit, header_limit, ...), http::error::end_of_stream when the
// connection ended before any byte of a message, partial_message when it ended inside one, or
// the connection's error. `observer` (may be null) hears of each read that brought bytes, before
// they are parsed: what arrived in one read can then be timed as one arrival.
struct ReadObserver {
  virtual void OnRead() = 0;

 protected:
  ~ReadObserver() = default;
};
awaitable<void> ReadHttpMessage(Socket& socket, TlsSocket* tls, boost::beast::flat_buffer& buffer,
                                boost::beast::http::basic_parser<false>& parser, error_code& ec,
                                ReadObserver* observer = nullptr);

}  // namespace llmtap::net
