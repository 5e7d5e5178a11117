// libFuzzer target for the proxy's request path: the bytes a client sends on one connection,
// through RequestReader (src/proxy/http_message.h), the parser and framing checks that
// Session::Loop in server.cc runs, and the upstream head it builds. Input: byte 0 picks the
// size of the pieces the bytes arrive in (as reads would bring them), byte 1 the limits
// (max_header_bytes, max_body_bytes); the rest is the connection's bytes. Requests are read
// one after another (pipelining) until one is refused or the bytes end.
//
// Beyond memory errors and undefined behaviour it checks:
//   - a refusal is 400, 413 or 501 with a message, and ends the connection;
//   - an accepted request has no Transfer-Encoding/Content-Length ambiguity: at most one
//     Transfer-Encoding, exactly "chunked", only in HTTP/1.1, never with Content-Length; one
//     Host in HTTP/1.1, at most one in HTTP/1.0; a body within max_body_bytes;
//   - the request sent upstream parses back (Beast) into exactly one request with the same
//     method, target and body, framed by one Content-Length, one Host (the upstream's), and no
//     hop-by-hop field nor any field the client's Connection named (but the proxy's own Host
//     and Content-Length);
//   - the outcome does not depend on how the bytes were split (the same input fed whole):
//     the same requests forwarded, the same refusal. (Beast checks a request line as soon as
//     it sees its start but, once it had to wait, only when the header's end is there, so a
//     refusal may come while the other split still waits for the header's end.)
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <boost/asio/buffer.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/rfc7230.hpp>
#include <boost/beast/http/string_body.hpp>

#include "proxy/http_message.h"

namespace {

namespace beast = boost::beast;
namespace http = beast::http;
using llmtap::proxy::HeaderStore;
using llmtap::proxy::Request;
using llmtap::proxy::RequestReader;

constexpr std::string_view kAuthority = "upstream.test:8000";

void Check(bool ok) {
  if (!ok) __builtin_trap();
}

beast::string_view Bv(std::string_view s) { return {s.data(), s.size()}; }

std::string_view Trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

int Count(const HeaderStore& h, http::field f) {
  int n = 0;
  for (const auto& field : h.fields()) n += field.name == f;
  return n;
}

void CheckAccepted(const Request& req, uint64_t max_body) {
  const HeaderStore& h = req.headers;
  const int te = Count(h, http::field::transfer_encoding);
  Check(te <= 1);
  if (te == 1) {
    Check(beast::iequals(Bv(Trim(h.Get("Transfer-Encoding"))), "chunked"));
    Check(req.version >= 11);
    Check(Count(h, http::field::content_length) == 0);
  }
  const int hosts = Count(h, http::field::host);
  Check(hosts <= 1 && (hosts == 1 || req.version < 11));
  Check(req.body.size() <= max_body);
}

void CheckForwarded(const Request& req, const std::string& head) {
  const std::string sent = head + req.body;
  http::request_parser<http::string_body> p;
  p.header_limit(static_cast<uint32_t>(head.size() + 1));
  p.body_limit(req.body.size());
  p.eager(true);
  beast::error_code ec;
  const size_t used = p.put(boost::asio::buffer(sent), ec);
  Check(!ec && p.is_done() && used == sent.size());
  const auto& m = p.get();
  Check(m.method_string() == Bv(req.method_string) && m.target() == Bv(req.target));
  Check(m.version() == 11 && !p.chunked() && m.body() == req.body);
  const size_t lengths = m.count(http::field::content_length);
  Check(lengths <= 1 && (req.body.empty() || lengths == 1));
  Check(m.count(http::field::host) == 1 && m[http::field::host] == Bv(kAuthority));
  Check(m.count(http::field::expect) == 0);
  for (const auto& f : m) Check(!llmtap::proxy::IsHopByHop(f.name()));
  // The client's fields its Connection names are not forwarded. Host and Content-Length named
  // there are the client's own, dropped too: the ones upstream gets are the proxy's (checked
  // above), as RFC 9110 7.6.1 has an intermediary generate them for the message it sends.
  for (const auto& f : req.headers.fields()) {
    if (f.name != http::field::connection) continue;
    for (auto token : http::token_list(Bv(req.headers.Value(f)))) {
      const http::field named = http::string_to_field(token);
      if (named == http::field::host || named == http::field::content_length) continue;
      Check(m.count(token) == 0);
    }
  }
}

// What one connection came to: per request, the upstream bytes or "!" and the refusal's
// status; `waiting` when the bytes ended before the last request did.
struct Outcome {
  std::vector<std::string> requests;
  bool waiting = false;
};

Outcome Run(std::string_view bytes, size_t piece, uint32_t max_header, uint64_t max_body) {
  Outcome outcome;
  RequestReader reader;
  beast::flat_buffer buffer;
  size_t at = 0;
  for (;;) {
    reader.Begin(max_header, max_body);
    RequestReader::State state = reader.Feed(buffer);
    while (state == RequestReader::State::kNeedMore && at < bytes.size()) {
      const std::string_view p = bytes.substr(at, piece);
      at += p.size();
      buffer.commit(boost::asio::buffer_copy(buffer.prepare(p.size()),
                                             boost::asio::buffer(p.data(), p.size())));
      state = reader.Feed(buffer);
    }
    if (state == RequestReader::State::kNeedMore) {
      outcome.waiting = true;
      return outcome;
    }
    if (state == RequestReader::State::kRejected) {
      const int status = reader.rejection().status;
      Check(status == 400 || status == 413 || status == 501);
      Check(!reader.rejection().message.empty() && !reader.rejection().code.empty());
      outcome.requests.push_back("!" + std::to_string(status));
      return outcome;
    }
    CheckAccepted(reader.request(), max_body);
    std::string head;
    reader.BuildUpstreamHead(kAuthority, &head);
    CheckForwarded(reader.request(), head);
    outcome.requests.push_back(head + reader.request().body);
    if (!reader.keep_alive()) return outcome;
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2) return 0;
  static constexpr uint32_t kHeaderLimits[] = {64, 256, 1024, 64 * 1024};
  static constexpr uint64_t kBodyLimits[] = {0, 16, 1024, 1 << 20};
  const size_t piece = data[0] == 0 ? size : size_t{data[0]};
  const uint32_t max_header = kHeaderLimits[data[1] & 3];
  const uint64_t max_body = kBodyLimits[(data[1] >> 2) & 3];
  const std::string_view bytes(reinterpret_cast<const char*>(data) + 2, size - 2);
  if (piece >= bytes.size()) {
    Run(bytes, piece, max_header, max_body);
    return 0;
  }
  const Outcome a = Run(bytes, piece, max_header, max_body);
  const Outcome b = Run(bytes, bytes.size(), max_header, max_body);
  const Outcome& shorter = a.requests.size() <= b.requests.size() ? a : b;
  const Outcome& longer = a.requests.size() <= b.requests.size() ? b : a;
  const size_t n = shorter.requests.size();
  Check(std::equal(shorter.requests.begin(), shorter.requests.end(), longer.requests.begin()));
  if (longer.requests.size() > n) {
    Check(longer.requests.size() == n + 1 && shorter.waiting && longer.requests[n][0] == '!');
  }
  return 0;
}
