#include "net/stream_io.h"

#include <boost/asio/redirect_error.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/read_size.hpp>
#include <boost/beast/http/error.hpp>

namespace llmtap::net {

namespace http = boost::beast::http;

namespace {

// What one read asks for at most, as Beast's http::async_read.
constexpr size_t kHttpReadSize = 64 * 1024;

// After a write said would_block: waits and flushes until the pending rest has gone.
awaitable<void> WaitAndFlush(TlsSocket& tls, error_code& ec) {
  do {
    co_await tls.AsyncWant(asio::redirect_error(use_awaitable, ec));
    if (ec) co_return;
    ec = tls.Flush();
  } while (ec == asio::error::would_block);
}

}  // namespace

awaitable<error_code> Handshake(TlsSocket& tls) {
  for (;;) {
    error_code ec = tls.Handshake();
    if (ec != asio::error::would_block) co_return ec;
    co_await tls.AsyncWant(asio::redirect_error(use_awaitable, ec));
    if (ec) co_return ec;
  }
}

awaitable<error_code> ClientHandshake(Socket& socket, const TlsClientContext& ctx,
                                      std::string_view host, TlsSessionSlot* slot,
                                      std::unique_ptr<TlsSocket>* tls) {
  *tls = TlsSocket::Client(ctx, socket, host, slot);
  if (*tls == nullptr) co_return asio::error::no_memory;
  co_return co_await Handshake(**tls);
}

awaitable<size_t> ReadSome(Socket& socket, TlsSocket* tls, asio::mutable_buffer buffer,
                           error_code& ec) {
  if (tls == nullptr) {
    co_return co_await socket.async_read_some(buffer, asio::redirect_error(use_awaitable, ec));
  }
  for (;;) {
    const size_t n = tls->ReadSome(buffer, ec);
    if (ec != asio::error::would_block) co_return n;
    co_await tls->AsyncWant(asio::redirect_error(use_awaitable, ec));
    if (ec) co_return 0;
  }
}

awaitable<void> WriteAll(Socket& socket, TlsSocket* tls, std::span<const asio::const_buffer> pieces,
                         error_code& ec) {
  if (tls == nullptr) {
    co_await asio::async_write(socket, pieces, asio::redirect_error(use_awaitable, ec));
    co_return;
  }
  tls->WriteNow(pieces, ec);
  if (ec == asio::error::would_block) co_await WaitAndFlush(*tls, ec);
}

awaitable<void> FinishWrite(TlsSocket& tls, error_code& ec) {
  ec = tls.Flush();
  if (ec == asio::error::would_block) co_await WaitAndFlush(tls, ec);
}

awaitable<void> ReadHttpMessage(Socket& socket, TlsSocket* tls, boost::beast::flat_buffer& buffer,
                                http::basic_parser<false>& parser, error_code& ec,
                                ReadObserver* observer) {
  ec = {};
  parser.eager(true);
  while (!parser.is_done()) {
    if (buffer.size() != 0) {
      const size_t used = parser.put(buffer.data(), ec);
      buffer.consume(used);
      if (ec == http::error::need_more) {
        ec = {};
      } else if (ec) {
        co_return;
      } else if (used != 0) {
        continue;  // done, or more of the buffer to parse
      }
    }
    const size_t size = boost::beast::read_size(buffer, kHttpReadSize);
    if (size == 0) {
      ec = http::error::buffer_overflow;
      co_return;
    }
    const size_t n = co_await ReadSome(socket, tls, buffer.prepare(size), ec);
    buffer.commit(n);
    if (n != 0 && observer != nullptr) observer->OnRead();
    if (ec == asio::error::eof) {
      if (!parser.got_some()) {
        ec = http::error::end_of_stream;
        co_return;
      }
      // A body that runs to the end of the connection ends here; any other message is cut
      // (partial_message).
      ec = {};
      parser.put_eof(ec);
      co_return;
    }
    if (ec) co_return;
  }
}

}  // namespace llmtap::net
