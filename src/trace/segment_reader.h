// SegmentReader: the lines of one capture segment for `llmtap merge` -- a local file, standard
// input or an s3:// object, zstd-compressed or not -- read with a buffer size the caller
// chooses, so that hundreds of segments open at once stay within a memory budget. It also
// measures what it read, for the checks against the segment's manifest: the stored bytes
// (their count and SHA-256, hashed as they pass, before decompression) and the number of
// complete lines.
//
// Why not LineReader: LineReader opens its source with the default stream options (8 MiB S3
// ranges, 4 MiB chunks, a client and connection per object) and offers no view of the stored
// bytes. The line rules are LineReader's exactly (see line_reader.h); the S3 reads go through
// one S3Client shared by every reader of the merge (one connection pool for one thread).
//
// One reader per thread, and the shared client on that same thread; not thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "common/status.h"
#include "store/s3_client.h"
#include "store/s3_url.h"
#include "store/sha256.h"
#include "trace/line_reader.h"

namespace llmtap::trace {

struct SegmentReaderOptions {
  // Bytes read at a time: the line buffer's size, and the length of each S3 ranged GET (the
  // compressed input of a zstd segment gets a buffer of this size too). The buffer grows
  // only for a line longer than half of it.
  size_t chunk_bytes = LineReader::kDefaultChunkBytes;
  // Hash the stored bytes (SHA-256) as they are read.
  bool sha256 = false;
  // s3://: the object's size when a listing gave it (else a HEAD asks).
  std::optional<uint64_t> stored_size;
  // A failed S3 range is retried (back-off 400 ms, 800 ms, ...); 404 and 403 are not.
  int s3_attempts = 4;
};

class SegmentReader {
 public:
  SegmentReader() = default;
  ~SegmentReader();
  SegmentReader(const SegmentReader&) = delete;
  SegmentReader& operator=(const SegmentReader&) = delete;

  // Opens `path`: "-" is standard input, "s3://bucket/key" an object read through `client`
  // (which must outlive the reader; unused otherwise), anything else a local file. zstd data
  // (zstd's magic number at the start) is decompressed whatever the name.
  Status Open(const std::string& path, store::S3Client* client,
              const SegmentReaderOptions& options);

  // Next line, or false at the end or on a read error (see status()). `line->bytes` stays
  // valid until the next call; LineReader::kPadding zero bytes follow it.
  bool Next(Line* line);

  // Frees the buffers and the decompressor; the counts below stay.
  void Close();

  const Status& status() const { return status_; }
  const std::string& path() const { return path_; }
  // Read to the end of the data without an error.
  bool finished() const { return finished_; }
  // Size as stored (compressed size for zstd; 0 for a pipe), and stored bytes read so far.
  uint64_t stored_size() const { return stored_size_; }
  uint64_t stored_position() const { return stored_position_; }
  // Lines handed out that ended in '\n' (what the uploader's "records" counts).
  uint64_t complete_lines() const { return complete_lines_; }
  bool compressed() const { return zstd_ != nullptr || was_zstd_; }
  // Lower-case hex SHA-256 of the stored bytes read so far (options.sha256); empty otherwise.
  // Call once, when finished().
  std::string Sha256Hex();
  // Bytes this reader holds now (buffers; not zstd's window), for the merge's accounting.
  size_t buffer_bytes() const { return cap_ + (zin_ ? zin_cap_ : 0); }

 private:
  // Stored bytes into `dst` (at most `cap`); *n = 0 at the end.
  Status ReadStored(char* dst, size_t cap, size_t* n);
  // Decoded bytes (decompressed if zstd) into `dst`; *n = 0 at the end.
  Status ReadDecoded(char* dst, size_t cap, size_t* n);
  Status Sniff(char* dst, size_t cap, size_t* n);
  Status Inflate(char* dst, size_t cap, size_t* n);
  bool Fill();

  std::string path_;
  SegmentReaderOptions options_;
  Status status_;
  // Where the stored bytes come from: a descriptor, or an object through the shared client.
  int fd_ = -1;
  bool owns_fd_ = false;
  store::S3Client* client_ = nullptr;
  store::S3Url url_;
  uint64_t stored_size_ = 0;
  uint64_t stored_position_ = 0;
  bool stored_eof_ = false;
  std::unique_ptr<store::Sha256> sha_;
  // zstd: the stream, and its compressed input buffer.
  bool sniffed_ = false;
  bool was_zstd_ = false;
  void* zstd_ = nullptr;  // ZSTD_DStream*
  std::unique_ptr<char[]> zin_;
  size_t zin_cap_ = 0;
  size_t zin_pos_ = 0;
  size_t zin_len_ = 0;
  bool frame_open_ = false;
  // Lines (as LineReader).
  std::unique_ptr<char[]> buf_;
  size_t cap_ = 0;
  size_t begin_ = 0;
  size_t end_ = 0;
  size_t scan_ = 0;
  bool eof_ = false;
  bool finished_ = false;
  uint64_t line_number_ = 0;
  uint64_t complete_lines_ = 0;
};

}  // namespace llmtap::trace
