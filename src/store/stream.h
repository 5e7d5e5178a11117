// Byte streams behind every trace tool: a source reads a local file, standard input or an
// s3:// object; a sink writes a local file or an s3:// object. zstd is handled on both sides
// (a source is decompressed when it starts with zstd's magic number, a sink whose name ends
// in ".zst" is compressed), so every tool reads and writes .jsonl.zst like .jsonl.
//
// Memory is bounded by a few buffers (the S3 range or part size), never by the data size.
// One stream per thread; not thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "common/status.h"

namespace llmtap::store {

class ByteSource {
 public:
  virtual ~ByteSource() = default;
  // Reads up to `cap` bytes into `buf`; `*n` is 0 at the end of the data.
  virtual Status Read(char* buf, size_t cap, size_t* n) = 0;
  // Size of the file or object as stored (compressed size for zstd), 0 when unknown (a pipe).
  virtual uint64_t stored_size() const = 0;
  // Stored bytes consumed so far (for progress against stored_size()).
  virtual uint64_t stored_position() const = 0;
};

struct SourceOptions {
  // An s3:// object is read in ranged GETs of this many bytes (a failed range is retried).
  size_t s3_range_bytes = size_t{8} << 20;
  int s3_attempts = 4;
};

// Opens `path`: "-" is standard input, "s3://bucket/key" an object (credentials and endpoint
// from the AWS_* environment, see S3Config), anything else a local file. zstd data is
// decompressed whatever the name.
Status OpenSource(const std::string& path, std::unique_ptr<ByteSource>* source,
                  const SourceOptions& options = {});

// Reads a whole small file or object (a manifest) into `*out`; NotFound when it is absent.
Status ReadWhole(const std::string& path, std::string* out, size_t max_bytes = size_t{64} << 20);

class ByteSink {
 public:
  virtual ~ByteSink() = default;
  virtual Status Write(std::string_view data) = 0;
  // Finishes the file or object (an s3:// object exists only once Close succeeds). Returns
  // the first error of any Write or of closing.
  virtual Status Close() = 0;
};

struct SinkOptions {
  bool force = false;  // replace an existing file or object
  // An s3:// object goes up in parts of this many bytes (one PUT when it is smaller).
  size_t s3_part_bytes = size_t{16} << 20;
  int zstd_level = 3;
  // zstd long-distance matching over a window of 2^zstd_window_log bytes (0: the level's own
  // window, 2-8 MiB). Multi-turn traffic repeats each conversation's history many requests
  // later; a 16 MiB window (24) finds those repeats. Readers need that much memory per stream.
  int zstd_window_log = 0;
  // The uncompressed size when known in advance (0: unknown): a smaller input then gets a
  // smaller window, so readers need less memory.
  uint64_t pledged_size = 0;
  // Compress whatever the name (the ".zst" suffix decides when unset).
  bool compress = false;
  // A local file is fsync'ed before Close returns.
  bool sync = false;
};

// Creates `path` for writing: a local file is created 0600 (missing directories 0700), never
// through a symlink and never over an existing file unless `force`; an s3:// object likewise
// refuses to replace an existing object unless `force`. A name ending in ".zst" is written
// zstd-compressed. A sink destroyed without Close() leaves no object (the multipart upload is
// aborted) and a local file as far as it got.
Status OpenSink(const std::string& path, std::unique_ptr<ByteSink>* sink,
                const SinkOptions& options = {});

// What OpenSink would refuse, checked before any work is done: an existing file or object
// (unless `force`), a symlink, a missing bucket, the store's credentials.
Status CheckSinkTarget(const std::string& path, bool force);

// Whether `data` starts with zstd's frame magic number.
bool IsZstd(std::string_view data);

}  // namespace llmtap::store
