// The proxy with TLS on both sides, in-process: a TLS listener in front of the SimServer, and a
// plain proxy whose upstream is that listener (https://localhost). Compiled in one unit with
// server_test.cc (the program is a unity build) and uses its helpers: FastSim, Normalize, the
// request bodies and the Beast Client.
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <thread>

#include <gtest/gtest.h>

#include "common/testing/temp_files.h"
#include "net/http_get.h"
#include "net/tls.h"
#include "proxy/server.h"
#include "proxy/session.h"
#include "sim/server.h"

namespace llmtap::proxy {
namespace {

// The certificates of tests/lib/make_test_certs.sh, made once per program.
std::string TestCert(const std::string& name) {
  static const llmtap::testing::TempDir dir;
  static const bool made = [] {
    const char* source = std::getenv("LLMTAP_SOURCE_DIR");
    const std::string root =
        source != nullptr
            ? std::string(source)
            : std::filesystem::path(__FILE__).parent_path().parent_path().parent_path().string();
    return std::system(("bash '" + root + "/tests/lib/make_test_certs.sh' '" + dir.path() +
                        "' >/dev/null 2>&1")
                           .c_str()) == 0;
  }();
  EXPECT_TRUE(made) << "make_test_certs.sh failed";
  return dir.File(name);
}

// The value of the first metrics line that starts with `series` (-1 when none).
double MetricValue(const std::string& text, const std::string& series) {
  const size_t at = text.find("\n" + series + " ");
  if (at == std::string::npos) return -1;
  return std::strtod(text.c_str() + at + series.size() + 2, nullptr);
}

// llmtap_proxy_tls_handshakes_total of one side ("client", "upstream"), new or resumed.
double Handshakes(const std::string& metrics, const std::string& side, bool resumed) {
  return MetricValue(metrics, "llmtap_proxy_tls_handshakes_total{side=\"" + side +
                                  "\",resumed=\"" + (resumed ? "true" : "false") + "\"}");
}

class ProxyTlsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string error;
    ASSERT_TRUE(sim_.Start(&error)) << error;
    cert_file_ = key_dir_.File("live.pem");
    std::ofstream(cert_file_) << std::ifstream(TestCert("server.pem")).rdbuf();
    ProxyOptions back = ProxyTo(sim_.port());
    back.tls_cert_file = cert_file_;
    back.tls_key_file = TestCert("server.key");
    back_ = std::make_unique<ProxyServer>(back);
    ASSERT_TRUE(back_->Start(&error)) << error;
    ProxyOptions front = ProxyTo(back_->port());
    front.upstream = "https://localhost:" + std::to_string(back_->port());
    front.upstream_tls.ca_file = TestCert("ca.pem");
    front.max_idle_upstream_per_thread = 0;  // a new connection (resumed) per request
    front_ = std::make_unique<ProxyServer>(front);
    ASSERT_TRUE(front_->Start(&error)) << error;
  }

  sim::SimServer sim_{FastSim()};
  llmtap::testing::TempDir key_dir_;
  std::string cert_file_;
  std::unique_ptr<ProxyServer> back_;   // TLS listener -> sim
  std::unique_ptr<ProxyServer> front_;  // plain listener -> https://localhost:back
};

TEST_F(ProxyTlsTest, OverTlsBothWaysEqualsDirectAndResumes) {
  Client direct(sim_.port());
  Client proxied(front_->port());
  for (const std::string& body : {kChat, kChatStream, kCompletion}) {
    SCOPED_TRACE(body);
    const std::string target = body == kCompletion ? "/v1/completions" : "/v1/chat/completions";
    Response a = direct.Send(http::verb::post, target, body);
    Response b = proxied.Send(http::verb::post, target, body);
    EXPECT_EQ(a.status, b.status);
    EXPECT_EQ(a.chunked, b.chunked);
    EXPECT_EQ(Normalize(a.body), Normalize(b.body));
  }
  // A GET over https straight to the TLS listener.
  std::string error;
  net::TlsClientOptions trust;
  trust.ca_file = TestCert("ca.pem");
  auto ctx = net::TlsClientContext::Make(trust, &error);
  ASSERT_NE(ctx, nullptr) << error;
  const std::string https = "https://localhost:" + std::to_string(back_->port()) + "/v1/models";
  const net::HttpGetResult models =
      net::HttpGet(https, std::chrono::seconds(5), net::kHttpGetMaxBodyBytes, {}, ctx.get());
  const net::HttpGetResult plain = net::HttpGet(
      "http://127.0.0.1:" + std::to_string(sim_.port()) + "/v1/models", std::chrono::seconds(5));
  EXPECT_EQ(models.error, "");
  EXPECT_EQ(models.status, 200);
  EXPECT_EQ(Normalize(models.body), Normalize(plain.body));

  const std::string front = front_->MetricsText();
  EXPECT_EQ(Handshakes(front, "upstream", false), 1);
  EXPECT_EQ(Handshakes(front, "upstream", true), 2);
  const std::string back = back_->MetricsText();
  EXPECT_EQ(Handshakes(back, "client", true), 2);
  EXPECT_EQ(MetricValue(back, R"(llmtap_proxy_tls_handshake_failures_total{side="client"})"), 0);
}

// Connections idle past the buffer sweep (their TLS record buffers freed) serve on: a client's
// keep-alive connection to the TLS listener, and the pooled upstream connection to it.
TEST_F(ProxyTlsTest, ConnectionsIdlePastTheBufferSweepServeOn) {
  ProxyOptions pooled = ProxyTo(back_->port());
  pooled.upstream = "https://localhost:" + std::to_string(back_->port());
  pooled.upstream_tls.ca_file = TestCert("ca.pem");
  ProxyServer front(pooled);
  std::string error;
  ASSERT_TRUE(front.Start(&error)) << error;
  Client proxied(front.port());
  EXPECT_EQ(proxied.Send(http::verb::post, "/v1/chat/completions", kChatStream).status, 200);
  std::this_thread::sleep_for(Worker::kTlsBuffersIdle * 2 + std::chrono::milliseconds(200));
  for (const std::string& body : {kChatStream, kChat}) {
    Response r = proxied.Send(http::verb::post, "/v1/chat/completions", body);
    EXPECT_EQ(r.status, 200);
    EXPECT_NE(r.body.find("\"choices\""), std::string::npos) << r.body;
  }
  // One upstream connection served all three requests.
  const std::string text = front.MetricsText();
  EXPECT_EQ(Handshakes(text, "upstream", false), 1);
  EXPECT_EQ(Handshakes(text, "upstream", true), 0);
}

TEST_F(ProxyTlsTest, PlainHttpToTheTlsPortIs400) {
  Client plain(back_->port());
  Response r = plain.Send(http::verb::get, "/v1/models");
  EXPECT_EQ(r.status, 400);
  EXPECT_NE(r.body.find("The plain HTTP request was sent to HTTPS port"), std::string::npos);
  EXPECT_EQ(MetricValue(back_->MetricsText(), "llmtap_proxy_tls_plain_http_rejected_total"), 1);
}

TEST_F(ProxyTlsTest, ReloadKeepsTheCertificateOnAFailure) {
  std::string error;
  EXPECT_TRUE(back_->ReloadTls(&error)) << error;
  std::ofstream(cert_file_) << "not a certificate\n";
  EXPECT_FALSE(back_->ReloadTls(&error));
  EXPECT_NE(error.find("--tls-cert"), std::string::npos) << error;
  // The current context still serves.
  Client proxied(front_->port());
  EXPECT_EQ(proxied.Send(http::verb::post, "/v1/completions", kCompletion).status, 200);
  EXPECT_FALSE(front_->ReloadTls(&error));  // no TLS listener
}

}  // namespace
}  // namespace llmtap::proxy
