#include "net/tls.h"

#include "net/tls_openssl.h"

#include <arpa/inet.h>
#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <system_error>
#include <utility>

namespace llmtap::net {

using namespace tls_detail;

namespace {

// The one protocol offered and accepted by ALPN, in its wire format.
constexpr unsigned char kAlpn[] = "\x08http/1.1";
constexpr unsigned kAlpnSize = sizeof(kAlpn) - 1;

// out_ keeps its memory between writes up to this size; a larger one is released once sent.
constexpr size_t kKeepOutCapacity = 64 * 1024;

// --- Contexts --------------------------------------------------------------------------------

// Never a terminal prompt for a key's passphrase: a key that asks for one fails to load, and
// the flag lets the caller say why.
int NoPassphrase(char*, int, int, void* asked) {
  if (asked != nullptr) *static_cast<bool*>(asked) = true;
  return 0;
}

struct CtxDeleter {
  void operator()(SSL_CTX* ctx) const { SSL_CTX_free(ctx); }
};
using CtxPtr = std::unique_ptr<SSL_CTX, CtxDeleter>;

// The settings both sides share: TLS >= 1.2, no renegotiation, partial and moving writes
// (WriteNow, Flush), buffers released while idle, read-ahead (a record's header and body in
// one recv; HasPending covers what it holds).
CtxPtr NewContext(const SSL_METHOD* method, std::string* error) {
  ERR_clear_error();
  CtxPtr ctx(SSL_CTX_new(method));
  if (ctx == nullptr) {
    *error = "cannot make a TLS context: " + TakeErrorText();
    return nullptr;
  }
  SSL_CTX_set_min_proto_version(ctx.get(), TLS1_2_VERSION);
  SSL_CTX_set_options(ctx.get(), SSL_OP_NO_RENEGOTIATION);
  SSL_CTX_set_mode(ctx.get(), SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER |
                                  SSL_MODE_RELEASE_BUFFERS);
  SSL_CTX_set_read_ahead(ctx.get(), 1);
  SSL_CTX_set_default_passwd_cb(ctx.get(), NoPassphrase);
  return ctx;
}

// A certificate time as Unix seconds; 0 when unreadable.
int64_t UnixTime(const ASN1_TIME* time) {
  struct tm tm {};
  if (time == nullptr || ASN1_TIME_to_tm(time, &tm) != 1) return 0;
  return static_cast<int64_t>(timegm(&tm));
}

// What a PEM file holds, from its "-----BEGIN <label>-----" lines: so that a load error says
// what the file is instead of OpenSSL's "no start line" (a key given as the certificate, a
// certificate as the key). Reads at most 1 MiB; a file that cannot be read holds nothing here
// (OpenSSL's own error then names the cause).
struct PemContents {
  bool certificate = false;
  bool private_key = false;
  std::string other;  // the first other label ("CERTIFICATE REQUEST", "PUBLIC KEY", ...)

  static PemContents Of(const std::string& path) {
    PemContents c;
    std::FILE* f = std::fopen(path.c_str(), "rb");
    if (f == nullptr) return c;
    std::string text(1 << 20, '\0');
    text.resize(std::fread(text.data(), 1, text.size(), f));
    std::fclose(f);
    static constexpr std::string_view kBegin = "-----BEGIN ";
    for (size_t at = text.find(kBegin); at != std::string::npos; at = text.find(kBegin, at + 1)) {
      const size_t from = at + kBegin.size();
      const size_t to = text.find("-----", from);
      if (to == std::string::npos || to - from > 64) continue;
      const std::string_view label(text.data() + from, to - from);
      if (label == "CERTIFICATE" || label == "TRUSTED CERTIFICATE" || label == "X509 CERTIFICATE") {
        c.certificate = true;
      } else if (label.ends_with("PRIVATE KEY")) {
        c.private_key = true;
      } else if (label != "EC PARAMETERS" && c.other.empty()) {
        c.other = label;  // openssl ecparam -genkey writes EC PARAMETERS before the key
      }
    }
    return c;
  }

  // "a certificate", "a private key", "a certificate request", "no PEM data", ...
  std::string Text() const {
    if (certificate && private_key) return "a certificate and a private key";
    if (certificate) return "a certificate";
    if (private_key) return "a private key";
    if (other == "CERTIFICATE REQUEST" || other == "NEW CERTIFICATE REQUEST") {
      return "a certificate request (CSR)";
    }
    if (other.ends_with("PUBLIC KEY")) return "a public key";
    if (!other.empty()) return "PEM data of type " + other;
    return "no PEM data";
  }
};

// The error of a certificate file (`flag` FILE) OpenSSL could not load: what the file holds
// instead of a certificate, or OpenSSL's reason.
std::string CertificateFileError(const char* verb, const char* flag, const std::string& file) {
  const unsigned long code = ERR_peek_error();
  const bool unreadable = ERR_SYSTEM_ERROR(code);
  const std::string why = TakeErrorText();
  const PemContents holds = unreadable ? PemContents{} : PemContents::Of(file);
  if (!unreadable && !holds.certificate) {
    return std::string(flag) + " " + file + " holds " + holds.Text() + ", not a certificate";
  }
  return std::string(verb) + " " + flag + " " + file + ": " + why;
}

// A certificate chain and its key, named in errors by the flags that gave them. An empty
// `key_file` means the key is in cert_file; given, even as the same file, it is named as
// `key_flag`.
bool LoadCertificate(SSL_CTX* ctx, const std::string& cert_file, const std::string& key_file,
                     const char* cert_flag, const char* key_flag, std::string* error) {
  const bool key_given = !key_file.empty();
  const std::string& key = key_given ? key_file : cert_file;
  const char* key_named = key_given ? key_flag : cert_flag;
  const std::string mismatch = key_given && key_file != cert_file
                                   ? std::string(key_flag) + " does not match " + cert_flag
                                   : "the key in " + std::string(key_named) + " " + key +
                                         " does not match the certificate of " + cert_flag;
  ERR_clear_error();
  if (SSL_CTX_use_certificate_chain_file(ctx, cert_file.c_str()) != 1) {
    *error = CertificateFileError("cannot load", cert_flag, cert_file);
    return false;
  }
  bool asked = false;
  SSL_CTX_set_default_passwd_cb_userdata(ctx, &asked);
  const int loaded = SSL_CTX_use_PrivateKey_file(ctx, key.c_str(), SSL_FILETYPE_PEM);
  SSL_CTX_set_default_passwd_cb_userdata(ctx, nullptr);
  if (loaded != 1) {
    const unsigned long code = ERR_peek_error();
    if (asked) {
      ERR_clear_error();
      *error = "encrypted private keys are not supported: " + key;
    } else if (ERR_GET_LIB(code) == ERR_LIB_X509 &&
               (ERR_GET_REASON(code) == X509_R_KEY_VALUES_MISMATCH ||
                ERR_GET_REASON(code) == X509_R_KEY_TYPE_MISMATCH)) {
      ERR_clear_error();
      *error = mismatch;
    } else {
      // OpenSSL 3's decoders say "unsupported" of a file with no key in it.
      const bool no_key =
          (ERR_GET_LIB(code) == ERR_LIB_OSSL_DECODER &&
           ERR_GET_REASON(code) == ERR_R_UNSUPPORTED) ||
          (ERR_GET_LIB(code) == ERR_LIB_PEM && ERR_GET_REASON(code) == PEM_R_NO_START_LINE);
      const std::string why = TakeErrorText();
      const PemContents holds = no_key ? PemContents::Of(key) : PemContents{};
      if (!no_key) {
        *error = "cannot load " + std::string(key_named) + " " + key + ": " + why;
      } else if (!key_given) {
        *error = std::string(cert_flag) + " " + key + " holds " + holds.Text() +
                 " and no private key: give the key with " + key_flag;
      } else {
        *error =
            std::string(key_flag) + " " + key + " holds " + holds.Text() + ", not a private key";
      }
    }
    return false;
  }
  if (SSL_CTX_check_private_key(ctx) != 1) {
    ERR_clear_error();
    *error = mismatch;
    return false;
  }
  return true;
}

}  // namespace

// OpenSSL's callbacks, which reach the TlsSocket through the SSL's app data.
struct TlsSocket::Detail {
  static TlsSocket* Of(SSL* ssl) { return static_cast<TlsSocket*>(SSL_get_app_data(ssl)); }

  // Client: records the first failing certificate; the verdict stays OpenSSL's.
  static int Verify(int ok, X509_STORE_CTX* store) {
    if (ok == 1) return ok;
    auto* ssl =
        static_cast<SSL*>(X509_STORE_CTX_get_ex_data(store, SSL_get_ex_data_X509_STORE_CTX_idx()));
    TlsSocket* self = ssl != nullptr ? Of(ssl) : nullptr;
    if (self != nullptr && self->verify_failure_.empty()) {
      self->verify_failure_ = VerifyFailureText(
          X509_STORE_CTX_get_error(store), X509_STORE_CTX_get_current_cert(store), self->host_);
    }
    return ok;
  }

  // Client: the server asked for a certificate (then a handshake_failure alert means "none").
  static int CertificateRequested(SSL* ssl, void*) {
    if (TlsSocket* self = Of(ssl)) self->cert_requested_ = true;
    return 1;
  }

  // Client: a session (a TLS 1.2 one at the end of the handshake, TLS 1.3 tickets while
  // reading) goes to the connection's slot, which takes the reference.
  static int NewSession(SSL* ssl, SSL_SESSION* session) {
    TlsSocket* self = Of(ssl);
    if (self == nullptr || self->slot_ == nullptr) return 0;
    self->slot_->Set(session);
    return 1;
  }

  // Server: http/1.1 when the client offers it; a client offering only others is refused.
  static int SelectAlpn(SSL* ssl, const unsigned char** out, unsigned char* out_size,
                        const unsigned char* in, unsigned in_size, void*) {
    unsigned char* selected = nullptr;
    if (SSL_select_next_proto(&selected, out_size, kAlpn, kAlpnSize, in, in_size) ==
        OPENSSL_NPN_NEGOTIATED) {
      *out = selected;
      return SSL_TLSEXT_ERR_OK;
    }
    if (TlsSocket* self = Of(ssl)) {
      self->alpn_offered_.clear();
      for (unsigned i = 0; i < in_size; i += 1 + in[i]) {
        if (!self->alpn_offered_.empty()) self->alpn_offered_ += ", ";
        self->alpn_offered_.append(reinterpret_cast<const char*>(in) + i + 1,
                                   std::min<unsigned>(in[i], in_size - i - 1));
      }
    }
    return SSL_TLSEXT_ERR_ALERT_FATAL;
  }

  // An alert the peer sent, in words.
  static std::string AlertText(const TlsSocket& self, int alert) {
    const bool server = SSL_is_server(self.ssl_) == 1;
    const std::string peer = server ? "the client" : "the server";
    const std::string description = SSL_alert_desc_string_long(alert);
    switch (alert) {
      case SSL_AD_CERTIFICATE_REQUIRED:
        return "the peer requires a client certificate";
      case SSL_AD_HANDSHAKE_FAILURE:
        if (!server && self.cert_requested_ && SSL_get_certificate(self.ssl_) == nullptr) {
          return "the peer requires a client certificate";
        }
        return peer + " refused the handshake (handshake failure alert)";
      case SSL_AD_UNKNOWN_CA:
      case SSL_AD_BAD_CERTIFICATE:
      case SSL_AD_UNSUPPORTED_CERTIFICATE:
      case SSL_AD_CERTIFICATE_REVOKED:
      case SSL_AD_CERTIFICATE_EXPIRED:
      case SSL_AD_CERTIFICATE_UNKNOWN:
        return server ? "the client rejected the certificate: " + description
                      : "the server rejected the client certificate: " + description;
      case SSL_AD_NO_APPLICATION_PROTOCOL:
        return server ? "the client speaks no protocol llmtap offers (ALPN)"
                      : "the server speaks no protocol llmtap offers (ALPN http/1.1)";
      case SSL_AD_PROTOCOL_VERSION:
        return peer + " does not support TLS 1.2 or later";
      case SSL_AD_UNRECOGNIZED_NAME:
        return "the server does not know the name " + self.host_ + " (SNI)";
      default:
        return peer + " sent a TLS alert: " + description;
    }
  }

  // A TLS failure (OpenSSL's queued error `code`) in words.
  static std::string FailureText(const TlsSocket& self, unsigned long code, Step step) {
    const bool server = SSL_is_server(self.ssl_) == 1;
    const int reason = ERR_GET_REASON(code);
    if (ERR_GET_LIB(code) == ERR_LIB_SSL && !ERR_SYSTEM_ERROR(code)) {
      if (reason >= SSL_AD_REASON_OFFSET && reason < SSL_AD_REASON_OFFSET + 256) {
        return AlertText(self, reason - SSL_AD_REASON_OFFSET);
      }
      switch (reason) {
        case SSL_R_CERTIFICATE_VERIFY_FAILED:
          if (!self.verify_failure_.empty()) return self.verify_failure_;
          return std::string(server ? "client certificate verify failed: "
                                    : "certificate verify failed: ") +
                 X509_verify_cert_error_string(SSL_get_verify_result(self.ssl_));
        case SSL_R_HTTP_REQUEST:
          return "the client spoke plain HTTP";
        case SSL_R_HTTPS_PROXY_REQUEST:
          return "the client spoke plain HTTP (a proxy CONNECT request)";
        case SSL_R_WRONG_VERSION_NUMBER:
        case SSL_R_PACKET_LENGTH_TOO_LONG:
        case SSL_R_RECORD_LENGTH_MISMATCH:
          if (const std::string_view first = FirstBytes(self.ssl_); !LooksLikeTls(first)) {
            if (server) return "the client does not speak TLS";
            return first.starts_with("HTTP/")
                       ? "the server does not speak TLS (it answered plain HTTP)"
                       : "the server does not speak TLS";
          }
          break;
        case SSL_R_NO_APPLICATION_PROTOCOL:
          if (server) {
            return "the client offered no protocol llmtap speaks (ALPN: " + self.alpn_offered_ +
                   ")";
          }
          break;
        case SSL_R_PEER_DID_NOT_RETURN_A_CERTIFICATE:
          return "the client sent no certificate";
        case SSL_R_UNSUPPORTED_PROTOCOL:
        case SSL_R_VERSION_TOO_LOW:
          return std::string(server ? "the client" : "the server") +
                 " does not support TLS 1.2 or later";
        default:
          break;
      }
    }
    return std::string(step == Step::kHandshake ? "TLS handshake failed: " : "TLS failure: ") +
           ReasonText(code);
  }

  // A TLS record starts with its content type (20-24) and the major version 3.
  static bool LooksLikeTls(std::string_view first) {
    if (first.size() < 2) return true;  // too little to tell
    const auto type = static_cast<unsigned char>(first[0]);
    return type >= 20 && type <= 24 && first[1] == 3;
  }
};

// --- TlsClientContext ------------------------------------------------------------------------

std::shared_ptr<const TlsClientContext> TlsClientContext::Make(const TlsClientOptions& options,
                                                               std::string* error) {
  CtxPtr ctx = NewContext(TLS_client_method(), error);
  if (ctx == nullptr) return nullptr;
  SSL_CTX* c = ctx.get();
  // A bad --cacert is reported under --insecure too: the user meant something by it.
  if (!options.ca_file.empty()) {
    if (SSL_CTX_load_verify_file(c, options.ca_file.c_str()) != 1) {
      *error = CertificateFileError("cannot read", "--cacert", options.ca_file);
      return nullptr;
    }
  } else if (!options.insecure && SSL_CTX_set_default_verify_paths(c) != 1) {
    *error = "cannot load the system's trusted certificates: " + TakeErrorText();
    return nullptr;
  }
  if (options.insecure) {
    SSL_CTX_set_verify(c, SSL_VERIFY_NONE, nullptr);
  } else {
    SSL_CTX_set_verify(c, SSL_VERIFY_PEER, TlsSocket::Detail::Verify);
  }
  if (!options.cert_file.empty()) {
    if (!LoadCertificate(c, options.cert_file, options.key_file, "--cert", "--key", error)) {
      return nullptr;
    }
  } else if (!options.key_file.empty()) {
    *error = "--key needs --cert";
    return nullptr;
  }
  SSL_CTX_set_cert_cb(c, TlsSocket::Detail::CertificateRequested, nullptr);
  if (SSL_CTX_set_alpn_protos(c, kAlpn, kAlpnSize) != 0) {  // 0 is success here
    *error = "cannot set ALPN: " + TakeErrorText();
    return nullptr;
  }
  if (options.session_reuse) {
    SSL_CTX_set_session_cache_mode(c, SSL_SESS_CACHE_CLIENT | SSL_SESS_CACHE_NO_INTERNAL_STORE);
    SSL_CTX_sess_set_new_cb(c, TlsSocket::Detail::NewSession);
  } else {
    SSL_CTX_set_session_cache_mode(c, SSL_SESS_CACHE_OFF);
  }
  return std::shared_ptr<const TlsClientContext>(new TlsClientContext(ctx.release(), options));
}

TlsClientContext::TlsClientContext(ssl_ctx_st* ctx, TlsClientOptions options)
    : ctx_(ctx), options_(std::move(options)) {}

TlsClientContext::~TlsClientContext() { SSL_CTX_free(ctx_); }

// --- TlsServerContext ------------------------------------------------------------------------

std::shared_ptr<const TlsServerContext> TlsServerContext::Make(const std::string& cert_file,
                                                               const std::string& key_file,
                                                               std::string* error) {
  CtxPtr ctx = NewContext(TLS_server_method(), error);
  if (ctx == nullptr) return nullptr;
  SSL_CTX* c = ctx.get();
  if (!LoadCertificate(c, cert_file, key_file, "--tls-cert", "--tls-key", error)) return nullptr;
  SSL_CTX_set_alpn_select_cb(c, TlsSocket::Detail::SelectAlpn, nullptr);
  // Resumption by stateless tickets only: nothing is cached per session on the server. The
  // context id is what OpenSSL requires to resume where client certificates are verified.
  SSL_CTX_set_session_cache_mode(c, SSL_SESS_CACHE_OFF);
  static constexpr unsigned char kSessionContext[] = "llmtap";
  SSL_CTX_set_session_id_context(c, kSessionContext, sizeof(kSessionContext) - 1);
  X509* leaf = SSL_CTX_get0_certificate(c);
  std::string subject = NameText(X509_get_subject_name(leaf));
  std::string description = subject + ", expires " + Day(X509_get0_notAfter(leaf));
  std::shared_ptr<TlsServerContext> made(
      new TlsServerContext(ctx.release(), std::move(description)));
  made->subject_ = std::move(subject);
  made->not_before_ = UnixTime(X509_get0_notBefore(leaf));
  made->not_after_ = UnixTime(X509_get0_notAfter(leaf));
  return made;
}

std::string UtcDay(int64_t unix_seconds) {
  const time_t t = static_cast<time_t>(unix_seconds);
  struct tm tm {};
  char buffer[16] = "?";
  if (gmtime_r(&t, &tm) != nullptr) std::strftime(buffer, sizeof(buffer), "%Y-%m-%d", &tm);
  return buffer;
}

TlsServerContext::TlsServerContext(ssl_ctx_st* ctx, std::string description)
    : ctx_(ctx), description_(std::move(description)) {}

TlsServerContext::~TlsServerContext() { SSL_CTX_free(ctx_); }

std::chrono::seconds TlsServerContext::expires_in() const {
  int days = 0;
  int seconds = 0;
  const X509* leaf = SSL_CTX_get0_certificate(ctx_);
  if (leaf == nullptr || ASN1_TIME_diff(&days, &seconds, nullptr, X509_get0_notAfter(leaf)) != 1) {
    return std::chrono::seconds(0);
  }
  return std::chrono::seconds(int64_t{days} * 86400 + seconds);
}

// --- TlsSessionSlot --------------------------------------------------------------------------

TlsSessionSlot::~TlsSessionSlot() { SSL_SESSION_free(session_); }

void TlsSessionSlot::Set(ssl_session_st* session) {
  SSL_SESSION_free(session_);
  session_ = session;
}

// --- TlsSocket -------------------------------------------------------------------------------

TlsSocket::TlsSocket(ssl_st* ssl, Socket& socket)
    : ssl_(ssl), socket_(socket), fd_(socket.is_open() ? socket.native_handle() : -1) {}

TlsSocket::~TlsSocket() {
  // SSL_free marks the session of a connection that sent no close_notify as not resumable, and
  // with it the session its slot holds. TLS 1.1 and later allow resuming it (RFC 4346, 7.2.1):
  // say the close was sent. A connection that failed has had its session dropped by OpenSSL.
  if (!error_ && SSL_is_init_finished(ssl_) == 1) {
    SSL_set_shutdown(ssl_, SSL_get_shutdown(ssl_) | SSL_SENT_SHUTDOWN);
  }
  SSL_free(ssl_);
}

namespace {

// An SSL on the socket's descriptor, or null when OpenSSL cannot allocate.
SSL* NewSsl(SSL_CTX* ctx, Socket& socket) {
  // SSL_read and SSL_write must get EAGAIN, not block: Asio sets non-blocking mode only when its
  // own first asynchronous operation starts.
  error_code ignored;
  if (socket.is_open()) socket.non_blocking(true, ignored);
  SSL* ssl = SSL_new(ctx);
  if (ssl == nullptr) return nullptr;
  BIO* bio = NewFdBio(socket.is_open() ? socket.native_handle() : -1);
  if (bio == nullptr) {
    SSL_free(ssl);
    return nullptr;
  }
  SSL_set_bio(ssl, bio, bio);  // one reference for both directions
  return ssl;
}

}  // namespace

std::unique_ptr<TlsSocket> TlsSocket::Client(const TlsClientContext& ctx, Socket& socket,
                                             std::string_view host, TlsSessionSlot* slot) {
  SSL* ssl = NewSsl(ctx.native(), socket);
  if (ssl == nullptr) return nullptr;
  std::unique_ptr<TlsSocket> self(new TlsSocket(ssl, socket));
  SSL_set_app_data(ssl, self.get());
  SSL_set_connect_state(ssl);
  std::string name(host);
  if (name.size() >= 2 && name.front() == '[' && name.back() == ']') {
    name = name.substr(1, name.size() - 2);
  }
  if (!name.empty() && name.back() == '.') name.pop_back();  // "example.com." is example.com
  self->host_ = name;
  const bool ip = IsIpLiteral(name);
  // A name OpenSSL refuses (too long, a NUL in it), or none where the certificate must name it,
  // fails the handshake: the server's answer cannot make it right.
  bool ok = ip || name.empty() || SSL_set_tlsext_host_name(ssl, name.c_str()) == 1;
  if (!ctx.options().insecure) {
    ok = ok && !name.empty();
    if (ip) {
      ok = ok && X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(ssl), name.c_str()) == 1;
    } else {
      SSL_set_hostflags(ssl, X509_CHECK_FLAG_NO_PARTIAL_WILDCARDS);
      ok = ok && SSL_set1_host(ssl, name.c_str()) == 1;
    }
  }
  if (!ok) {
    ERR_clear_error();
    self->failure_ = "cannot use the host name \"" + name + "\" for TLS";
    self->error_ = asio::error::invalid_argument;
  }
  if (slot != nullptr && ctx.options().session_reuse) {
    self->slot_ = slot;
    if (slot->get() != nullptr && SSL_SESSION_is_resumable(slot->get()) == 1) {
      SSL_set_session(ssl, slot->get());
    }
  }
  return self;
}

std::unique_ptr<TlsSocket> TlsSocket::Server(const TlsServerContext& ctx, Socket& socket) {
  SSL* ssl = NewSsl(ctx.native(), socket);
  if (ssl == nullptr) return nullptr;
  std::unique_ptr<TlsSocket> self(new TlsSocket(ssl, socket));
  SSL_set_app_data(ssl, self.get());
  SSL_set_accept_state(ssl);
  return self;
}

bool TlsSocket::Open() const {
  // native_handle() is not const in Asio, but only reads the descriptor.
  return socket_.is_open() && const_cast<Socket&>(socket_).native_handle() == fd_;
}

error_code TlsSocket::Fail(int ret, Step step) {
  const int saved_errno = errno;
  const int kind = SSL_get_error(ssl_, ret);
  if (kind == SSL_ERROR_WANT_READ || kind == SSL_ERROR_WANT_WRITE) {
    want_ =
        kind == SSL_ERROR_WANT_READ ? asio::socket_base::wait_read : asio::socket_base::wait_write;
    return asio::error::would_block;
  }
  const bool handshake = step == Step::kHandshake;
  const unsigned long code = ERR_peek_error();
  ERR_clear_error();
  if (kind == SSL_ERROR_ZERO_RETURN) {
    failure_ = handshake ? "connection closed during the TLS handshake"
                         : "the peer closed the TLS connection (close_notify)";
    return asio::error::eof;
  }
  error_code ec;
  if ((ERR_GET_LIB(code) == ERR_LIB_SSL && !ERR_SYSTEM_ERROR(code) &&
       ERR_GET_REASON(code) == SSL_R_UNEXPECTED_EOF_WHILE_READING) ||
      (kind == SSL_ERROR_SYSCALL && code == 0 && saved_errno == 0)) {
    ec = asio::error::eof;
    failure_ = handshake ? "connection closed during the TLS handshake"
                         : "the connection closed without a TLS close_notify";
  } else if ((kind == SSL_ERROR_SYSCALL && code == 0) || ERR_SYSTEM_ERROR(code)) {
    ec = error_code(code == 0 ? saved_errno : static_cast<int>(ERR_GET_REASON(code)),
                    boost::system::system_category());
    failure_ = handshake ? ec.message() + " during the TLS handshake" : ec.message();
  } else {
    // Never 0 (success), even with an empty queue.
    const int value = static_cast<int>(code & INT_MAX);
    ec = error_code(value != 0 ? value : 1, Category());
    failure_ = Detail::FailureText(*this, code, step);
  }
  error_ = ec;
  return ec;
}

error_code TlsSocket::Handshake() {
  if (!Open()) return asio::error::bad_descriptor;
  if (error_) return error_;
  if (SSL_is_init_finished(ssl_) == 1) return {};
  ERR_clear_error();
  const int ret = SSL_do_handshake(ssl_);
  return ret == 1 ? error_code() : Fail(ret, Step::kHandshake);
}

size_t TlsSocket::ReadSome(asio::mutable_buffer buffer, error_code& ec) {
  ec = {};
  if (!Open()) {
    ec = asio::error::bad_descriptor;
  } else if (error_) {
    ec = error_;
  } else if (buffer.size() != 0) {
    ERR_clear_error();
    size_t n = 0;
    const int ret = SSL_read_ex(ssl_, buffer.data(), buffer.size(), &n);
    if (ret == 1) return n;
    ec = Fail(ret, Step::kRead);
  }
  return 0;
}

error_code TlsSocket::WriteLoop(const char* data, size_t size, size_t* done) {
  // Partial-write mode: each SSL_write_ex returns once a record has gone. After would_block the
  // next call must start at the same byte (OpenSSL has part of it in a record already).
  while (*done < size) {
    ERR_clear_error();
    size_t n = 0;
    const int ret = SSL_write_ex(ssl_, data + *done, size - *done, &n);
    if (ret != 1) return Fail(ret, Step::kWrite);
    *done += n;
  }
  return {};
}

size_t TlsSocket::WriteNow(std::span<const asio::const_buffer> pieces, error_code& ec) {
  ec = {};
  if (!Open()) {
    ec = asio::error::bad_descriptor;
    return 0;
  }
  if (error_) {
    ec = error_;
    return 0;
  }
  size_t total = 0;
  size_t nonempty = 0;
  const asio::const_buffer* only = nullptr;
  for (const asio::const_buffer& piece : pieces) {
    if (piece.size() == 0) continue;
    total += piece.size();
    ++nonempty;
    only = &piece;
  }
  if (total == 0) return 0;
  if (nonempty == 1 && pending_ == 0) {
    const char* data = static_cast<const char*>(only->data());
    size_t done = 0;
    ec = WriteLoop(data, total, &done);
    if (ec == asio::error::would_block) {
      out_.assign(data + done, total - done);
      out_sent_ = 0;
      pending_ = total - done;
    }
    return !ec || ec == asio::error::would_block ? total : 0;
  }
  // Several pieces go as one record sequence (not a record each), and a write behind one still
  // pending goes after it: both through out_.
  if (pending_ == 0) {
    out_.clear();
    out_sent_ = 0;
  }
  out_.reserve(out_.size() + total);
  for (const asio::const_buffer& piece : pieces) {
    out_.append(static_cast<const char*>(piece.data()), piece.size());
  }
  pending_ += total;
  ec = Flush();
  return !ec || ec == asio::error::would_block ? total : 0;
}

error_code TlsSocket::Flush() {
  if (!Open()) return asio::error::bad_descriptor;
  if (error_) return error_;
  if (pending_ == 0) return {};
  size_t done = 0;
  const error_code ec = WriteLoop(out_.data() + out_sent_, pending_, &done);
  out_sent_ += done;
  pending_ -= done;
  if (pending_ == 0) {
    out_sent_ = 0;
    out_.clear();
    if (out_.capacity() > kKeepOutCapacity) std::string().swap(out_);
  }
  return ec;
}

bool TlsSocket::HasPending() const {
  return SSL_has_pending(ssl_) == 1 || !InboxEmpty(ssl_);
}

void TlsSocket::ShrinkInbox() { ReleaseInbox(ssl_); }

asio::mutable_buffer TlsSocket::InboxSpace() {
  const std::span<char> space = tls_detail::InboxSpace(ssl_);
  return {space.data(), space.size()};
}

error_code TlsSocket::Received(size_t n, error_code ec) {
  // Closed or cancelled here: the caller stops.
  if (ec == asio::error::operation_aborted || ec == asio::error::bad_descriptor || !Open()) {
    return ec ? ec : asio::error::bad_descriptor;
  }
  // The peer's end or a socket error is told by the TLS step that reads it, in its words.
  const bool eof = ec == asio::error::eof;
  const int error = ec && !eof ? (ec.category() == boost::system::system_category() ? ec.value()
                                                                                       : EIO)
                               : 0;
  InboxReceived(ssl_, n, error, eof);
  return {};
}

void TlsSocket::KeepBuffers() { SSL_clear_mode(ssl_, SSL_MODE_RELEASE_BUFFERS); }

bool TlsSocket::ReleaseBuffers() {
  // Not while a decrypted record is partly read: OpenSSL before 3.0.14 would free the buffer
  // that record still points into (CVE-2024-4741).
  if (HasPending() || SSL_free_buffers(ssl_) != 1) return false;
  if (!receiving_) {
    ReleaseInbox(ssl_);
  } else if (!shrink_ && !InboxIsSmall(ssl_)) {
    // The read owns the inbox until its handler runs (it may have received already): the
    // handler shrinks it once the cancellation arrives.
    shrink_ = true;
    error_code ignored;
    socket_.cancel(ignored);
  }
  return true;
}

void TlsSocket::ShutdownSend() {
  if (!Open() || error_ || SSL_is_init_finished(ssl_) != 1) return;
  ERR_clear_error();
  SSL_shutdown(ssl_);
  ERR_clear_error();
}

bool TlsSocket::resumed() const { return SSL_session_reused(ssl_) == 1; }

std::string_view TlsSocket::version() const { return SSL_get_version(ssl_); }

std::string_view TlsSocket::alpn() const {
  const unsigned char* data = nullptr;
  unsigned size = 0;
  SSL_get0_alpn_selected(ssl_, &data, &size);
  return data != nullptr ? std::string_view(reinterpret_cast<const char*>(data), size) : "";
}

std::string_view TlsSocket::server_name() const {
  const char* name = SSL_get_servername(ssl_, TLSEXT_NAMETYPE_host_name);
  return name != nullptr ? name : "";
}

}  // namespace llmtap::net
