// Session ids of capture rows: where they come from (session_headers, session_fields, or an id
// the host passes) and how they are written. A mooncake_payload row with a known id is
//   {"timestamp":N,"payload":<body>,"session_id":"<id>"}
// and a row without one stays {"timestamp":N,"payload":<body>}.
//
// Pure functions over their arguments; any thread may call them. Nothing here logs: session
// ids are client data and never appear in diagnostics.
#pragma once

#include <cstddef>
#include <initializer_list>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace llmtap {

// Longest session id kept, in bytes of its UTF-8 text (before JSON escaping). Longer ids are cut
// at the last whole character within this many bytes.
inline constexpr size_t kMaxSessionIdBytes = 256;

// What the row gains after its payload: `,"session_id":"` + escaped id + `"`.
inline constexpr std::string_view kSessionIdMemberHead = ",\"session_id\":\"";

// Request header lookup, provided by the host for session_headers. Implementations are read
// only during the Capture::Offer call they are passed to.
class RequestHeaders {
 public:
  // The value of the first field named `name` (ASCII case-insensitive), "" if absent.
  virtual std::string_view Get(std::string_view name) const = 0;

 protected:
  ~RequestHeaders() = default;
};

// RequestHeaders over (name, value) pairs the caller keeps alive, for embedders whose server
// has no lookup of its own (and for tests).
class HeaderPairs final : public RequestHeaders {
 public:
  using Pair = std::pair<std::string_view, std::string_view>;
  explicit HeaderPairs(std::vector<Pair> pairs) : pairs_(std::move(pairs)) {}
  HeaderPairs(std::initializer_list<Pair> pairs) : pairs_(pairs) {}
  std::string_view Get(std::string_view name) const override;

 private:
  std::vector<Pair> pairs_;
};

// Appends the row's session member for `id` (raw bytes, no JSON escapes) to `out`: cut to
// kMaxSessionIdBytes at a character boundary, then JSON-escaped. Returns false and appends
// nothing when `id` is empty or its kept part is not valid UTF-8.
bool AppendSessionIdMember(std::string_view id, std::string* out);

// Tries `names` in order; the first header with a non-empty value that AppendSessionIdMember
// takes is appended. Returns whether one was.
bool AppendSessionIdFromHeaders(const RequestHeaders& headers,
                                const std::vector<std::string>& names, std::string* out);

// Body fields as dotted paths ("user", "metadata.session_id"), each split once into its keys.
class SessionFieldPaths {
 public:
  SessionFieldPaths() = default;
  explicit SessionFieldPaths(const std::vector<std::string>& dotted);
  bool empty() const { return paths_.empty(); }

  // Tries each path in order in `json`, a JSON object in the compact form JsonCompactor writes
  // (valid, no whitespace outside strings). The first path that leads to a non-empty string or
  // an integer (written as its decimal text) gives the id, appended as by
  // AppendSessionIdMember. A key that occurs twice in one object is read at its last
  // occurrence, as Python's json module and most servers read it. `scratch` is reused for
  // keys and values with escapes. Returns whether an id was appended. Never throws on any
  // input (malformed input finds nothing); may throw std::bad_alloc.
  bool AppendFromBody(std::string_view json, std::string* scratch, std::string* out) const;

 private:
  std::vector<std::vector<std::string>> paths_;
};

// Decodes the inside of a JSON string (between the quotes, escapes as written) into `*out`.
// Returns false for a malformed escape or a lone surrogate (which no UTF-8 text can hold).
bool DecodeJsonStringContent(std::string_view raw, std::string* out);

}  // namespace llmtap
