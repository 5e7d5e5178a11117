// The proxy with TLS on both sides, in-process: a TLS listener in front of the SimServer, and a
// plain proxy whose upstream is that listener (https://localhost). Compiled in one unit with
// server_test.cc (the program is a unity build) and uses its helpers: FastSim, Normalize, the
// request bodies and the Beast Client.
#include <sys/stat.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "common/testing/fault_env.h"
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
  // 120 s: a guard against a hang only (a TLS handshake under a sanitizer on a loaded machine
  // may take seconds; the answer ends the wait).
  const net::HttpGetResult models =
      net::HttpGet(https, std::chrono::seconds(120), net::kHttpGetMaxBodyBytes, {}, ctx.get());
  const net::HttpGetResult plain = net::HttpGet(
      "http://127.0.0.1:" + std::to_string(sim_.port()) + "/v1/models", std::chrono::seconds(120));
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

// A TLS listener in front of the sim whose certificate and key files the test replaces, logging
// into a CapturingLogger.
class ProxyCertificateTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string error;
    ASSERT_TRUE(sim_.Start(&error)) << error;
  }
  // Copies NAME.pem and NAME.key of make_test_certs.sh to the live files (the key mode 0600).
  void Install(const std::string& name) {
    std::ofstream(cert_file_, std::ios::trunc) << std::ifstream(TestCert(name + ".pem")).rdbuf();
    std::ofstream(key_file_, std::ios::trunc) << std::ifstream(TestCert(name + ".key")).rdbuf();
    ::chmod(key_file_.c_str(), 0600);
  }
  ProxyOptions Options() {
    ProxyOptions o = ProxyTo(sim_.port());
    o.tls_cert_file = cert_file_;
    o.tls_key_file = key_file_;
    o.logger = &log_;
    return o;
  }
  bool Start(std::string* error, ProxyOptions o) {
    proxy_ = std::make_unique<ProxyServer>(std::move(o));
    return proxy_->Start(error);
  }
  // The test certificate NAME's validity, as the proxy reads it.
  static std::shared_ptr<const net::TlsServerContext> Context(const std::string& name) {
    std::string error;
    auto ctx =
        net::TlsServerContext::Make(TestCert(name + ".pem"), TestCert(name + ".key"), &error);
    EXPECT_NE(ctx, nullptr) << error;
    return ctx;
  }
  static std::string Valid(const net::TlsServerContext& ctx) {
    return "valid " + net::UtcDay(ctx.not_before()) + " to " + net::UtcDay(ctx.not_after());
  }
  double Expiry() {
    return MetricValue(proxy_->MetricsText(),
                       "llmtap_proxy_tls_certificate_expiry_timestamp_seconds");
  }
  std::vector<std::string> Warnings() {
    std::vector<std::string> out;
    for (const std::string& line : log_.lines()) {
      if (line.starts_with("warning: ")) out.push_back(line);
    }
    return out;
  }

  sim::SimServer sim_{FastSim()};
  llmtap::testing::TempDir dir_;
  const std::string cert_file_ = dir_.File("live.pem");
  const std::string key_file_ = dir_.File("live.key");
  llmtap::testing::CapturingLogger log_;
  std::unique_ptr<ProxyServer> proxy_;
};

TEST_F(ProxyCertificateTest, OutsideItsValidityOrExpiringSoonIsAWarningAtStart) {
  const std::string what = "warning: llmtap proxy: the TLS certificate ";
  struct Case {
    std::string name;
    std::string problem;
  };
  for (const Case& c : std::vector<Case>{
           {"expired",
            " expired on " + net::UtcDay(Context("expired")->not_after()) + ": clients refuse it"},
           {"notyet", " is not valid before " + net::UtcDay(Context("notyet")->not_before()) +
                          ": clients refuse it until then"},
           {"soon", " expires in 3 days, on " + net::UtcDay(Context("soon")->not_after()) +
                        ": renew it and send SIGHUP"}}) {
    SCOPED_TRACE(c.name);
    Install(c.name);
    std::string error;
    ASSERT_TRUE(Start(&error, Options())) << error;  // served, with a warning
    const std::vector<std::string> warnings = Warnings();
    ASSERT_EQ(warnings.size(), 1u);
    EXPECT_EQ(warnings[0], what + "CN=" + c.name + " (--tls-cert " + cert_file_ + ", " +
                               Valid(*Context(c.name)) + ")" + c.problem);
    EXPECT_EQ(Expiry(), static_cast<double>(Context(c.name)->not_after()));
    proxy_.reset();
    log_.Clear();
  }
  // A window shorter than what is left: no warning; a valid certificate: none.
  Install("soon");
  ProxyOptions o = Options();
  o.tls_cert_warning_window = std::chrono::hours(24);
  std::string error;
  ASSERT_TRUE(Start(&error, o)) << error;
  EXPECT_EQ(Warnings().size(), 0u);
  Install("server");
  ASSERT_TRUE(Start(&error, Options())) << error;
  EXPECT_EQ(Warnings().size(), 0u);
}

TEST_F(ProxyCertificateTest, ReloadRefusesExpiredAndNotYetValidAndWarnsOfExpiringSoon) {
  Install("server");
  std::string error;
  ASSERT_TRUE(Start(&error, Options())) << error;
  const double serving = Context("server")->not_after();
  EXPECT_EQ(Expiry(), serving);
  for (const std::string name : {"expired", "notyet"}) {
    SCOPED_TRACE(name);
    Install(name);
    log_.Clear();
    EXPECT_FALSE(proxy_->ReloadTls(&error));
    EXPECT_NE(error.find("the TLS certificate CN=" + name + " (--tls-cert " + cert_file_ + ", " +
                         Valid(*Context(name)) + ")"),
              std::string::npos)
        << error;
    const std::vector<std::string> warnings = Warnings();
    ASSERT_EQ(warnings.size(), 1u);
    EXPECT_EQ(warnings[0], "warning: llmtap proxy: keeping the current certificate: " + error);
    EXPECT_EQ(Expiry(), serving);  // the current one stays
  }
  // Still served with the current certificate.
  net::TlsClientOptions trust;
  trust.ca_file = TestCert("ca.pem");
  auto ctx = net::TlsClientContext::Make(trust, &error);
  ASSERT_NE(ctx, nullptr) << error;
  const std::string url = "https://localhost:" + std::to_string(proxy_->port()) + "/v1/models";
  EXPECT_EQ(
      net::HttpGet(url, std::chrono::seconds(120), net::kHttpGetMaxBodyBytes, {}, ctx.get()).status,
      200);
  // Expiring soon: loaded, with a warning.
  Install("soon");
  log_.Clear();
  EXPECT_TRUE(proxy_->ReloadTls(&error)) << error;
  const std::vector<std::string> warnings = Warnings();
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_NE(warnings[0].find("CN=soon"), std::string::npos) << warnings[0];
  EXPECT_NE(warnings[0].find(" expires in 3 days"), std::string::npos) << warnings[0];
  EXPECT_EQ(log_.Count("info: llmtap proxy: reloaded TLS certificate CN=soon"), 1);
  EXPECT_EQ(Expiry(), static_cast<double>(Context("soon")->not_after()));
}

TEST_F(ProxyCertificateTest, AKeyOthersCanReadIsAWarningOrRefusedWhenStrict) {
  Install("server");
  std::string error;
  struct Case {
    mode_t mode;
    std::string says;  // "" for no warning
  };
  for (const Case& c :
       std::vector<Case>{{0644, "readable by its group and other users (mode 0644)"},
                         {0666, "readable by its group and other users (mode 0666)"},
                         {0640, "readable by its group (mode 0640)"},
                         {0604, "readable by other users (mode 0604)"},
                         {0620, "writable by its group (mode 0620)"},
                         {0600, ""},
                         {0400, ""}}) {
    SCOPED_TRACE(c.mode);
    ::chmod(key_file_.c_str(), c.mode);
    log_.Clear();
    ASSERT_TRUE(Start(&error, Options())) << error;
    const std::vector<std::string> warnings = Warnings();
    if (c.says.empty()) {
      EXPECT_EQ(warnings.size(), 0u);
    } else {
      const std::string problem = "the private key --tls-key " + key_file_ + " is " + c.says +
                                  ": run `chmod 600 " + key_file_ + "`";
      ASSERT_EQ(warnings.size(), 1u);
      EXPECT_EQ(warnings[0], "warning: llmtap proxy: " + problem);
      ProxyOptions strict = Options();
      strict.strict_key_permissions = true;
      EXPECT_FALSE(Start(&error, strict));
      EXPECT_EQ(error, problem + " (refused: --strict-key-permissions)");
    }
    proxy_.reset();
  }
  // The key in the certificate's file: that file is the key's, named by its flag.
  const std::string both = dir_.File("both.pem");
  std::ofstream(both) << std::ifstream(TestCert("server.pem")).rdbuf()
                      << std::ifstream(TestCert("server.key")).rdbuf();
  ::chmod(both.c_str(), 0644);
  ProxyOptions o = Options();
  o.tls_cert_file = both;
  o.tls_key_file = "";
  o.strict_key_permissions = true;
  EXPECT_FALSE(Start(&error, o));
  EXPECT_EQ(error.find("the private key --tls-cert " + both + " is readable"), 0u) << error;
  // A reload applies the same rule: the current certificate stays.
  ::chmod(both.c_str(), 0600);
  ASSERT_TRUE(Start(&error, o)) << error;
  ::chmod(both.c_str(), 0644);
  EXPECT_FALSE(proxy_->ReloadTls(&error));
  EXPECT_NE(error.find("--strict-key-permissions"), std::string::npos) << error;
}

}  // namespace
}  // namespace llmtap::proxy
