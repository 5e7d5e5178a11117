// Recovery of a capture file an earlier run left at the capture path when it stopped uncleanly
// (crash, SIGKILL, power loss): once OpenNewCapture has cut its torn tail and moved it (and its
// sidecars) aside, its manifest is rewritten to describe that file, so that `merge` and the
// uploader treat it like any finished file. Called only from the thread that opens the capture
// (CaptureWriter::Start).
#pragma once

#include <cstdint>
#include <string>

#include "common/env.h"
#include "common/log.h"
#include "common/status.h"

namespace llmtap {

// Rewrites ManifestPathFor(data_path) (the killed run's running manifest, moved aside with the
// file, or none) as the manifest of the file at `data_path`:
//   - "state": "recovered", and "recovered": when, where the epoch came from, the torn bytes cut;
//   - "file": records and bytes counted from the file, the last row's timestamp;
//   - the epoch (timestamp_zero_unix_ms): the killed run's, which a run writes to its manifest
//     before a file's first row reaches the file; failing that (a file from a version that did
//     not), the file's modification time less its last row's timestamp, marked as an estimate;
//   - the killed run's counters stay, as of its last manifest ("counters_as_of_utc"): records
//     it had queued but not written are lost and counted nowhere.
// A raw_payload file has no timestamps: its epoch stays null. A file whose manifest says
// "stopped" (a clean stop of a local capture) is left as it is.
Status WriteRecoveredManifest(Env* env, const std::string& data_path, uint64_t torn_bytes_cut);

}  // namespace llmtap
