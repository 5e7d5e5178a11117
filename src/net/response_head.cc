#include "net/response_head.h"

#include <charconv>
#include <string_view>

namespace llmtap::net {

using namespace std::string_view_literals;

bool EndResponseHead(unsigned version, bool keep_alive, BodyFraming framing,
                     uint64_t content_length, std::string* out) {
  switch (framing) {
    case BodyFraming::kContentLength: {
      char digits[24];
      const auto end = std::to_chars(digits, digits + sizeof digits, content_length).ptr;
      out->append("Content-Length: "sv).append(digits, end).append("\r\n"sv);
      break;
    }
    case BodyFraming::kChunked:
      out->append("Transfer-Encoding: chunked\r\n"sv);
      break;
    case BodyFraming::kUntilClose:
      keep_alive = false;
      break;
    case BodyFraming::kFieldsGiven:
      break;
  }
  // "close" whatever the client's version (RFC 9112 §9.6: a server that closes after this
  // response SHOULD say so): the sim's status line says HTTP/1.1 to every client, and a response
  // of HTTP/1.1 without "close" means the connection persists (§9.3) to a client that reads it
  // so (curl --http1.0 kept such a connection as reusable, then found it dead).
  if (!keep_alive) out->append("Connection: close\r\n"sv);
  if (version < 11 && keep_alive) out->append("Connection: keep-alive\r\n"sv);
  out->append("\r\n"sv);
  return keep_alive;
}

}  // namespace llmtap::net
