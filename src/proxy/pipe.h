// Pipe: one TCP connection of the proxy (a client's or an upstream's) with at most one read in
// flight, which may carry TLS (net/tls.h), and the small I/O vocabulary around it (Buffers).
//
// A read may stay posted while its owner does something else; its completion resumes the
// coroutine waiting in Wait(), if any, or is kept until one asks. So the client connection's
// next read doubles as the watch for a client that hangs up mid-response, and a pooled upstream
// connection's read both notices an upstream that closes it and becomes the read of the next
// response: neither costs a system call of its own (no MSG_PEEK, no epoll_ctl).
//
// With TLS (`tls` set) a read is first tried at once (OpenSSL may already hold plaintext, which
// no readiness wait would report: Asio's reactor is edge-triggered) and waits for the readiness
// it asks for only after would_block; a read that completes at once is still delivered through
// the loop (posted), as a plain read is. A write takes everything at once: what the socket could
// not take stays pending in the TlsSocket (WritePending) until FinishWrite (net/stream_io.h).
//
// Internal to src/proxy: used by the sessions (session.h) and the upstream pool. A Pipe is
// touched only by the thread of the event loop its socket lives on; it is shared because a
// read in flight keeps it alive.
#pragma once

#include <array>
#include <chrono>
#include <cstddef>
#include <memory>
#include <optional>
#include <utility>

#include <boost/asio/async_result.hpp>
#include <boost/asio/buffer.hpp>
#include <boost/asio/error.hpp>
#include <boost/beast/core/flat_buffer.hpp>

#include "common/asio_types.h"
#include "common/coarse_clock.h"
#include "net/tls.h"

namespace llmtap::proxy {

using namespace llmtap::asio_types;

// What one write sends: up to four pieces (a response head, a chunk-size line, body bytes, a
// chunk tail); unused pieces are empty.
using Buffers = std::array<asio::const_buffer, 4>;

// Each read asks for this much: an upstream read takes whatever the upstream has sent so far
// (so that it goes to the client in one write), a client read a whole request in most cases.
inline constexpr size_t kReadBytes = 16 * 1024;

class Pipe : public std::enable_shared_from_this<Pipe> {
 public:
  // Told when the connection's read ends with an error while nobody waits for it (the peer
  // went away).
  class Owner {
   public:
    virtual void OnHangUp() = 0;

   protected:
    ~Owner() = default;
  };

  explicit Pipe(Socket s) : socket(std::move(s)) {}
  explicit Pipe(const Executor& executor) : socket(executor) {}  // not open yet

  // Posts a read unless one is in flight or the connection has failed. (Asio 1.74 tries the
  // read at once, one recv that usually finds nothing, then waits for readiness.)
  void StartRead() {
    if (reading || error) return;
    reading = true;
    if (tls) {
      ReadTls();
      return;
    }
    socket.async_read_some(
        buffer.prepare(kReadBytes),
        [self = shared_from_this()](error_code ec, size_t n) { self->OnRead(ec, n); });
  }

  // Writes what the socket takes now, without waiting (the socket is in non-blocking mode).
  // Returns the bytes written; a full socket buffer is not an error. With TLS every byte is
  // taken, and what the socket did not take yet is WritePending().
  size_t WriteNow(const Buffers& buffers, error_code& ec) {
    if (tls) {
      const size_t n = tls->WriteNow(buffers, ec);
      if (ec == asio::error::would_block) ec = {};
      return n;
    }
    const size_t n = socket.write_some(buffers, ec);
    if (ec == asio::error::would_block || ec == asio::error::try_again) ec = {};
    return n;
  }
  bool WritePending() const { return tls && tls->write_pending(); }

  // Received bytes not consumed yet: in `buffer`, or held by OpenSSL.
  bool HasBufferedInput() const { return buffer.size() != 0 || (tls && tls->HasPending()); }

  // Ends the sending side: close_notify with TLS, then the TCP FIN.
  void ShutdownSend() {
    if (tls) tls->ShutdownSend();
    error_code ignored;
    socket.shutdown(tcp::socket::shutdown_send, ignored);
  }

  // Suspends until the read in flight completes. Only call while `reading`.
  template <class Token>
  auto Wait(Token&& token) {
    return asio::async_initiate<Token, void()>(
        [this](auto handler) { waiter_.emplace(std::move(handler)); }, token);
  }

  void Close() {
    error_code ignored;
    socket.close(ignored);
  }

  Socket socket;
  std::unique_ptr<net::TlsSocket> tls;  // null: plain TCP
  boost::beast::flat_buffer buffer;
  error_code error;      // what ended the connection's reads (sticky)
  bool reading = false;  // a read is in flight
  bool parked = false;   // in an idle pool: any completed read makes it useless
  // The client connection's session, told of a hang-up while nobody waits for a read (the
  // session clears it before it goes away).
  Owner* owner = nullptr;

 private:
  // What a coroutine suspended by Wait() is resumed through.
  using Waiter = asio::async_result<asio::use_awaitable_t<Executor>, void()>::handler_type;

  void OnRead(error_code ec, size_t n);
  // StartRead with TLS: reads now, or waits for the readiness OpenSSL asked for and tries again.
  void ReadTls();

  std::optional<Waiter> waiter_;
};

}  // namespace llmtap::proxy
