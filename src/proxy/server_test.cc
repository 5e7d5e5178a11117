// The proxy in-process on 127.0.0.1:0, in front of an in-process SimServer or a scripted raw
// upstream, talked to with a Beast client.
#include "proxy/server.h"

#include <atomic>
#include <chrono>
#include <fstream>
#include <functional>
#include <memory>
#include <mutex>
#include <sstream>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <boost/asio/connect.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/read_until.hpp>
#include <boost/asio/streambuf.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/buffers_to_string.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http.hpp>
#include <nlohmann/json.hpp>

#include "capture/capture.h"
#include "common/testing/http_client.h"
#include "common/testing/temp_files.h"
#include "proxy/capture_observer.h"
#include "sim/engine.h"
#include "sim/server.h"
#include "sim/testdata/fast_options.h"

namespace llmtap::proxy {
namespace {

using namespace ::llmtap::testing::http_test_names;

// Response ids and creation times differ per request; everything else must be byte-equal.
std::string Normalize(const std::string& body) {
  std::string out;
  size_t pos = 0;
  while (pos < body.size()) {
    size_t id = body.find("\"id\":\"", pos);
    size_t created = body.find("\"created\":", pos);
    size_t next = std::min(id, created);
    if (next == std::string::npos) break;
    const size_t key_len = next == id ? 6 : 10;
    out.append(body, pos, next + key_len - pos);
    size_t end = next + key_len;
    while (end < body.size() && body[end] != '"' && body[end] != ',') ++end;
    out.push_back('X');
    pos = end;
  }
  out.append(body, pos, std::string::npos);
  return out;
}

// Requests without max_tokens get 8 tokens.
sim::SimOptions FastSim() {
  sim::SimOptions o = sim::testing::FastSimOptions();
  o.seed = 7;
  o.timing.output_tokens_mean = 8;
  o.timing.output_tokens_stddev = 0;
  return o;
}

ProxyOptions ProxyTo(uint16_t upstream_port) {
  ProxyOptions o;
  o.port = 0;
  o.threads = 2;
  o.upstream = "http://127.0.0.1:" + std::to_string(upstream_port);
  o.grace = std::chrono::milliseconds(2000);
  return o;
}

const std::string kChat =
    R"({"model":"m","messages":[{"role":"user","content":"Say hi."}],"max_tokens":6})";
const std::string kChatStream =
    R"({"model":"m","messages":[{"role":"user","content":"Say hi."}],"max_tokens":6,)"
    R"("stream":true,"stream_options":{"include_usage":true}})";
const std::string kCompletion = R"({"model":"m", "prompt":"Once upon", "max_tokens":5})";

class SimProxyTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string error;
    ASSERT_TRUE(sim_.Start(&error)) << error;
  }
  void StartProxy(std::vector<RequestObserver*> observers = {},
                  std::vector<const MetricsSource*> sources = {}) {
    proxy_ = std::make_unique<ProxyServer>(ProxyTo(sim_.port()), std::move(observers),
                                           std::move(sources));
    std::string error;
    ASSERT_TRUE(proxy_->Start(&error)) << error;
  }
  sim::SimServer sim_{FastSim()};
  std::unique_ptr<ProxyServer> proxy_;
};

TEST_F(SimProxyTest, ResponsesEqualDirectOnes) {
  StartProxy();
  Client direct(sim_.port());
  Client proxied(proxy_->port());
  for (const auto& [target, body] : std::vector<std::pair<std::string, std::string>>{
           {"/v1/chat/completions", kChat},
           {"/v1/chat/completions", kChatStream},
           {"/v1/completions", kCompletion},
           {"/v1/completions?x=1", R"({"prompt":"a","max_tokens":3,"stream":true})"},
           {"/v1/chat/completions", R"({"messages":"nope"})"}}) {
    SCOPED_TRACE(body);
    Response a = direct.Send(http::verb::post, target, body);
    Response b = proxied.Send(http::verb::post, target, body);
    EXPECT_EQ(a.status, b.status);
    EXPECT_EQ(a.headers[http::field::content_type], b.headers[http::field::content_type]);
    EXPECT_EQ(a.headers[http::field::cache_control], b.headers[http::field::cache_control]);
    EXPECT_EQ(a.chunked, b.chunked);
    EXPECT_EQ(Normalize(a.body), Normalize(b.body));
  }
  Response models = proxied.Send(http::verb::get, "/v1/models");
  EXPECT_EQ(models.status, 200);
  EXPECT_EQ(json::parse(models.body)["object"], "list");
  Response missing = proxied.Send(http::verb::get, "/nope?a=b");
  EXPECT_EQ(missing.status, 404);
  EXPECT_NE(missing.body.find("/nope"), std::string::npos);
}

TEST_F(SimProxyTest, ReusesUpstreamConnections) {
  StartProxy();
  Client proxied(proxy_->port());
  for (int i = 0; i < 5; ++i) {
    EXPECT_EQ(proxied.Send(http::verb::post, "/v1/chat/completions", kChat).status, 200);
  }
  // Through the same connection: a request's counters are final before the next one is read.
  const std::string m = proxied.Send(http::verb::get, "/llmtap/metrics").body;
  EXPECT_NE(m.find("llmtap_proxy_upstream_connects_total 1\n"), std::string::npos) << m;
  EXPECT_NE(m.find("llmtap_proxy_upstream_reuses_total 4\n"), std::string::npos) << m;
  EXPECT_NE(m.find("llmtap_proxy_requests_total{class=\"2xx\"} 5\n"), std::string::npos) << m;
}

TEST_F(SimProxyTest, CapturesPostBodiesThroughTheObserver) {
  const llmtap::testing::TempDir dir;
  CaptureOptions copt;
  copt.config.path = dir.File("requests.jsonl");
  Capture capture(copt);
  ASSERT_TRUE(capture.Start().ok());
  CaptureObserver observer(&capture);
  StartProxy({&observer}, {&observer});
  Client proxied(proxy_->port());
  const std::string pretty = "{\n  \"model\": \"m\",\n  \"prompt\": \"x\", \"max_tokens\": 2\n}";
  EXPECT_EQ(proxied.Send(http::verb::post, "/v1/chat/completions?debug=1", kChat).status, 200);
  EXPECT_EQ(proxied.Send(http::verb::post, "/v1/completions", pretty).status, 200);
  EXPECT_EQ(proxied.Send(http::verb::get, "/v1/models").status, 200);
  // The metrics endpoint is answered by the proxy and shows the capture counters.
  Response metrics = proxied.Send(http::verb::get, "/llmtap/metrics");
  EXPECT_EQ(metrics.status, 200);
  EXPECT_NE(metrics.body.find("llmtap_capture_offered_total 2\n"), std::string::npos)
      << metrics.body;
  EXPECT_NE(metrics.body.find("llmtap_build_info{version="), std::string::npos);
  proxy_->Stop();
  capture.Stop();
  std::ifstream in(copt.config.path);
  std::vector<json> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(json::parse(line));
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(lines[0]["payload"], json::parse(kChat));
  EXPECT_EQ(lines[1]["payload"], json::parse(pretty));
  EXPECT_TRUE(lines[0]["timestamp"].is_number_integer());
}

// An observer that keeps per-request state and checks, in every later phase, that it finds
// its own state back (not another observer's).
class TaggingObserver final : public RequestObserver {
 public:
  explicit TaggingObserver(int tag) : tag_(tag) {}
  void OnRequestReceived(RequestContext& ctx, const HeaderView&) noexcept override {
    if (ctx.state() != nullptr) mismatches_.fetch_add(1);
    ctx.state() = std::make_unique<Tag>(tag_);
  }
  void OnBodyComplete(RequestContext& ctx, std::string_view) noexcept override { Check(ctx); }
  void OnUpstreamChosen(RequestContext& ctx, std::string_view) noexcept override { Check(ctx); }
  void OnResponseHeaders(RequestContext& ctx, int, const HeaderView&) noexcept override {
    Check(ctx);
  }
  void OnResponseChunk(RequestContext& ctx, std::string_view) noexcept override { Check(ctx); }
  void OnDone(RequestContext& ctx, const RelayResult&) noexcept override {
    Check(ctx);
    done_.fetch_add(1);
  }
  int checks() const { return checks_.load(); }
  int mismatches() const { return mismatches_.load(); }
  int done() const { return done_.load(); }

 private:
  struct Tag final : ObserverState {
    explicit Tag(int t) : tag(t) {}
    int tag;
  };
  void Check(RequestContext& ctx) {
    const auto* t = dynamic_cast<const Tag*>(ctx.state().get());
    if (t == nullptr || t->tag != tag_) mismatches_.fetch_add(1);
    checks_.fetch_add(1);
  }
  int tag_;
  std::atomic<int> checks_{0};
  std::atomic<int> mismatches_{0};
  std::atomic<int> done_{0};
};

TEST_F(SimProxyTest, EachObserverHasItsOwnRequestState) {
  TaggingObserver first(1);
  TaggingObserver second(2);
  StartProxy({&first, &second});
  Client proxied(proxy_->port());
  EXPECT_EQ(proxied.Send(http::verb::post, "/v1/chat/completions", kChat).status, 200);
  EXPECT_EQ(proxied.Send(http::verb::post, "/v1/chat/completions", kChatStream).status, 200);
  proxy_->Stop();
  for (const TaggingObserver* o : {&first, &second}) {
    EXPECT_EQ(o->done(), 2);
    EXPECT_GT(o->checks(), 8);
    EXPECT_EQ(o->mismatches(), 0);
  }
}

TEST_F(SimProxyTest, StartRefusesMoreObserversThanStateSlots) {
  std::vector<std::unique_ptr<TaggingObserver>> observers;
  std::vector<RequestObserver*> list;
  for (size_t i = 0; i < kMaxObservers; ++i) {
    observers.push_back(std::make_unique<TaggingObserver>(static_cast<int>(i)));
    list.push_back(observers.back().get());
  }
  ProxyServer too_many(ProxyTo(sim_.port()), list);
  std::string error;
  EXPECT_FALSE(too_many.Start(&error));
  EXPECT_NE(error.find("observers"), std::string::npos) << error;
  list.pop_back();
  ProxyServer enough(ProxyTo(sim_.port()), list);
  EXPECT_TRUE(enough.Start(&error)) << error;
}

TEST_F(SimProxyTest, ClientCancelMidStreamClosesTheUpstreamRequest) {
  sim::SimOptions slow = FastSim();
  slow.timing.itl_ms = 20;
  sim::SimServer sim(slow);
  std::string error;
  ASSERT_TRUE(sim.Start(&error)) << error;
  ProxyServer proxy(ProxyTo(sim.port()));
  ASSERT_TRUE(proxy.Start(&error)) << error;
  {
    Client c(proxy.port());
    http::request<http::string_body> req{http::verb::post, "/v1/chat/completions", 11};
    req.set(http::field::host, "x");
    // 100000 tokens 20 ms apart: a stream of over half an hour, which only an abort ends within
    // the test.
    req.body() = R"({"messages":[{"role":"user","content":"go"}],"max_tokens":100000,"stream":true})";
    req.prepare_payload();
    http::write(c.socket(), req);
    // Wait for the first bytes of the stream, then hang up.
    asio::streambuf head;
    asio::read_until(c.socket(), head, "data: ");
  }
  // Until the sim counts the abort (120 s: a guard against a hang only; had the proxy not
  // closed the upstream request, the stream would still be running then, and never counted as
  // aborted).
  const sim::SimMetrics& m = sim.engine().metrics();
  const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  while (m.requests_aborted.load() == 0 && std::chrono::steady_clock::now() < end) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  EXPECT_EQ(m.requests_aborted.load(), 1u);
  while (proxy.active_requests() != 0 && std::chrono::steady_clock::now() < end) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  EXPECT_EQ(proxy.active_requests(), 0);
  EXPECT_NE(proxy.MetricsText().find("llmtap_proxy_client_cancelled_total 1\n"), std::string::npos);
}

// A scripted upstream: accepts connections one at a time on its own thread, records each raw
// request head + body, and answers with `respond(raw_request)` (raw bytes), or never answers
// when that returns "".
class RawUpstream {
 public:
  explicit RawUpstream(std::function<std::string(const std::string&)> respond,
                       bool close_after_answer = false)
      : respond_(std::move(respond)),
        close_after_answer_(close_after_answer),
        acceptor_(ioc_, tcp::endpoint(tcp::v4(), 0)) {
    thread_ = std::thread([this] { Serve(); });
  }
  ~RawUpstream() {
    stop_ = true;
    boost::system::error_code ignored;
    tcp::socket s(ioc_);
    s.connect(tcp::endpoint(asio::ip::make_address("127.0.0.1"), port()), ignored);
    thread_.join();
  }
  uint16_t port() const { return acceptor_.local_endpoint().port(); }
  std::vector<std::string> requests() {
    std::lock_guard<std::mutex> lock(mu_);
    return requests_;
  }

 private:
  void Serve() {
    while (!stop_) {
      tcp::socket s(ioc_);
      boost::system::error_code ec;
      acceptor_.accept(s, ec);
      if (ec || stop_) return;
      for (;;) {
        beast::flat_buffer buffer;
        http::request<http::string_body> req;
        http::read(s, buffer, req, ec);
        if (ec) break;
        std::ostringstream raw;
        raw << req;
        {
          std::lock_guard<std::mutex> lock(mu_);
          requests_.push_back(raw.str());
        }
        const std::string answer = respond_(raw.str());
        if (answer.empty()) {
          // Never answer: wait for the peer to go away.
          char c;
          s.read_some(asio::buffer(&c, 1), ec);
          break;
        }
        asio::write(s, asio::buffer(answer), ec);
        if (ec || close_after_answer_) break;
      }
    }
  }

  std::function<std::string(const std::string&)> respond_;
  bool close_after_answer_;
  asio::io_context ioc_;
  tcp::acceptor acceptor_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
  std::mutex mu_;
  std::vector<std::string> requests_;
};

TEST(ProxyHeadersTest, DropsHopByHopKeepsEndToEndRewritesHost) {
  RawUpstream upstream([](const std::string&) {
    return std::string(
        "HTTP/1.1 201 Created\r\nContent-Type: text/plain\r\nConnection: X-Hop\r\n"
        "X-Hop: 1\r\nKeep-Alive: timeout=5\r\nX-End: yes\r\nTransfer-Encoding: chunked\r\n\r\n"
        "3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n");
  });
  ProxyServer proxy(ProxyTo(upstream.port()));
  std::string error;
  ASSERT_TRUE(proxy.Start(&error)) << error;
  Client c(proxy.port());
  http::request<http::string_body> req{http::verb::put, "/v1/x?a=1&b=%20", 11};
  req.set(http::field::host, "client.example");
  req.set(http::field::authorization, "Bearer sk-secret");
  req.set(http::field::connection, "keep-alive, X-Client-Hop");
  req.set("X-Client-Hop", "drop me");
  req.set(http::field::te, "trailers");
  req.set(http::field::upgrade, "h2c");
  req.set(http::field::proxy_authorization, "Basic abc");
  req.set("X-Trace", "42");
  req.chunked(true);
  req.body() = "hello chunked";
  Response r = c.Send(req);
  EXPECT_EQ(r.status, 201);
  EXPECT_EQ(r.body, "abcde");
  EXPECT_TRUE(r.chunked);
  EXPECT_EQ(r.headers["X-End"], "yes");
  EXPECT_EQ(r.headers.count("X-Hop"), 0u);
  EXPECT_EQ(r.headers.count(http::field::keep_alive), 0u);

  ASSERT_EQ(upstream.requests().size(), 1u);
  const std::string sent = upstream.requests()[0];
  EXPECT_EQ(sent.rfind("PUT /v1/x?a=1&b=%20 HTTP/1.1\r\n", 0), 0u) << sent;
  EXPECT_NE(sent.find("Host: 127.0.0.1:" + std::to_string(upstream.port()) + "\r\n"),
            std::string::npos)
      << sent;
  EXPECT_NE(sent.find("Authorization: Bearer sk-secret\r\n"), std::string::npos);
  EXPECT_NE(sent.find("X-Trace: 42\r\n"), std::string::npos);
  EXPECT_NE(sent.find("Content-Length: 13\r\n"), std::string::npos) << sent;
  EXPECT_NE(sent.find("\r\n\r\nhello chunked"), std::string::npos);
  for (const char* gone : {"X-Client-Hop", "TE:", "Upgrade", "Proxy-Authorization",
                           "Transfer-Encoding", "client.example"}) {
    EXPECT_EQ(sent.find(gone), std::string::npos) << gone << " in\n" << sent;
  }
}

// A compressed answer is relayed byte for byte; with capture_responses its outcome says the
// response could not be read ("response": null) instead of a misread empty text.
TEST(ProxyCaptureTest, ACompressedResponseIsRelayedAndRecordedAsUnreadable) {
  static constexpr char kGzip[] = "\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\x03{\"x\":1}\0\r\n";
  const std::string gzip_body(kGzip, sizeof(kGzip) - 1);  // the NUL inside included
  RawUpstream upstream([&](const std::string&) {
    return "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Encoding: gzip\r\n"
           "Content-Length: " +
           std::to_string(gzip_body.size()) + "\r\n\r\n" + gzip_body;
  });
  const llmtap::testing::TempDir dir;
  CaptureOptions copt;
  copt.config.path = dir.File("requests.jsonl");
  copt.config.outcomes = true;
  copt.config.capture_responses = true;
  Capture capture(copt);
  ASSERT_TRUE(capture.Start().ok());
  CaptureObserver observer(&capture);
  ProxyServer proxy(ProxyTo(upstream.port()), {&observer}, {&observer});
  std::string error;
  ASSERT_TRUE(proxy.Start(&error)) << error;
  const Response r = Client(proxy.port()).Send(http::verb::post, "/v1/chat/completions", kChat);
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.body, gzip_body);
  proxy.Stop();
  capture.Stop();
  std::ifstream in(copt.config.path + ".outcomes.ndjson");
  std::string line;
  ASSERT_TRUE(std::getline(in, line));
  const json outcome = json::parse(line);
  EXPECT_EQ(outcome["status"], 200);
  ASSERT_TRUE(outcome.contains("response")) << line;
  EXPECT_TRUE(outcome["response"].is_null()) << line;
}

TEST(ProxyErrorsTest, UpstreamDownIs502) {
  uint16_t closed_port;
  {
    asio::io_context ioc;
    tcp::acceptor a(ioc, tcp::endpoint(tcp::v4(), 0));
    closed_port = a.local_endpoint().port();
  }
  ProxyServer proxy(ProxyTo(closed_port));
  std::string error;
  ASSERT_TRUE(proxy.Start(&error)) << error;
  Client c(proxy.port());
  Response r = c.Send(http::verb::post, "/v1/chat/completions", kChat);
  EXPECT_EQ(r.status, 502);
  json body = json::parse(r.body);
  EXPECT_EQ(body["error"]["type"], "upstream_error");
  EXPECT_EQ(body["error"]["code"], "upstream_unavailable");
  EXPECT_TRUE(body["error"]["param"].is_null());
  // The connection stays usable.
  EXPECT_EQ(c.Send(http::verb::get, "/llmtap/metrics").status, 200);
}

TEST(ProxyErrorsTest, SlowUpstreamIs504) {
  RawUpstream upstream([](const std::string&) { return std::string(); });
  ProxyOptions o = ProxyTo(upstream.port());
  o.read_timeout = std::chrono::milliseconds(200);
  ProxyServer proxy(o);
  std::string error;
  ASSERT_TRUE(proxy.Start(&error)) << error;
  Client c(proxy.port());
  Response r = c.Send(http::verb::post, "/v1/completions", kCompletion);
  EXPECT_EQ(r.status, 504);
  EXPECT_EQ(json::parse(r.body)["error"]["code"], "upstream_timeout");
}

TEST(ProxyErrorsTest, BodyOverLimitIs413) {
  RawUpstream upstream([](const std::string&) {
    return std::string("HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok");
  });
  ProxyOptions o = ProxyTo(upstream.port());
  o.max_body_bytes = 100;
  ProxyServer proxy(o);
  std::string error;
  ASSERT_TRUE(proxy.Start(&error)) << error;
  {
    Client c(proxy.port());
    EXPECT_EQ(c.Send(http::verb::post, "/v1/completions", std::string(100, 'x')).status, 200);
    EXPECT_EQ(c.Send(http::verb::post, "/v1/completions", std::string(101, 'x')).status, 413);
  }
  {
    Client c(proxy.port());
    http::request<http::string_body> req{http::verb::post, "/v1/completions", 11};
    req.set(http::field::host, "x");
    req.chunked(true);
    req.body() = std::string(150, 'y');
    EXPECT_EQ(c.Send(req).status, 413);
  }
  EXPECT_EQ(upstream.requests().size(), 1u);
}

TEST(ProxyErrorsTest, StaleUpstreamConnectionIsRetriedOnce) {
  // Answers every request and then closes the connection without saying so.
  std::atomic<int> answered{0};
  RawUpstream upstream(
      [&](const std::string&) {
        ++answered;
        return std::string("HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok");
      },
      /*close_after_answer=*/true);
  ProxyOptions o = ProxyTo(upstream.port());
  o.threads = 1;
  ProxyServer proxy(o);
  std::string error;
  ASSERT_TRUE(proxy.Start(&error)) << error;
  Client c(proxy.port());
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(c.Send(http::verb::get, "/x").status, 200);
  }
  EXPECT_EQ(answered.load(), 3);
}

TEST_F(SimProxyTest, StopLetsInFlightStreamsFinish) {
  StartProxy();
  Client c(proxy_->port());
  http::request<http::string_body> req{http::verb::post, "/v1/chat/completions", 11};
  req.set(http::field::host, "x");
  req.body() = R"({"messages":[{"role":"user","content":"go"}],"max_tokens":200,"stream":true})";
  req.prepare_payload();
  http::write(c.socket(), req);
  asio::streambuf head;
  asio::read_until(c.socket(), head, "data: ");
  std::thread stopper([this] { proxy_->Stop(); });
  // The rest of the stream still arrives, ending with [DONE] and the final chunk.
  boost::system::error_code ec;
  asio::read_until(c.socket(), head, "0\r\n\r\n", ec);
  EXPECT_FALSE(ec) << ec.message();
  const std::string all(asio::buffers_begin(head.data()), asio::buffers_end(head.data()));
  EXPECT_NE(all.find("data: [DONE]"), std::string::npos);
  // ...and then the proxy closes the connection.
  char byte;
  c.socket().read_some(asio::buffer(&byte, 1), ec);
  EXPECT_EQ(ec, asio::error::eof);
  stopper.join();
}

std::string PostRequest(const std::string& fields, const std::string& body) {
  return "POST /v1/x HTTP/1.1\r\nHost: h\r\n" + fields + "\r\n" + body;
}

// Reads from `s` until the peer closes; returns all bytes.
std::string ReadToEof(tcp::socket& s) {
  std::string all;
  boost::system::error_code ec;
  char buf[4096];
  while (!ec) {
    const size_t n = s.read_some(asio::buffer(buf), ec);
    all.append(buf, n);
  }
  return all;
}

TEST(ProxyRequestTest, RejectsBadFramingWithJson400AndCloses) {
  RawUpstream upstream([](const std::string&) {
    return std::string("HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok");
  });
  ProxyServer proxy(ProxyTo(upstream.port()));
  std::string error;
  ASSERT_TRUE(proxy.Start(&error)) << error;
  for (const std::string& bad : {PostRequest("Transfer-Encoding: chunked\r\n", "zz\r\n"),
                                 PostRequest("Transfer-Encoding: gzip, chunked\r\n", "0\r\n\r\n"),
                                 std::string("GET / HTTP/1.1\r\n\r\n")}) {
    SCOPED_TRACE(bad);
    Client c(proxy.port());
    asio::write(c.socket(), asio::buffer(bad));
    const std::string answer = ReadToEof(c.socket());
    EXPECT_TRUE(answer.rfind("HTTP/1.1 400 ", 0) == 0 || answer.rfind("HTTP/1.1 501 ", 0) == 0)
        << answer;
    EXPECT_NE(answer.find("Connection: close\r\n"), std::string::npos);
    const json body = json::parse(answer.substr(answer.find("\r\n\r\n") + 4));
    EXPECT_EQ(body["error"]["type"], "invalid_request_error");
  }
  EXPECT_TRUE(upstream.requests().empty());
}

// A chunked upstream response whose framing breaks in the same read as a good chunk.
TEST(ProxyRelayTest, BodyParsedBeforeAFramingErrorIsRelayedThenTheStreamIsCut) {
  RawUpstream upstream([](const std::string&) {
    return std::string(
        "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
        "6\r\ndata: \r\n3\r\nw0\n\r\nzz\r\nnot a chunk\r\n");
  });
  ProxyServer proxy(ProxyTo(upstream.port()));
  std::string error;
  ASSERT_TRUE(proxy.Start(&error)) << error;
  Client c(proxy.port());
  asio::write(c.socket(), asio::buffer(PostRequest("Content-Length: 2\r\n", "{}")));
  const std::string answer = ReadToEof(c.socket());
  EXPECT_EQ(answer.rfind("HTTP/1.1 200 OK\r\n", 0), 0u) << answer;
  // The good bytes in one chunk, no terminating chunk, nothing of the bad bytes.
  EXPECT_NE(answer.find("\r\n\r\n9\r\ndata: w0\n\r\n"), std::string::npos) << answer;
  EXPECT_EQ(answer.find("0\r\n\r\n"), std::string::npos) << answer;
  EXPECT_EQ(answer.find("not a chunk"), std::string::npos) << answer;
  // A body that breaks after the head counts as a reset; a head that does not parse, as a
  // protocol error.
  const std::string metrics = proxy.MetricsText();
  EXPECT_NE(metrics.find("llmtap_proxy_upstream_errors_total{kind=\"reset\"} 1\n"),
            std::string::npos)
      << metrics;
  EXPECT_NE(metrics.find("llmtap_proxy_upstream_errors_total{kind=\"protocol\"} 0\n"),
            std::string::npos)
      << metrics;
}

TEST(ProxyRelayTest, GarbageResponseHeadIs502AndAProtocolError) {
  RawUpstream upstream([](const std::string&) { return std::string("SSH-2.0-x\r\n\r\n"); },
                       /*close_after_answer=*/true);
  ProxyServer proxy(ProxyTo(upstream.port()));
  std::string error;
  ASSERT_TRUE(proxy.Start(&error)) << error;
  Client c(proxy.port());
  EXPECT_EQ(c.Send(http::verb::get, "/x").status, 502);
  // On the same connection: the proxy counts a request after its response was sent, and before
  // it reads the next one.
  const std::string metrics = c.Send(http::verb::get, "/llmtap/metrics").body;
  EXPECT_NE(metrics.find("llmtap_proxy_upstream_errors_total{kind=\"protocol\"} 1\n"),
            std::string::npos)
      << metrics;
}

}  // namespace
}  // namespace llmtap::proxy
