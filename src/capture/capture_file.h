// Capture destination handling: opening the capture file, and keeping an older one aside.
// Called only from the thread that owns the capture file (Capture::Start, then the writer).
// The names of a capture's files are pure functions in file_names.h, for anyone.
#pragma once

#include <memory>
#include <string>

#include "common/env.h"
#include "common/log.h"
#include "common/status.h"
#include "capture/file_names.h"

namespace llmtap {

// Cuts a torn last line (bytes after the last '\n') from the file at `path`. Sets
// `*cut_bytes` to the number of bytes removed (0 when the file ends with '\n' or is empty).
Status RepairTornTail(Env* env, const std::string& path, uint64_t* cut_bytes);

// Prepares `path` for a new capture and opens it for appending:
//   - missing parent directories are created with mode 0700;
//   - a symlink or non-regular file at `path` is refused;
//   - an existing non-empty file is never appended to: its torn last line (if any) is cut,
//     then it and its sidecars (manifest, outcomes, shadow pairs) are renamed aside (see
//     AsideName), with a log line;
//   - the file is opened O_APPEND|O_CLOEXEC|O_NOFOLLOW with mode 0600.
Status OpenNewCapture(Env* env, Logger* logger, const std::string& path,
                      std::unique_ptr<AppendFile>* file);

// At the start of a run, when `path` holds no capture (missing or empty): an older run's
// outcomes or shadow pairs sidecars there (left when it recorded nothing, or when its capture
// was deleted) are renamed aside as OpenNewCapture would have with their capture (see
// AsideName), with a log line, so that this run's lines never follow theirs. The manifest stays
// (the run rewrites it).
void MoveStraySidecarsAside(Env* env, Logger* logger, const std::string& path);

// Reopens this process's own capture after a failure: no rename-aside; a torn tail past
// `expected_size` (our last complete line) is cut. `*size` receives the resulting size.
Status ReopenOwnCapture(Env* env, const std::string& path, uint64_t expected_size,
                        std::unique_ptr<AppendFile>* file, uint64_t* size);

}  // namespace llmtap
