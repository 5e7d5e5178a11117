// TLS for llmtap's connections: OpenSSL (TLS 1.2 and 1.3, HTTP/1.1 by ALPN) over an existing
// Asio socket, each step tried at once and waited for only when it would block, as nginx does.
//
// Why not Asio's ssl::stream: its synchronous writes lose ciphertext on a non-blocking socket,
// so every TLS write would have to be an async_write (the proxy writes at once and waits only
// when the socket is full); it copies every byte twice more through its BIO pair; and it
// encrypts only the first buffer of a multi-buffer write. Here SSL_write sends on the fd,
// SSL_read reads what AsyncWant received, and a caller calls AsyncWant only after an operation
// said would_block. The plain path pays one `if (tls)` per read or write.
//
// The contexts hold the settings (trust, certificates, ALPN, session tickets); a TlsSocket is one
// connection. Contexts are immutable once made and may be shared by threads; a TlsSocket and a
// TlsSessionSlot belong to one thread (the event loop of their socket).
//
// Include from .cc files only (it includes common/asio_types.h). No OpenSSL header is included
// here: OpenSSL's C headers are included by tls.cc alone.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>

#include <boost/asio/async_result.hpp>
#include <boost/asio/buffer.hpp>
#include <boost/asio/socket_base.hpp>

#include "common/asio_types.h"
#include "net/tls_options.h"

struct ssl_st;
struct ssl_ctx_st;
struct ssl_session_st;

namespace llmtap::net {

using namespace llmtap::asio_types;

// A client context (SSL_CTX): trust store, client certificate, ALPN http/1.1, TLS >= 1.2.
class TlsClientContext {
 public:
  // Nullptr and *error = "cannot read --cacert FILE: ...", "--key does not match --cert", ...
  static std::shared_ptr<const TlsClientContext> Make(const TlsClientOptions& options,
                                                      std::string* error);
  ~TlsClientContext();
  TlsClientContext(const TlsClientContext&) = delete;
  TlsClientContext& operator=(const TlsClientContext&) = delete;

  const TlsClientOptions& options() const { return options_; }
  ssl_ctx_st* native() const { return ctx_; }

 private:
  TlsClientContext(ssl_ctx_st* ctx, TlsClientOptions options);
  ssl_ctx_st* ctx_;
  TlsClientOptions options_;
};

// A server context: certificate chain (PEM, leaf first) and key, ALPN http/1.1, stateless
// session tickets, TLS >= 1.2.
class TlsServerContext {
 public:
  // Nullptr and *error = "cannot load --tls-cert FILE: ...", "--tls-key does not match
  // --tls-cert", "encrypted private keys are not supported: FILE", ... An empty `key_file`
  // means the key is in cert_file.
  static std::shared_ptr<const TlsServerContext> Make(const std::string& cert_file,
                                                      const std::string& key_file,
                                                      std::string* error);
  ~TlsServerContext();
  TlsServerContext(const TlsServerContext&) = delete;
  TlsServerContext& operator=(const TlsServerContext&) = delete;

  // "CN=llmtap.example, expires 2027-01-04" (the leaf certificate), for log lines.
  const std::string& description() const { return description_; }
  // The leaf certificate's subject ("CN=llmtap.example") and validity period, in Unix seconds
  // (notBefore, notAfter; 0 when unreadable).
  const std::string& subject() const { return subject_; }
  int64_t not_before() const { return not_before_; }
  int64_t not_after() const { return not_after_; }
  // Seconds until the leaf certificate expires (negative once it has).
  std::chrono::seconds expires_in() const;
  ssl_ctx_st* native() const { return ctx_; }

 private:
  TlsServerContext(ssl_ctx_st* ctx, std::string description);
  ssl_ctx_st* ctx_;
  std::string description_;
  std::string subject_;
  int64_t not_before_ = 0;
  int64_t not_after_ = 0;
};

// "2027-01-04" (UTC) of a Unix time.
std::string UtcDay(int64_t unix_seconds);

// The session of the last connection to one server, offered by the next connection to resume
// (TLS 1.3 tickets arrive after the handshake, so the slot is filled by OpenSSL's new-session
// callback). One per thread per server; not thread-safe.
class TlsSessionSlot {
 public:
  TlsSessionSlot() = default;
  ~TlsSessionSlot();
  TlsSessionSlot(const TlsSessionSlot&) = delete;
  TlsSessionSlot& operator=(const TlsSessionSlot&) = delete;

  void Set(ssl_session_st* session);  // takes one reference
  ssl_session_st* get() const { return session_; }

 private:
  ssl_session_st* session_ = nullptr;
};

// One TLS connection over a socket it does not own. Every call is one non-blocking step:
// success, asio::error::would_block (then AsyncWant() and call again), or a
// failure whose text failure() keeps. Errors are mapped so that plain-TCP logic keeps working:
// close_notify and an EOF without it are asio::error::eof; a socket error is its errno
// (connection_reset, broken_pipe); a closed socket is bad_descriptor. Any other failure (a TLS
// protocol or certificate failure) is an error_code of a "tls" category whose message() is
// OpenSSL's reason ("certificate verify failed"); failure() says it in a user's words. After
// any failure but a close_notify received, every call returns that failure again.
//
// Only wait after would_block: Asio's reactor is edge-triggered, so plaintext OpenSSL already
// holds (read-ahead) would otherwise sit unread.
//
// OpenSSL never reads the socket itself: what the peer sends is received by AsyncWant, with
// Asio's own read (which tries a recv first and keeps the descriptor registered), into an inbox
// OpenSSL reads from. Waiting for readability with socket.async_wait instead would cost an
// epoll_ctl per wait (Asio re-arms the descriptor for every wait it is asked for).
class TlsSocket {
 public:
  // `host`: the server's name (SNI, and the name the certificate must carry) or IP literal, v4
  // or v6, brackets allowed (the address the certificate must carry; no SNI). `slot` may be null
  // (no resumption); it must outlive the TlsSocket. Both put the socket in non-blocking mode.
  // Nullptr only when OpenSSL cannot allocate.
  static std::unique_ptr<TlsSocket> Client(const TlsClientContext& ctx, Socket& socket,
                                           std::string_view host, TlsSessionSlot* slot);
  static std::unique_ptr<TlsSocket> Server(const TlsServerContext& ctx, Socket& socket);
  ~TlsSocket();
  TlsSocket(const TlsSocket&) = delete;
  TlsSocket& operator=(const TlsSocket&) = delete;

  // One handshake step: {} once done, would_block, or a failure (failure() says which:
  // "certificate signed by an unknown CA (CN=...)", "certificate has expired (CN=..., expired
  // YYYY-MM-DD)", "host name mismatch: the certificate does not name HOST (it names ...)", "the
  // server does not speak TLS (it answered plain HTTP)", "connection closed during the TLS
  // handshake", ...).
  error_code Handshake();

  // Plaintext into `buffer`: the bytes read (> 0), or 0 with `ec` set. May want a write (a TLS
  // 1.3 KeyUpdate answered while reading).
  size_t ReadSome(asio::mutable_buffer buffer, error_code& ec);

  // Encrypts and sends what it can of `pieces` now, several pieces as one record sequence.
  // Returns the plaintext bytes taken: all of them, or 0 on a failure. When not all could be
  // sent, `ec` is would_block: the rest is kept (flattened) and Flush() continues it after
  // AsyncWant(); the caller's buffers may be released once this returns. A single piece that all
  // goes is not copied.
  size_t WriteNow(std::span<const asio::const_buffer> pieces, error_code& ec);
  error_code Flush();
  bool write_pending() const { return pending_ != 0; }

  // Received bytes not yet returned are held (by OpenSSL, read ahead, or in the inbox): a read
  // may not block, so read before waiting.
  bool HasPending() const;
  // After would_block: waits for what the step wants, then handler(error_code): {} to call the
  // step again (a failure of the connection then comes from that step, in words), or the wait's
  // error when it was cancelled or the socket closed. For a read it receives into the inbox;
  // for a write it waits until the socket takes more. At most one at a time; the TlsSocket
  // must outlive it.
  template <class Token>
  auto AsyncWant(Token&& token) {
    return asio::async_initiate<Token, void(error_code)>(
        [this](auto handler) {
          if (want_ != asio::socket_base::wait_read) {
            socket_.async_wait(want_, std::move(handler));
            return;
          }
          ReceiveIntoInbox(std::move(handler));
        },
        token);
  }

  // Sends close_notify (best effort, never waits).
  void ShutdownSend();

  // Record buffers (about 33 KB per connection while held). By default OpenSSL frees them
  // whenever a read or write leaves nothing in them and allocates them again for the next
  // record: little memory per idle connection, at a cost per request on a busy one. A busy
  // server keeps them instead (KeepBuffers) and frees those of connections that have gone idle
  // (ReleaseBuffers, from a sweep), as OpenSSL cannot tell a pause from idleness.
  void KeepBuffers();
  // Frees the buffers if they hold nothing; they are allocated again by the next read or write.
  // False when they hold data (then nothing is freed). An AsyncWant read in flight is cancelled
  // and made again, into a small buffer, without its caller seeing it: call it only while
  // nothing else waits on the socket.
  bool ReleaseBuffers();

  bool resumed() const;
  // "TLSv1.3", "TLSv1.2".
  std::string_view version() const;
  // The ALPN protocol agreed ("http/1.1"), or "" when none.
  std::string_view alpn() const;
  // The server name the client asked for (SNI), on the server side; "" when none.
  std::string_view server_name() const;
  // The text of the last failure (or EOF).
  const std::string& failure() const { return failure_; }

 private:
  // tls.cc: OpenSSL's callbacks (certificate verification, ALPN, new sessions), which fill the
  // members below and which the contexts install, and the wording of failures.
  struct Detail;
  friend struct Detail;
  friend class TlsClientContext;
  friend class TlsServerContext;
  enum class Step { kHandshake, kRead, kWrite };

  TlsSocket(ssl_st* ssl, Socket& socket);
  bool Open() const;
  // AsyncWant's read: where it goes, and what came (the error the wait ends with, if any).
  asio::mutable_buffer InboxSpace();
  error_code Received(size_t n, error_code ec);
  template <class Handler>
  void ReceiveIntoInbox(Handler handler) {
    receiving_ = true;
    socket_.async_read_some(InboxSpace(), [this, handler = std::move(handler)](
                                              error_code ec, size_t n) mutable {
      receiving_ = false;
      if (std::exchange(shrink_, false) && ec == asio::error::operation_aborted && Open()) {
        // ReleaseBuffers cancelled it: the same wait, into the small inbox.
        ShrinkInbox();
        ReceiveIntoInbox(std::move(handler));
        return;
      }
      std::move(handler)(Received(n, ec));
    });
  }
  void ShrinkInbox();
  error_code Fail(int ret, Step step);
  error_code WriteLoop(const char* data, size_t size, size_t* done);

  ssl_st* ssl_;
  Socket& socket_;
  // The socket's descriptor when this was made: a number reused by a new connection is not ours.
  int fd_;
  asio::socket_base::wait_type want_ = asio::socket_base::wait_read;
  std::string out_;      // the flattened rest of a write that would block
  size_t out_sent_ = 0;  // how much of out_ has been taken by SSL_write
  size_t pending_ = 0;   // bytes of out_ not yet taken
  error_code error_;     // the failure that ended the connection, returned by every later call
  std::string failure_;
  TlsSessionSlot* slot_ = nullptr;
  std::string host_;             // client: the name or address the certificate must carry
  std::string verify_failure_;   // client: the first certificate check that failed, in words
  std::string alpn_offered_;     // server: the protocols of a client llmtap speaks none of
  bool cert_requested_ = false;  // client: the server asked for a client certificate
  bool receiving_ = false;       // an AsyncWant read into the inbox is in flight
  bool shrink_ = false;          // ReleaseBuffers cancelled it to shrink the inbox
};

}  // namespace llmtap::net
