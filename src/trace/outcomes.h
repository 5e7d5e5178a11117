// The response outcomes sidecar (`<capture>.outcomes.ndjson`, README "Response outcomes"), read
// once and joined to its capture safely. One reader for every tool that joins outcomes to rows
// (anonymize, split, sessions, replay).
//
// A sidecar line names its capture row twice: `line` (1-based, in the capture file) and
// `timestamp` (that row's timestamp). OutcomeJoin looks an outcome up by `line` and uses it only
// when its `timestamp` equals the row's, so a sidecar that belongs to another file (e.g. the
// full capture's sidecar given with one of `llmtap split`'s outputs) never lends one request's
// numbers to another:
//
//   - an outcome whose timestamp differs from its row's is not used: it is skipped and counted
//     (`mismatched`), the first few named by line;
//   - the sidecar as a whole is refused (RefusedStatus names both files) when it plainly
//     belongs to another file: an outcome names a line past the capture's last line (checked
//     at Finish), or more outcomes mismatch than match (checked from the kEarlyRows-th
//     compared row on, after every row, so a long run stops early, and at Finish once at least
//     two mismatched). A single mismatched row never refuses the sidecar;
//   - rows without a timestamp (raw_payload rows) cannot be checked: they join by line alone
//     and are counted as `unchecked`.
//
// Memory: the whole sidecar is held, sorted by line (sidecar lines come in completion order,
// not line order, so a streaming merge would need an unbounded window): 80 bytes per
// outcome, plus the line's text (~250 bytes) when Load is asked to keep it (split rewrites
// lines), plus 8 bytes per captured response when asked for answer keys (sessions), plus about
// 100 bytes per line with a response_id (Responses and Messages answers) when asked for those
// (sessions, replay), plus such a line's response text when asked for it (replay
// --responses-chain inline), plus about 300 bytes per line when asked for its side of a
// fidelity pair (replay with the sidecar). That is a few percent of the capture it describes.
//
// Threads: an OutcomeTable is built by one thread (Load), then read-only: any thread may call
// its const methods. An OutcomeJoin belongs to the one thread that reads the capture.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "common/status.h"

namespace llmtap::trace {

// Why an outcome's completion_tokens cannot stand for the request's output length.
enum class Unusable : uint8_t {
  kNone,           // usable: the response ended normally and reported its usage
  kCancelled,      // the client went away: the answer was cut short
  kUpstreamError,  // connect/timeout/reset/protocol
  kHttpStatus,     // not 2xx
  kNoUsage,        // the response reported no completion_tokens
};

// What an outcome line holds of its response's text (capture_responses, the `response` member).
enum class AnswerText : uint8_t {
  kNone,       // no `response` member (capture_responses off), or null (body not readable)
  kWhole,      // the whole text: its AnswerKey is known (Load with answer_keys)
  kTruncated,  // cut at max_response_bytes: what the client got is not known
};

// The key of an answer as a client puts it back into `messages` for its next turn: the
// assistant message's content text and each tool call's function name and arguments, in
// order, as decoded strings (not JSON bytes: escapes and key order do not matter). Reasoning
// is not part of it (clients do not send it back). Content given in parts is the
// concatenation of their texts; null content is empty text. A 64-bit hash: two different
// answers share a key about once in 2^64.
class AnswerKeyHasher {
 public:
  // Appends to the content text (several calls concatenate, in order; tool calls may come
  // before or after).
  void Text(std::string_view text) { text_.append(text); }
  void ToolCall(std::string_view name, std::string_view arguments);
  uint64_t Finish();  // the key; the hasher is empty again after it

 private:
  std::string text_;
  uint64_t calls_ = 0;
  uint64_t n_calls_ = 0;
};
// "cancelled", "upstream error", "HTTP status", "no usage reported" ("" for kNone).
std::string_view UnusableName(Unusable why);

struct Outcome {
  uint64_t line = 0;      // 1-based line in the capture file
  int64_t timestamp = 0;  // that row's timestamp (ms)
  int32_t status = 0;     // HTTP status; 0 when absent or not a number (no response)
  Unusable unusable = Unusable::kNone;
  AnswerText answer = AnswerText::kNone;      // what the line holds of the response text
  std::optional<double> latency_ms;           // request head read -> end of the response
  std::optional<uint64_t> completion_tokens;  // as reported, usable or not
  // The prompt tokens and those of them the server reported reused from its cache
  // (`cached_tokens`), when the line has both (else kNoCache in both): the capture's server
  // cache hit rate. 32 bits each, so that an outcome stays 80 bytes.
  static constexpr uint32_t kNoCache = UINT32_MAX;
  uint32_t prompt_tokens = kNoCache;
  uint32_t cached_tokens = kNoCache;
  uint32_t text_size = 0;              // the line's text (Load with keep_text)
  uint32_t answer_index = UINT32_MAX;  // its answer key (OutcomeTable::AnswerKey)
  uint64_t text_offset = 0;

  // The completion tokens when they can stand for the output length, else nullopt.
  std::optional<uint64_t> usable_tokens() const {
    return unusable == Unusable::kNone ? completion_tokens : std::nullopt;
  }
};

class OutcomeTable {
 public:
  struct LoadOptions {
    bool keep_text = false;  // keep each line's text (OutcomeTable::Text)
    // Read each line's `response` (Outcome::answer) and keep the AnswerKey of every whole one
    // (OutcomeTable::AnswerKey).
    bool answer_keys = false;
    // Keep each line's `response_id` (the Responses API's "resp_..." and Messages' "msg_..."
    // ids: OutcomeTable::ResponseId).
    bool response_ids = false;
    // Keep the `response` member (its JSON text) of each line with a response_id whose text is
    // whole (not truncated): OutcomeTable::Response (replay --responses-chain inline).
    bool responses = false;
    // Keep each line's captured side for replay-fidelity pairs (OutcomeTable::Side).
    bool sides = false;
  };

  // Reads `path` (local, .zst or s3://, as LineReader reads it). A missing file or object is
  // not an error (*loaded stays false). Lines that are not outcome objects (not JSON, or without a
  // non-negative integer `line` and an integer `timestamp`) are counted in bad_lines() and
  // ignored; a capture line listed twice keeps its last outcome (duplicate_lines()).
  Status Load(const std::string& path, bool* loaded) { return Load(path, {}, loaded); }
  Status Load(const std::string& path, const LoadOptions& options, bool* loaded);

  // The outcome for capture line `line`, or null. No timestamp check: use OutcomeJoin to join.
  const Outcome* Find(uint64_t line) const;
  // The sidecar line an outcome came from, whitespace-trimmed (empty unless keep_text).
  std::string_view Text(const Outcome& o) const {
    return std::string_view(text_).substr(o.text_offset, o.text_size);
  }
  // The line's response_id (Responses "resp_...", Messages "msg_..."); "" when it has none or
  // Load was not asked for them.
  std::string_view ResponseId(const Outcome& o) const {
    auto it = ids_.find(o.line);
    return it == ids_.end() ? std::string_view() : std::string_view(it->second);
  }
  // The line's `response` member as JSON text (an object), when Load was asked for them and
  // the line has a response_id and a whole response; "" otherwise.
  std::string_view Response(const Outcome& o) const {
    auto it = responses_.find(o.line);
    return it == responses_.end() ? std::string_view() : std::string_view(it->second);
  }
  // The line's outcome as one side of a replay-fidelity pair (fidelity/certificate.h): a JSON
  // object {"status","ttft_ms","itl_ms","latency_ms","prompt_tokens","completion_tokens",
  // "finish_reason","error","cached_tokens","server","spec"} with the line's values (null when
  // absent; "error" is "cancelled" for a response the client cut short; itl_ms is AIPerf's
  // (latency - ttft) / (completion_tokens - 1)). "" unless Load was asked for sides.
  std::string_view Side(const Outcome& o) const {
    auto it = sides_.find(o.line);
    return it == sides_.end() ? std::string_view() : std::string_view(it->second);
  }
  // The AnswerKey of the response text when the line held all of it (Load with answer_keys).
  std::optional<uint64_t> AnswerKey(const Outcome& o) const {
    if (o.answer != AnswerText::kWhole || o.answer_index >= answer_keys_.size()) return {};
    return answer_keys_[o.answer_index];
  }

  // The sidecar a tool joins to the capture `capture_path`: `explicit_path` when given (it
  // must exist), else `<capture_path>.outcomes.ndjson` or the same with .zst when one exists
  // (for `X.jsonl.zst`: `X.jsonl.outcomes.ndjson[.zst]`, as the uploader stores a compressed
  // segment's; none for standard input); none when `off`. Warns about bad and duplicate
  // lines in *warnings.
  Status LoadFor(const std::string& capture_path, const std::string& explicit_path, bool off,
                 const LoadOptions& options, bool* loaded, std::vector<std::string>* warnings);

  const std::string& path() const { return path_; }
  const std::vector<Outcome>& outcomes() const { return by_line_; }  // sorted by line
  size_t size() const { return by_line_.size(); }
  uint64_t max_line() const { return by_line_.empty() ? 0 : by_line_.back().line; }
  uint64_t bad_lines() const { return bad_lines_; }
  uint64_t duplicate_lines() const { return duplicates_; }

 private:
  std::string path_;
  std::vector<Outcome> by_line_;
  std::string text_;
  // The lines with a response_id (few: Responses and Messages answers), apart from Outcome,
  // which stays small; of two outcomes for one line, the later one's.
  std::unordered_map<uint64_t, std::string> ids_;
  std::unordered_map<uint64_t, std::string> responses_;  // LoadOptions::responses, by line
  std::unordered_map<uint64_t, std::string> sides_;      // LoadOptions::sides, by line
  std::vector<uint64_t> answer_keys_;
  uint64_t bad_lines_ = 0;
  uint64_t duplicates_ = 0;
};

// Joins a table to one pass over a capture (see the rules at the top).
class OutcomeJoin {
 public:
  // Compared rows after which (and at every row after) a majority of mismatches refuses.
  static constexpr uint64_t kEarlyRows = 16;
  static constexpr size_t kNamedMismatches = 5;

  // `table` must outlive the join; `capture_path` is only named in messages.
  OutcomeJoin(const OutcomeTable* table, std::string capture_path)
      : table_(table), capture_path_(std::move(capture_path)) {}

  // The outcome of the row on `line` whose timestamp is `timestamp` (nullopt: the row has
  // none), or null when the sidecar has none for the line, its timestamp differs, or the
  // sidecar has been refused.
  const Outcome* Join(uint64_t line, std::optional<double> timestamp);

  // Ok, or why the sidecar belongs to another file. Refused() can turn true during the pass;
  // a caller may stop reading then.
  bool refused() const { return refused_; }
  // After the last row: `capture_lines` is the capture's line count. Returns RefusedStatus().
  Status Finish(uint64_t capture_lines);
  Status RefusedStatus() const;

  uint64_t matched() const { return matched_; }
  uint64_t mismatched() const { return mismatched_; }
  uint64_t unchecked() const { return unchecked_; }  // joined by line alone (no timestamp)
  // "line 12: timestamp 5400 in the sidecar, 5401 in the capture" for the first few.
  const std::vector<std::string>& mismatch_examples() const { return examples_; }
  // One line for a report, empty when nothing mismatched.
  std::string MismatchSummary() const;

 private:
  void CheckMajority(bool at_end);

  const OutcomeTable* table_;
  std::string capture_path_;
  uint64_t matched_ = 0, mismatched_ = 0, unchecked_ = 0;
  std::vector<std::string> examples_;
  bool refused_ = false;
  std::string why_;
};

// Appends the sidecar line `text` (as OutcomeTable::Text gives it) with its `line` set to
// `line` and, when given, its `timestamp` to `timestamp`; every other byte unchanged. False
// (nothing appended) when `text` lacks either key.
bool AppendOutcomeRenumbered(std::string_view text, uint64_t line, std::optional<double> timestamp,
                             std::string* out);

}  // namespace llmtap::trace
