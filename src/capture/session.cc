#include "capture/session.h"

#include <cstdint>
#include <cstring>

#include "common/ascii.h"
#include "common/json_escape.h"

namespace llmtap {
namespace {

constexpr size_t kNpos = std::string_view::npos;

// RFC 3629 UTF-8: no overlong forms, no surrogates, nothing above U+10FFFF.
bool IsValidUtf8(std::string_view s) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  const size_t n = s.size();
  size_t i = 0;
  while (i < n) {
    const unsigned char c = p[i];
    if (c < 0x80) {
      ++i;
      continue;
    }
    size_t len;
    unsigned char lo = 0x80, hi = 0xBF;
    if (c >= 0xC2 && c <= 0xDF) {
      len = 2;
    } else if (c >= 0xE0 && c <= 0xEF) {
      len = 3;
      if (c == 0xE0) lo = 0xA0;
      if (c == 0xED) hi = 0x9F;
    } else if (c >= 0xF0 && c <= 0xF4) {
      len = 4;
      if (c == 0xF0) lo = 0x90;
      if (c == 0xF4) hi = 0x8F;
    } else {
      return false;
    }
    if (n - i < len) return false;
    if (p[i + 1] < lo || p[i + 1] > hi) return false;
    for (size_t k = 2; k < len; ++k) {
      if ((p[i + k] & 0xC0) != 0x80) return false;
    }
    i += len;
  }
  return true;
}

// Index just past the string whose opening quote is at json[i], or npos.
size_t SkipString(std::string_view json, size_t i) {
  const char* data = json.data();
  size_t from = i + 1;
  while (from < json.size()) {
    const void* q = std::memchr(data + from, '"', json.size() - from);
    if (q == nullptr) return kNpos;
    const size_t at = static_cast<size_t>(static_cast<const char*>(q) - data);
    size_t backslashes = 0;
    while (at - backslashes > i + 1 && data[at - backslashes - 1] == '\\') ++backslashes;
    if (backslashes % 2 == 0) return at + 1;
    from = at + 1;
  }
  return kNpos;
}

// Index just past the value starting at json[i], or npos.
size_t SkipValue(std::string_view json, size_t i) {
  if (i >= json.size()) return kNpos;
  const char c = json[i];
  if (c == '"') return SkipString(json, i);
  if (c == '{' || c == '[') {
    size_t depth = 0;
    while (i < json.size()) {
      const char d = json[i];
      if (d == '"') {
        i = SkipString(json, i);
        if (i == kNpos) return kNpos;
        continue;
      }
      if (d == '{' || d == '[') {
        ++depth;
      } else if (d == '}' || d == ']') {
        if (--depth == 0) return i + 1;
      }
      ++i;
    }
    return kNpos;
  }
  while (i < json.size() && json[i] != ',' && json[i] != '}' && json[i] != ']') ++i;
  return i;
}

// The index of the value of the last member named `key` of the object at json[i] ('{'), or
// npos.
size_t FindMember(std::string_view json, size_t i, std::string_view key, std::string* scratch) {
  if (i >= json.size() || json[i] != '{') return kNpos;
  ++i;
  size_t found = kNpos;
  if (i < json.size() && json[i] == '}') return kNpos;
  while (i < json.size()) {
    if (json[i] != '"') return kNpos;
    const size_t end = SkipString(json, i);
    if (end == kNpos) return kNpos;
    const std::string_view raw = json.substr(i + 1, end - i - 2);
    bool match;
    if (raw.find('\\') == kNpos) {
      match = raw == key;
    } else {
      match = DecodeJsonStringContent(raw, scratch) && *scratch == key;
    }
    i = end;
    if (i >= json.size() || json[i] != ':') return kNpos;
    ++i;
    if (match) found = i;
    i = SkipValue(json, i);
    if (i == kNpos || i >= json.size()) return kNpos;
    if (json[i] == '}') return found;
    if (json[i] != ',') return kNpos;
    ++i;
  }
  return kNpos;
}

bool ReadHex4(std::string_view raw, size_t at, uint32_t* out) {
  if (at > raw.size() || raw.size() - at < 4) return false;
  uint32_t v = 0;
  for (size_t k = 0; k < 4; ++k) {
    const int h = HexDigitValue(raw[at + k]);
    if (h < 0) return false;
    v = v << 4 | static_cast<uint32_t>(h);
  }
  *out = v;
  return true;
}

// Whether json[i..end) is an integer: -?digits, no fraction or exponent.
bool IsInteger(std::string_view token) {
  size_t k = token.starts_with('-') ? 1 : 0;
  if (k == token.size()) return false;
  for (; k < token.size(); ++k) {
    if (token[k] < '0' || token[k] > '9') return false;
  }
  return true;
}

}  // namespace

std::string_view HeaderPairs::Get(std::string_view name) const {
  for (const Pair& p : pairs_) {
    if (AsciiEqualsIgnoreCase(p.first, name)) return p.second;
  }
  return {};
}

bool DecodeJsonStringContent(std::string_view raw, std::string* out) {
  out->clear();
  size_t i = 0;
  while (i < raw.size()) {
    const size_t bs = raw.find('\\', i);
    if (bs == kNpos) {
      out->append(raw.substr(i));
      break;
    }
    out->append(raw.substr(i, bs - i));
    if (bs + 1 >= raw.size()) return false;
    const char e = raw[bs + 1];
    i = bs + 2;
    if (e == 'u') {
      uint32_t cp;
      if (!ReadHex4(raw, i, &cp)) return false;
      i += 4;
      if (cp >= 0xDC00 && cp <= 0xDFFF) return false;  // a low surrogate first
      if (cp >= 0xD800 && cp <= 0xDBFF) {
        uint32_t low;
        if (raw.size() - i < 6 || raw[i] != '\\' || raw[i + 1] != 'u' ||
            !ReadHex4(raw, i + 2, &low) || low < 0xDC00 || low > 0xDFFF) {
          return false;
        }
        i += 6;
        cp = 0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00);
      }
      char utf8[4];
      out->append(utf8, EncodeUtf8(cp, utf8));
    } else {
      const int c = JsonShortEscapeValue(e);
      if (c < 0) return false;
      out->push_back(static_cast<char>(c));
    }
  }
  return true;
}

bool AppendSessionIdMember(std::string_view id, std::string* out) {
  if (id.size() > kMaxSessionIdBytes) {
    size_t end = kMaxSessionIdBytes;
    while (end > 0 && (static_cast<unsigned char>(id[end]) & 0xC0) == 0x80) --end;
    id = id.substr(0, end);
  }
  if (id.empty() || !IsValidUtf8(id)) return false;
  out->append(kSessionIdMemberHead);
  AppendJsonEscaped(out, id);
  out->push_back('"');
  return true;
}

bool AppendSessionIdFromHeaders(const RequestHeaders& headers,
                                const std::vector<std::string>& names, std::string* out) {
  for (const std::string& name : names) {
    const std::string_view value = headers.Get(name);
    if (!value.empty() && AppendSessionIdMember(value, out)) return true;
  }
  return false;
}

SessionFieldPaths::SessionFieldPaths(const std::vector<std::string>& dotted) {
  for (const std::string& d : dotted) {
    std::vector<std::string>& keys = paths_.emplace_back();
    size_t start = 0;
    while (true) {
      const size_t dot = d.find('.', start);
      keys.push_back(d.substr(start, dot == std::string::npos ? std::string::npos : dot - start));
      if (dot == std::string::npos) break;
      start = dot + 1;
    }
  }
}

bool SessionFieldPaths::AppendFromBody(std::string_view json, std::string* scratch,
                                       std::string* out) const {
  for (const std::vector<std::string>& keys : paths_) {
    size_t at = 0;
    for (const std::string& key : keys) {
      at = FindMember(json, at, key, scratch);
      if (at == kNpos) break;
    }
    if (at == kNpos || at >= json.size()) continue;
    if (json[at] == '"') {
      const size_t end = SkipString(json, at);
      if (end == kNpos) continue;
      const std::string_view raw = json.substr(at + 1, end - at - 2);
      if (raw.find('\\') == kNpos) {
        if (AppendSessionIdMember(raw, out)) return true;
      } else if (DecodeJsonStringContent(raw, scratch) && AppendSessionIdMember(*scratch, out)) {
        return true;
      }
      continue;
    }
    if (json[at] == '-' || (json[at] >= '0' && json[at] <= '9')) {
      const size_t end = SkipValue(json, at);
      if (end == kNpos) continue;
      const std::string_view token = json.substr(at, end - at);
      if (IsInteger(token) && AppendSessionIdMember(token, out)) return true;
    }
  }
  return false;
}

}  // namespace llmtap
