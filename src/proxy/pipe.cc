#include "proxy/pipe.h"

namespace llmtap::proxy {

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
