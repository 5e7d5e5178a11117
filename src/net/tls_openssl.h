// The OpenSSL side of net/tls.cc that does not need a connection: the "tls" error category,
// OpenSSL's errors and certificates in words, and the socket BIO. Private to src/net (it
// includes OpenSSL's headers): tls.cc and tls_openssl.cc only.
#pragma once

#include <openssl/bio.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>

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

// A BIO over the socket descriptor `fd` (send with MSG_NOSIGNAL, recv; never closes it), which
// keeps the first bytes received.
BIO* NewFdBio(int fd);
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
