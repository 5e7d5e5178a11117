// The parallel half of AnonymizeTrace (anonymize.h), private to llmtap_anonymize:
//   anonymize.cc          the calling thread: reads batches of lines and, in input order
//                         (common/ordered_batches.h), checks formats, numbers blocks densely
//                         and writes the rows (Emitter)
//   anonymize_workers.cc  the worker threads: parse, tokenize and hash each line of a batch
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "anonymize/anonymize.h"
#include "common/ordered_batches.h"
#include "trace/record.h"
#include "trace/tool_common.h"

namespace llmtap::anonymize::anonymize_internal {

// What a worker found for one line. Everything the in-order stage needs, and no prompt
// bytes: only counts and keyed ids leave the worker.
struct RowResult {
  uint64_t line = 0;
  trace::TraceFormat row_format = trace::TraceFormat::kUnknown;  // kUnknown: the line did not parse
  std::string skip_kind;                                         // empty: the row is good
  std::string skip_reason;
  std::optional<double> timestamp;
  std::optional<uint64_t> requested_output;  // max_(completion_)tokens, or output_length
  std::string session;                       // keyed hash of the row's session_id, if any
  bool session_dropped = false;              // a session_id that is not a string
  bool completions = false;                  // with a session: a completions request
  bool big_integers = false;                 // an integer beyond 64 bits read as a double
  uint64_t input_length = 0;
  size_t ids_begin = 0, ids_end = 0;  // into Batch::ids
  // A row with a session: PrefixHash of its first i tokens at Batch::prefix[prefix_begin + i - 1]
  // for i = 1 .. input_length (the in-order stage tells whether it continues the session's
  // previous turn).
  size_t prefix_begin = 0;
};

struct Batch {
  trace::LineBatch input;
  std::vector<RowResult> rows;  // one per input line, filled by a worker
  std::vector<KeyedId> ids;
  std::vector<uint64_t> prefix;
};

// A 64-bit hash of a token sequence, extended one token at a time from kPrefixSeed (a
// polynomial in an odd constant, mod 2^64: one multiply-add per token): equal sequences give
// equal hashes; different ones of one length collide only by chance, or when made to (then a
// turn is taken for a continuation of its session's previous one). Never leaves the process.
inline constexpr uint64_t kPrefixSeed = 0x6c6c6d7461702d70ull;  // "llmtap-p"
inline constexpr uint64_t kPrefixMul = 0x9e3779b97f4a7c15ull;
inline uint64_t PrefixStep(uint64_t h, uint32_t token) { return (h + token + 1) * kPrefixMul; }

// out[i] = the hash of tokens[0..i] (PrefixStep from kPrefixSeed), two tokens a step so that
// the two multiplies of a step do not wait for each other (half the latency of the plain loop).
inline void PrefixHashes(std::span<const uint32_t> tokens, uint64_t* out) {
  constexpr uint64_t kMul2 = kPrefixMul * kPrefixMul;
  uint64_t h = kPrefixSeed;
  size_t i = 0;
  for (; i + 2 <= tokens.size(); i += 2) {
    const uint64_t a = h + tokens[i] + 1;
    out[i] = a * kPrefixMul;
    h = out[i + 1] = a * kMul2 + (uint64_t{tokens[i + 1]} + 1) * kPrefixMul;
  }
  if (i < tokens.size()) out[i] = PrefixStep(h, tokens[i]);
}

// A worker thread's work: tokenizes and hashes each line of a batch with `options` (tokenizer,
// key and session key set; it must outlive the work); `fixed_format`: the input's format when
// known up front, else each row's own.
OrderedBatches<Batch>::Work MakeWorker(const AnonymizeOptions& options,
                                       std::optional<trace::TraceFormat> fixed_format);

}  // namespace llmtap::anonymize::anonymize_internal
