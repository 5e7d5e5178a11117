// Capture destination handling: where a capture file goes and how an older one is kept.
// Called only from the thread that owns the capture file (Capture::Start, then the writer).
#pragma once

#include <memory>
#include <string>

#include "capture/env.h"
#include "capture/log.h"
#include "common/status.h"

namespace llmtap {

// "<path>.manifest.json"
std::string ManifestPathFor(const std::string& capture_path);

// "<path>.outcomes.jsonl": the response outcomes sidecar (outcomes: true).
std::string OutcomesPathFor(const std::string& capture_path);

// The name a finished file gets when capture rotates: "dir/requests.jsonl" becomes
// "dir/requests.<UTC of its first record, yyyymmddThhmmss.mmmZ>.jsonl" ("-<attempt>" is added
// after the time when the caller finds that name taken), so names sort by time.
std::string RotatedName(const std::string& capture_path, int64_t first_record_wall_nanos,
                        int attempt);

// The name an older capture is moved to: "dir/requests.jsonl" becomes
// "dir/requests.<UTC yyyymmddThhmmssZ>.jsonl" (".<n>" is added before the extension by
// the caller when that name is taken).
std::string AsideName(const std::string& capture_path, int64_t wall_nanos, int attempt);

// Cuts a torn last line (bytes after the last '\n') from the file at `path`. Sets
// `*cut_bytes` to the number of bytes removed (0 when the file ends with '\n' or is empty).
Status RepairTornTail(Env* env, const std::string& path, uint64_t* cut_bytes);

// Prepares `path` for a new capture and opens it for appending:
//   - missing parent directories are created with mode 0700;
//   - a symlink or non-regular file at `path` is refused;
//   - an existing non-empty file is never appended to: its torn last line (if any) is cut,
//     then it and its sidecars (manifest, outcomes) are renamed aside (see AsideName), with a log line;
//   - the file is opened O_APPEND|O_CLOEXEC|O_NOFOLLOW with mode 0600.
Status OpenNewCapture(Env* env, Logger* logger, const std::string& path,
                      std::unique_ptr<AppendFile>* file);

// Reopens this process's own capture after a failure: no rename-aside; a torn tail past
// `expected_size` (our last complete line) is cut. `*size` receives the resulting size.
Status ReopenOwnCapture(Env* env, const std::string& path, uint64_t expected_size,
                        std::unique_ptr<AppendFile>* file, uint64_t* size);

}  // namespace llmtap
