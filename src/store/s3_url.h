// S3Url: an `s3://bucket/key-or-prefix` address, as every S3 tool spells it. Pure parsing;
// any thread.
#pragma once

#include <string>
#include <string_view>

#include "common/status.h"

namespace llmtap::store {

struct S3Url {
  std::string bucket;
  std::string key;  // may be empty (the whole bucket) or end in '/' (a prefix)

  std::string ToString() const { return "s3://" + bucket + "/" + key; }
};

// Whether `text` starts with "s3://" (then it must parse; a typo is an error, not a file name).
bool IsS3Url(std::string_view text);

// Parses "s3://bucket[/key]". The bucket must be 3-63 characters of [a-z0-9.-] starting
// and ending with a letter or digit (the rules S3 and Ceph RGW enforce); the error names
// the input and the rule it broke.
Status ParseS3Url(std::string_view text, S3Url* url);

// "a/b" + "c" -> "a/b/c"; "a/b/" + "c" -> "a/b/c"; "" + "c" -> "c".
std::string JoinKey(std::string_view prefix, std::string_view name);

// Percent-encodes for a URL path (RFC 3986 unreserved bytes and '/' stay as they are) or,
// with `encode_slash`, for a query value (SigV4 wants '/' as %2F there).
std::string UriEncode(std::string_view text, bool encode_slash);

}  // namespace llmtap::store
