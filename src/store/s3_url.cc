#include "store/s3_url.h"

namespace llmtap::store {

bool IsS3Url(std::string_view text) { return text.starts_with("s3://"); }

Status ParseS3Url(std::string_view text, S3Url* url) {
  if (!IsS3Url(text)) {
    return Status::InvalidArgument(std::string(text) + " is not an s3:// address");
  }
  std::string_view rest = text.substr(5);
  size_t slash = rest.find('/');
  std::string_view bucket = rest.substr(0, slash);
  std::string_view key = slash == std::string_view::npos ? std::string_view() : rest.substr(slash + 1);
  auto bad = [&](const std::string& why) {
    return Status::InvalidArgument("bad s3:// address " + std::string(text) + ": bucket '" +
                                   std::string(bucket) + "' " + why);
  };
  if (bucket.size() < 3 || bucket.size() > 63) return bad("must be 3 to 63 characters long");
  for (char c : bucket) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '.' || c == '-';
    if (!ok) return bad("may hold only lower-case letters, digits, '.' and '-'");
  }
  auto alnum = [](char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9'); };
  if (!alnum(bucket.front()) || !alnum(bucket.back())) {
    return bad("must start and end with a letter or digit");
  }
  if (key.starts_with('/')) {
    return Status::InvalidArgument("bad s3:// address " + std::string(text) +
                                   ": the key starts with '/' (write s3://bucket/key)");
  }
  url->bucket = std::string(bucket);
  url->key = std::string(key);
  return Status::Ok();
}

std::string JoinKey(std::string_view prefix, std::string_view name) {
  std::string out(prefix);
  if (!out.empty() && out.back() != '/') out.push_back('/');
  out.append(name);
  return out;
}

std::string UriEncode(std::string_view text, bool encode_slash) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  std::string out;
  out.reserve(text.size());
  for (unsigned char c : text) {
    const bool unreserved = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') ||
                            (c >= '0' && c <= '9') || c == '-' || c == '_' || c == '.' ||
                            c == '~' || (c == '/' && !encode_slash);
    if (unreserved) {
      out.push_back(static_cast<char>(c));
    } else {
      out.push_back('%');
      out.push_back(kHex[c >> 4]);
      out.push_back(kHex[c & 15]);
    }
  }
  return out;
}

}  // namespace llmtap::store
