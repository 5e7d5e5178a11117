// Escaping text for HTML and XML (the HTML report, S3 request bodies). A pure function; any
// thread may call it.
#pragma once

#include <string>
#include <string_view>

namespace llmtap {

// `text` with & < > " ' written as entities: safe in HTML and XML text and attribute values
// (the HTML report, S3 request bodies).
inline std::string MarkupEscape(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        out.push_back(c);
    }
  }
  return out;
}

}  // namespace llmtap
