// The OpenSSL side of net/tls.cc that does not need a connection: the "tls" error category,
// OpenSSL's errors and certificates in words, and the socket BIO. Private to src/net (it
// includes OpenSSL's headers): tls.cc and tls_openssl.cc only.
#pragma once

#include <openssl/bio.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>

#include <cstddef>
#include <span>
#include <string>
#include <string_view>

#include <boost/system/error_code.hpp>

namespace llmtap::net::tls_detail {

// The error_code category of a TLS failure: OpenSSL's packed error code (library and reason),
// so that message() is OpenSSL's reason string ("certificate verify failed").
const boost::system::error_category& Category();

// OpenSSL's words for an error of its queue; a system error (a file that cannot be opened) in
// the C library's.
std::string ReasonText(unsigned long code);  // NOLINT(runtime/int): OpenSSL's type
// The reason of the oldest queued error, and an empty queue.
std::string TakeErrorText();

// A BIO over the socket descriptor `fd`, which it never closes: it writes with
// send(MSG_NOSIGNAL) and reads from an inbox of ciphertext that the caller's reads fill
// (InboxSpace, InboxReceived); with the inbox empty a read asks to be retried. It keeps the first
// bytes received.
BIO* NewFdBio(int fd);
inline constexpr size_t kInboxBytes = 16 * 1024;
inline constexpr size_t kIdleInboxBytes = 256;
// Where the next bytes received go (the unread ones moved to the front): kInboxBytes, allocated
// on first use, or kIdleInboxBytes for the first read after ReleaseInbox.
std::span<char> InboxSpace(SSL* ssl);
// `n` bytes were received into InboxSpace; then, when `eof` or `error` (an errno), the socket's
// read ended: once the inbox is read, the BIO reports that end.
void InboxReceived(SSL* ssl, size_t n, int error, bool eof);
bool InboxEmpty(SSL* ssl);
// The inbox is the small one (ReleaseInbox, until the next read fills it).
bool InboxIsSmall(SSL* ssl);
// Frees the inbox if it holds nothing: the next read goes to a small one kept in the BIO, and
// the one after that allocates it again. Not while a read into it is in flight.
void ReleaseInbox(SSL* ssl);
// The first bytes the peer sent on `ssl`'s BIO.
std::string_view FirstBytes(SSL* ssl);

// "CN=name" (the whole name when it has no common name).
std::string NameText(const X509_NAME* name);
// "YYYY-MM-DD".
std::string Day(const ASN1_TIME* time);
// The DNS names and addresses a certificate names, comma-separated.
std::string NamesOf(X509* cert);
// A verification failure in words, for `host`.
std::string VerifyFailureText(int error, X509* cert, const std::string& host);
// An IPv4 or IPv6 literal.
bool IsIpLiteral(const std::string& host);

}  // namespace llmtap::net::tls_detail
