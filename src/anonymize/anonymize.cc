// AnonymizeTrace (anonymize.h) on the calling thread: the input read in batches for the
// worker pool (anonymize_workers.cc), then, in input order, formats checked, output lengths
// chosen, block ids numbered densely and the rows written; RenderAnonymizeText.
#include "anonymize/anonymize.h"

#include <sys/stat.h>
#include <unistd.h>

#include <charconv>
#include <chrono>
#include <memory>
#include <thread>
#include <unordered_map>

#include "anonymize/anonymize_internal.h"
#include "trace/line_reader.h"
#include "trace/outcomes.h"
#include "trace/trace_io.h"

namespace llmtap::anonymize {

namespace {

using anonymize_internal::Batch;
using anonymize_internal::kPrefixSeed;
using anonymize_internal::RowResult;
using trace::TraceFormat;

// A batch stops growing at this many bytes of lines, so that a file of huge prompts still
// spreads over every worker.
constexpr size_t kBatchBytes = size_t{1} << 20;

void AppendUnsigned(uint64_t v, std::string* out) {
  char buf[24];
  auto r = std::to_chars(buf, buf + sizeof(buf), v);
  out->append(buf, r.ptr);
}

bool SameFile(const std::string& a, const std::string& b) {
  struct stat sa, sb;
  return ::stat(a.c_str(), &sa) == 0 && ::stat(b.c_str(), &sb) == 0 && sa.st_dev == sb.st_dev &&
         sa.st_ino == sb.st_ino;
}

// The in-order half: format consistency, output_length, dense ids, session turns, the rows
// written.
class Emitter {
 public:
  // `options` with its session key set; it must outlive the Emitter.
  Emitter(const AnonymizeOptions& options, AnonymizeReport* report, trace::FormatResolver* resolver,
          bool format_fixed, trace::OutcomeJoin* outcomes, DenseIds* dense, trace::OutputFile* out)
      : r_(report),
        resolver_(resolver),
        format_fixed_(format_fixed),
        outcomes_(outcomes),
        default_output_length_(options.default_output_length),
        block_size_(options.block_size),
        dense_(dense),
        out_(out),
        turn_hasher_(*options.key),
        part_hasher_(*options.session_key) {}

  void Emit(const Batch& batch) {
    for (const RowResult& row : batch.rows) {
      ++r_->rows;
      if (row.row_format != TraceFormat::kUnknown && !format_fixed_) {
        if (resolver_->format() == TraceFormat::kUnknown) {
          resolver_->Init(row.row_format, std::nullopt);
          resolved_here_ = true;
        } else if (row.row_format != resolver_->format()) {
          Skip(row.line, "format mismatch",
               "a " + std::string(trace::TraceFormatName(row.row_format)) + " row in a " +
                   std::string(trace::TraceFormatName(resolver_->format())) + " file");
          continue;
        }
      }
      if (!row.skip_kind.empty()) {
        Skip(row.line, row.skip_kind, row.skip_reason);
        continue;
      }
      Write(batch, row);
    }
  }

  bool resolved_here() const { return resolved_here_; }

 private:
  // A session's last turn written, to tell whether the next one continues it.
  struct Session {
    std::string written;  // the session id its rows carry now: the hash, or a part's
    uint32_t part = 0;
    uint64_t length = 0;  // the last turn's prompt tokens
    uint64_t output = 0;  // and its output_length
    uint64_t full = 0;    // PrefixStep hash of all its tokens
    uint64_t near = 0;    // of all but its last kContinuationSlack (0: too short for that)
  };

  void Skip(uint64_t line, const std::string& kind, std::string reason) {
    r_->skipped.Add(line, std::move(reason));
    ++r_->skip_reasons[kind];
  }

  // The row's output_length; 0, from wherever it came, is written as 1 and counted.
  uint64_t OutputLength(const RowResult& row) {
    uint64_t v = 0;
    const char* zero = nullptr;
    const trace::Outcome* o = nullptr;
    if (outcomes_) {
      uint64_t mismatched = outcomes_->mismatched();
      o = outcomes_->Join(row.line, row.timestamp);
      if (!o || !o->usable_tokens()) {
        ++r_->outcome_fallbacks[o ? std::string(trace::UnusableName(o->unusable))
                                : outcomes_->mismatched() != mismatched
                                    ? "timestamp differs from the row's"
                                    : "no outcome for the line"];
        o = nullptr;
      }
    }
    if (o) {
      ++r_->from_outcomes;
      v = *o->usable_tokens();
      zero = "completion_tokens 0 in the outcome";
    } else if (row.requested_output) {
      ++r_->from_max_tokens;
      v = *row.requested_output;
      zero = "max_tokens 0 in the request";
    } else {
      ++r_->from_default;
      v = default_output_length_;
      zero = "--default-output-length 0";
    }
    if (v == 0) {
      ++r_->output_raised;
      ++r_->output_raised_from[zero];
      v = 1;
    }
    return v;
  }

  void AppendId(uint64_t id, bool first) {
    if (!first) line_.push_back(',');
    AppendUnsigned(id, &line_);
    ++r_->ids_written;
  }

  void Write(const Batch& batch, const RowResult& row) {
    const uint64_t output = OutputLength(row);
    // A later session turn that continues its session's previous one is written as its new
    // content (anonymize.h "Sessions"); any other row whole.
    std::string_view session_id;
    uint64_t new_tokens = 0;
    if (!row.session.empty()) {
      Session& s = sessions_[row.session];
      const uint64_t* hashes = batch.prefix.data() + row.prefix_begin;
      auto prefix = [&](uint64_t n) { return n == 0 ? kPrefixSeed : hashes[n - 1]; };
      const uint64_t length = row.input_length;
      if (s.written.empty()) {
        s.written = row.session;
      } else {
        const char* part = nullptr;
        bool continues = length >= s.length && prefix(s.length) == s.full;
        if (!continues && s.near != 0 && length >= s.length) {
          continues = prefix(s.length - kContinuationSlack) == s.near;
        }
        if (!continues) {
          part = "its prompt does not continue the previous turn's";
        } else if (length - s.length <= s.output) {
          part = "it adds no more tokens than the previous turn's output_length";
        } else {
          new_tokens = length - s.length - s.output;
        }
        if (part) {
          s.written = part_hasher_.SessionPart(row.session, ++s.part);
          ++r_->session_parts;
          ++r_->session_part_reasons[part];
        }
      }
      s.length = length;
      s.output = output;
      s.full = prefix(length);
      s.near = length >= 2 * kContinuationSlack ? prefix(length - kContinuationSlack) : 0;
      session_id = s.written;
    }

    line_.clear();
    line_.push_back('{');
    if (row.timestamp) {
      line_ += "\"timestamp\":";
      trace::AppendNumber(*row.timestamp, &line_);
      line_.push_back(',');
    } else {
      ++r_->without_timestamp;
    }
    line_ += "\"input_length\":";
    AppendUnsigned(new_tokens ? new_tokens : row.input_length, &line_);
    line_ += ",\"output_length\":";
    AppendUnsigned(output, &line_);
    line_ += ",\"hash_ids\":[";
    if (new_tokens == 0) {
      for (size_t i = row.ids_begin; i < row.ids_end; ++i) {
        bool hit;
        uint64_t id = dense_->Get(batch.ids[i], &hit);
        if (hit) ++r_->hit_blocks;
        AppendId(id, i == row.ids_begin);
      }
    } else {
      // The captured prompt's blocks count as seen (the hit rate is the capture's); the ids
      // written name the new content's blocks.
      for (size_t i = row.ids_begin; i < row.ids_end; ++i) {
        if (dense_->See(batch.ids[i])) ++r_->hit_blocks;
      }
      const KeyedId& whole = batch.ids[row.ids_end - 1];
      const uint64_t n = (new_tokens + block_size_ - 1) / block_size_;
      for (uint64_t i = 0; i < n; ++i) {
        AppendId(
            dense_->Number(turn_hasher_.TurnBlock(whole, new_tokens, static_cast<uint32_t>(i))),
            i == 0);
      }
      ++r_->turns_as_new_content;
      r_->new_content_tokens += new_tokens;
      if (row.completions) ++r_->completions_turns;
    }
    line_ += "]";
    if (!session_id.empty()) {
      // base64url: nothing to escape.
      line_ += ",\"session_id\":\"";
      line_ += session_id;
      line_ += "\"";
      ++r_->with_session;
    } else if (row.session_dropped) {
      ++r_->session_ids_dropped;
    }
    line_ += "}";
    out_->WriteLine(line_);
    ++r_->written;
    if (row.big_integers) ++r_->rows_big_integers;
    r_->tokens += row.input_length;
    r_->blocks += row.ids_end - row.ids_begin;
    r_->unique_blocks = dense_->unique_in_file();
    r_->sessions = sessions_.size();
  }

  AnonymizeReport* r_;
  trace::FormatResolver* resolver_;
  bool format_fixed_;
  bool resolved_here_ = false;
  trace::OutcomeJoin* outcomes_;
  uint64_t default_output_length_;
  uint64_t block_size_;
  DenseIds* dense_;
  trace::OutputFile* out_;
  std::string line_;
  BlockHasher turn_hasher_;  // the block key: ids of a turn's new content
  BlockHasher part_hasher_;  // the session key: ids of a session's later parts
  // By hashed session id (16 characters): the session's last turn.
  std::unordered_map<std::string, Session> sessions_;
};

// The two halves joined: batches of lines read ahead and handed to `r->threads` workers (with
// `options`, its session key set), and emitted strictly in input order as each oldest one is
// done. Enough batches stay in flight to keep every worker busy while the oldest is written.
void AnonymizeBatches(const AnonymizeOptions& options, std::optional<TraceFormat> fixed_format,
                      trace::LineReader* reader, trace::Progress* progress,
                      const trace::OutcomeJoin& join, Emitter* emitter, AnonymizeReport* r) {
  OrderedBatches<Batch> pool(r->threads, size_t{r->threads} * 3,
                             [&] { return anonymize_internal::MakeWorker(options, fixed_format); });
  const size_t max_lines = std::max<size_t>(1, options.batch_lines);
  pool.Run(
      [&](Batch* batch) {
        return batch->input.Read(reader, progress, max_lines, kBatchBytes,
                                 {.lines = &r->lines, .blank = &r->blank});
      },
      [&](Batch& batch) {
        emitter->Emit(batch);
        // A sidecar of another file: read no further (AnonymizeTrace then fails the run); the
        // batches in flight are still emitted, as the workers hold them.
        return !join.refused();
      });
}

}  // namespace

AnonymizeReport AnonymizeTrace(const AnonymizeOptions& options) {
  auto start = std::chrono::steady_clock::now();
  AnonymizeReport r;
  r.path = options.path;
  r.skipped.limit = options.max_failures;
  if (options.tokenizer == nullptr || options.key == nullptr) {
    r.io = Status::InvalidArgument("a tokenizer and a key are required");
    return r;
  }
  std::unique_ptr<BlockKey> random_session_key;
  AnonymizeOptions with_keys = options;
  r.session_key_note = options.session_key_note;
  if (with_keys.session_key == nullptr) {
    random_session_key = BlockKey::Random(&r.io);
    if (!random_session_key) return r;
    with_keys.session_key = random_session_key.get();
    r.session_key_note = "random, not saved (hashed ids match no other run)";
  }
  if (options.block_size == 0) {
    r.io = Status::InvalidArgument("--block-size must be at least 1");
    return r;
  }
  if (options.replayer == Replayer::kAiperf && options.block_size != kAiperfBlockSize) {
    const std::string b = std::to_string(options.block_size);
    r.io = Status::InvalidArgument(
        "--block-size " + b +
        ": AIPerf (0.11) rebuilds a mooncake_trace's prompts from hash_ids "
        "in blocks of 512 tokens and refuses --isl-block-size with --input-file, so it would "
        "reject this trace whole; keep --block-size 512 for AIPerf, or add --replayer llmtap "
        "for a trace that only `llmtap replay --block-size " +
        b + "` replays");
    return r;
  }
  r.out = !options.out.empty() ? options.out : trace::DerivedPath(options.path, "", "anonymized");
  if (options.path != "-" && SameFile(options.path, r.out)) {
    r.io = Status::InvalidArgument("the output " + r.out + " is the input file");
    return r;
  }

  trace::FormatResolver resolver;
  resolver.InitFor(options.path, options.format, &r.warnings, " (format taken from the rows)");
  std::optional<TraceFormat> fixed_format;
  if (resolver.format() != TraceFormat::kUnknown) fixed_format = resolver.format();

  trace::OutcomeTable outcomes;
  bool have_outcomes = false;
  r.io = outcomes.LoadFor(options.path, options.outcomes_path, options.no_outcomes, {},
                          &have_outcomes, &r.warnings);
  if (!r.io.ok()) return r;
  if (have_outcomes) r.outcomes_path = outcomes.path();

  DenseIds dense;
  KeyedId fingerprint = BlockHasher(*options.key).Fingerprint();
  if (!options.id_map_path.empty()) {
    bool loaded = false;
    r.io = dense.Load(options.id_map_path, options.block_size, fingerprint, &loaded);
    if (!r.io.ok()) return r;
    r.id_map_path = options.id_map_path;
    r.id_map_loaded = dense.size();
  }

  r.io = trace::CheckOutputPath(r.out, options.force);
  if (!r.io.ok()) return r;
  trace::LineReader reader;
  trace::OutputFile out;
  r.io = trace::OpenInputAndOutput(options.path, &reader, r.out, options.force, &out);
  if (!r.io.ok()) return r;

  r.threads = options.threads ? options.threads : std::max(1u, std::thread::hardware_concurrency());
  trace::Progress progress("anonymize", options.progress);
  trace::OutcomeJoin join(&outcomes, options.path);
  Emitter emitter(with_keys, &r, &resolver, fixed_format.has_value(),
                  have_outcomes ? &join : nullptr, &dense, &out);
  AnonymizeBatches(with_keys, fixed_format, &reader, &progress, join, &emitter, &r);
  progress.Finish();
  r.input_bytes = reader.bytes_consumed();
  if (!reader.status().ok()) r.io = reader.status();
  if (have_outcomes && r.io.ok()) r.io = join.Finish(r.lines);
  if (have_outcomes && !join.refused() && join.mismatched()) {
    r.warnings.push_back(join.MismatchSummary());
  }
  r.outcomes_mismatched = join.mismatched();
  Status closed = out.Close();
  if (r.io.ok()) r.io = closed;
  // Only after a complete run: a map extended by a failed one would number blocks that no
  // output holds.
  if (r.io.ok() && !options.id_map_path.empty()) {
    r.io = dense.Save(options.id_map_path, options.block_size, fingerprint);
    r.id_map_saved = dense.size();
  }
  if (!r.io.ok()) {
    // Ours (created just now), and incomplete: a partial trace would mislead a replay.
    ::unlink(r.out.c_str());
  }
  r.format = resolver.format();
  r.format_source = emitter.resolved_here() ? "first valid row" : resolver.source();
  if (r.without_timestamp > 0) {
    r.warnings.push_back(std::to_string(r.without_timestamp) +
                         " rows have no timestamp (raw_payload input): AIPerf replays them at "
                         "--concurrency or --request-rate; to keep a schedule, run `llmtap "
                         "convert --to mooncake_payload --rate R` first");
  }
  if (r.completions_turns > 0) {
    r.warnings.push_back(
        std::to_string(r.completions_turns) +
        " later session turns are completions requests: AIPerf (0.11) sends a session's turns "
        "to --endpoint-type completions one at a time and fails from its second turn on; replay "
        "them with --endpoint-type chat, or with llmtap replay (its completions prompt is the "
        "conversation so far)");
  }
  if (r.session_ids_dropped > 0) {
    r.warnings.push_back(std::to_string(r.session_ids_dropped) +
                         " rows have a session_id that is not a string (AIPerf takes strings "
                         "only): written without one");
  }
  if (r.rows == 0 && r.io.ok()) r.warnings.push_back("the file holds no rows");
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return r;
}

std::string RenderAnonymizeText(const AnonymizeReport& r, const std::string& tokenizer_note,
                                const std::string& key_note) {
  std::string out =
      trace::RenderIssues(r.path, r.skipped, "more skipped lines not shown", r.warnings);
  if (!r.io.ok()) return out + "error: " + r.io.ToString() + "\n";
  auto num = [](double v, int decimals) {
    char buf[64];
    std::snprintf(buf, sizeof(buf), "%.*f", decimals, v);
    return std::string(buf);
  };
  auto u = [](uint64_t v) { return std::to_string(v); };
  out += r.path + " (" + std::string(trace::TraceFormatName(r.format)) + ", format from " +
         r.format_source + ") -> " + r.out + " (mooncake_trace)\n";
  out += "  rows: " + u(r.written) + " written of " + u(r.rows);
  if (r.skipped.total) {
    out += "; " + u(r.skipped.total) + " skipped (";
    bool first = true;
    for (const auto& [kind, n] : r.skip_reasons) {
      out += (first ? "" : ", ") + kind + " " + u(n);
      first = false;
    }
    out += ")";
  }
  if (r.blank) out += "; " + u(r.blank) + " blank lines";
  out += "\n  tokenizer: " + tokenizer_note + "\n  key: " + key_note + "\n";
  out += "  input tokens: " + u(r.tokens);
  if (r.written) {
    out += " (mean " + num(static_cast<double>(r.tokens) / static_cast<double>(r.written), 1) +
           " per row)";
  }
  out += "\n  blocks: " + u(r.blocks) + ", unique " + u(r.unique_blocks) +
         "; prefix hit rate under an infinite cache: " + num(r.hit_rate(), 4);
  if (r.ids_written != r.blocks) {
    out += " (of the captured prompts; hash_ids written: " + u(r.ids_written) + ")";
  }
  out += "\n";
  if (!r.id_map_path.empty()) {
    out += "  id map: " + r.id_map_path + " (" + u(r.id_map_loaded) + " ids before, " +
           u(r.id_map_saved) + " after)\n";
  }
  if (r.with_session) {
    out += "  sessions: " + u(r.sessions) + " (" + u(r.with_session) +
           " rows), session_id written as its keyed hash; session key: " + r.session_key_note +
           "\n";
    out += "  session turns: " + u(r.turns_as_new_content) +
           " later turns written as their new content (" + u(r.new_content_tokens) +
           " tokens; AIPerf and llmtap replay send each after the conversation so far)";
    if (r.session_parts) {
      out += "; " + u(r.session_parts) + " started a new part of their session, written whole (";
      bool first = true;
      for (const auto& [why, n] : r.session_part_reasons) {
        out += (first ? "" : ", ") + why + ": " + u(n);
        first = false;
      }
      out += ")";
    }
    out += "\n";
  }
  out += "  output_length from: outcomes " + u(r.from_outcomes) + ", max_tokens " +
         u(r.from_max_tokens) + ", default " + u(r.from_default);
  if (!r.outcomes_path.empty()) {
    out += " (sidecar " + r.outcomes_path;
    if (!r.outcome_fallbacks.empty()) {
      out += "; not used:";
      for (const auto& [why, n] : r.outcome_fallbacks) out += " " + why + " " + u(n) + ",";
      out.pop_back();
    }
    out += ")";
  }
  out += "\n";
  if (r.output_raised) {
    out += "  output_length 0 written as 1 (AIPerf refuses 0): " + u(r.output_raised) + " rows (";
    bool first = true;
    for (const auto& [why, n] : r.output_raised_from) {
      out += (first ? "" : ", ") + why + ": " + u(n);
      first = false;
    }
    out += ")\n";
  }
  if (r.rows_big_integers) {
    out += "  " + u(r.rows_big_integers) +
           " rows hold an integer beyond 64 bits: read as a double, as AIPerf reads it\n";
  }
  double mb = static_cast<double>(r.input_bytes) / 1e6;
  out += "  " + num(r.seconds, 2) + " s on " + u(r.threads) +
         " threads: " + num(r.seconds > 0 ? static_cast<double>(r.rows) / r.seconds : 0, 0) +
         " rows/s, " + num(r.seconds > 0 ? mb / r.seconds : 0, 1) + " MB/s\n";
  return out;
}

}  // namespace llmtap::anonymize
