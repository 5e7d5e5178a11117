// The parallel half of AnonymizeTrace (anonymize.h), private to llmtap_anonymize:
//   anonymize.cc          the calling thread: reads batches of lines, hands them to the pool
//                         and, in input order, checks formats, numbers blocks densely and
//                         writes the rows (Emitter)
//   anonymize_workers.cc  the worker threads: parse, tokenize and hash each line of a batch
//
// Threads: a Batch belongs to the calling thread except between WorkerPool::Submit and
// WorkerPool::WaitDone, when one worker owns it.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "anonymize/anonymize.h"
#include "trace/record.h"

namespace llmtap::anonymize::anonymize_internal {

struct LineRef {
  size_t offset = 0;
  size_t size = 0;
  uint64_t number = 0;
  bool torn = false;
};

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
  std::string bytes;  // the lines, each followed by '\n'; simdjson padding after the last
  std::vector<LineRef> lines;
  std::vector<RowResult> rows;
  std::vector<KeyedId> ids;
  bool done = false;

  void Clear() {
    bytes.clear();
    lines.clear();
    rows.clear();
    ids.clear();
    done = false;
  }
};

// Batches in, the same batches marked done out; workers take them in any order. Each of
// `threads` workers tokenizes and hashes with `options` (tokenizer, key and session key set);
// `fixed_format`: the input's format when known up front, else each row's own.
class WorkerPool {
 public:
  WorkerPool(unsigned threads, const AnonymizeOptions& options,
             std::optional<trace::TraceFormat> fixed_format);
  ~WorkerPool();
  void Submit(Batch* batch);
  void WaitDone(Batch* batch);

 private:
  std::mutex mu_;
  std::condition_variable work_cv_, done_cv_;
  std::deque<Batch*> queue_;
  bool closing_ = false;
  std::vector<std::thread> threads_;
};

}  // namespace llmtap::anonymize::anonymize_internal
