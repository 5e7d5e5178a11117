// The suffix proposer's implementation (suffix.h) in parts, by the way the data flows:
//   suffix_tree.h/.cc      the suffix tree: appends, removal of the oldest sequence, walks;
//   suffix_caches.h/.cc    trees kept between requests: finished requests' prompt trees
//                          (SavedTrees) and trees over shared prompt prefixes (PrefixTrees);
//   suffix_context.h/.cc   the prompt tree's walks read off the request's context, no tree;
//   suffix.cc              the proposer: requests, both sources' walks, the pick, the replay.
// This header: what they share. Internal: included by those files only.
// The hot paths (a tree's append and its helpers, the context's append) are defined in the
// headers, so that they inline into their callers as when all of this was one file; the functions
// defined in the .cc files were already called, not inlined, from the proposer.
#pragma once

#include <cstddef>
#include <cstdint>

#include "specdec/suffix.h"

namespace llmtap::specdec::suffix_internal {

constexpr uint32_t kNone = UINT32_MAX;
constexpr uint32_t kRoot = 0;

// The reference's cap on a walk from a match of length m: float product and sum, 1e-6 added in
// double, truncated (may be negative). (Compiled with -ffp-contract=off, as every file here.)
inline int ReferenceCap(size_t m, const SuffixOptions& o) {
  const float spec = static_cast<float>(static_cast<int>(m)) * o.max_spec_factor;
  const float with_offset = spec + o.max_spec_offset;
  const double limit = static_cast<double>(with_offset) + 1e-6;
  return limit >= 2147483647.0 ? INT32_MAX : static_cast<int>(limit);
}

}  // namespace llmtap::specdec::suffix_internal
