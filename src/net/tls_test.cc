// TLS (net/tls.h) and the coroutine reads and writes over it (net/stream_io.h): an in-process
// client and server on one io_context over 127.0.0.1, with the certificates of
// tests/lib/make_test_certs.sh. The test sets a few OpenSSL options on the contexts' native()
// handles (a TLS version cap, client-certificate verification on the server, another ALPN offer)
// that llmtap itself never sets.
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>

#include <gtest/gtest.h>

#include <array>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http/error.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/string_body.hpp>

#include "common/asio_types.h"
#include "common/testing/temp_files.h"
#include "net/stream_io.h"
#include "net/tls.h"

namespace llmtap::net {
namespace {

namespace http = boost::beast::http;

std::filesystem::path TlsTestSourceDir() {
  const char* dir = std::getenv("LLMTAP_SOURCE_DIR");
  if (dir != nullptr && *dir != '\0') return dir;
  return std::filesystem::path(__FILE__).parent_path().parent_path().parent_path();
}

// The certificates ctest made for this run beside the program (the net_test_certs fixture),
// when they are there and from today; else "".
std::string FixtureCertDir() {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::path dir = fs::read_symlink("/proc/self/exe", ec).parent_path() / "test-certs";
  const fs::file_time_type made = fs::last_write_time(dir / "client.pem", ec);
  if (ec || fs::file_time_type::clock::now() - made > std::chrono::hours(12)) return "";
  return dir.string();
}

// A file made by tests/lib/make_test_certs.sh: ctest's, or made once per test program into a
// temporary directory removed at exit.
std::string Cert(const std::string& name) {
  static const std::string fixture = FixtureCertDir();
  if (!fixture.empty()) return fixture + "/" + name;
  static const llmtap::testing::TempDir dir;
  static const bool made =
      std::system(("bash '" + (TlsTestSourceDir() / "tests/lib/make_test_certs.sh").string() +
                   "' '" + dir.path() + "'")
                      .c_str()) == 0;
  EXPECT_TRUE(made) << "make_test_certs.sh failed";
  return dir.File(name);
}

// "YYYY-MM-DD" of a certificate's notAfter, as the failure texts write it.
std::string NotAfterDay(const std::string& pem) {
  FILE* f = std::fopen(pem.c_str(), "r");
  if (f == nullptr) return "?";
  X509* cert = PEM_read_X509(f, nullptr, nullptr, nullptr);
  std::fclose(f);
  struct tm tm {};
  char day[16] = "?";
  if (cert != nullptr && ASN1_TIME_to_tm(X509_get0_notAfter(cert), &tm) == 1) {
    std::strftime(day, sizeof(day), "%Y-%m-%d", &tm);
  }
  X509_free(cert);
  return day;
}

std::shared_ptr<const TlsServerContext> ServerContext(const std::string& name = "server") {
  std::string error;
  auto ctx = TlsServerContext::Make(Cert(name + ".pem"), Cert(name + ".key"), &error);
  EXPECT_NE(ctx, nullptr) << error;
  return ctx;
}

std::shared_ptr<const TlsClientContext> ClientContext(TlsClientOptions options = {}) {
  if (options.ca_file == "default") options.ca_file = Cert("ca.pem");
  std::string error;
  auto ctx = TlsClientContext::Make(options, &error);
  EXPECT_NE(ctx, nullptr) << error;
  return ctx;
}

TlsClientOptions TrustingTheTestCa() {
  TlsClientOptions o;
  o.ca_file = "default";
  return o;
}

// One client and one server socket connected over 127.0.0.1, and the loop that runs them.
class TlsTest : public ::testing::Test {
 protected:
  void Connect() {
    client_.connect(acceptor_.local_endpoint());
    acceptor_.accept(server_);
    client_.set_option(tcp::no_delay(true));  // as llmtap's connections
    server_.set_option(tcp::no_delay(true));
  }

  // Runs the coroutines to their end (a stalled read fails the test after 120 s: a guard
  // against a hang only, as every case here ends on its own, at once on a quiet machine).
  template <typename... Coroutines>
  void Run(Coroutines&&... coroutines) {
    (asio::co_spawn(ioc_, std::move(coroutines),
                    [](std::exception_ptr e) {
                      if (e) std::rethrow_exception(e);
                    }),
     ...);
    ioc_.restart();
    ioc_.run_for(std::chrono::seconds(120));
    ASSERT_TRUE(ioc_.stopped()) << "timed out";
  }

  // Both handshakes; a side that fails closes its socket, as a caller would.
  static awaitable<void> Shake(Socket& socket, TlsSocket& tls, error_code* ec) {
    *ec = co_await Handshake(tls);
    if (*ec) socket.close();
  }
  void Handshakes(TlsSocket& client, TlsSocket& server) {
    Run(Shake(client_, client, &client_ec_), Shake(server_, server, &server_ec_));
  }

  // A TLS connection between the contexts, handshake done; false (with the failures) if not.
  bool Establish(const TlsClientContext& client_ctx, const TlsServerContext& server_ctx,
                 std::string_view host = "localhost", TlsSessionSlot* slot = nullptr) {
    Connect();
    client_tls_ = TlsSocket::Client(client_ctx, client_, host, slot);
    server_tls_ = TlsSocket::Server(server_ctx, server_);
    Handshakes(*client_tls_, *server_tls_);
    return !client_ec_ && !server_ec_;
  }

  // Reads into a string until `size` bytes or an error.
  static awaitable<void> ReadAll(Socket& socket, TlsSocket* tls, size_t size, std::string* out,
                                 error_code* ec) {
    std::array<char, 4096> buffer;
    while (out->size() < size) {
      const size_t n = co_await ReadSome(socket, tls, asio::buffer(buffer), *ec);
      if (*ec) co_return;
      out->append(buffer.data(), n);
    }
  }

  asio::io_context ioc_;
  Acceptor acceptor_{ioc_.get_executor(), tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0)};
  Socket client_{ioc_.get_executor()};
  Socket server_{ioc_.get_executor()};
  std::unique_ptr<TlsSocket> client_tls_;
  std::unique_ptr<TlsSocket> server_tls_;
  error_code client_ec_;
  error_code server_ec_;
};

TEST_F(TlsTest, Tls13HandshakeAgreesOnHttp11AndTheServerSeesTheName) {
  auto server_ctx = ServerContext();
  EXPECT_EQ(server_ctx->description(), "CN=server, expires " + NotAfterDay(Cert("server.pem")));
  EXPECT_GT(server_ctx->expires_in(), std::chrono::hours(24 * 29));
  EXPECT_LT(server_ctx->expires_in(), std::chrono::hours(24 * 31));
  ASSERT_TRUE(Establish(*ClientContext(TrustingTheTestCa()), *server_ctx))
      << client_tls_->failure() << " / " << server_tls_->failure();
  EXPECT_EQ(client_tls_->version(), "TLSv1.3");
  EXPECT_EQ(server_tls_->version(), "TLSv1.3");
  EXPECT_EQ(client_tls_->alpn(), "http/1.1");
  EXPECT_EQ(server_tls_->alpn(), "http/1.1");
  EXPECT_EQ(server_tls_->server_name(), "localhost");
  EXPECT_FALSE(client_tls_->resumed());

  // Data both ways.
  std::string got_by_server, got_by_client;
  error_code read_ec, write_ec;
  auto client = [&]() -> awaitable<void> {
    const std::array<asio::const_buffer, 1> ping{asio::buffer("ping", 4)};
    co_await WriteAll(client_, client_tls_.get(), ping, write_ec);
    co_await ReadAll(client_, client_tls_.get(), 4, &got_by_client, &read_ec);
  };
  auto server = [&]() -> awaitable<void> {
    co_await ReadAll(server_, server_tls_.get(), 4, &got_by_server, &read_ec);
    const std::array<asio::const_buffer, 1> pong{asio::buffer("pong", 4)};
    co_await WriteAll(server_, server_tls_.get(), pong, write_ec);
  };
  Run(client(), server());
  EXPECT_FALSE(read_ec) << read_ec.message();
  EXPECT_FALSE(write_ec) << write_ec.message();
  EXPECT_EQ(got_by_server, "ping");
  EXPECT_EQ(got_by_client, "pong");
}

TEST_F(TlsTest, Tls12Handshake) {
  auto server_ctx = ServerContext();
  SSL_CTX_set_max_proto_version(server_ctx->native(), TLS1_2_VERSION);
  ASSERT_TRUE(Establish(*ClientContext(TrustingTheTestCa()), *server_ctx))
      << client_tls_->failure() << " / " << server_tls_->failure();
  EXPECT_EQ(client_tls_->version(), "TLSv1.2");
  EXPECT_EQ(server_tls_->alpn(), "http/1.1");
  EXPECT_EQ(client_tls_->alpn(), "http/1.1");
}

TEST_F(TlsTest, AnIpLiteralIsCheckedAsAnAddressWithoutSni) {
  auto server_ctx = ServerContext();
  auto client_ctx = ClientContext(TrustingTheTestCa());
  ASSERT_TRUE(Establish(*client_ctx, *server_ctx, "127.0.0.1")) << client_tls_->failure();
  EXPECT_EQ(server_tls_->server_name(), "");
  client_.close();
  server_.close();
  // The certificate names ::1 too; the connection itself goes over 127.0.0.1.
  ASSERT_TRUE(Establish(*client_ctx, *server_ctx, "[::1]")) << client_tls_->failure();
  EXPECT_EQ(server_tls_->server_name(), "");
}

struct CertCase {
  const char* name;
  const char* server_cert;
  const char* ca_file;  // "" = the system's store; "default" = the test CA
  const char* host;
  std::string client_failure;
  std::string server_failure;
};

class TlsCertificateTest : public TlsTest, public ::testing::WithParamInterface<CertCase> {};

TEST_P(TlsCertificateTest, FailsInWords) {
  const CertCase& c = GetParam();
  TlsClientOptions options;
  options.ca_file = c.ca_file[0] == '/' ? Cert(c.ca_file + 1) : c.ca_file;
  ASSERT_FALSE(Establish(*ClientContext(options), *ServerContext(c.server_cert), c.host));
  std::string expected = c.client_failure;
  if (const size_t at = expected.find("$DAY"); at != std::string::npos) {
    expected.replace(at, 4, NotAfterDay(Cert(std::string(c.server_cert) + ".pem")));
  }
  EXPECT_EQ(client_tls_->failure(), expected);
  EXPECT_EQ(client_ec_.category().name(), std::string("tls"));
  EXPECT_EQ(client_ec_.message(), "certificate verify failed");
  EXPECT_EQ(server_tls_->failure(), c.server_failure);
}

INSTANTIATE_TEST_SUITE_P(
    Cases, TlsCertificateTest,
    ::testing::Values(
        CertCase{"UnknownCaOfTheSystemStore", "server", "", "localhost",
                 "certificate signed by an unknown CA (CN=llmtap test CA)",
                 "the client rejected the certificate: unknown CA"},
        CertCase{"UnknownCaOfCacert", "server", "/other-ca.pem", "localhost",
                 "certificate signed by an unknown CA (CN=llmtap test CA)",
                 "the client rejected the certificate: unknown CA"},
        CertCase{"SelfSigned", "ca", "", "localhost", "self-signed certificate (CN=llmtap test CA)",
                 "the client rejected the certificate: unknown CA"},
        CertCase{"Expired", "expired", "default", "localhost",
                 "certificate has expired (CN=expired, expired $DAY)",
                 "the client rejected the certificate: certificate expired"},
        CertCase{"WrongHost", "wronghost", "default", "localhost",
                 "host name mismatch: the certificate does not name localhost (it names "
                 "wrong.example)",
                 "the client rejected the certificate: bad certificate"},
        CertCase{"WrongAddress", "server", "default", "10.1.2.3",
                 "host name mismatch: the certificate does not name 10.1.2.3 (it names "
                 "localhost, 127.0.0.1, ::1)",
                 "the client rejected the certificate: bad certificate"}),
    [](const ::testing::TestParamInfo<CertCase>& info) { return info.param.name; });

TEST_F(TlsTest, NoHostNameIsNoCheckButAFailure) {
  Connect();
  client_tls_ = TlsSocket::Client(*ClientContext(TrustingTheTestCa()), client_, "", nullptr);
  EXPECT_EQ(client_tls_->Handshake(), asio::error::invalid_argument);
  EXPECT_EQ(client_tls_->failure(), "cannot use the host name \"\" for TLS");
}

TEST_F(TlsTest, InsecureChecksNeitherCertificateNorName) {
  TlsClientOptions options;
  options.insecure = true;
  EXPECT_TRUE(Establish(*ClientContext(options), *ServerContext("wronghost")))
      << client_tls_->failure();
}

TEST_F(TlsTest, APlainHttpServerDoesNotSpeakTls) {
  Connect();
  client_tls_ =
      TlsSocket::Client(*ClientContext(TrustingTheTestCa()), client_, "localhost", nullptr);
  auto plain_server = [&]() -> awaitable<void> {
    std::array<char, 512> hello;
    error_code ec;
    co_await server_.async_read_some(asio::buffer(hello), asio::redirect_error(use_awaitable, ec));
    const std::string answer = "HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n";
    co_await asio::async_write(server_, asio::buffer(answer),
                               asio::redirect_error(use_awaitable, ec));
    server_.close();
  };
  Run(Shake(client_, *client_tls_, &client_ec_), plain_server());
  EXPECT_TRUE(client_ec_);
  EXPECT_EQ(client_tls_->failure(), "the server does not speak TLS (it answered plain HTTP)");
}

TEST_F(TlsTest, APlainHttpClientSpeaksPlainHttp) {
  Connect();
  server_tls_ = TlsSocket::Server(*ServerContext(), server_);
  auto plain_client = [&]() -> awaitable<void> {
    const std::string request = "GET / HTTP/1.1\r\nHost: localhost\r\n\r\n";
    error_code ec;
    co_await asio::async_write(client_, asio::buffer(request),
                               asio::redirect_error(use_awaitable, ec));
  };
  Run(plain_client(), Shake(server_, *server_tls_, &server_ec_));
  EXPECT_TRUE(server_ec_);
  EXPECT_EQ(server_tls_->failure(), "the client spoke plain HTTP");
}

TEST_F(TlsTest, AServerThatClosesEndsTheHandshakeWithEof) {
  Connect();
  client_tls_ =
      TlsSocket::Client(*ClientContext(TrustingTheTestCa()), client_, "localhost", nullptr);
  server_.close();
  Run(Shake(client_, *client_tls_, &client_ec_));
  EXPECT_EQ(client_ec_, asio::error::eof) << client_ec_.message();
  EXPECT_EQ(client_tls_->failure(), "connection closed during the TLS handshake");
}

TEST_F(TlsTest, AClientOfferingOnlyOtherProtocolsIsRefused) {
  auto client_ctx = ClientContext(TrustingTheTestCa());
  static constexpr unsigned char kH2[] = "\x02h2";
  ASSERT_EQ(SSL_CTX_set_alpn_protos(client_ctx->native(), kH2, 3), 0);
  ASSERT_FALSE(Establish(*client_ctx, *ServerContext()));
  EXPECT_EQ(server_tls_->failure(), "the client offered no protocol llmtap speaks (ALPN: h2)");
  EXPECT_EQ(client_tls_->failure(), "the server speaks no protocol llmtap offers (ALPN http/1.1)");
}

TEST_F(TlsTest, AClientOfferingNoProtocolIsServed) {
  auto client_ctx = ClientContext(TrustingTheTestCa());
  ASSERT_EQ(SSL_CTX_set_alpn_protos(client_ctx->native(), nullptr, 0), 0);
  ASSERT_TRUE(Establish(*client_ctx, *ServerContext())) << server_tls_->failure();
  EXPECT_EQ(server_tls_->alpn(), "");
  EXPECT_EQ(client_tls_->alpn(), "");
}

// Mutual TLS: llmtap's listener asks for no client certificate; the test makes its server ask.
class TlsClientCertificateTest : public TlsTest, public ::testing::WithParamInterface<int> {
 protected:
  std::shared_ptr<const TlsServerContext> AskingServer(const std::string& trusted) {
    auto ctx = ServerContext();
    SSL_CTX_set_verify(ctx->native(), SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT, nullptr);
    EXPECT_EQ(SSL_CTX_load_verify_file(ctx->native(), Cert(trusted).c_str()), 1);
    SSL_CTX_set_max_proto_version(ctx->native(), GetParam());
    return ctx;
  }

  // The client's failure: from the handshake (TLS 1.2), or from the first read (TLS 1.3, where
  // the client's handshake ends before the server has checked its certificate).
  std::string ClientFailure() {
    if (client_ec_) return client_tls_->failure();
    std::string got;
    error_code ec;
    Run(ReadAll(client_, client_tls_.get(), 1, &got, &ec));
    return ec ? client_tls_->failure() : "no failure";
  }
};

TEST_P(TlsClientCertificateTest, MissingCertificate) {
  Connect();
  client_tls_ =
      TlsSocket::Client(*ClientContext(TrustingTheTestCa()), client_, "localhost", nullptr);
  server_tls_ = TlsSocket::Server(*AskingServer("ca.pem"), server_);
  Handshakes(*client_tls_, *server_tls_);
  EXPECT_EQ(server_tls_->failure(), "the client sent no certificate");
  EXPECT_EQ(ClientFailure(), "the peer requires a client certificate");
}

TEST_P(TlsClientCertificateTest, CertificateOfAnUnknownCa) {
  TlsClientOptions options = TrustingTheTestCa();
  options.cert_file = Cert("client.pem");
  options.key_file = Cert("client.key");
  Connect();
  client_tls_ = TlsSocket::Client(*ClientContext(options), client_, "localhost", nullptr);
  server_tls_ = TlsSocket::Server(*AskingServer("other-ca.pem"), server_);
  Handshakes(*client_tls_, *server_tls_);
  // The client sends its chain up to the CA it trusts (OpenSSL's auto-chain).
  EXPECT_EQ(server_tls_->failure(),
            "client certificate verify failed: self-signed certificate in certificate chain");
  EXPECT_EQ(ClientFailure(), "the server rejected the client certificate: unknown CA");
}

TEST_P(TlsClientCertificateTest, Accepted) {
  TlsClientOptions options = TrustingTheTestCa();
  options.cert_file = Cert("client.pem");
  options.key_file = Cert("client.key");
  ASSERT_TRUE(Establish(*ClientContext(options), *AskingServer("ca.pem")))
      << client_tls_->failure() << " / " << server_tls_->failure();
}

INSTANTIATE_TEST_SUITE_P(Versions, TlsClientCertificateTest,
                         ::testing::Values(TLS1_2_VERSION, TLS1_3_VERSION),
                         [](const ::testing::TestParamInfo<int>& info) {
                           return info.param == TLS1_2_VERSION ? "Tls12" : "Tls13";
                         });

// 1 MiB of a repeating pattern.
std::string Megabyte() {
  std::string data(1 << 20, '\0');
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<char>('a' + i * 7 % 26);
  return data;
}

TEST_F(TlsTest, ABigWriteWaitsAndFlushesTheRest) {
  ASSERT_TRUE(Establish(*ClientContext(TrustingTheTestCa()), *ServerContext()));
  // A small send buffer; the receiver's window stops the rest until the server reads. (A shrunk
  // SO_RCVBUF on an open connection would drop segments and wait for retransmissions.)
  client_.set_option(asio::socket_base::send_buffer_size(4096));
  const std::string expected = Megabyte() + "tail";
  {
    // The caller's buffers go away as soon as WriteNow returns: the rest was copied.
    const std::string data = Megabyte();
    const std::array<asio::const_buffer, 1> pieces{asio::buffer(data)};
    error_code ec;
    EXPECT_EQ(client_tls_->WriteNow(pieces, ec), data.size());
    ASSERT_EQ(ec, asio::error::would_block);
    EXPECT_TRUE(client_tls_->write_pending());
    // A write behind a pending one queues after it.
    const std::string tail = "tail";
    const std::array<asio::const_buffer, 1> more{asio::buffer(tail)};
    EXPECT_EQ(client_tls_->WriteNow(more, ec), 4u);
    EXPECT_EQ(ec, asio::error::would_block);
  }
  error_code flush_ec, read_ec;
  std::string got;
  auto flush = [&]() -> awaitable<void> { co_await FinishWrite(*client_tls_, flush_ec); };
  Run(flush(), ReadAll(server_, server_tls_.get(), expected.size(), &got, &read_ec));
  EXPECT_FALSE(flush_ec) << flush_ec.message();
  EXPECT_FALSE(read_ec) << read_ec.message();
  EXPECT_FALSE(client_tls_->write_pending());
  EXPECT_TRUE(got == expected) << got.size();
}

// WriteAll of several pieces, over TLS (flattened, then flushed as the socket takes it) and
// plain TCP.
class WriteAllTest : public TlsTest, public ::testing::WithParamInterface<bool> {};

TEST_P(WriteAllTest, ABigWriteOfSeveralPieces) {
  if (GetParam()) {
    ASSERT_TRUE(Establish(*ClientContext(TrustingTheTestCa()), *ServerContext()));
  } else {
    Connect();
  }
  client_.set_option(asio::socket_base::send_buffer_size(4096));
  const std::string head = "head", body = Megabyte();
  const std::array<asio::const_buffer, 2> pieces{asio::buffer(head), asio::buffer(body)};
  error_code write_ec, read_ec;
  std::string got;
  auto write = [&]() -> awaitable<void> {
    co_await WriteAll(client_, client_tls_.get(), pieces, write_ec);
  };
  Run(write(), ReadAll(server_, server_tls_.get(), head.size() + body.size(), &got, &read_ec));
  EXPECT_FALSE(write_ec) << write_ec.message();
  EXPECT_FALSE(read_ec) << read_ec.message();
  EXPECT_TRUE(got == head + body) << got.size();
}

INSTANTIATE_TEST_SUITE_P(Transports, WriteAllTest, ::testing::Values(false, true),
                         [](const ::testing::TestParamInfo<bool>& info) {
                           return info.param ? "Tls" : "Plain";
                         });

TEST_F(TlsTest, SeveralPiecesGoAsOneRecordSequence) {
  ASSERT_TRUE(Establish(*ClientContext(TrustingTheTestCa()), *ServerContext()));
  const std::array<asio::const_buffer, 4> pieces{asio::buffer("ab", 2), asio::const_buffer(),
                                                 asio::buffer("cd", 2), asio::buffer("ef", 2)};
  error_code ec;
  EXPECT_EQ(client_tls_->WriteNow(pieces, ec), 6u);
  EXPECT_FALSE(ec);
  // One record: one read returns it all.
  std::array<char, 64> buffer;
  size_t n = 0;
  auto read = [&]() -> awaitable<void> {
    n = co_await ReadSome(server_, server_tls_.get(), asio::buffer(buffer), ec);
  };
  Run(read());
  EXPECT_FALSE(ec);
  EXPECT_EQ(std::string(buffer.data(), n), "abcdef");
}

TEST_F(TlsTest, RecordsAlreadyReadDoNotStallTheNextRead) {
  ASSERT_TRUE(Establish(*ClientContext(TrustingTheTestCa()), *ServerContext()));
  // Two records, and one record read in pieces: all in the socket before the server reads, so
  // read-ahead takes them in one recv and no readiness event will come for the rest.
  error_code ec;
  for (const char* text : {"hello", "world", "onetwo"}) {
    const std::array<asio::const_buffer, 1> piece{asio::buffer(text, std::strlen(text))};
    client_tls_->WriteNow(piece, ec);
    ASSERT_FALSE(ec);
  }
  std::string got;
  bool pending_after_first = false;
  auto read = [&]() -> awaitable<void> {
    std::array<char, 5> buffer;
    while (got.size() < 16) {
      const size_t n = co_await ReadSome(server_, server_tls_.get(),
                                         asio::buffer(buffer.data(), got.size() == 10 ? 3 : 5), ec);
      if (ec) co_return;
      if (got.empty()) pending_after_first = server_tls_->HasPending();
      got.append(buffer.data(), n);
    }
  };
  Run(read());
  EXPECT_FALSE(ec) << ec.message();
  EXPECT_EQ(got, "helloworldonetwo");
  EXPECT_TRUE(pending_after_first);
}

// Kept buffers are freed only when they hold nothing, and a connection whose buffers were freed
// reads and writes on (OpenSSL allocates them again).
TEST_F(TlsTest, KeptBuffersAreReleasedOnlyWhenEmpty) {
  ASSERT_TRUE(Establish(*ClientContext(TrustingTheTestCa()), *ServerContext()));
  client_tls_->KeepBuffers();
  server_tls_->KeepBuffers();
  error_code ec;
  std::array<char, 3> buffer;
  size_t n = 0;
  auto read = [&]() -> awaitable<void> {
    n = co_await ReadSome(server_, server_tls_.get(), asio::buffer(buffer), ec);
  };
  for (const char* text : {"abcdef", "ghi"}) {
    const std::array<asio::const_buffer, 1> piece{asio::buffer(text, std::strlen(text))};
    client_tls_->WriteNow(piece, ec);
    ASSERT_FALSE(ec);
  }
  Run(read());
  ASSERT_FALSE(ec) << ec.message();
  EXPECT_EQ(std::string(buffer.data(), n), "abc");
  // "def" of the first record and all of the second are still held: nothing is freed.
  EXPECT_TRUE(server_tls_->HasPending());
  EXPECT_FALSE(server_tls_->ReleaseBuffers());
  std::string rest;
  Run(ReadAll(server_, server_tls_.get(), 6, &rest, &ec));
  EXPECT_EQ(rest, "defghi");
  EXPECT_TRUE(server_tls_->ReleaseBuffers());
  EXPECT_TRUE(client_tls_->ReleaseBuffers());
  // Both ways again after the release.
  const std::array<asio::const_buffer, 1> back{asio::buffer("jkl", 3)};
  server_tls_->WriteNow(back, ec);
  ASSERT_FALSE(ec);
  std::string got;
  Run(ReadAll(client_, client_tls_.get(), 3, &got, &ec));
  EXPECT_EQ(got, "jkl");
}

// The buffers released while a read waits (as the proxy's sweep does to an idle connection): the
// wait goes on, and a big message then arrives whole.
TEST_F(TlsTest, BuffersReleasedWhileAReadWaits) {
  ASSERT_TRUE(Establish(*ClientContext(TrustingTheTestCa()), *ServerContext()));
  server_tls_->KeepBuffers();
  const std::string message = Megabyte();
  std::string got;
  error_code read_ec;
  error_code write_ec;
  bool released = false;
  auto release_then_write = [&]() -> awaitable<void> {
    Timer timer(ioc_.get_executor());
    timer.expires_after(std::chrono::milliseconds(20));  // the server's read is waiting by then
    co_await timer.async_wait(use_awaitable);
    released = server_tls_->ReleaseBuffers();
    const std::array<asio::const_buffer, 1> piece{asio::buffer(message)};
    co_await WriteAll(client_, client_tls_.get(), piece, write_ec);
  };
  Run(ReadAll(server_, server_tls_.get(), message.size(), &got, &read_ec), release_then_write());
  EXPECT_TRUE(released);
  EXPECT_FALSE(read_ec) << read_ec.message();
  EXPECT_FALSE(write_ec) << write_ec.message();
  EXPECT_TRUE(got == message);
}

TEST_F(TlsTest, CloseNotifyIsEof) {
  ASSERT_TRUE(Establish(*ClientContext(TrustingTheTestCa()), *ServerContext()));
  client_tls_->ShutdownSend();
  std::string got;
  error_code ec;
  Run(ReadAll(server_, server_tls_.get(), 1, &got, &ec));
  EXPECT_EQ(ec, asio::error::eof) << ec.message();
  EXPECT_EQ(server_tls_->failure(), "the peer closed the TLS connection (close_notify)");
}

TEST_F(TlsTest, TcpCloseWithoutCloseNotifyIsEof) {
  ASSERT_TRUE(Establish(*ClientContext(TrustingTheTestCa()), *ServerContext()));
  // A FIN alone (a close of the socket with the session tickets unread would send a reset).
  client_.shutdown(tcp::socket::shutdown_send);
  std::string got;
  error_code ec;
  Run(ReadAll(server_, server_tls_.get(), 1, &got, &ec));
  EXPECT_EQ(ec, asio::error::eof) << ec.message();
  EXPECT_EQ(server_tls_->failure(), "the connection closed without a TLS close_notify");
  // And again on the next read.
  std::array<char, 8> buffer;
  EXPECT_EQ(server_tls_->ReadSome(asio::buffer(buffer), ec), 0u);
  EXPECT_EQ(ec, asio::error::eof);
}

TEST_F(TlsTest, AResetIsConnectionReset) {
  ASSERT_TRUE(Establish(*ClientContext(TrustingTheTestCa()), *ServerContext()));
  client_.set_option(asio::socket_base::linger(true, 0));  // close sends RST
  client_.close();
  std::string got;
  error_code ec;
  Run(ReadAll(server_, server_tls_.get(), 1, &got, &ec));
  EXPECT_EQ(ec, asio::error::connection_reset) << ec.message();
  error_code write_ec;
  const std::array<asio::const_buffer, 1> piece{asio::buffer("x", 1)};
  server_tls_->WriteNow(piece, write_ec);
  EXPECT_EQ(write_ec, asio::error::connection_reset) << write_ec.message();
}

TEST_F(TlsTest, CallsAfterTheSocketClosedAreBadDescriptor) {
  ASSERT_TRUE(Establish(*ClientContext(TrustingTheTestCa()), *ServerContext()));
  client_.close();
  // The descriptor number goes to another socket: nothing may reach it.
  Socket other(ioc_.get_executor());
  other.open(tcp::v4());
  std::array<char, 8> buffer;
  error_code ec;
  EXPECT_EQ(client_tls_->ReadSome(asio::buffer(buffer), ec), 0u);
  EXPECT_EQ(ec, asio::error::bad_descriptor);
  const std::array<asio::const_buffer, 1> piece{asio::buffer("x", 1)};
  EXPECT_EQ(client_tls_->WriteNow(piece, ec), 0u);
  EXPECT_EQ(ec, asio::error::bad_descriptor);
  EXPECT_EQ(client_tls_->Flush(), asio::error::bad_descriptor);
  EXPECT_EQ(client_tls_->Handshake(), asio::error::bad_descriptor);
  client_tls_->ShutdownSend();
}

class TlsResumptionTest : public TlsTest, public ::testing::WithParamInterface<int> {};

TEST_P(TlsResumptionTest, TheSecondConnectionResumes) {
  auto server_ctx = ServerContext();
  SSL_CTX_set_max_proto_version(server_ctx->native(), GetParam());
  auto client_ctx = ClientContext(TrustingTheTestCa());
  TlsSessionSlot slot;
  for (int i = 0; i < 2; ++i) {
    client_.close();
    server_.close();
    ASSERT_TRUE(Establish(*client_ctx, *server_ctx, "localhost", &slot)) << client_tls_->failure();
    EXPECT_EQ(client_tls_->resumed(), i == 1);
    EXPECT_EQ(server_tls_->resumed(), i == 1);
    // TLS 1.3 tickets come after the handshake: the client reads them with the first data.
    std::string got;
    error_code ec;
    const std::array<asio::const_buffer, 1> piece{asio::buffer("x", 1)};
    server_tls_->WriteNow(piece, ec);
    Run(ReadAll(client_, client_tls_.get(), 1, &got, &ec));
    EXPECT_EQ(got, "x");
    EXPECT_NE(slot.get(), nullptr);
  }
}

TEST_P(TlsResumptionTest, NotWithoutSessionReuse) {
  auto server_ctx = ServerContext();
  SSL_CTX_set_max_proto_version(server_ctx->native(), GetParam());
  TlsClientOptions options = TrustingTheTestCa();
  options.session_reuse = false;
  auto client_ctx = ClientContext(options);
  TlsSessionSlot slot;
  ASSERT_TRUE(Establish(*client_ctx, *server_ctx, "localhost", &slot));
  std::string got;
  error_code ec;
  const std::array<asio::const_buffer, 1> piece{asio::buffer("x", 1)};
  server_tls_->WriteNow(piece, ec);
  Run(ReadAll(client_, client_tls_.get(), 1, &got, &ec));
  EXPECT_EQ(slot.get(), nullptr);
}

INSTANTIATE_TEST_SUITE_P(Versions, TlsResumptionTest,
                         ::testing::Values(TLS1_2_VERSION, TLS1_3_VERSION),
                         [](const ::testing::TestParamInfo<int>& info) {
                           return info.param == TLS1_2_VERSION ? "Tls12" : "Tls13";
                         });

// The server's key, encrypted with a passphrase.
std::string EncryptedKey(const llmtap::testing::TempDir& dir, const std::string& key) {
  FILE* in = std::fopen(Cert(key).c_str(), "r");
  EVP_PKEY* pkey = in != nullptr ? PEM_read_PrivateKey(in, nullptr, nullptr, nullptr) : nullptr;
  if (in != nullptr) std::fclose(in);
  const std::string path = dir.File("encrypted-" + key);
  FILE* out = std::fopen(path.c_str(), "w");
  static const char kPass[] = "secret";
  EXPECT_EQ(PEM_write_PKCS8PrivateKey(out, pkey, EVP_aes_256_cbc(), kPass, 6, nullptr, nullptr), 1);
  std::fclose(out);
  EVP_PKEY_free(pkey);
  return path;
}

TEST(TlsContextTest, FailuresNameTheFlagAndFile) {
  llmtap::testing::TempDir dir;
  std::string error;
  const std::string server_key = EncryptedKey(dir, "server.key");
  EXPECT_EQ(TlsServerContext::Make(Cert("server.pem"), server_key, &error), nullptr);
  EXPECT_EQ(error, "encrypted private keys are not supported: " + server_key);
  EXPECT_EQ(TlsServerContext::Make("/nonexistent/cert.pem", "", &error), nullptr);
  EXPECT_EQ(error, "cannot load --tls-cert /nonexistent/cert.pem: No such file or directory");
  // A file that is not what its flag wants says what it holds instead.
  EXPECT_EQ(TlsServerContext::Make(Cert("server.key"), Cert("server.key"), &error), nullptr);
  EXPECT_EQ(error, "--tls-cert " + Cert("server.key") + " holds a private key, not a certificate");
  EXPECT_EQ(TlsServerContext::Make(Cert("server.key"), "", &error), nullptr);
  EXPECT_EQ(error, "--tls-cert " + Cert("server.key") + " holds a private key, not a certificate");
  EXPECT_EQ(TlsServerContext::Make(Cert("server.pem"), Cert("server2.key"), &error), nullptr);
  EXPECT_EQ(error, "--tls-key does not match --tls-cert");
  // The mistake is in --tls-key, even when it names the certificate's own file.
  EXPECT_EQ(TlsServerContext::Make(Cert("server.pem"), Cert("server.pem"), &error), nullptr);
  EXPECT_EQ(error, "--tls-key " + Cert("server.pem") + " holds a certificate, not a private key");
  EXPECT_EQ(TlsServerContext::Make(Cert("server.pem"), Cert("ca.pem"), &error), nullptr);
  EXPECT_EQ(error, "--tls-key " + Cert("ca.pem") + " holds a certificate, not a private key");
  // No --tls-key: the key was looked for in the certificate's file.
  EXPECT_EQ(TlsServerContext::Make(Cert("server.pem"), "", &error), nullptr);
  EXPECT_EQ(error, "--tls-cert " + Cert("server.pem") +
                       " holds a certificate and no private key: give the key with --tls-key");
  const std::string text = dir.File("notes.txt");
  std::ofstream(text) << "not a certificate\n";
  EXPECT_EQ(TlsServerContext::Make(text, Cert("server.key"), &error), nullptr);
  EXPECT_EQ(error, "--tls-cert " + text + " holds no PEM data, not a certificate");
  EXPECT_EQ(TlsServerContext::Make(Cert("server.pem"), text, &error), nullptr);
  EXPECT_EQ(error, "--tls-key " + text + " holds no PEM data, not a private key");
  const std::string csr = dir.File("req.csr");
  std::ofstream(csr) << "-----BEGIN CERTIFICATE REQUEST-----\nMIIB\n-----END CERTIFICATE "
                        "REQUEST-----\n";
  EXPECT_EQ(TlsServerContext::Make(csr, Cert("server.key"), &error), nullptr);
  EXPECT_EQ(error, "--tls-cert " + csr + " holds a certificate request (CSR), not a certificate");
  // Both in one file, given as both flags: fine.
  const std::string both = dir.File("both.pem");
  std::ofstream(both) << std::ifstream(Cert("server.pem")).rdbuf()
                      << std::ifstream(Cert("server.key")).rdbuf();
  EXPECT_NE(TlsServerContext::Make(both, both, &error), nullptr) << error;
  EXPECT_NE(TlsServerContext::Make(both, "", &error), nullptr) << error;
  EXPECT_EQ(TlsServerContext::Make(Cert("server.pem"), "/nonexistent/key.pem", &error), nullptr);
  EXPECT_EQ(error, "cannot load --tls-key /nonexistent/key.pem: No such file or directory");

  TlsClientOptions o;
  o.ca_file = Cert("server.key");
  EXPECT_EQ(TlsClientContext::Make(o, &error), nullptr);
  EXPECT_EQ(error, "--cacert " + o.ca_file + " holds a private key, not a certificate");
  o.ca_file = "/nonexistent/ca.pem";
  EXPECT_EQ(TlsClientContext::Make(o, &error), nullptr);
  EXPECT_EQ(error, "cannot read --cacert /nonexistent/ca.pem: No such file or directory");
  o.ca_file = "";
  o.cert_file = Cert("client.pem");
  o.key_file = Cert("server.key");
  EXPECT_EQ(TlsClientContext::Make(o, &error), nullptr);
  EXPECT_EQ(error, "--key does not match --cert");
  o.key_file = EncryptedKey(dir, "client.key");
  EXPECT_EQ(TlsClientContext::Make(o, &error), nullptr);
  EXPECT_EQ(error, "encrypted private keys are not supported: " + o.key_file);
  o.key_file = Cert("client.pem");
  EXPECT_EQ(TlsClientContext::Make(o, &error), nullptr);
  EXPECT_EQ(error, "--key " + o.key_file + " holds a certificate, not a private key");
  o.cert_file = "";
  EXPECT_EQ(TlsClientContext::Make(o, &error), nullptr);
  EXPECT_EQ(error, "--key needs --cert");
}

// The leaf certificate's validity period, read for the proxy's checks and its expiry metric.
// The certificates were made when the suite started, however long ago: their dates are compared
// with each other (made within seconds of each other), not with the clock.
TEST(TlsContextTest, ValidityPeriodOfTheLeaf) {
  const int64_t now = std::time(nullptr);
  auto server = ServerContext("server");
  EXPECT_EQ(server->subject(), "CN=server");
  EXPECT_LE(server->not_before(), now);
  EXPECT_NEAR(static_cast<double>(server->not_after() - server->not_before()), 30.0 * 86400, 120);
  EXPECT_EQ(UtcDay(server->not_after()), NotAfterDay(Cert("server.pem")));
  auto notyet = ServerContext("notyet");
  EXPECT_GT(notyet->not_before(), now);
  EXPECT_NEAR(static_cast<double>(notyet->not_before() - server->not_before()), 10.0 * 86400, 120);
  auto expired = ServerContext("expired");
  EXPECT_LT(expired->not_after(), now);
  EXPECT_EQ(UtcDay(0), "1970-01-01");
}

// ReadHttpMessage over TLS and plain TCP: a chunked response and a Content-Length one in one
// write (the second waits in the buffer), then the end of the connection.
class ReadHttpMessageTest : public TlsTest, public ::testing::WithParamInterface<bool> {};

TEST_P(ReadHttpMessageTest, ChunkedThenContentLengthThenEnd) {
  const bool tls = GetParam();
  if (tls) {
    ASSERT_TRUE(Establish(*ClientContext(TrustingTheTestCa()), *ServerContext()));
  } else {
    Connect();
  }
  const std::string responses =
      "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
      "5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n"
      "HTTP/1.1 201 Created\r\nContent-Length: 3\r\n\r\nabc";
  boost::beast::flat_buffer buffer;
  std::string bodies;
  error_code ec, write_ec;
  auto server = [&]() -> awaitable<void> {
    const std::array<asio::const_buffer, 1> piece{asio::buffer(responses)};
    co_await WriteAll(server_, server_tls_.get(), piece, write_ec);
    if (server_tls_) server_tls_->ShutdownSend();
    server_.shutdown(tcp::socket::shutdown_send);
  };
  auto client = [&]() -> awaitable<void> {
    for (int i = 0; i < 2; ++i) {
      http::response_parser<http::string_body> parser;
      co_await ReadHttpMessage(client_, client_tls_.get(), buffer, parser, ec);
      if (ec) co_return;
      bodies += std::to_string(parser.get().result_int()) + ":" + parser.get().body() + ";";
    }
    http::response_parser<http::string_body> parser;
    co_await ReadHttpMessage(client_, client_tls_.get(), buffer, parser, ec);
  };
  Run(server(), client());
  EXPECT_FALSE(write_ec);
  EXPECT_EQ(bodies, "200:hello world;201:abc;");
  EXPECT_EQ(ec, http::error::end_of_stream) << ec.message();
}

TEST_P(ReadHttpMessageTest, LimitsAndCutMessages) {
  // One message of each connection, read with body_limit(3) and header_limit(30) when asked.
  auto read_one = [&](const std::string& sent, bool limits) {
    client_.close();
    server_.close();
    if (GetParam()) {
      EXPECT_TRUE(Establish(*ClientContext(TrustingTheTestCa()), *ServerContext()));
    } else {
      Connect();
    }
    error_code ec, write_ec;
    auto server = [&]() -> awaitable<void> {
      const std::array<asio::const_buffer, 1> piece{asio::buffer(sent)};
      co_await WriteAll(server_, server_tls_.get(), piece, write_ec);
      if (server_tls_) server_tls_->ShutdownSend();
      server_.shutdown(tcp::socket::shutdown_send);
    };
    auto client = [&]() -> awaitable<void> {
      boost::beast::flat_buffer buffer;
      http::response_parser<http::string_body> parser;
      if (limits) {
        parser.body_limit(3);
        parser.header_limit(30);
      }
      co_await ReadHttpMessage(client_, client_tls_.get(), buffer, parser, ec);
    };
    Run(server(), client());
    EXPECT_FALSE(write_ec);
    return ec;
  };
  const std::string response = "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello";
  const std::string chunked =
      "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n";
  EXPECT_EQ(read_one(response, false), error_code());
  EXPECT_EQ(read_one(response, true), error_code());
  EXPECT_EQ(read_one("HTTP/1.1 200 OK\r\nX-Long: " + std::string(40, 'a') + "\r\n\r\n", true),
            http::error::header_limit);
  // (Beast 1.74 checks body_limit against chunks and bodies read to the end only.)
  EXPECT_EQ(read_one("HTTP/1.1 200 OK\r\n\r\nhello", true), http::error::body_limit);
  EXPECT_EQ(read_one(response.substr(0, 40), false), http::error::partial_message);
  EXPECT_EQ(read_one(chunked.substr(0, 55), false), http::error::partial_message);
  EXPECT_EQ(read_one("HTTP/1.1 200 OK\r\n\r\nuntil the end", false), error_code());
}

INSTANTIATE_TEST_SUITE_P(Transports, ReadHttpMessageTest, ::testing::Values(false, true),
                         [](const ::testing::TestParamInfo<bool>& info) {
                           return info.param ? "Tls" : "Plain";
                         });

}  // namespace
}  // namespace llmtap::net
