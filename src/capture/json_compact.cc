// JSON validation + compaction for capture records.
//
// Three implementations with one contract (see json_compact.h):
//
//  1. An AVX-512 kernel (x86-64 with AVX-512 BW/VL/VBMI/VBMI2, chosen at run time). One pass,
//     64 bytes per step: string/escape masks as in simdjson's stage 1, Keiser-Lemire UTF-8
//     validation, whitespace removal with VPCOMPRESSB, and a small state machine that runs only
//     on the structural events (brackets, commas, colons, string starts, scalar starts). It
//     writes straight into the caller's string and needs no scratch memory.
//  2. simdjson's DOM parser + simdjson::minify, for CPUs without those AVX-512 extensions.
//     simdjson validates everything the contract needs (checked in json_compact_test.cc), but
//     needs a padded copy and ~14 bytes of parser state per input byte, and it rejects valid
//     numbers it cannot represent (1e400, 2^64).
//  3. A byte-at-a-time reference. The fast paths only decide "valid object, here is the
//     output" or "not that"; every rejection is re-run through the reference, which is the
//     single source of truth for which CompactError applies (the first error, scanning left to
//     right) and the fallback for valid bodies simdjson cannot handle. Rejections are rare on
//     the request path; even a hostile one costs at most one reference pass (~1.4 GB/s, and it
//     stops at the first error).
//
// Measured on the 2-core AMD EPYC (Zen 5) dev box, 4 KB chat body: AVX-512 kernel ~0.65 us
// (~6 GB/s), simdjson path ~1.25 us, reference ~2.7 us (bench/json_compact_bench.cc).
//
// Files: this one holds the public entry (JsonCompactor::Compact) and the dispatch between the
// paths; json_compact_avx512.cc, json_compact_simdjson.cc and json_compact_reference.cc hold
// one path each; json_compact_internal.h the helpers they share.
#include "capture/json_compact.h"

#include "capture/json_compact_internal.h"
#include "capture/json_compact_simdjson.h"

#include <memory>
#include <string>
#include <string_view>

namespace llmtap {

struct JsonCompactor::Impl {
  json_compact_internal::SimdjsonCompactor simdjson;
};

std::string_view CompactErrorName(CompactError error) {
  switch (error) {
    case CompactError::kOk:
      return "ok";
    case CompactError::kEmpty:
      return "empty";
    case CompactError::kInvalidJson:
      return "invalid_json";
    case CompactError::kNotAnObject:
      return "not_an_object";
    case CompactError::kTooDeep:
      return "too_deep";
    case CompactError::kNonStandardJson:
      return "non_standard_json";
  }
  return "unknown";
}

JsonCompactor::JsonCompactor() : impl_(std::make_unique<Impl>()) {}
JsonCompactor::~JsonCompactor() = default;

CompactError JsonCompactor::Compact(std::string_view body, std::string* out) {
  if (json_compact_internal::HasAvx512Kernel()) {
    if (json_compact_internal::TryCompactAvx512(body, out)) return CompactError::kOk;
    return CompactJsonReference(body, out);
  }
  if (impl_->simdjson.TryCompactSimdjson(body, out)) return CompactError::kOk;
  return CompactJsonReference(body, out);
}

JsonCompactor& ThreadLocalJsonCompactor() {
  thread_local JsonCompactor compactor;
  return compactor;
}

}  // namespace llmtap
