#include "net/tls_openssl.h"

#include <arpa/inet.h>
#include <openssl/err.h>
#include <openssl/x509v3.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <ctime>
#include <memory>
#include <system_error>

namespace llmtap::net::tls_detail {

namespace {

// The error_code of a TLS failure: OpenSSL's packed error code (library and reason), so that
// message() is OpenSSL's reason string ("certificate verify failed").
class TlsCategory final : public boost::system::error_category {
 public:
  const char* name() const noexcept override { return "tls"; }
  std::string message(int value) const override {
    const char* reason = ERR_reason_error_string(static_cast<unsigned long>(value));
    return reason != nullptr ? reason : "TLS failure";
  }
};

}  // namespace

const boost::system::error_category& Category() {
  static const TlsCategory category;
  return category;
}

// OpenSSL's words for an error of its queue; a system error (a file that cannot be opened) in
// the C library's.
std::string ReasonText(unsigned long code) {
  if (code == 0) return "unknown error";
  if (ERR_SYSTEM_ERROR(code)) return std::generic_category().message(ERR_GET_REASON(code));
  if (ERR_GET_LIB(code) == ERR_LIB_PEM && ERR_GET_REASON(code) == PEM_R_NO_START_LINE) {
    return "no PEM data in it";
  }
  if (ERR_GET_LIB(code) == ERR_LIB_X509 &&
      ERR_GET_REASON(code) == X509_R_NO_CERTIFICATE_OR_CRL_FOUND) {
    return "no certificate in it";
  }
  const char* reason = ERR_reason_error_string(code);
  return reason != nullptr ? reason : "error " + std::to_string(code);
}

// The reason of the oldest queued error (the cause; later ones say where it surfaced), and an
// empty queue.
std::string TakeErrorText() {
  const unsigned long code = ERR_peek_error();
  ERR_clear_error();
  return ReasonText(code);
}

namespace {

// --- The socket BIO --------------------------------------------------------------------------
// OpenSSL's socket BIO writes with write(), which raises SIGPIPE on a connection the peer reset;
// this BIO writes with send(MSG_NOSIGNAL) as Asio does, so no process-wide signal setting is
// needed (the replay never ignored SIGPIPE: Asio's own sends never raise it). It reads from an
// inbox the caller's asynchronous reads fill (TlsSocket::AsyncWant), never from the socket
// itself. It also keeps the first bytes received, which tell "not TLS at all" (an HTTP answer)
// from a TLS fault. It never closes the descriptor: Asio's socket owns it.
struct FdBio {
  int fd = -1;
  unsigned char first[5] = {};
  size_t first_size = 0;
  // The inbox: `small` on an idle connection, else `big` (kInboxBytes).
  char small[kIdleInboxBytes];
  std::unique_ptr<char[]> big;
  char* inbox = small;
  size_t capacity = kIdleInboxBytes;
  bool small_next = false;  // the next InboxSpace is `small` (ReleaseInbox)
  size_t begin = 0;         // the unread bytes are inbox[begin, end)
  size_t end = 0;
  bool at_eof = false;  // the socket's read ended: an EOF, or a failure (error != 0)
  int error = 0;        // errno
};

int FdBioWrite(BIO* bio, const char* data, int size) {
  auto* state = static_cast<FdBio*>(BIO_get_data(bio));
  BIO_clear_retry_flags(bio);
  const ssize_t n = ::send(state->fd, data, static_cast<size_t>(size), MSG_NOSIGNAL);
  if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
    BIO_set_retry_write(bio);
  }
  return static_cast<int>(n);
}

int FdBioRead(BIO* bio, char* data, int size) {
  auto* state = static_cast<FdBio*>(BIO_get_data(bio));
  BIO_clear_retry_flags(bio);
  if (state->begin == state->end) {
    if (!state->at_eof) {
      BIO_set_retry_read(bio);  // would_block: the caller receives more (AsyncWant)
      errno = EAGAIN;
      return -1;
    }
    if (state->error != 0) {
      errno = state->error;
      return -1;
    }
    // Read by BIO_eof(): OpenSSL 3 reports an EOF without close_notify as
    // SSL_R_UNEXPECTED_EOF_WHILE_READING only when the BIO says it is at the end.
    BIO_set_flags(bio, BIO_FLAGS_IN_EOF);
    errno = 0;
    return 0;
  }
  const size_t n = std::min(state->end - state->begin, static_cast<size_t>(size));
  std::memcpy(data, state->inbox + state->begin, n);
  state->begin += n;
  if (state->begin == state->end) state->begin = state->end = 0;
  if (state->first_size < sizeof(state->first)) {
    const size_t take = std::min(sizeof(state->first) - state->first_size, n);
    std::memcpy(state->first + state->first_size, data, take);
    state->first_size += take;
  }
  return static_cast<int>(n);
}

long FdBioCtrl(BIO* bio, int cmd, long, void*) {  // NOLINT(runtime/int): OpenSSL's signature
  switch (cmd) {
    case BIO_CTRL_FLUSH:
      return 1;
    case BIO_CTRL_EOF:
      return BIO_test_flags(bio, BIO_FLAGS_IN_EOF) != 0 ? 1 : 0;
    default:
      return 0;
  }
}

int FdBioDestroy(BIO* bio) {
  delete static_cast<FdBio*>(BIO_get_data(bio));
  BIO_set_data(bio, nullptr);
  return 1;
}

const BIO_METHOD* FdBioMethod() {
  static BIO_METHOD* const method = [] {
    BIO_METHOD* m = BIO_meth_new(BIO_get_new_index() | BIO_TYPE_SOURCE_SINK | BIO_TYPE_DESCRIPTOR,
                                 "llmtap socket");
    if (m == nullptr) return m;
    BIO_meth_set_write(m, FdBioWrite);
    BIO_meth_set_read(m, FdBioRead);
    BIO_meth_set_ctrl(m, FdBioCtrl);
    BIO_meth_set_destroy(m, FdBioDestroy);
    return m;
  }();
  return method;
}

}  // namespace

// The first bytes the peer sent.
std::string_view FirstBytes(SSL* ssl) {
  const auto* state = static_cast<const FdBio*>(BIO_get_data(SSL_get_rbio(ssl)));
  if (state == nullptr) return {};
  return std::string_view(reinterpret_cast<const char*>(state->first), state->first_size);
}

namespace {
FdBio& StateOf(SSL* ssl) { return *static_cast<FdBio*>(BIO_get_data(SSL_get_rbio(ssl))); }
}  // namespace

std::span<char> InboxSpace(SSL* ssl) {
  FdBio& s = StateOf(ssl);
  if (s.small_next) {
    s.small_next = false;
  } else if (s.big == nullptr) {
    s.big = std::make_unique_for_overwrite<char[]>(kInboxBytes);
    s.inbox = s.big.get();
    s.capacity = kInboxBytes;
  }
  if (s.begin != 0) {
    std::memmove(s.inbox, s.inbox + s.begin, s.end - s.begin);
    s.end -= s.begin;
    s.begin = 0;
  }
  return {s.inbox + s.end, s.capacity - s.end};
}

void InboxReceived(SSL* ssl, size_t n, int error, bool eof) {
  FdBio& s = StateOf(ssl);
  s.end += n;
  if (eof || error != 0) {
    s.at_eof = true;
    s.error = error;
  }
}

bool InboxEmpty(SSL* ssl) {
  const FdBio& s = StateOf(ssl);
  return s.begin == s.end;
}

bool InboxIsSmall(SSL* ssl) { return StateOf(ssl).big == nullptr; }

void ReleaseInbox(SSL* ssl) {
  FdBio& s = StateOf(ssl);
  if (s.begin != s.end) return;
  s.big.reset();
  s.inbox = s.small;
  s.capacity = kIdleInboxBytes;
  s.small_next = true;
}

BIO* NewFdBio(int fd) {
  const BIO_METHOD* method = FdBioMethod();
  BIO* bio = method != nullptr ? BIO_new(method) : nullptr;
  if (bio == nullptr) return nullptr;
  auto* state = new FdBio;
  state->fd = fd;
  BIO_set_data(bio, state);
  BIO_set_init(bio, 1);
  return bio;
}

// --- Certificates in words -------------------------------------------------------------------

// "CN=name", or the whole name on one line when it has no common name.
std::string NameText(const X509_NAME* name) {
  if (name == nullptr) return "no name";
  const int i = X509_NAME_get_index_by_NID(name, NID_commonName, -1);
  if (i >= 0) {
    unsigned char* utf8 = nullptr;
    const int n =
        ASN1_STRING_to_UTF8(&utf8, X509_NAME_ENTRY_get_data(X509_NAME_get_entry(name, i)));
    if (n >= 0) {
      std::string text = "CN=" + std::string(reinterpret_cast<const char*>(utf8), n);
      OPENSSL_free(utf8);
      return text;
    }
  }
  char buffer[256];
  return X509_NAME_oneline(name, buffer, sizeof(buffer)) != nullptr ? buffer : "no name";
}

// "2026-12-04" (UTC).
std::string Day(const ASN1_TIME* time) {
  struct tm tm {};
  if (time == nullptr || ASN1_TIME_to_tm(time, &tm) != 1) return "an unreadable date";
  char buffer[16];
  std::strftime(buffer, sizeof(buffer), "%Y-%m-%d", &tm);
  return buffer;
}

// The DNS names and addresses a certificate names (its CN when it has no subjectAltName).
std::string NamesOf(X509* cert) {
  std::string names;
  auto add = [&](std::string name) {
    if (!names.empty()) names += ", ";
    names += name;
  };
  auto* sans =
      static_cast<GENERAL_NAMES*>(X509_get_ext_d2i(cert, NID_subject_alt_name, nullptr, nullptr));
  const int count = sans != nullptr ? sk_GENERAL_NAME_num(sans) : 0;
  constexpr int kMaxNames = 6;
  for (int i = 0; i < count && i < kMaxNames; ++i) {
    const GENERAL_NAME* gen = sk_GENERAL_NAME_value(sans, i);
    if (gen->type == GEN_DNS) {
      const ASN1_IA5STRING* s = gen->d.dNSName;
      add(std::string(reinterpret_cast<const char*>(ASN1_STRING_get0_data(s)),
                      ASN1_STRING_length(s)));
    } else if (gen->type == GEN_IPADD) {
      const ASN1_OCTET_STRING* s = gen->d.iPAddress;
      char text[INET6_ADDRSTRLEN] = {};
      const int family = ASN1_STRING_length(s) == 16 ? AF_INET6 : AF_INET;
      if (inet_ntop(family, ASN1_STRING_get0_data(s), text, sizeof(text)) != nullptr) add(text);
    }
  }
  if (count > kMaxNames) add("...");
  GENERAL_NAMES_free(sans);
  if (names.empty()) {
    names = NameText(X509_get_subject_name(cert));
    if (names.starts_with("CN=")) names.erase(0, 3);
  }
  return names;
}

// Why a certificate check failed, for a user: the certificate by its name, and the dates or
// names that made it fail.
std::string VerifyFailureText(int error, X509* cert, const std::string& host) {
  const std::string subject =
      cert != nullptr ? NameText(X509_get_subject_name(cert)) : std::string("no certificate");
  switch (error) {
    case X509_V_ERR_UNABLE_TO_GET_ISSUER_CERT:
    case X509_V_ERR_UNABLE_TO_GET_ISSUER_CERT_LOCALLY:
    case X509_V_ERR_UNABLE_TO_VERIFY_LEAF_SIGNATURE:
    case X509_V_ERR_SELF_SIGNED_CERT_IN_CHAIN:
    case X509_V_ERR_CERT_UNTRUSTED:
      return "certificate signed by an unknown CA (" +
             (cert != nullptr ? NameText(X509_get_issuer_name(cert)) : subject) + ")";
    case X509_V_ERR_DEPTH_ZERO_SELF_SIGNED_CERT:
      return "self-signed certificate (" + subject + ")";
    case X509_V_ERR_CERT_HAS_EXPIRED:
      return "certificate has expired (" + subject + ", expired " +
             (cert != nullptr ? Day(X509_get0_notAfter(cert)) : "") + ")";
    case X509_V_ERR_CERT_NOT_YET_VALID:
      return "certificate is not yet valid (" + subject + ", valid from " +
             (cert != nullptr ? Day(X509_get0_notBefore(cert)) : "") + ")";
    case X509_V_ERR_HOSTNAME_MISMATCH:
    case X509_V_ERR_IP_ADDRESS_MISMATCH:
      return "host name mismatch: the certificate does not name " + host +
             (cert != nullptr ? " (it names " + NamesOf(cert) + ")" : "");
    default:
      return std::string("certificate verify failed: ") + X509_verify_cert_error_string(error) +
             " (" + subject + ")";
  }
}

// Host names and addresses as the certificate check wants them.
bool IsIpLiteral(const std::string& host) {
  unsigned char address[16];
  return inet_pton(AF_INET, host.c_str(), address) == 1 ||
         inet_pton(AF_INET6, host.c_str(), address) == 1;
}

}  // namespace llmtap::net::tls_detail
