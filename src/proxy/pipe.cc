#include "proxy/pipe.h"

#include <boost/asio/post.hpp>

namespace llmtap::proxy {

void Pipe::ReadTls() {
  error_code ec;
  const size_t n = tls->ReadSome(buffer.prepare(kReadBytes), ec);
  if (ec == asio::error::would_block) {
    // Also what a parked connection sees after a TLS 1.3 NewSessionTicket: no plaintext, so it
    // stays parked and waits again.
    tls->AsyncWant([self = shared_from_this()](error_code wait_ec) {
      if (wait_ec) {
        self->OnRead(wait_ec, 0);
      } else {
        self->ReadTls();
      }
    });
    return;
  }
  // Completed at once: delivered through the loop, as a plain read's completion is (callers
  // call Wait() after StartRead()).
  asio::post(socket.get_executor(), [self = shared_from_this(), ec, n] { self->OnRead(ec, n); });
}

void Pipe::OnRead(error_code ec, size_t n) {
  reading = false;
  buffer.commit(n);
  if (ec) error = ec;
  if (parked) {
    // A pooled connection has nothing to say; whatever it said makes it useless.
    Close();
    return;
  }
  if (waiter_) {
    Waiter waiter = std::move(*waiter_);
    waiter_.reset();
    waiter();
    return;
  }
  if (ec && owner != nullptr) owner->OnHangUp();
}

}  // namespace llmtap::proxy
