// `llmtap split`: routes each row of a mixed capture into one file per endpoint type (chat,
// completions, other), keeping the input format and every byte of each row (only the
// timestamp value changes, and only with `rebase`), with one exception: completions rows of
// a raw_payload input are written as mooncake_payload rows {"payload":<request bytes>}
// without a timestamp, because AIPerf's raw_payload loader refuses requests without
// `messages`. Streaming; one call per thread.
//
// Sessions: the rows of one `session_id` go to one file, in file order, because AIPerf replays
// a session's turns one after another within a run of one endpoint type. A session is routed
// by its first chat or completions row; a later row of the other of those two types is not
// routed (skipped, named by line with the line of the session's first row; exit 1): it could
// only be replayed in another run, out of its conversation, and AIPerf refuses a session that
// mixes them. Rows of other shapes (embeddings, ...) go to the other file whatever their
// session. Memory: one entry per distinct session id (its bytes plus ~64 bytes).
//
// The outcomes sidecar (`<input>.outcomes.ndjson`, or `outcomes_path`) goes along: each output
// gets `<output>.outcomes.ndjson` holding the outcomes of its rows, `line` renumbered to the
// row's line in that output and `timestamp` set to the row's timestamp there (rebased with
// `rebase`); every other byte of an outcome line is kept. The join is trace/outcomes.h's: an
// outcome whose timestamp differs from its row's is dropped and counted, and a sidecar that
// belongs to another file fails the run (exit 2, no outputs left). Memory: the sidecar, held
// sorted by line with each line's text (about 300 bytes per outcome; the capture itself
// streams).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"
#include "trace/record.h"
#include "trace/tool_common.h"

namespace llmtap::trace {

struct SplitOptions {
  std::string path;
  std::string out_dir;                // default: the input's directory
  bool rebase = false;                // each output's first timestamp becomes 0
  bool force = false;                 // overwrite existing outputs
  std::optional<TraceFormat> format;  // default: manifest, else the first valid row
  std::string outcomes_path;          // default: <path>.outcomes.ndjson when it exists
  bool no_outcomes = false;           // write no outcomes sidecars
  size_t max_failures = 20;
  bool progress = false;
};

struct SplitOutput {
  Endpoint endpoint = Endpoint::kOther;
  // The input's format, except completions from a raw_payload input: mooncake_payload rows
  // {"payload":<request>} without a timestamp (AIPerf's raw_payload loader takes chat only).
  TraceFormat format = TraceFormat::kUnknown;
  std::string path;
  uint64_t rows = 0;
  std::string model;  // the first row's "model", if any
  bool several_models = false;
  std::string aiperf_command;  // empty for "other"
  uint64_t sessions = 0;       // distinct session ids among its rows
  std::string outcomes_path;   // its sidecar, empty when the input has none
  uint64_t outcomes = 0;       // lines in it
};

struct SplitReport {
  std::string path;
  Status io;  // usage, open, read or write error
  TraceFormat format = TraceFormat::kUnknown;
  std::string format_source;
  std::vector<SplitOutput> outputs;  // files written, in the order of api::Endpoint, other last
  uint64_t lines = 0;
  uint64_t routed = 0;
  uint64_t blank = 0;
  bool torn_tail = false;
  FailureList skipped;              // lines not routed (invalid JSON, ...)
  uint64_t mixed_sessions = 0;      // sessions with chat and completions rows
  uint64_t mixed_session_rows = 0;  // their rows not routed
  // Rows routed to chat that a Messages server would take too (in a file whose API llmtap's
  // capture did not record).
  ChatOrMessagesRows chat_or_messages;
  std::string outcomes_path;         // the input's sidecar, empty when none
  uint64_t outcomes_in = 0;          // outcomes in it (one per capture line)
  uint64_t outcomes_written = 0;     // carried into the outputs' sidecars
  uint64_t outcomes_mismatched = 0;  // dropped: timestamp differs from the row's
  uint64_t outcomes_unrouted = 0;    // dropped: for a row not routed, or no row at all
  std::vector<std::string> warnings;

  // 0 every row routed, 1 some rows skipped, 2 usage/IO error.
  int exit_code() const { return !io.ok() ? 2 : (skipped.total == 0 ? 0 : 1); }
};

SplitReport SplitTrace(const SplitOptions& options);
std::string RenderSplitText(const SplitReport& report);

// The AIPerf command line that replays `file` (`endpoint` kChat or kCompletions). Timestamped
// rows (`first_timestamp_ms`, the file's first) replay on their schedule, said explicitly
// (--fixed-schedule); a schedule that does not start at 0 starts at its first row
// (--fixed-schedule-auto-offset) instead of waiting that long before the first request.
std::string AiperfCommand(const std::string& model, Endpoint endpoint, TraceFormat format,
                          const std::string& file, std::optional<double> first_timestamp_ms);

}  // namespace llmtap::trace
