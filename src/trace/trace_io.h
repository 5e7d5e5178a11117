// Files around the trace tools: buffered private output files that never clobber, the
// capture manifest sidecar as a reader sees it, and progress lines on stderr. One object
// per thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "api/endpoints.h"
#include "common/status.h"
#include "store/stream.h"

namespace llmtap::trace {

// A new output file or s3:// object (see store::OpenSink): created 0600, never through a
// symlink, never over an existing file unless `force` (then replaced); ".zst" names are
// compressed. Writes are buffered; Close() reports the first error.
class OutputFile {
 public:
  OutputFile() = default;
  ~OutputFile();
  OutputFile(const OutputFile&) = delete;
  OutputFile& operator=(const OutputFile&) = delete;

  Status Open(const std::string& path, bool force);
  // Appends bytes plus '\n'.
  void WriteLine(std::string_view line) {
    if (buf_.size() + line.size() + 1 > kFlushBytes) Flush();
    buf_.append(line);
    buf_.push_back('\n');
  }
  // A line built in place, without a copy: append at most `max_bytes` to the buffer returned
  // (or nothing), then call EndLine() if a line was appended.
  std::string* BeginLine(size_t max_bytes) {
    if (buf_.size() + max_bytes + 1 > kFlushBytes) Flush();
    return &buf_;
  }
  void EndLine() { buf_.push_back('\n'); }
  Status Close();
  bool is_open() const { return sink_ != nullptr; }
  const std::string& path() const { return path_; }

 private:
  static constexpr size_t kFlushBytes = size_t{1} << 20;
  void Flush();

  std::string path_;
  std::unique_ptr<store::ByteSink> sink_;
  std::string buf_;
  Status status_;
};

// Refuses (InvalidArgument naming --force) when `path` exists and `force` is false.
Status CheckOutputPath(const std::string& path, bool force);

class LineReader;

// A one-input, one-output tool's files: opens `in_path` into `in`, then `out_path` into `out`
// (see OutputFile::Open). The first failure, or Ok.
Status OpenInputAndOutput(const std::string& in_path, LineReader* in, const std::string& out_path,
                          bool force, OutputFile* out);

// The parts of a capture's manifest sidecar (`<capture>.manifest.json`) the tools use.
struct ManifestView {
  std::string path;
  std::string format;  // "mooncake_payload" or "raw_payload" as written by the capture
  std::optional<int64_t> timestamp_zero_unix_ms;
  double sample_rate = 1.0;
  bool has_sample_rate = false;
  std::string state;
  std::map<std::string, uint64_t> counters;  // every numeric counter, by name (whole run)
  // Lines in this file ("file"."records"); a rotated run's counters span several files.
  std::optional<uint64_t> file_records;
  // The file's records by the API of the path each was sent to ("file"."apis", llmtap's short
  // names: chat, messages, ...); absent in manifests written before the capture counted them.
  std::optional<std::map<std::string, uint64_t>> file_apis;
};

// nullopt with *status ok when there is no manifest; an error status when it is unreadable.
std::optional<ManifestView> ReadManifestFor(const std::string& capture_path, Status* status);

// What a capture's manifest says of the rows whose body alone cannot tell chat from Anthropic
// Messages (record.h, RowChatOrMessages), line by line:
// - a mooncake_payload capture by llmtap names every Messages row (endpoint_type): no guess;
// - a capture that counted its rows by API ("file"."apis") and recorded no /v1/messages
//   request: every such row is chat; one that recorded Messages requests and no chat request:
//   every row read as chat is Messages. Both hold for the lines the counts cover (the first
//   sum-of-counts lines: a capture still running may have written more since);
// - otherwise (no manifest, an older one, or chat and Messages requests both recorded): the
//   row is read as chat and counted as a guess, as before.
class ApiRecord {
 public:
  enum class Kind { kUnknown, kNamed, kNoMessages, kMessagesOnly, kBoth };
  ApiRecord() = default;
  explicit ApiRecord(const std::optional<ManifestView>& manifest);
  // From the manifest beside `capture_path` (unreadable: kUnknown).
  static ApiRecord For(const std::string& capture_path);

  Kind kind() const { return kind_; }
  // The API of line `line` (from 1), read from its shape as `by_shape` (RowEndpoint).
  api::Endpoint Resolve(api::Endpoint by_shape, uint64_t line) const;
  // Whether a chat-or-Messages row on line `line` is a guess, to be counted and warned about.
  bool Guesses(uint64_t line) const { return kind_ != Kind::kNamed && !Covers(line); }
  // Said after a guess warning: why the manifest could not tell ("" when it has nothing).
  std::string Note() const;

 private:
  bool Covers(uint64_t line) const {
    return (kind_ == Kind::kNoMessages || kind_ == Kind::kMessagesOnly) && line <= lines_;
  }
  Kind kind_ = Kind::kUnknown;
  uint64_t lines_ = 0;  // the first lines the counts cover
  uint64_t chat_ = 0, messages_ = 0;
};

// Progress on stderr every 2 s, when stderr is a terminal or when forced. Cheap to call
// often: it reads the clock only every 64 calls.
class Progress {
 public:
  Progress(std::string tool, bool force);
  void Update(uint64_t bytes_done, uint64_t bytes_total) {
    if (!enabled_ || (++calls_ & 63) != 0) return;
    Maybe(bytes_done, bytes_total);
  }
  void Finish();

 private:
  void Maybe(uint64_t bytes_done, uint64_t bytes_total);
  std::string tool_;
  bool enabled_;
  bool printed_ = false;
  uint64_t calls_ = 0;
  std::chrono::steady_clock::time_point start_;
  std::chrono::steady_clock::time_point last_;
};

// "D/base.<suffix>.jsonl" for IN "any/dir/base.jsonl" (".jsonl" is added when IN has no
// such extension); out_dir empty means IN's directory.
std::string DerivedPath(const std::string& in, const std::string& out_dir, std::string_view suffix);

}  // namespace llmtap::trace
