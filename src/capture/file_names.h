// The names of a capture's files: the sidecars beside a capture file, and the time-stamped names
// rotated and older captures get. Pure functions of their arguments, safe from any thread; the
// trace tools and the uploader use them to find a capture's sidecars.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace llmtap {

// "<path>.manifest.json"
// The directory of a file's path: "." for a bare name, "/" for one at the root.
std::string DirName(const std::string& path);

std::string ManifestPathFor(const std::string& capture_path);

// "<path>.outcomes.ndjson": the response outcomes sidecar (outcomes: true). Not ".jsonl": AIPerf's
// raw_payload loader takes a directory and reads every *.jsonl file in it as requests.
std::string OutcomesPathFor(const std::string& capture_path);

// "<path>.outcomes.jsonl": the name earlier llmtap builds gave the sidecar. Still found by the
// tools, moved aside with its capture and uploaded.
std::string LegacyOutcomesPathFor(const std::string& capture_path);

// An outcomes sidecar's name, either one, compressed (".zst") or not.
bool IsOutcomesName(std::string_view name);

// "<path>.shadow.ndjson": the shadow pairs sidecar (`llmtap proxy --shadow` with capture on): one
// line per mirrored request, joined to its capture row by line and timestamp. Not ".jsonl", for
// the reason the outcomes sidecar is not.
std::string ShadowPairsPathFor(const std::string& capture_path);

// The name a finished file gets when capture rotates: "dir/requests.jsonl" becomes
// "dir/requests.<UTC of its first record, yyyymmddThhmmss.mmmZ>.jsonl" ("-<attempt>" is added
// after the time when the caller finds that name taken), so names sort by time.
std::string RotatedName(const std::string& capture_path, int64_t first_record_wall_nanos,
                        int attempt);

// The name an older capture is moved to: "dir/requests.jsonl" becomes
// "dir/requests.<UTC yyyymmddThhmmss.mmmZ>.jsonl" ("-<attempt>" is added after the time when the
// caller finds that name taken). To the millisecond: fleet capture uploads the file under this
// name, and two restarts within one second (a crash loop) must not name two files alike in the
// store, where the second upload would replace the first.
std::string AsideName(const std::string& capture_path, int64_t wall_nanos, int attempt);

}  // namespace llmtap
