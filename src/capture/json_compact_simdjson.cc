// The simdjson path of JsonCompactor: simdjson's DOM parser validates, simdjson::minify
// compacts. Used on CPUs without the AVX-512 kernel (see json_compact.cc).
#include "capture/json_compact_simdjson.h"

#include "capture/json_compact_internal.h"

#include <algorithm>
#include <cstring>
#include <new>
#include <utility>

namespace llmtap::json_compact_internal {

bool SimdjsonCompactor::TryCompactSimdjson(std::string_view body, std::string* out) {
  if (!parser_ready) {
    // simdjson's max_depth N admits nesting up to N - 1.
    if (parser.allocate(kInitialCapacity, kMaxDepth + 1) != simdjson::SUCCESS) return false;
    parser_ready = true;
  }
  // simdjson reads up to SIMDJSON_PADDING bytes past the end, which the caller's buffer
  // does not promise; parse a padded copy. Grow-only, so steady state does not allocate.
  const size_t needed = body.size() + simdjson::SIMDJSON_PADDING;
  if (scratch_size < needed) {
    const size_t size = std::max(needed, 2 * scratch_size);
    std::unique_ptr<char[]> grown(new (std::nothrow) char[size]);
    if (grown == nullptr) return false;
    scratch = std::move(grown);
    scratch_size = size;
  }
  std::memcpy(scratch.get(), body.data(), body.size());
  std::memset(scratch.get() + body.size(), 0, simdjson::SIMDJSON_PADDING);
  simdjson::dom::element root;
  if (parser.parse(scratch.get(), body.size(), /*realloc_if_needed=*/false).get(root) !=
          simdjson::SUCCESS ||
      !root.is_object()) {
    return false;
  }
  const size_t old = out->size();
  if (!GrowBy(out, body.size() + kOutputSlack)) return false;
  size_t written = 0;
  if (simdjson::minify(body.data(), body.size(), out->data() + old, written) != simdjson::SUCCESS) {
    out->resize(old);
    return false;
  }
  out->resize(old + written);
  return true;
}

// Testing hook: the simdjson path alone, without the reference fallback, so tests can hold it
// to the reference.
bool TryCompactSimdjsonForTest(std::string_view body, std::string* out) {
  thread_local SimdjsonCompactor compactor;
  return compactor.TryCompactSimdjson(body, out);
}

}  // namespace llmtap::json_compact_internal
