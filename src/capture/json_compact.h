// Validates a request body and makes it one JSONL line by removing insignificant
// whitespace only. Values, key order and string escapes stay byte-identical.
//
// A JsonCompactor holds reusable parser state: one instance per thread (it is not
// thread-safe). ThreadLocalJsonCompactor() gives the calling thread its own.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>

namespace llmtap {

enum class CompactError {
  kOk,
  kEmpty,        // nothing but whitespace
  kInvalidJson,  // not RFC 8259 JSON (syntax, bad UTF-8, unescaped control character, ...)
  kNotAnObject,  // valid JSON whose top-level value is not an object
  kTooDeep,      // nesting deeper than the compactor's limit
  // An object but for what Python's json module also reads (so Python servers serve it) and
  // strict parsers, AIPerf's among them, refuse: NaN, Infinity, -Infinity, a lone UTF-16
  // surrogate escape. Never recorded: no JSON replayer loads it.
  kNonStandardJson,
};

std::string_view CompactErrorName(CompactError error);

class JsonCompactor {
 public:
  JsonCompactor();
  ~JsonCompactor();
  JsonCompactor(const JsonCompactor&) = delete;
  JsonCompactor& operator=(const JsonCompactor&) = delete;

  // Validates `body` (a complete JSON text whose top level must be an object) and appends
  // its compact form to `*out`. On error `*out` is left as it was. Never throws.
  // Allocates only when `*out` or the internal buffers must grow.
  CompactError Compact(std::string_view body, std::string* out);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

JsonCompactor& ThreadLocalJsonCompactor();

// Reference implementation: a plain byte-at-a-time validating compactor with the same
// contract. Slow; used as the fallback for numbers the fast path cannot represent and as
// the oracle in tests and fuzzing.
CompactError CompactJsonReference(std::string_view body, std::string* out);

}  // namespace llmtap
