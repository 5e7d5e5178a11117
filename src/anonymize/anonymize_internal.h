// The parallel half of AnonymizeTrace (anonymize.h), private to llmtap_anonymize:
//   anonymize.cc          the calling thread: reads batches of lines and, in input order
//                         (common/ordered_batches.h), checks formats, numbers blocks densely
//                         and writes the rows (Emitter)
//   anonymize_workers.cc  the worker threads: parse, tokenize and hash each line of a batch
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
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

// A 64-bit hash of a token sequence, extended one token at a time from kPrefixSeed: equal
// sequences give equal hashes, and different ones equal hashes only by chance (2^-64). Not
// keyed: it never leaves the process.
inline constexpr uint64_t kPrefixSeed = 0x6c6c6d7461702d70ull;  // "llmtap-p"
inline uint64_t PrefixStep(uint64_t h, uint32_t token) {
  uint64_t z = h + 0x9e3779b97f4a7c15ull * (uint64_t{token} + 1);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// A row's text with each integer too large for 64 bits (above 2^64 - 1, below -2^63) written
// as a decimal (`.0` appended), so that it parses as a double, as AIPerf's JSON reader (orjson)
// reads it; strings are left as they are. False when the row holds no such integer.
bool WidenBigIntegers(std::string_view line, std::string* out);

// A worker thread's work: tokenizes and hashes each line of a batch with `options` (tokenizer,
// key and session key set; it must outlive the work); `fixed_format`: the input's format when
// known up front, else each row's own.
OrderedBatches<Batch>::Work MakeWorker(const AnonymizeOptions& options,
                                       std::optional<trace::TraceFormat> fixed_format);

}  // namespace llmtap::anonymize::anonymize_internal
