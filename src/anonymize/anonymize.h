// `llmtap anonymize`: a capture (mooncake_payload or raw_payload) becomes a Mooncake trace
// with no prompt in it: one row per request,
//   {"timestamp":T,"input_length":N,"output_length":M,"hash_ids":[...]}
// where N is the prompt's token count under the given tokenizer and hash_ids name its blocks
// of block_size tokens (see block_hash.h), remapped to dense integers in first-seen order.
// M is at least 1 (AIPerf refuses 0).
//
// Sessions. A row with a session_id ends with ,"session_id":"<BlockHasher::SessionId of the id
// under session_key>"}, and the original never appears. AIPerf reads a session's rows as the
// turns of one conversation: turn k sends the conversation so far (each earlier turn's prompt
// and the answer the server gave it) followed by turn k's own prompt, so a later turn's
// input_length and hash_ids are its NEW content only; `llmtap replay` does the same. A
// capture's later turn holds the whole conversation instead, so it is written as what it adds:
//   N_k = L_k - L_{k-1} - M_{k-1}
// (L: the captured prompt's tokens, M: output_length), with ids that name the whole prompt
// (BlockHasher::TurnBlock), and history + new content then has the captured length. A turn is
// written this way when its tokens start with the previous turn's (all of them, or all but the
// last kContinuationSlack of a long one: a chat template may render the generation prompt
// otherwise once the answer follows it) and it adds more than M_{k-1} tokens. Any other turn
// (the client cut or rewrote the history, retried, or the previous output_length exceeds what
// the answer added) starts a new part of the session: written whole, with its own session id
// (BlockHasher::SessionPart), so AIPerf sends it as the first turn of a conversation.
//
// Threads: AnonymizeTrace runs on the calling thread plus `threads` workers it starts and
// joins; the worker pool tokenizes and hashes batches of lines in parallel while the calling
// thread reads ahead and then, strictly in input order, remaps ids and writes rows. The
// tokenizer and the key are shared read-only. One call per thread at a time.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "anonymize/block_hash.h"
#include "anonymize/id_map.h"
#include "common/status.h"
#include "tokenizer/tokenizer.h"
#include "trace/record.h"
#include "trace/tool_common.h"

namespace llmtap::anonymize {

// The block size AIPerf (0.11) rebuilds mooncake_trace prompts with; it refuses
// --isl-block-size together with --input-file, so no other size can be replayed there.
inline constexpr uint32_t kAiperfBlockSize = 512;

// A later session turn continues the previous one when its tokens start with all of the
// previous turn's but at most this many at the end (and that is at most half of them).
inline constexpr uint64_t kContinuationSlack = 32;

// Who the output is for. kAiperf: the block size must be kAiperfBlockSize. kLlmtap: `llmtap
// replay --block-size B` replays any block size.
enum class Replayer { kAiperf, kLlmtap };

struct AnonymizeOptions {
  std::string path;  // input trace; "-" is standard input
  std::string out;   // default: <input base>.anonymized.jsonl beside the input
  bool force = false;
  const tokenizer::Tokenizer* tokenizer = nullptr;  // required
  const BlockKey* key = nullptr;                    // required
  // Keys the session ids; null: a random key made for this run (ids then match no other run).
  const BlockKey* session_key = nullptr;
  std::string session_key_note;  // where session_key came from, for the summary
  uint32_t block_size = kAiperfBlockSize;
  Replayer replayer = Replayer::kAiperf;
  // Sidecar with the actual completion tokens; empty: <path>.outcomes.ndjson when it exists.
  // Joined by line and timestamp; a sidecar of another file fails the run (trace/outcomes.h).
  std::string outcomes_path;
  bool no_outcomes = false;
  // Id map file (id_map.h) to continue the numbering of earlier runs with the same key, and
  // to extend for later ones. Empty: numbering starts at 0 and is not kept.
  std::string id_map_path;
  // output_length of a row with neither a usable outcome nor max_(completion_)tokens
  // (0 is written as 1, as every output_length below 1 is).
  uint64_t default_output_length = 256;
  std::optional<trace::TraceFormat> format;  // of the input; default: manifest, else per row
  unsigned threads = 0;                      // workers; 0: one per core
  size_t batch_lines = 256;                  // lines per work item (also capped by bytes)
  size_t max_failures = 20;
  bool progress = false;
};

struct AnonymizeReport {
  std::string path;
  std::string out;
  Status io;  // usage, open, read or write error: the output is incomplete (and removed)
  trace::TraceFormat format = trace::TraceFormat::kUnknown;
  std::string format_source;
  std::string outcomes_path;   // the sidecar used, empty when none
  std::string id_map_path;     // the id map used, empty when none
  uint64_t id_map_loaded = 0;  // ids it held before this run
  uint64_t id_map_saved = 0;   // and after
  unsigned threads = 0;

  uint64_t lines = 0, blank = 0, rows = 0, written = 0;
  uint64_t input_bytes = 0;
  // The captured prompts of the rows written (whole, also for session turns written as their
  // new content): tokens, blocks, distinct blocks, blocks seen earlier in the file.
  uint64_t tokens = 0;
  uint64_t blocks = 0;
  uint64_t unique_blocks = 0;
  uint64_t hit_blocks = 0;
  uint64_t ids_written = 0;  // hash_ids in the output
  // output_length sources, and why an outcome could not be used (cancelled, ...).
  uint64_t from_outcomes = 0, from_max_tokens = 0, from_default = 0;
  std::map<std::string, uint64_t> outcome_fallbacks;
  // output_length 0 written as 1 (AIPerf refuses 0), by where the 0 came from.
  uint64_t output_raised = 0;
  std::map<std::string, uint64_t> output_raised_from;
  // Outcomes not used because their timestamp differs from their row's (trace/outcomes.h).
  uint64_t outcomes_mismatched = 0;
  uint64_t without_timestamp = 0;  // rows written without one (raw_payload input)
  uint64_t with_session = 0;       // rows written with a (hashed) session_id
  // The capture's distinct sessions among them (AIPerf sees sessions + session_parts).
  uint64_t sessions = 0;
  uint64_t session_ids_dropped = 0;  // rows whose session_id is not a string (written without)
  // Later turns written as their new content (anonymize.h "Sessions"), and those tokens; the
  // turns that started a new part of their session instead (written whole), and why.
  uint64_t turns_as_new_content = 0, new_content_tokens = 0;
  uint64_t session_parts = 0;
  uint64_t completions_turns = 0;  // of the turns written as new content: completions requests
  std::map<std::string, uint64_t> session_part_reasons;
  // Rows holding an integer beyond 64 bits, read as a double (as AIPerf does).
  uint64_t rows_big_integers = 0;
  std::string session_key_note;

  trace::FailureList skipped;
  std::map<std::string, uint64_t> skip_reasons;  // short reason -> rows
  std::vector<std::string> warnings;
  double seconds = 0;

  // Under an infinite prefix cache, in input order: share of blocks already seen.
  double hit_rate() const {
    return blocks ? static_cast<double>(hit_blocks) / static_cast<double>(blocks) : 0;
  }
  int exit_code() const { return !io.ok() ? 2 : (skipped.total == 0 ? 0 : 1); }
};

AnonymizeReport AnonymizeTrace(const AnonymizeOptions& options);

// `key_note` says where the key came from ("random, not saved", "key file K").
std::string RenderAnonymizeText(const AnonymizeReport& report, const std::string& tokenizer_note,
                                const std::string& key_note);

}  // namespace llmtap::anonymize
