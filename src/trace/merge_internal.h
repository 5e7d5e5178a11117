// Internals of `llmtap merge` (merge.h), shared by its files: merge_plan.cc (which segments,
// from local paths and s3:// prefixes, and their manifests) and merge.cc (opening, reading and
// interleaving them on absolute time). Internal to llmtap_trace; one thread runs a Merger.
#pragma once

#include <sys/stat.h>

#include <algorithm>
#include <cctype>
#include <ctime>
#include <limits>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <queue>
#include <set>

#include "capture/file_names.h"
#include "capture/manifest.h"
#include "common/json_escape.h"
#include "store/s3_url.h"
#include "store/sha256.h"
#include "store/stream.h"
#include "trace/line_reader.h"
#include "trace/merge.h"
#include "trace/trace_io.h"

namespace llmtap::trace::merge_internal {

constexpr double kInf = std::numeric_limits<double>::infinity();

inline std::string_view BaseName(std::string_view path) {
  size_t slash = path.rfind('/');
  return slash == std::string_view::npos ? path : path.substr(slash + 1);
}

// A compressed file's manifest is named after the uncompressed file it describes.
inline std::string WithoutZst(const std::string& path) {
  return path.ends_with(".zst") ? path.substr(0, path.size() - 4) : path;
}

inline std::string MiB(size_t n) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2g MiB", static_cast<double>(n) / (1 << 20));
  return buf;
}

// One segment to read and its place in the merge.
struct Cursor {
  enum class State { kPending, kOpen, kDone };
  size_t index = 0;
  std::string path;
  std::string replica;                   // folder under a prefix; empty for inputs named one by one
  bool listed = false;                   // found under a prefix (a bad one is skipped, not fatal)
  std::optional<uint64_t> stored_bytes;  // size known before opening (listing, HEAD, stat)
  std::optional<SegmentManifest> manifest;
  double epoch_ms = 0;
  State state = State::kPending;
  // Opened when the merge reaches key_ms (its epoch), not before: see merge.h.
  bool lazy = false;
  double key_ms = 0;
  // Made when the segment is opened (with the read size of the merge), closed at its end.
  std::optional<LineReader> reader;
  std::unique_ptr<store::Sha256> sha;  // of the stored bytes, when the manifest gives one
  // Rows in the capture writer's framing are taken without a parse (see Open).
  bool capture_rows = false;
  Line line;
  double abs_ms = 0;  // of the current row
  double ts_ms = 0;
  bool has_row = false;
  TraceFormat format = TraceFormat::kUnknown;  // the manifest's, else of the first valid row
  uint64_t rows = 0;
  std::optional<double> last_ts;
  bool cut = false;     // reading stopped at --to, before the end
  bool merged = false;  // opened and read (not skipped)
  // Written before each row's session_id when the inputs come from several replicas: the
  // replica's name and ':', escaped for a JSON string (empty: ids written as they are).
  std::string session_prefix;

  double when() const { return state == State::kPending ? key_ms : abs_ms; }
};

struct Later {
  // priority_queue keeps the largest on top: "a after b" puts the earliest first; ties go
  // to the lower input index (line order within an input is the cursor's own order). A
  // pending segment sorts at its epoch, a lower bound of its rows (timestamps are >= 0), so
  // it is opened before any of its rows is due.
  bool operator()(const Cursor* a, const Cursor* b) const {
    if (a->when() != b->when()) return a->when() > b->when();
    return a->index > b->index;
  }
};

class Merger {
 public:
  Merger(const MergeOptions& options, MergeReport* r) : o_(options), r_(*r) {
    r_.out = options.out;
    r_.skipped.limit = options.max_failures;
  }
  void Run();

 private:
  Status Client(const std::string& input);
  Status AddInput(const std::string& input);
  Status AddNamed(const std::string& path, std::optional<uint64_t> stored_bytes);
  Status Plan();
  void Advance(Cursor* c);
  Status Open(Cursor* c);
  Status Finish(Cursor* c);
  void WriteManifest(const std::optional<double>& last_ts);
  void QualifySessionIds();
  // Named after the uncompressed output, as every reader (and the uploader) names it.
  std::string ManifestPath() const { return ManifestPathFor(WithoutZst(o_.out)); }
  void Issue(const Cursor& c, std::string why) {
    r_.segment_issues.push_back({c.path, std::move(why)});
  }

  const MergeOptions& o_;
  MergeReport& r_;
  // Every S3 request of the merge borrows from this: the listing, HEADs, and each open
  // segment's read-ahead (a connection per segment being downloaded, reused by the next).
  std::unique_ptr<store::S3ClientPool> pool_;
  store::S3ClientPool::Lease client_;  // for listing and HEADs, while planning
  std::vector<std::unique_ptr<Cursor>> cursors_;
  std::set<std::string> seen_;
  std::vector<std::string> prefixes_;  // the s3:// prefixes listed
  RowParser parser_;  // one for all cursors: a row is parsed, placed, and its parse dropped
  size_t open_ = 0;
  uint64_t done_bytes_ = 0;
  uint64_t total_bytes_ = 0;
  bool all_epochs_ = true;
};

}  // namespace llmtap::trace::merge_internal
