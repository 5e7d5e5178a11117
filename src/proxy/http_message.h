// The proxy's HTTP/1.1 message handling that needs no event loop: header storage, hop-by-hop
// filtering, RequestReader, which parses and validates a client's request from a buffer and
// builds the head sent upstream, and the response side: the upstream response's parser and the
// framing of what goes to the client (response heads, chunk lines). The sessions (session.cc,
// relay.cc) read into buffers and hand them to these; the libFuzzer target
// fuzz/http_request_fuzz.cc drives the same request code. Internal to src/proxy (and its tests
// and fuzz target); pure functions and per-connection objects, used on one thread at a time.
//
// Request framing policy (RFC 9112 §6), all decided from fields already parsed:
//   - Transfer-Encoding must be exactly "chunked" (case-insensitive). A list that ends in
//     chunked ("gzip, chunked") names a coding the proxy does not apply: 501. Anything else
//     (chunked not final, unknown, parameters, "identity"): 400 (§6.3 item 4). Either way the
//     connection is closed.
//   - Transfer-Encoding with Content-Length, in either order: 400 (RFC 9112 §6.3 item 3 allows
//     refusing rather than dropping the Content-Length, and a proxy that picked one could
//     disagree with a hop before it).
//   - Transfer-Encoding in an HTTP/1.0 request: 400 (§6.1: the framing is faulty).
//   - An HTTP/1.1 request without Host, any request with more than one Host: 400 (§3.2).
//   - The request line and header section together must fit in max_header_bytes (400).
//   - Chunk lines and the trailer section: each must fit in max_header_bytes (the parser never
//     sees more than that of one at a time, so nothing unbounded is buffered), and their
//     extensions and trailer fields together count toward max_header_bytes per request.
//   - Trailer fields are dropped (RFC 9110 §6.5.1): only header-section fields are forwarded.
//   - Any other framing error (bad chunk size, bad extension, bad trailer field): 400.
//
// Threads: one RequestReader and one UpstreamResponseParser per client connection, used by that
// connection's thread.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <boost/beast/core/error.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/string.hpp>
#include <boost/beast/http/field.hpp>
#include <boost/beast/http/rfc7230.hpp>
#include <boost/beast/http/verb.hpp>

#include "common/http_body_parser.h"
#include "proxy/observer.h"

namespace llmtap::proxy {

// A header block as parsed: every field in order, in one string that is reused from message to
// message (Beast's http::fields allocates once per field).
class HeaderStore final : public HeaderView {
 public:
  struct Field {
    boost::beast::http::field name;
    uint32_t name_at, name_size, value_at, value_size;
  };

  void Clear() {
    text_.clear();
    fields_.clear();
  }
  void Add(boost::beast::http::field name, std::string_view name_string, std::string_view value);
  const std::vector<Field>& fields() const { return fields_; }
  std::string_view Name(const Field& f) const { return {text_.data() + f.name_at, f.name_size}; }
  std::string_view Value(const Field& f) const { return {text_.data() + f.value_at, f.value_size}; }
  std::string_view Get(std::string_view name) const override;

 private:
  std::string text_;
  std::vector<Field> fields_;
};

// Hop-by-hop fields (RFC 9110 7.6.1, RFC 9112): they describe one connection, not the
// message, so a proxy must not forward them. Trailer goes too: the proxy re-frames bodies and
// does not relay trailer fields.
bool IsHopByHop(boost::beast::http::field f);

// Appends "Name: value\r\n" to `out` for every end-to-end field of `from`: not hop-by-hop, not
// named by a Connection field, not one of the `skip_count` fields at `skip`, and not named (in
// any case) by `skip_names`. Known field names are written in their canonical spelling, others
// as received.
void AppendEndToEnd(const HeaderStore& from, std::string* out,
                    const boost::beast::http::field* skip = nullptr, size_t skip_count = 0,
                    const std::vector<std::string>* skip_names = nullptr);

void AppendUint(std::string* out, uint64_t v);

// The request a client sent, parsed into storage reused from request to request.
struct Request {
  HeaderStore headers;  // the header section only; trailer fields are dropped
  std::string method_string;
  std::string target;
  std::string body;  // de-chunked
  boost::beast::http::verb method = boost::beast::http::verb::unknown;
  unsigned version = 11;
  bool has_content_length = false;
  bool expect_continue = false;

  void Clear();
};

// Why a request is refused: the status and an OpenAI-style error message and code.
struct Rejection {
  int status = 0;
  std::string_view message;
  std::string_view code;
};

// Beast's parser for one request, with the framing checks above. Used through RequestReader.
class RequestParser final : public BodyParser<true, Request, true> {
 public:
  RequestParser(Request* out, uint64_t metadata_budget, uint64_t max_body)
      : BodyParser(out), budget_(metadata_budget), body_left_(max_body) {
    out_->Clear();
  }
  // Set when a check of ours stopped the parser.
  const Rejection& rejection() const { return rejection_; }

 private:
  void on_field_impl(boost::beast::http::field name, string_view name_string, string_view value,
                     error_code& ec) override;
  void on_header_impl(error_code& ec) override;
  void on_chunk_header_impl(std::uint64_t size, string_view extensions, error_code& ec) override;
  void Reject(const Rejection& why, error_code& ec);
  void Spend(size_t bytes, error_code& ec);  // from budget_, or reject

  Rejection rejection_;
  Rejection deferred_;  // a Transfer-Encoding verdict, given once the head is whole
  uint64_t budget_;     // what chunk extensions and trailer fields may still take
  uint64_t body_left_;  // what chunk data may still take
  int hosts_ = 0;
};

// Reads requests one after another from a client's buffer.
class RequestReader {
 public:
  enum class State {
    kNeedMore,  // feed more bytes
    kDone,      // request() is complete: forward it
    kRejected,  // answer rejection() and close the connection
  };

  // Starts the next request with these limits (the Request storage is reused).
  void Begin(uint32_t max_header_bytes, uint64_t max_body_bytes);

  // Parses what `buffer` holds and consumes what was parsed; bytes after a complete request
  // stay (the next request, pipelined). After kDone or kRejected, call Begin() before feeding.
  State Feed(boost::beast::flat_buffer& buffer);

  const Request& request() const { return req_; }
  Request& request() { return req_; }
  const Rejection& rejection() const { return rejection_; }
  bool header_done() const;
  bool got_some() const;
  bool keep_alive() const;  // valid once header_done()
  bool chunked() const;     // valid once header_done()

  // The head of the request sent upstream, in `out` (replaced): the same method and target,
  // HTTP/1.1, the end-to-end header fields, Host: `authority`, and the body framed by one
  // Content-Length. Call after kDone. The shadow's candidate gets the same head but for the
  // fields `skip_names` names, with `extra_fields` ("Name: value\r\n" lines) added.
  void BuildUpstreamHead(std::string_view authority, std::string* out,
                         const std::vector<std::string>* skip_names = nullptr,
                         std::string_view extra_fields = {}) const;

 private:
  Request req_;
  std::optional<RequestParser> parser_;
  Rejection rejection_;
  size_t window_ = 0;     // max_header_bytes: the most of an element the parser is shown
  size_t head_used_ = 0;  // request head bytes the parser consumed
};

// The upstream's response head, and its body de-chunked into `body` (which the relay empties
// after each client write).
struct UpstreamResponse {
  HeaderStore headers;
  std::string reason;
  std::string body;
  int status = 0;
};

// Beast's parser for one upstream response, into storage reused from response to response.
// Trailer fields are dropped; the body has no limit (it is relayed piecewise).
class UpstreamResponseParser final : public BodyParser<false, UpstreamResponse, false> {
 public:
  // Empties `out`. A response to HEAD has no body, whatever its framing says.
  UpstreamResponseParser(UpstreamResponse* out, uint32_t max_header_bytes, bool head_request);

  // Feeds everything `buffer` holds and consumes what was parsed. Needing more bytes is not an
  // error here: ec stays clear and the caller reads more.
  void Feed(boost::beast::flat_buffer& buffer, error_code& ec);

 private:
  void on_field_impl(boost::beast::http::field name, string_view name_string, string_view value,
                     error_code&) override;
};

// The head of an upstream response as relayed to a client, in `out` (replaced): the status line
// in the client's HTTP version (the upstream's reason phrase, or the standard one when it sent
// none), the end-to-end fields, Transfer-Encoding: chunked when `chunked`, and the Connection
// field that `keep` needs for that version.
void BuildRelayedHead(const UpstreamResponse& response, unsigned version, bool keep, bool chunked,
                      std::string* out);

// The head of a response the proxy answers itself (its error pages, the metrics endpoint), in
// `out` (replaced): standard reason phrase, Content-Type, Connection as `keep_alive` needs for
// `version`, Content-Length.
void BuildOwnHead(int status, std::string_view content_type, unsigned version, bool keep_alive,
                  uint64_t content_length, std::string* out);

// Chunked framing of a relayed body: the chunk-size line before `size` bytes (written into
// `line`), and what follows a write's bytes: "\r\n" closing the chunk when it `had_data`, and
// the last chunk and the end of the message "0\r\n\r\n" when `last` ("" when neither).
std::string_view ChunkSizeLine(size_t size, char (&line)[24]);
std::string_view ChunkTail(bool had_data, bool last);

}  // namespace llmtap::proxy
