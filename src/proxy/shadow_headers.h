// The candidate's header rules of shadow traffic (shadow.h): --shadow-header and
// --shadow-drop-header.
//
// Internal to src/proxy (and its tests). A value: any thread, one object at a time.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace llmtap::proxy {

// What the candidate gets of the client's request header fields: all that the upstream gets,
// but for those named by --shadow-drop-header and those --shadow-header replaces, plus the
// --shadow-header fields.
class ShadowHeaderRules {
 public:
  // "Name: value" (a token name, optional white space around the value): replaces the client's
  // field of that name, or adds it. False with a reason in *error (that never holds the value:
  // it may be a secret).
  bool AddSet(std::string_view spec, std::string* error);
  // A field name (a token) not sent to the candidate.
  bool AddDrop(std::string_view name, std::string* error);

  // Lower-case names of the client's fields left out (dropped or replaced).
  const std::vector<std::string>& skipped() const { return skipped_; }
  // The replacement fields as "Name: value\r\n" lines.
  const std::string& extra_fields() const { return extra_; }

 private:
  std::vector<std::string> skipped_;
  std::string extra_;
};

}  // namespace llmtap::proxy
