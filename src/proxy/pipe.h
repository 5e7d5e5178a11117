// Pipe: one TCP connection of the proxy (a client's or an upstream's) with at most one read in
// flight, and the small I/O vocabulary around it (Buffers, WriteNow).
//
// A read may stay posted while its owner does something else; its completion resumes the
// coroutine waiting in Wait(), if any, or is kept until one asks. So the client connection's
// next read doubles as the watch for a client that hangs up mid-response, and a pooled upstream
// connection's read both notices an upstream that closes it and becomes the read of the next
// response: neither costs a system call of its own (no MSG_PEEK, no epoll_ctl).
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

namespace llmtap::proxy {

using namespace llmtap::asio_types;

// What one write sends: up to four pieces (a response head, a chunk-size line, body bytes, a
// chunk tail); unused pieces are empty.
using Buffers = std::array<asio::const_buffer, 4>;

// Each read asks for this much: an upstream read takes whatever the upstream has sent so far
// (so that it goes to the client in one write), a client read a whole request in most cases.
inline constexpr size_t kReadBytes = 16 * 1024;

// Writes what the socket takes now, without waiting (the socket is in non-blocking mode).
// Returns the bytes written; a full socket buffer is not an error.
template <class ConstBuffers>
size_t WriteNow(Socket& socket, const ConstBuffers& buffers, error_code& ec) {
  const size_t n = socket.write_some(buffers, ec);
  if (ec == asio::error::would_block || ec == asio::error::try_again) ec = {};
  return n;
}

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
    socket.async_read_some(
        buffer.prepare(kReadBytes),
        [self = shared_from_this()](error_code ec, size_t n) { self->OnRead(ec, n); });
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

  std::optional<Waiter> waiter_;
};

}  // namespace llmtap::proxy
