// LeadingBom: drops a UTF-8 byte order mark (EF BB BF) at the start of a stream fed in pieces
// split anywhere. Used by the SSE framer (net/sse.h) and the proxy's UsageScanner in JSON mode.
//
// Threads: one per stream, used by one thread at a time.
#pragma once

#include <cstdint>

namespace llmtap::net {

class LeadingBom {
 public:
  // The first byte of [p, end) past the BOM (or past its part seen so far). *broken is set when
  // the stream began with part of a BOM and then something else: those bytes were dropped, and
  // the caller must treat what follows as damaged.
  const char* Skip(const char* p, const char* end, bool* broken) {
    constexpr char kBom[] = "\xEF\xBB\xBF";
    *broken = false;
    while (p < end && matched_ < 3) {
      if (*p == kBom[matched_]) {
        ++matched_;
        ++p;
        continue;
      }
      *broken = matched_ > 0;
      matched_ = 3;
    }
    return p;
  }
  // The start of the stream is past: Skip does nothing any more.
  bool done() const { return matched_ >= 3; }

 private:
  uint8_t matched_ = 0;  // BOM bytes matched; 3 once past the start either way
};

}  // namespace llmtap::net
