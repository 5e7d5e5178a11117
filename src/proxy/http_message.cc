#include "proxy/http_message.h"

#include <algorithm>
#include <cstdio>
#include <limits>

#include <boost/asio/buffer.hpp>
#include <boost/beast/http/error.hpp>
#include <boost/beast/http/status.hpp>

#include "net/response_head.h"

namespace llmtap::proxy {

namespace {

using namespace std::string_view_literals;
namespace beast = boost::beast;
namespace http = beast::http;
using boost::system::error_code;

beast::string_view Bv(std::string_view s) { return {s.data(), s.size()}; }

std::string_view TrimOws(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

constexpr Rejection kBodyTooLarge{413, "The request body is larger than max_body_bytes.",
                                  "request_too_large"};
constexpr Rejection kMalformedHead{400, "Malformed HTTP request.", "bad_request"};
constexpr Rejection kMalformedBody{
    400, "Malformed request body framing (chunk size, chunk extension or trailer field).",
    "bad_request"};
constexpr Rejection kHeadTooLarge{400, "The request head is larger than max_header_bytes.",
                                  "bad_request"};
constexpr Rejection kMetadataTooLarge{
    400, "Chunk extensions and trailer fields are larger than max_header_bytes.", "bad_request"};

// Beast has refused a Content-Length before a Transfer-Encoding and a second chunked (and
// refuses a Content-Length after chunked). Only "chunked" alone passes.
Rejection CheckTransferEncoding(std::string_view value, unsigned version) {
  if (version < 11) {
    return {400, "Transfer-Encoding is not allowed in an HTTP/1.0 request.", "bad_request"};
  }
  const std::string_view v = TrimOws(value);
  if (beast::iequals(Bv(v), "chunked")) return {};
  const size_t comma = v.rfind(',');
  if (comma != std::string_view::npos &&
      beast::iequals(Bv(TrimOws(v.substr(comma + 1))), "chunked")) {
    return {501, "Transfer codings other than chunked are not implemented.", "not_implemented"};
  }
  return {400, "Transfer-Encoding must be exactly \"chunked\".", "bad_request"};
}

}  // namespace

void HeaderStore::Add(http::field name, std::string_view name_string, std::string_view value) {
  Field f{name, static_cast<uint32_t>(text_.size()), static_cast<uint32_t>(name_string.size()), 0,
          static_cast<uint32_t>(value.size())};
  text_.append(name_string);
  f.value_at = static_cast<uint32_t>(text_.size());
  text_.append(value);
  fields_.push_back(f);
}

std::string_view HeaderStore::Get(std::string_view name) const {
  for (const Field& f : fields_) {
    if (beast::iequals(Bv(Name(f)), Bv(name))) return Value(f);
  }
  return {};
}

bool IsHopByHop(http::field f) {
  switch (f) {
    case http::field::connection:
    case http::field::keep_alive:
    case http::field::te:
    case http::field::transfer_encoding:
    case http::field::upgrade:
    case http::field::proxy_connection:
    case http::field::proxy_authenticate:
    case http::field::proxy_authorization:
    case http::field::trailer:
      return true;
    default:
      return false;
  }
}

void AppendEndToEnd(const HeaderStore& from, std::string* out, const http::field* skip,
                    size_t skip_count, const std::vector<std::string>* skip_names) {
  beast::string_view named[16];
  size_t named_count = 0;
  bool named_overflow = false;
  for (const auto& f : from.fields()) {
    if (f.name != http::field::connection) continue;
    for (auto token : http::token_list(Bv(from.Value(f)))) {
      if (named_count < std::size(named)) {
        named[named_count++] = token;
      } else {
        named_overflow = true;
      }
    }
  }
  for (const auto& f : from.fields()) {
    if (IsHopByHop(f.name) || std::find(skip, skip + skip_count, f.name) != skip + skip_count) {
      continue;
    }
    const beast::string_view name = Bv(from.Name(f));
    bool is_named = false;
    for (size_t i = 0; i < named_count && !is_named; ++i) {
      is_named = beast::iequals(name, named[i]);
    }
    // More than 16 named fields is not a real client; check the rest the slow way.
    if (!is_named && named_overflow) {
      for (const auto& c : from.fields()) {
        if (c.name != http::field::connection) continue;
        for (auto token : http::token_list(Bv(from.Value(c)))) {
          if (beast::iequals(name, token)) is_named = true;
        }
      }
    }
    if (is_named) continue;
    if (skip_names != nullptr &&
        std::any_of(skip_names->begin(), skip_names->end(),
                    [&](const std::string& n) { return beast::iequals(name, Bv(n)); })) {
      continue;
    }
    if (f.name != http::field::unknown) {
      const beast::string_view canonical = http::to_string(f.name);
      out->append(canonical.data(), canonical.size());
    } else {
      out->append(name.data(), name.size());
    }
    out->append(": "sv).append(from.Value(f)).append("\r\n"sv);
  }
}

void AppendUint(std::string* out, uint64_t v) {
  char digits[20];
  char* p = digits + sizeof digits;
  do {
    *--p = static_cast<char>('0' + v % 10);
    v /= 10;
  } while (v != 0);
  out->append(p, digits + sizeof digits - p);
}

void Request::Clear() {
  headers.Clear();
  body.clear();
  version = 11;
  has_content_length = false;
  expect_continue = false;
}

void RequestParser::Reject(const Rejection& why, error_code& ec) {
  rejection_ = why;
  // Any error stops the parser; RequestReader answers rejection_ rather than this code.
  ec = http::error::bad_value;
}

void RequestParser::Spend(size_t bytes, error_code& ec) {
  if (bytes > budget_) return Reject(kMetadataTooLarge, ec);
  budget_ -= bytes;
}

void RequestParser::on_field_impl(http::field name, string_view name_string, string_view value,
                                  error_code& ec) {
  // Beast calls this for trailer fields too (after the last chunk): they count toward the
  // budget and are dropped. (Beast itself refuses Content-Length and Transfer-Encoding there.)
  if (is_header_done()) {
    Spend(name_string.size() + value.size(), ec);
    return;
  }
  switch (name) {
    case http::field::content_length:
      out_->has_content_length = true;
      break;
    case http::field::expect:
      if (beast::iequals(value, "100-continue")) out_->expect_continue = true;
      break;
    case http::field::host:
      ++hosts_;
      break;
    case http::field::transfer_encoding:
      // Judged once the head is whole, like Host: a verdict must not depend on how much of
      // the head had arrived when the parser first looked at it.
      if (deferred_.status == 0)
        deferred_ = CheckTransferEncoding({value.data(), value.size()}, out_->version);
      break;
    default:
      break;
  }
  out_->headers.Add(name, {name_string.data(), name_string.size()}, {value.data(), value.size()});
}

void RequestParser::on_header_impl(error_code& ec) {
  if (deferred_.status != 0) return Reject(deferred_, ec);
  if (hosts_ > 1 || (hosts_ == 0 && out_->version >= 11)) {
    return Reject({400, "A request must have exactly one Host field.", "bad_request"}, ec);
  }
  // Chunk sizes are counted by on_chunk_header_impl instead: Beast 1.74 takes a chunk's size off
  // its limit before it parses the chunk's extensions, again on every try while they are
  // incomplete.
  if (chunked()) body_limit(boost::none);
}

void RequestParser::on_chunk_header_impl(std::uint64_t size, string_view extensions,
                                         error_code& ec) {
  if (size > body_left_) return Reject(kBodyTooLarge, ec);
  body_left_ -= size;
  Spend(extensions.size(), ec);
}

void RequestReader::Begin(uint32_t max_header_bytes, uint64_t max_body_bytes) {
  parser_.emplace(&req_, max_header_bytes, max_body_bytes);
  parser_->header_limit(max_header_bytes);
  parser_->body_limit(max_body_bytes);
  parser_->eager(true);
  rejection_ = {};
  window_ = std::max<size_t>(max_header_bytes, 1);
  head_used_ = 0;
}

RequestReader::State RequestReader::Feed(beast::flat_buffer& buffer) {
  error_code ec;
  while (buffer.size() > 0 && !parser_->is_done()) {
    // The parser is never shown more than max_header_bytes of the request head (from its
    // first byte), nor, after the head, of one chunk line or trailer section: it parses an
    // element only once it has it whole, so one longer than that can never complete. (Beast's
    // own header_limit bounds only what is left after the fields it consumed, so alone it
    // would let the head's size depend on how the bytes arrive.)
    const bool in_head = !parser_->is_header_done();
    const size_t window = in_head ? window_ - head_used_ : window_;
    const size_t n = std::min(buffer.size(), window);
    size_t used = 0;
    if (n > 0) {
      used = parser_->put(boost::asio::buffer(buffer.data().data(), n), ec);
      buffer.consume(used);
      if (in_head) head_used_ += used;
    } else {
      ec = http::error::need_more;
    }
    if (ec == http::error::need_more) {
      ec = {};
      // Parsed up to an incomplete element: give the parser a window that starts there.
      if (used > 0) continue;
      if (n == window) {
        rejection_ = in_head ? kHeadTooLarge : kMetadataTooLarge;
        return State::kRejected;
      }
      break;
    }
    if (ec) {
      if (parser_->rejection().status != 0) {
        rejection_ = parser_->rejection();
      } else if (ec == http::error::body_limit) {
        rejection_ = kBodyTooLarge;
      } else if (ec == http::error::header_limit) {
        rejection_ = kHeadTooLarge;
      } else {
        rejection_ = parser_->is_header_done() ? kMalformedBody : kMalformedHead;
      }
      return State::kRejected;
    }
    if (used == 0) break;
  }
  return parser_->is_done() ? State::kDone : State::kNeedMore;
}

bool RequestReader::header_done() const { return parser_->is_header_done(); }
bool RequestReader::got_some() const { return parser_->got_some(); }
bool RequestReader::keep_alive() const { return parser_->keep_alive(); }
bool RequestReader::chunked() const { return parser_->chunked(); }

void RequestReader::BuildUpstreamHead(std::string_view authority, std::string* out,
                                      const std::vector<std::string>* skip_names,
                                      std::string_view extra_fields) const {
  // Host names the upstream; Expect was answered by the proxy; the body goes with one
  // Content-Length of its own.
  static constexpr http::field kSkip[] = {http::field::host, http::field::expect,
                                          http::field::content_length};
  out->assign(req_.method_string).append(" "sv).append(req_.target).append(" HTTP/1.1\r\n"sv);
  AppendEndToEnd(req_.headers, out, kSkip, std::size(kSkip), skip_names);
  out->append(extra_fields);
  out->append("Host: "sv).append(authority).append("\r\n"sv);
  if (req_.has_content_length || parser_->chunked() || !req_.body.empty()) {
    out->append("Content-Length: "sv);
    AppendUint(out, req_.body.size());
    out->append("\r\n"sv);
  }
  out->append("\r\n"sv);
}

UpstreamResponseParser::UpstreamResponseParser(UpstreamResponse* out, uint32_t max_header_bytes,
                                               bool head_request)
    : BodyParser(out) {
  out_->headers.Clear();
  out_->body.clear();
  header_limit(max_header_bytes);
  body_limit(std::numeric_limits<std::uint64_t>::max());
  eager(true);
  if (head_request) skip(true);
}

void UpstreamResponseParser::on_field_impl(http::field name, string_view name_string,
                                           string_view value, error_code&) {
  // Trailer fields (after a chunked body) are not relayed.
  if (is_header_done()) return;
  out_->headers.Add(name, {name_string.data(), name_string.size()}, {value.data(), value.size()});
}

void UpstreamResponseParser::Feed(beast::flat_buffer& buffer, error_code& ec) {
  while (buffer.size() > 0 && !is_done()) {
    const size_t used = put(buffer.data(), ec);
    buffer.consume(used);
    if (ec == http::error::need_more) {
      ec = {};
      return;
    }
    if (ec || used == 0) return;
  }
}

namespace {

// "HTTP/1.x STATUS " in `out` (replaced).
void AssignStatusLineStart(unsigned version, int status, std::string* out) {
  out->assign(version >= 11 ? "HTTP/1.1 "sv : "HTTP/1.0 "sv);
  AppendUint(out, static_cast<uint64_t>(status));
  out->push_back(' ');
}

void AppendStandardReason(int status, std::string* out) {
  const beast::string_view reason = http::obsolete_reason(http::int_to_status(status));
  out->append(reason.data(), reason.size());
}

}  // namespace

void BuildRelayedHead(const UpstreamResponse& response, unsigned version, bool keep, bool chunked,
                      std::string* out) {
  AssignStatusLineStart(version, response.status, out);
  if (response.reason.empty()) {
    AppendStandardReason(response.status, out);
  } else {
    out->append(response.reason);
  }
  out->append("\r\n"sv);
  AppendEndToEnd(response.headers, out);
  net::EndResponseHead(version, keep,
                       chunked ? net::BodyFraming::kChunked : net::BodyFraming::kFieldsGiven, 0,
                       out);
}

void BuildOwnHead(int status, std::string_view content_type, unsigned version, bool keep_alive,
                  uint64_t content_length, std::string* out) {
  AssignStatusLineStart(version, status, out);
  AppendStandardReason(status, out);
  out->append("\r\nContent-Type: "sv).append(content_type).append("\r\n"sv);
  net::EndResponseHead(version, keep_alive, net::BodyFraming::kContentLength, content_length, out);
}

std::string_view ChunkSizeLine(size_t size, char (&line)[24]) {
  const int len = std::snprintf(line, sizeof line, "%zx\r\n", size);
  return {line, static_cast<size_t>(len)};
}

std::string_view ChunkTail(bool had_data, bool last) {
  static constexpr std::string_view kTail = "\r\n0\r\n\r\n";
  if (had_data && last) return kTail;
  if (had_data) return kTail.substr(0, 2);
  if (last) return kTail.substr(2);
  return {};
}

}  // namespace llmtap::proxy
