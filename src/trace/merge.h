// `llmtap merge`: interleaves the captures of several replicas on absolute time. Each input's
// timestamps are shifted by its manifest epoch (timestamp_zero_unix_ms); output timestamps
// are relative to the earliest row written; ties keep input order, then line order.
//
// Inputs are local files, s3:// objects and s3:// prefixes. A prefix stands for every
// complete segment under it (store_segments.h: data objects with their manifest, one folder
// per replica), filtered by --replica globs; incomplete or damaged segments are reported and
// skipped. --from/--to keep the rows in [from, to) of wall-clock time; a segment whose span
// (its manifest's epoch and file.last_timestamp_ms) lies outside is never opened.
//
// A k-way merge with one streaming cursor (a LineReader) per segment. A segment whose manifest
// gives its epoch and format is opened only when the merge reaches its first instant and
// closed at its end, so the segments open at once are those overlapping in time (about one per
// replica), not all of them. Each open segment holds two buffers of the read size, the read
// budget divided among that many, with a floor: its lines, and for s3:// the stored bytes
// downloaded ahead of the merge (store::SourceOptions::s3_buffer_bytes), so downloading
// overlaps with merging. A compressed segment also holds zstd's window (up to 16 MiB as the
// uploader compresses, less for a smaller file) and a 128 KiB input buffer. Memory thus grows
// with the number of segments (a few KiB of bookkeeping each) and with how many overlap in
// time, never with their size.
//
// S3 requests borrow clients from one pool: an open segment holds a connection while it
// downloads and gives it back at its end (or when the merge leaves it waiting, see
// s3_park_ms), so connections follow the segments downloading at once, not their number.
// Each segment's stored bytes are hashed (SHA-256) on its download thread.
//
// One call per thread (it starts threads of its own: manifests, downloads).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "trace/record.h"
#include "trace/store_segments.h"
#include "trace/tool_common.h"

namespace llmtap::trace {

struct MergeOptions {
  // Local files ("-" for standard input), s3:// objects, s3:// prefixes (ending in '/', or
  // naming no object but a folder).
  std::vector<std::string> inputs;
  std::string out;  // a local file, .zst, or s3://
  // Inputs without a manifest epoch are taken to share timestamp 0.
  bool assume_aligned = false;
  // Segments whose manifest has no epoch but says when their file was open and still empty
  // (files an unclean stop left, uploaded by llmtap before 2026-12-06) are placed from then,
  // with a warning, instead of skipped.
  bool recover_epochs = false;
  bool force = false;
  size_t max_failures = 20;
  bool progress = false;
  // Keep rows at wall-clock time [from, to) (Unix ms).
  std::optional<int64_t> from_unix_ms;
  std::optional<int64_t> to_unix_ms;
  // Inputs from several replicas: session ids are written as "<replica>:<id>" (merge.cc,
  // QualifySessionIds) unless this is set.
  bool keep_session_ids = false;
  // fnmatch(3) patterns on the replica folder names under prefixes (any may match).
  std::vector<std::string> replica_globs;
  // Read buffers of the segments open at once share this (two each: lines, and the S3
  // read-ahead); each gets at least min_chunk_bytes and at most max_chunk_bytes.
  size_t read_budget_bytes = size_t{256} << 20;
  size_t min_chunk_bytes = size_t{256} << 10;
  size_t max_chunk_bytes = size_t{8} << 20;
};

struct MergeInputSummary {
  std::string path;
  std::string replica;              // folder under a prefix; empty for inputs named one by one
  std::optional<int64_t> epoch_ms;  // from the manifest
  uint64_t rows = 0;
};

struct MergeReport {
  std::string out;
  std::string out_manifest;
  Status io;
  TraceFormat format = TraceFormat::kUnknown;
  std::vector<MergeInputSummary> inputs;  // the segments read, in input order
  uint64_t written = 0;
  std::optional<int64_t> epoch_ms;  // wall clock of output timestamp 0 (when known)
  FailureList skipped;              // reasons carry "file:line: "
  // Segments left out (no manifest, wrong size, gone), or read but failing a check against
  // their manifest (SHA-256, line count): exit 1 either way.
  std::vector<SegmentIssue> segment_issues;
  std::vector<std::string> warnings;
  uint64_t rows_outside_window = 0;                // read, and left out by --from/--to
  size_t segments_outside_window = 0;              // never opened
  size_t epochs_recovered = 0;                     // --recover-epochs placed them
  std::vector<std::string> replicas_filtered_out;  // folders --replica left out
  size_t chunk_bytes = 0;                          // read size of each open segment
  size_t planned_open = 0;   // segments overlapping in time at most (what the budget was split by)
  size_t max_open = 0;       // segments open at once, measured
  size_t store_clients = 0;  // S3 clients made (listing, HEADs, downloads): one connection each
  bool session_ids_qualified = false;  // inputs from several replicas: ids became "<replica>:<id>"
  uint64_t session_rows_qualified = 0;
  int exit_code() const {
    if (!io.ok()) return 2;
    return skipped.total == 0 && segment_issues.empty() ? 0 : 1;
  }
};

MergeReport MergeTraces(const MergeOptions& options);
std::string RenderMergeText(const MergeReport& report);

// A --from/--to value: ISO-8601 UTC ("2026-12-04T10:00:00Z", "...:00.250Z"; a space may stand
// for the 'T', "+00:00" for the 'Z') or Unix milliseconds ("1796378400000").
Status ParseTimeArg(std::string_view text, int64_t* unix_ms);

}  // namespace llmtap::trace
