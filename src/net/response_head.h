// The end of an HTTP/1.x response head, for every server in llmtap (the sim; the proxy's own
// answers and the heads it relays): the framing field, the Connection field and the blank line
// are written by this one function, together and last, so that no field can land after the
// head has ended (the sim once wrote `Connection: close` into the body of streamed answers to
// HTTP/1.0 and `Connection: close` clients). Pure; any thread.
#pragma once

#include <cstdint>
#include <string>

namespace llmtap::net {

enum class BodyFraming {
  kContentLength,  // "Content-Length: n"
  kChunked,        // "Transfer-Encoding: chunked"; HTTP/1.1 clients only
  kUntilClose,     // no framing field: the body ends when the server closes (RFC 9112 §6.3)
  kFieldsGiven,    // the caller wrote the framing among its fields (a relayed Content-Length)
};

// How to frame a body whose length is not known up front (a stream): chunked for an HTTP/1.1
// client, until the close for an HTTP/1.0 one, which knows no chunked coding (RFC 9112 §6.1).
inline BodyFraming StreamFraming(unsigned version) {
  return version >= 11 ? BodyFraming::kChunked : BodyFraming::kUntilClose;
}

// Appends the framing field (`content_length` with kContentLength), the Connection field
// ("close" when the connection ends after this response, whatever the client's `version`;
// "keep-alive" when an HTTP/1.0 client's connection stays open), and the blank line that ends
// the head. A body framed by the close never keeps the connection. Returns whether the
// connection stays open after this response.
bool EndResponseHead(unsigned version, bool keep_alive, BodyFraming framing,
                     uint64_t content_length, std::string* out);

}  // namespace llmtap::net
