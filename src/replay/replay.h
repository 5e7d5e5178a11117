// `llmtap replay` end to end: stream the trace through a Lookahead (read, plan and parse a bounded
// distance ahead), run it, and hand each request to RunOutputs as it ends (requests.jsonl, the
// statistics), then summarize and write --out. Memory does not grow with the trace. The CLI's
// callback calls Replay(); tests call the parts (input.h, schedule.h, lookahead.h, response.h,
// metrics.h, summary.h, runner.h) directly.
//
// Threads: call from one thread; it blocks until the run ends (see runner.h and lookahead.h for
// the threads it starts).
#pragma once

#include "replay/options.h"

namespace llmtap::replay {

// --certify: the replay-fidelity certificate did not certify the replay (or there was none).
inline constexpr int kNotCertified = 3;

// Prints the plan, progress and the console summary. Exit code: 0 every request succeeded and
// every row was read; 1 some requests failed or rows were skipped; 2 a usage, input or output
// error (or nothing to send); with --certify, kNotCertified before 1 when the replay was not
// certified.
int Replay(const ReplayOptions& options);

}  // namespace llmtap::replay
