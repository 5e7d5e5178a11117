// BodyParser: a Boost.Beast basic_parser that keeps a request's or response's start line and
// body (de-chunked) in a caller-owned struct, reusing its buffers across messages. The sim's
// and the proxy's parsers derive from it and add only their own on_field_impl.
//
// `Out` must have `std::string body` and, for requests, `method` (http::verb),
// `method_string`, `target` (std::string) and `version` (unsigned); for responses `status`
// (int) and `reason` (std::string). With `kReserveBody`, a Content-Length body is reserved
// whole up front (right for bodies kept whole, not for ones relayed and emptied piecewise).
//
// Threads: one parser per message, used by one thread.
#pragma once

#include <cstdint>
#include <string>

#include <boost/beast/http/basic_parser.hpp>

namespace llmtap {

template <bool isRequest, class Out, bool kReserveBody>
class BodyParser : public boost::beast::http::basic_parser<isRequest> {
 protected:
  using error_code = boost::beast::error_code;
  using string_view = boost::beast::string_view;

  explicit BodyParser(Out* out) : out_(out) {}
  Out* out_;

 private:
  void on_request_impl(boost::beast::http::verb method, string_view method_str, string_view target,
                       int version, error_code&) override {
    if constexpr (isRequest) {
      out_->method = method;
      out_->method_string.assign(method_str.data(), method_str.size());
      out_->target.assign(target.data(), target.size());
      out_->version = static_cast<unsigned>(version);
    }
  }
  void on_response_impl(int code, string_view reason, int, error_code&) override {
    if constexpr (!isRequest) {
      out_->status = code;
      out_->reason.assign(reason.data(), reason.size());
    }
  }
  void on_header_impl(error_code&) override {}
  void on_body_init_impl(const boost::optional<std::uint64_t>& length, error_code&) override {
    if (kReserveBody && length) out_->body.reserve(static_cast<size_t>(*length));
  }
  size_t on_body_impl(string_view body, error_code&) override {
    out_->body.append(body.data(), body.size());
    return body.size();
  }
  void on_chunk_header_impl(std::uint64_t, string_view, error_code&) override {}
  size_t on_chunk_body_impl(std::uint64_t, string_view body, error_code&) override {
    out_->body.append(body.data(), body.size());
    return body.size();
  }
  void on_finish_impl(error_code&) override {}
};

}  // namespace llmtap
