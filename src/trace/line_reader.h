// LineReader: the one streaming JSONL reader behind every trace tool (split, validate, stats,
// merge, convert, anonymize, replay), over local files, standard input, s3:// objects and
// zstd (see store/stream.h). Reads in large chunks into one reused buffer that keeps
// simdjson's padding after every line, so a line can be parsed in place without a copy.
// Memory is bounded by the chunk size plus the longest line (plus, for s3://, the source's
// read-ahead buffer, store::SourceOptions::s3_buffer_bytes), never by the file size.
//
// One reader per thread; not thread-safe.
//
// Line rules (the same in every tool):
//   - lines end at '\n'; a '\r' right before it (CRLF files) is dropped from the line;
//   - a last line without '\n' is handed out with `torn = true`: a capture cut mid-write
//     ends this way; each tool decides what to do with it (none treats it as fatal);
//   - line numbers start at 1 and count every line, blank ones included.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "common/status.h"
#include "store/stream.h"

namespace llmtap::trace {

struct Line {
  std::string_view bytes;  // without '\n' (and without the '\r' of a CRLF line)
  uint64_t number = 0;     // 1-based
  bool torn = false;       // last line of the file, no trailing '\n'
  bool crlf = false;       // ended with "\r\n"
};

class LineReader {
 public:
  // Bytes readable after the end of every line handed out (simdjson::SIMDJSON_PADDING).
  static constexpr size_t kPadding = 64;
  static constexpr size_t kDefaultChunkBytes = size_t{4} << 20;

  explicit LineReader(size_t chunk_bytes = kDefaultChunkBytes);
  ~LineReader();
  LineReader(const LineReader&) = delete;
  LineReader& operator=(const LineReader&) = delete;

  // Opens `path` for reading: "-" is standard input, "s3://bucket/key" an object in the store;
  // zstd-compressed data (.jsonl.zst) is decompressed as it is read. `source` sets how the
  // bytes are read (store/stream.h): the S3 read-ahead buffer, shared S3 clients, an object
  // size known beforehand (no HEAD), a hook that sees the stored bytes (a SHA-256).
  Status Open(const std::string& path);
  Status Open(const std::string& path, const store::SourceOptions& source);
  // Frees the buffers and the source (an s3:// download stops); the counts stay.
  void Close();

  // Next line, or false at end of file or on a read error (see status()). `line->bytes`
  // stays valid until the next call; kPadding bytes after it are readable.
  bool Next(Line* line);

  const Status& status() const { return status_; }
  const std::string& path() const { return path_; }
  // Read to the end of the data without an error.
  bool finished() const { return eof_ && status_.ok(); }
  uint64_t bytes_consumed() const { return consumed_; }
  // Lines handed out that ended in '\n' (a torn last line is not one).
  uint64_t complete_lines() const { return complete_lines_; }
  // Size of the file or object as stored (compressed size for zstd; 0 for pipes and standard
  // input), and the stored bytes read so far: progress is one against the other.
  uint64_t file_size() const { return file_size_; }
  uint64_t stored_position() const;

 private:
  bool Fill();

  std::string path_;
  std::unique_ptr<store::ByteSource> source_;
  bool eof_ = false;
  Status status_;
  size_t chunk_bytes_;
  std::unique_ptr<char[]> buf_;
  size_t cap_ = 0;    // usable bytes of buf_ (kPadding more are allocated)
  size_t begin_ = 0;  // first unconsumed byte
  size_t end_ = 0;    // one past the last byte read
  size_t scan_ = 0;   // where the search for '\n' resumes (begin_ <= scan_ <= end_)
  uint64_t line_number_ = 0;
  uint64_t complete_lines_ = 0;
  uint64_t consumed_ = 0;
  uint64_t file_size_ = 0;
  uint64_t closed_position_ = 0;  // stored_position() once closed
};

}  // namespace llmtap::trace
