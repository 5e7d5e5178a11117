#include "proxy/shadow_headers.h"

#include <algorithm>

#include "common/ascii.h"

namespace llmtap::proxy {
namespace {

bool IsTokenChar(char c) {
  if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9')) return true;
  return std::string_view("!#$%&'*+-.^_`|~").find(c) != std::string_view::npos;
}

bool IsToken(std::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), IsTokenChar);
}

std::string_view TrimFieldValue(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

std::string Lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = AsciiLower(c);
  return out;
}

}  // namespace

bool ShadowHeaderRules::AddSet(std::string_view spec, std::string* error) {
  const size_t colon = spec.find(':');
  const std::string_view name = colon == std::string_view::npos ? spec : spec.substr(0, colon);
  if (colon == std::string_view::npos || !IsToken(name)) {
    *error = "must be 'Name: value' with a header field name before the colon";
    return false;
  }
  const std::string_view value = TrimFieldValue(spec.substr(colon + 1));
  if (value.find_first_of("\r\n") != std::string_view::npos || value.find('\0') != value.npos) {
    *error = "the value of " + std::string(name) + " holds a line break or NUL";
    return false;
  }
  const std::string lower = Lower(name);
  if (lower == "host" || lower == "content-length" || lower == "transfer-encoding" ||
      lower == "connection") {
    *error = std::string(name) + " is set by the proxy";
    return false;
  }
  skipped_.push_back(lower);
  extra_.append(name).append(": ").append(value).append("\r\n");
  return true;
}

bool ShadowHeaderRules::AddDrop(std::string_view name, std::string* error) {
  if (!IsToken(name)) {
    *error = "'" + std::string(name) + "' is not a header field name";
    return false;
  }
  skipped_.push_back(Lower(name));
  return true;
}

}  // namespace llmtap::proxy
