// Shared plumbing of the trace tools (internal to llmtap_trace): how a file's format is
// decided and how failing lines and warnings are described.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "trace/line_reader.h"
#include "trace/record.h"
#include "trace/trace_io.h"

namespace llmtap::trace {

// A line that failed, with why.
struct LineFailure {
  uint64_t line = 0;
  std::string reason;
};

// Keeps the first `limit` failures and counts the rest.
struct FailureList {
  size_t limit = 20;
  std::vector<LineFailure> kept;
  uint64_t total = 0;
  void Add(uint64_t line, std::string reason) {
    ++total;
    if (kept.size() < limit) kept.push_back({line, std::move(reason)});
  }
};

// A file's format: --format beats the manifest, which beats the first valid row.
class FormatResolver {
 public:
  void Init(const std::optional<TraceFormat>& flag, const std::optional<ManifestView>& manifest) {
    if (flag) {
      format_ = *flag;
      source_ = "--format";
    } else if (manifest && ParseTraceFormat(manifest->format)) {
      format_ = *ParseTraceFormat(manifest->format);
      source_ = "manifest";
    }
  }
  // Init from the manifest next to `path`. If that manifest cannot be used, its error plus
  // `note` is appended to `warnings` (unless null). Returns the manifest.
  std::optional<ManifestView> InitFor(const std::string& path,
                                      const std::optional<TraceFormat>& flag,
                                      std::vector<std::string>* warnings, std::string_view note) {
    Status status;
    std::optional<ManifestView> manifest = ReadManifestFor(path, &status);
    if (!status.ok() && warnings) warnings->push_back(status.ToString() + std::string(note));
    Init(flag, manifest);
    return manifest;
  }
  TraceFormat Resolve(simdjson::dom::object row) {
    if (format_ == TraceFormat::kUnknown) {
      format_ = RowFormat(row);
      source_ = "first valid row";
    }
    return format_;
  }
  TraceFormat format() const { return format_; }
  const std::string& source() const { return source_; }

 private:
  TraceFormat format_ = TraceFormat::kUnknown;
  std::string source_ = "none (no valid row)";
};

// Where RowScanner counts the lines it reads; null members are not counted.
struct LineCounts {
  uint64_t* lines = nullptr;  // every line, blank or not
  uint64_t* blank = nullptr;  // blank lines (skipped, as AIPerf does)
  bool* torn_tail = nullptr;  // set when the last line has no trailing newline
  uint64_t* crlf = nullptr;   // lines ending in CRLF
};

// The read loop every tool shares: a trace's lines (LineReader), each parsed as a row
// (RowParser), with progress on stderr. Blank lines are counted and skipped.
class RowScanner {
 public:
  RowScanner(std::string tool, bool progress, LineCounts counts)
      : progress_(std::move(tool), progress), counts_(counts) {}
  // Opens `path` ("-" is standard input).
  Status Open(const std::string& path) { return reader_.Open(path); }
  // The next non-blank line, parsed into row(); false at the end of the input or on a read
  // error.
  bool Next(Line* line) {
    while (reader_.Next(line)) {
      progress_.Update(reader_.stored_position(), reader_.file_size());
      if (counts_.lines) ++*counts_.lines;
      if (line->crlf && counts_.crlf) ++*counts_.crlf;
      if (line->torn && counts_.torn_tail) *counts_.torn_tail = true;
      row_ = &parser_.Parse(line->bytes);
      if (row_->status != ParseStatus::kBlank) return true;
      if (counts_.blank) ++*counts_.blank;
    }
    return false;
  }
  // The current line's row; valid until the next Next().
  const ParsedRow& row() const { return *row_; }
  // Ends the progress display; returns the read status (not ok if reading failed).
  Status Finish() {
    progress_.Finish();
    return reader_.status();
  }

 private:
  LineReader reader_;
  RowParser parser_;
  Progress progress_;
  LineCounts counts_;
  const ParsedRow* row_ = nullptr;
};

// A run of a trace's non-blank lines copied out of the reader, for a worker thread to parse
// (the tools that work in parallel: anonymize, specdec): each line's bytes then '\n', and
// simdjson's padding after the last, so every line parses in place.
struct LineBatch {
  struct Ref {
    size_t offset = 0;  // into bytes
    size_t size = 0;
    uint64_t number = 0;  // 1-based line in the file
    bool torn = false;    // the file's last line, without '\n'
  };
  std::string bytes;
  std::vector<Ref> lines;

  std::string_view Text(const Ref& ref) const {
    return std::string_view(bytes.data() + ref.offset, ref.size);
  }
  // Replaces the batch with the next non-blank lines of `reader`: up to `max_lines` (at least
  // one), fewer once `max_bytes` are held. Counts as RowScanner counts, shows progress. False
  // when no line was left (or reading failed: see the reader's status()).
  bool Read(LineReader* reader, Progress* progress, size_t max_lines, size_t max_bytes,
            const LineCounts& counts);
};

// The rule AIPerf's mooncake_trace loader sets on the rows that share a session_id, kept by
// split (which routes by it) and validate (which checks it, with its input-mode rule on top):
// a session has one endpoint type, that of its first row. Ids are never printed (they may name
// users): a session is named by the line of its first row. Ids are kept as 64-bit hashes.
class SessionEndpoints {
 public:
  struct Session {
    Endpoint endpoint;    // the first row's
    uint64_t first_line;  // the first row's line
    uint8_t tag = 0;      // the caller's own per-session value, from the first row
    bool mixed = false;   // for the caller: a later row of another endpoint type was seen
  };
  // The session of `id` (non-empty), and true when this row is its first: then it is added
  // with this row's endpoint, line and tag.
  std::pair<Session*, bool> Add(std::string_view id, Endpoint endpoint, uint64_t line,
                                uint8_t tag = 0);
  // A row of endpoint type `row` breaks a session of type `session`: both are chat or
  // completions, and differ.
  static bool Breaks(Endpoint session, Endpoint row) {
    return IsChatOrCompletions(session) && IsChatOrCompletions(row) && session != row;
  }
  static bool IsChatOrCompletions(Endpoint e) {
    return e == Endpoint::kChat || e == Endpoint::kCompletions;
  }
  uint64_t size() const { return sessions_.size(); }

 private:
  std::unordered_map<uint64_t, Session> sessions_;
};

// "file:line: reason"
inline std::string Located(const std::string& path, uint64_t line, const std::string& reason) {
  return path + ":" + std::to_string(line) + ": " + reason;
}

// The head of a tool's text report: each kept failure as "file:line: reason" (just the reason
// when `path` is empty), "... N <more>" when some were not kept, then "warning: ..." lines.
std::string RenderIssues(const std::string& path, const FailureList& failures,
                         std::string_view more, const std::vector<std::string>& warnings);

}  // namespace llmtap::trace
