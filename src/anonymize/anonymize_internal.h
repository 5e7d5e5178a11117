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
  uint64_t input_length = 0;
  size_t ids_begin = 0, ids_end = 0;  // into Batch::ids
};

struct Batch {
  trace::LineBatch input;
  std::vector<RowResult> rows;  // one per input line, filled by a worker
  std::vector<KeyedId> ids;
};

// A worker thread's work: tokenizes and hashes each line of a batch with `options` (tokenizer,
// key and session key set; it must outlive the work); `fixed_format`: the input's format when
// known up front, else each row's own.
OrderedBatches<Batch>::Work MakeWorker(const AnonymizeOptions& options,
                                       std::optional<trace::TraceFormat> fixed_format);

}  // namespace llmtap::anonymize::anonymize_internal
