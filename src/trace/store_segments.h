// The capture segments an object store holds, as `llmtap merge` reads them. The capture's
// uploader (src/capture/uploader.h) puts each finished capture file under
// <prefix>/<replica>/ as a data object `<stem>.<time>.jsonl` or `.jsonl.zst`, maybe an
// outcomes object `<stem>.<time>.jsonl.outcomes.ndjson[.zst]`, and last a manifest
// `<stem>.<time>.jsonl.manifest.json` that lists the objects with their sizes and SHA-256 and
// the data's line count ("records"). A segment is complete exactly when its manifest exists;
// data without one is still uploading, or its upload was cut short.
//
// Pure parsing plus ListStoreSegments, which lists a prefix and reads the manifests (on a few
// threads of its own, each with its own S3 client). Any thread may call; objects are not
// shared.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "store/s3_client.h"

namespace llmtap::trace {

// What merge uses of a segment's manifest: the local capture manifest (capture/manifest.h)
// plus, in the store, the uploader's "replica", "records" and "objects".
struct SegmentManifest {
  struct Object {
    std::string role;  // "data" or "outcomes"
    std::string key;   // the object's key when it was uploaded
    std::optional<uint64_t> bytes;
    std::string sha256;  // lower-case hex; empty when none
  };
  std::string path;    // where it was read from (file or s3:// URL)
  std::string format;  // "mooncake_payload" or "raw_payload"
  std::optional<int64_t> timestamp_zero_unix_ms;
  // file.last_timestamp_ms of a finished file (state "rotated" or "stopped"): the timestamp
  // of its last record, so its time span.
  std::optional<int64_t> last_timestamp_ms;
  std::optional<uint64_t> file_sequence;
  // Lines the data holds: the uploader's "records", else file.records of a finished file
  // (state "rotated" or "stopped"); unset when neither can be trusted.
  std::optional<uint64_t> records;
  std::string state;
  // Without an epoch: when the manifest was written ("updated_utc"), if its file then held no
  // row. The file's first row came after it: the lower bound `merge --recover-epochs` uses.
  std::optional<int64_t> empty_at_unix_ms;
  std::string replica;  // the uploader's "replica", else a local manifest's "upload.replica"
  // The capture process the file came from ("host|pid|started_utc"); empty when the manifest
  // does not say. Its counters are that process's whole run so far (every file up to this).
  std::string run;
  std::map<std::string, uint64_t> counters;
  std::vector<Object> objects;

  // The "data" object entry whose key ends in `name` (a base name), if any.
  const Object* DataObjectNamed(std::string_view name) const;
};

// Parses a manifest's text; `path` is only for messages.
Status ParseSegmentManifest(std::string_view text, const std::string& path, SegmentManifest* out);

// One segment to read: its data, and its manifest when there is one.
struct StoreSegment {
  std::string data;     // s3:// URL (or a local path, for inputs named one by one)
  std::string replica;  // the folder it was found in (empty for inputs named one by one)
  std::optional<uint64_t> listed_bytes;  // the data object's size in the listing
  std::optional<SegmentManifest> manifest;
};

// A segment left out, and why.
struct SegmentIssue {
  std::string data;
  std::string reason;
};

struct StoreListing {
  std::string url;                        // the prefix listed (ends in '/', or the bucket)
  std::vector<StoreSegment> segments;     // complete ones, in key order
  std::vector<SegmentIssue> skipped;      // incomplete or damaged ones, in key order
  uint64_t objects = 0;                   // objects under the prefix
  std::vector<std::string> replicas;      // folders with segments (after the filter), sorted
  std::vector<std::string> filtered_out;  // folders the --replica globs left out, sorted
};

struct ListOptions {
  // fnmatch(3) patterns on the replica folder name; a segment is kept when any matches (all
  // are kept when empty).
  std::vector<std::string> replica_globs;
  // Manifests are fetched on this many threads (each its own S3 client and connection).
  int threads = 8;
  int attempts = 4;  // per manifest GET (404 and 403 are not retried)
};

// Lists `url` (s3://bucket/prefix/, or s3://bucket/ for the whole bucket) with `client` and
// reads every manifest under it. A segment's replica is the name of the folder its objects are
// in (for objects directly under the prefix, the prefix's last folder). Data objects without a
// manifest, manifests whose data object is missing or differs in size from what the manifest
// says, and damaged manifests go to `skipped`. An error (exit 2 material) when the listing
// fails (the message says what to fix: credentials, bucket, endpoint) or when no complete
// segment remains ("no complete segment under s3://...").
Status ListStoreSegments(store::S3Client* client, const std::string& url,
                         const ListOptions& options, StoreListing* out);

}  // namespace llmtap::trace
