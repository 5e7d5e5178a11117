// Test-only: a blocking keep-alive HTTP/1.1 client (Beast) for the in-process server tests of the
// simulator and the proxy. One Client per thread.
#pragma once

#include <cstdint>
#include <string>

#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http.hpp>
#include <nlohmann/json.hpp>

namespace llmtap::testing {

struct HttpResponse {
  int status = 0;
  boost::beast::http::fields headers;
  std::string content_type;  // copied out of `headers`, for brevity in tests
  std::string allow;
  std::string body;
  bool chunked = false;
};

// One keep-alive client connection to 127.0.0.1:`port`.
class HttpClient {
 public:
  explicit HttpClient(uint16_t port) : socket_(ioc_) {
    socket_.connect(
        boost::asio::ip::tcp::endpoint(boost::asio::ip::make_address("127.0.0.1"), port));
  }
  HttpResponse Send(boost::beast::http::request<boost::beast::http::string_body>& req) {
    boost::beast::http::write(socket_, req);
    return Read();
  }
  HttpResponse Send(boost::beast::http::verb method, const std::string& target,
                    const std::string& body = "") {
    namespace http = boost::beast::http;
    http::request<http::string_body> req{method, target, 11};
    req.set(http::field::host, "127.0.0.1");
    if (!body.empty()) {
      req.set(http::field::content_type, "application/json");
      req.body() = body;
      req.prepare_payload();
    }
    return Send(req);
  }
  HttpResponse Post(const std::string& target, const nlohmann::json& body) {
    return Send(boost::beast::http::verb::post, target, body.dump());
  }
  // Reads one response (up to 64 MiB of body).
  HttpResponse Read() {
    namespace http = boost::beast::http;
    http::response_parser<http::string_body> parser;
    parser.body_limit(64 << 20);
    http::read(socket_, buffer_, parser);
    auto& res = parser.get();
    HttpResponse r;
    r.status = res.result_int();
    r.chunked = res.chunked();
    for (const auto& f : res) r.headers.insert(f.name_string(), f.value());
    r.content_type = std::string(res[http::field::content_type]);
    r.allow = std::string(res[http::field::allow]);
    r.body = res.body();
    return r;
  }
  boost::asio::ip::tcp::socket& socket() { return socket_; }

 private:
  boost::asio::io_context ioc_;
  boost::asio::ip::tcp::socket socket_;
  boost::beast::flat_buffer buffer_;
};

// The names the in-process server tests (src/sim/server_test.cc, src/proxy/server_test.cc) write
// their requests with: `using namespace llmtap::testing::http_test_names;` inside the test's
// namespace.
namespace http_test_names {
namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = boost::beast::http;
using tcp = boost::asio::ip::tcp;
using nlohmann::json;
using Response = HttpResponse;
using Client = HttpClient;
}  // namespace http_test_names

}  // namespace llmtap::testing
