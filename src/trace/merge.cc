#include "trace/merge.h"

#include "trace/merge_internal.h"

namespace llmtap::trace {

namespace merge_internal {

Status Merger::Open(Cursor* c) {
  const SegmentManifest::Object* o =
      c->manifest ? c->manifest->DataObjectNamed(BaseName(c->path)) : nullptr;
  store::SourceOptions so;
  // The read-ahead buffer of an s3:// segment is its second buffer (merge.h).
  so.s3_buffer_bytes = r_.chunk_bytes;
  so.s3_clients = pool_.get();
  if (store::IsS3Url(c->path)) so.s3_size = c->stored_bytes;  // the listing's or HEAD's
  // Hashing costs ~0.6 ms per MB of one core (SHA extensions), on the read-ahead thread for
  // s3:// segments.
  if (o != nullptr && !o->sha256.empty()) {
    c->sha = std::make_unique<store::Sha256>();
    so.on_stored = [sha = c->sha.get()](std::string_view bytes) { sha->Update(bytes); };
  }
  // A segment whose manifest gives its SHA-256 was uploaded by the capture's uploader: its
  // bytes are the capture writer's, whose rows are `{"timestamp":N,"payload":P}` with P
  // validated when recorded (capture/json_compact.h), and the SHA-256 and line count at its end
  // say whether they still are. Such rows need no parse to be placed: MatchCaptureRow takes
  // the timestamp from the framing, and leaves to the parser any row of another shape and any
  // holding what the parser could refuse where the capture's validator accepted it, so an
  // intact segment is merged exactly as a parse of every row would merge it. (A segment
  // changed after the upload is reported by its SHA-256 at its end either way; only then could
  // a row the parser would have refused be written.) Parsing is most of merge's own CPU.
  c->capture_rows = c->sha != nullptr;
  c->reader.emplace(r_.chunk_bytes);
  Status s = c->reader->Open(c->path, so);
  c->state = Cursor::State::kDone;
  if (!s.ok()) {
    c->reader->Close();
    c->sha.reset();
    if (c->listed && s.code() == Status::Code::kNotFound) {
      Issue(*c, "deleted from the store after it was listed; skipped");
      return Status::Ok();
    }
    return s;
  }
  if (o != nullptr && o->bytes && *o->bytes != c->reader->file_size() && c->path != "-") {
    Issue(*c, "holds " + std::to_string(c->reader->file_size()) + " bytes, its manifest says " +
                  std::to_string(*o->bytes) + " (replaced or damaged after the upload?); skipped");
    c->reader->Close();
    c->sha.reset();
    return Status::Ok();
  }
  c->state = Cursor::State::kOpen;
  c->merged = true;
  r_.max_open = std::max(r_.max_open, ++open_);
  return Status::Ok();
}

// Advances to the next usable row; rows that cannot be merged are reported and skipped.
void Merger::Advance(Cursor* c) {
  c->has_row = false;
  while (c->reader->Next(&c->line)) {
    auto skip = [&](const std::string& why) {
      r_.skipped.Add(c->line.number, Located(c->path, c->line.number, why));
    };
    TraceFormat f;
    std::optional<double> ts;
    double capture_ts = 0;
    // A torn last line is the capture cut mid-write: always parsed.
    if (c->capture_rows && !c->line.torn &&
        MatchCaptureRow(TrimJsonWhitespace(c->line.bytes), &capture_ts)) {
      f = TraceFormat::kMooncake;
      ts = capture_ts;
    } else {
      const ParsedRow& row = parser_.Parse(c->line.bytes);
      if (row.status == ParseStatus::kBlank) continue;
      if (row.status != ParseStatus::kOk) {
        skip(c->line.torn ? "torn last line, skipped: " + row.error : row.error);
        continue;
      }
      f = RowFormat(row.object);
      ts = RowTimestamp(row.object);
    }
    if (c->format == TraceFormat::kUnknown) {
      c->format = f;
      if (f == TraceFormat::kRaw) return;  // the caller refuses the input
    }
    if (f != c->format) {
      skip("a " + std::string(TraceFormatName(f)) + " row in a " +
           std::string(TraceFormatName(c->format)) + " file");
      continue;
    }
    if (!ts) {
      skip("no numeric 'timestamp'; a row without one cannot be placed in time");
      continue;
    }
    if (*ts < 0) {
      // Captures count from 0, and a segment is opened at its epoch: an earlier row could not
      // be placed in order (AIPerf refuses it too).
      skip("negative 'timestamp'; skipped");
      continue;
    }
    if (c->last_ts && *ts < *c->last_ts) {
      skip("timestamp decreases (inputs must be in time order, as captures are); skipped");
      continue;
    }
    c->last_ts = ts;
    c->ts_ms = *ts;
    c->abs_ms = c->epoch_ms + *ts;
    if (o_.to_unix_ms && c->abs_ms >= static_cast<double>(*o_.to_unix_ms)) {
      // Rows are in time order: nothing later in this segment is in the window either.
      ++r_.rows_outside_window;
      c->cut = true;
      return;
    }
    if (o_.from_unix_ms && c->abs_ms < static_cast<double>(*o_.from_unix_ms)) {
      ++r_.rows_outside_window;
      continue;
    }
    c->has_row = true;
    return;
  }
}

// A cursor with no more rows: its read status and the checks against its manifest, then its
// buffers are freed.
Status Merger::Finish(Cursor* c) {
  if (c->state != Cursor::State::kOpen) return Status::Ok();
  c->state = Cursor::State::kDone;
  --open_;
  LineReader& reader = *c->reader;
  // The buffers and the download go now; the counts stay.
  reader.Close();
  done_bytes_ += reader.stored_position();
  const Status read = reader.status();
  const std::string merged = std::to_string(c->rows) + " rows were merged before this showed";
  if (!read.ok()) {
    // Damaged data (corrupt or cut zstd, an object deleted while read) is this segment's
    // problem; a store or disk that fails is everyone's.
    const bool damaged = read.code() == Status::Code::kInvalidArgument ||
                         (c->listed && read.code() == Status::Code::kNotFound);
    if (!damaged) return read;
    Issue(*c, read.message() + "; " + merged);
    return Status::Ok();
  }
  const SegmentManifest* m = c->manifest ? &*c->manifest : nullptr;
  if (m && reader.finished() && !c->cut) {
    if (m->records && *m->records != reader.complete_lines()) {
      Issue(*c, "holds " + std::to_string(reader.complete_lines()) + " lines, its manifest says " +
                    std::to_string(*m->records) + "; " + merged);
    }
    const SegmentManifest::Object* o = m->DataObjectNamed(BaseName(c->path));
    if (o != nullptr && !o->sha256.empty() && c->sha) {
      // At the end of the data every call of the hook has returned (stream.h).
      std::string sha = c->sha->HexDigest();
      if (sha != o->sha256) {
        Issue(*c, "SHA-256 of the stored bytes is " + sha.substr(0, 16) +
                      "..., its manifest says " + o->sha256.substr(0, 16) +
                      "... (changed after the upload); " + merged +
                      ": merge again without it (--replica, --from/--to) or re-upload it");
      }
    }
  }
  c->sha.reset();
  return Status::Ok();
}

void Merger::Run() {
  if (o_.inputs.empty()) {
    r_.io = Status::InvalidArgument("no inputs to merge");
    return;
  }
  if (o_.out.empty()) {
    r_.io = Status::InvalidArgument("an output file is required (-o OUT)");
    return;
  }
  if (o_.from_unix_ms && o_.to_unix_ms && *o_.from_unix_ms >= *o_.to_unix_ms) {
    r_.io = Status::InvalidArgument("--from must be before --to");
    return;
  }
  // Before any listing or reading: an output that would be refused fails fast, and so does
  // its manifest (OUT.jsonl and OUT.jsonl.zst share one), not after the data is written.
  r_.io = CheckOutputPath(o_.out, o_.force);
  if (r_.io.ok()) r_.io = CheckOutputPath(ManifestPath(), o_.force);
  if (!r_.io.ok()) return;
  r_.io = Plan();
  client_.reset();  // its connection goes to the first segment downloaded
  if (!r_.io.ok()) return;
  if (cursors_.empty() && r_.segments_outside_window > 0) {
    r_.warnings.push_back("no segment overlaps the window [--from, --to)");
  }

  // Segments whose format no manifest gives are read first: their first rows decide it.
  std::priority_queue<Cursor*, std::vector<Cursor*>, Later> heap;
  for (auto& c : cursors_) {
    if (c->lazy) {
      heap.push(c.get());
      continue;
    }
    r_.io = Open(c.get());
    if (!r_.io.ok()) return;
    if (c->state != Cursor::State::kOpen) continue;
    Advance(c.get());
    TraceFormat f = c->format;
    if (f != TraceFormat::kUnknown) {
      if (r_.format == TraceFormat::kUnknown) r_.format = f;
      if (f != r_.format) {
        r_.io = Status::InvalidArgument("inputs in different formats: " + cursors_[0]->path +
                                        " vs " + c->path + "; convert them to one format first");
        return;
      }
    }
    if (c->has_row) {
      heap.push(c.get());
    } else if (r_.io = Finish(c.get()); !r_.io.ok()) {
      return;
    }
  }
  if (r_.format == TraceFormat::kRaw) {
    r_.io = Status::InvalidArgument(
        "the inputs are raw_payload: no timestamps to merge on; "
        "convert them with `llmtap convert --to mooncake_payload`");
    return;
  }
  OutputFile out;
  r_.io = out.Open(o_.out, o_.force);
  if (!r_.io.ok()) return;
  Progress progress("merge", o_.progress);
  std::optional<double> base, last_written;
  while (!heap.empty()) {
    Cursor* c = heap.top();
    heap.pop();
    if (c->state == Cursor::State::kPending) {
      r_.io = Open(c);
      if (!r_.io.ok()) break;
      if (c->state != Cursor::State::kOpen) continue;
      Advance(c);
    } else {
      if (!base) base = c->abs_ms;
      // Written straight into the output's buffer: the row with its timestamp replaced (a
      // number of at most 24 characters for the at least one it replaces).
      const std::string_view row = TrimJsonWhitespace(c->line.bytes);
      std::string* buf = out.BeginLine(row.size() + 24 + c->session_prefix.size());
      const size_t line_start = buf->size();
      if (!AppendWithTimestamp(row, c->abs_ms - *base, buf)) {
        r_.skipped.Add(c->line.number,
                       Located(c->path, c->line.number, "timestamp key written with escapes"));
      } else {
        if (!c->session_prefix.empty()) {
          std::string_view written(buf->data() + line_start, buf->size() - line_start);
          if (std::optional<Span> id = FindSessionId(written)) {
            buf->insert(line_start + id->begin + 1, c->session_prefix);
            ++r_.session_rows_qualified;
          }
        }
        out.EndLine();
        ++r_.written;
        ++c->rows;
        last_written = c->abs_ms - *base;
      }
      Advance(c);
      if ((r_.written & 1023) == 0) {
        uint64_t done = done_bytes_;
        for (auto& k : cursors_) {
          if (k->state == Cursor::State::kOpen) done += k->reader->stored_position();
        }
        progress.Update(done, total_bytes_);
      }
    }
    if (c->has_row) {
      heap.push(c);
    } else if (r_.io = Finish(c); !r_.io.ok()) {
      break;
    }
  }
  progress.Finish();
  if (pool_) r_.store_clients = pool_->clients_made();
  for (auto& c : cursors_) {
    if (!c->merged) continue;
    r_.inputs.push_back({c->path, c->replica,
                         c->manifest ? c->manifest->timestamp_zero_unix_ms : std::nullopt,
                         c->rows});
  }
  Status closed = out.Close();
  if (r_.io.ok()) r_.io = closed;
  if (!r_.io.ok()) return;
  if (all_epochs_ && base) r_.epoch_ms = static_cast<int64_t>(*base);
  WriteManifest(last_written);
}

// A manifest for the merged file, so it can be merged again or described by stats.
void Merger::WriteManifest(const std::optional<double>& last_ts) {
  nlohmann::ordered_json j;
  j["schema"] = "llmtap.capture.manifest/v1";
  j["capture_path"] = o_.out;
  j["format"] = "mooncake_payload";
  if (r_.epoch_ms) {
    j["timestamp_zero_unix_ms"] = *r_.epoch_ms;
    j["timestamp_zero_utc"] = FormatUtcMillis(*r_.epoch_ms * 1000000);
  } else {
    j["timestamp_zero_unix_ms"] = nullptr;
    j["timestamp_zero_utc"] = nullptr;
  }
  j["state"] = "stopped";
  // This file's own rows and span, as a capture's manifest gives them (stats compares the
  // rows; a later merge uses the span to skip the file outside its window).
  j["file"] = {{"records", r_.written},
               {"last_timestamp_ms", static_cast<int64_t>(last_ts.value_or(0))}};
  nlohmann::ordered_json from = nlohmann::ordered_json::array();
  for (const MergeInputSummary& in : r_.inputs) from.push_back(in.path);
  j["merged_from"] = from;
  if (o_.from_unix_ms || o_.to_unix_ms) {
    j["window"] = {{"from_unix_ms", o_.from_unix_ms ? nlohmann::ordered_json(*o_.from_unix_ms)
                                                    : nlohmann::ordered_json(nullptr)},
                   {"to_unix_ms", o_.to_unix_ms ? nlohmann::ordered_json(*o_.to_unix_ms)
                                                : nlohmann::ordered_json(nullptr)}};
  }
  if (!o_.replica_globs.empty()) j["replica_globs"] = o_.replica_globs;
  if (r_.epochs_recovered > 0) j["epochs_recovered"] = r_.epochs_recovered;
  if (!r_.segment_issues.empty()) {
    nlohmann::ordered_json issues = nlohmann::ordered_json::array();
    for (const SegmentIssue& i : r_.segment_issues) {
      issues.push_back({{"data", i.data}, {"reason", i.reason}});
    }
    j["segment_issues"] = issues;
  }
  // Counters are a capture process's whole run so far, and every file of a rotated run
  // repeats them: summing segments would count a run once per file. So: per run, the counters
  // of its latest merged file; summed over runs (an input whose manifest does not name its
  // process counts as a run of its own).
  std::map<std::string, const Cursor*> latest;
  for (auto& c : cursors_) {
    if (!c->merged || !c->manifest) continue;
    std::string run = c->replica;
    run.append("|").append(c->manifest->run.empty() ? std::to_string(c->index) : c->manifest->run);
    auto [it, inserted] = latest.emplace(run, c.get());
    if (inserted) continue;
    auto order = [](const Cursor* k) {
      return std::make_pair(k->manifest->file_sequence.value_or(0), k->epoch_ms);
    };
    if (order(c.get()) > order(it->second)) it->second = c.get();
  }
  nlohmann::ordered_json counters = nlohmann::ordered_json::object();
  for (const auto& [run, c] : latest) {
    for (const auto& [k, v] : c->manifest->counters) {
      counters[k] = (counters.contains(k) ? counters[k].get<uint64_t>() : 0) + v;
    }
  }
  j["counters"] = counters;
  r_.out_manifest = ManifestPath();
  OutputFile mf;
  r_.io = mf.Open(r_.out_manifest, o_.force);
  if (r_.io.ok()) {
    mf.WriteLine(j.dump(2, ' ', false, nlohmann::ordered_json::error_handler_t::replace));
    r_.io = mf.Close();
  }
}

}  // namespace merge_internal

using merge_internal::Merger;
using merge_internal::MiB;


MergeReport MergeTraces(const MergeOptions& options) {
  MergeReport r;
  Merger(options, &r).Run();
  return r;
}

std::string RenderMergeText(const MergeReport& r) {
  std::string out = RenderIssues("", r.skipped, "more skipped lines not shown", r.warnings);
  // A live fleet has a segment uploading per replica; hundreds of lines would bury the rest.
  constexpr size_t kIssues = 50;
  for (size_t i = 0; i < r.segment_issues.size() && i < kIssues; ++i) {
    out += "segment " + r.segment_issues[i].data + ": " + r.segment_issues[i].reason + "\n";
  }
  if (r.segment_issues.size() > kIssues) {
    out += "... " + std::to_string(r.segment_issues.size() - kIssues) +
           " more segments skipped or failing a check" +
           (r.out_manifest.empty() ? "" : " (all are listed in " + r.out_manifest + ")") + "\n";
  }
  if (!r.io.ok()) return out + "error: " + r.io.ToString() + "\n";
  out += r.out + ": " + std::to_string(r.written) + " rows (" +
         std::string(TraceFormatName(r.format)) + ")";
  if (r.epoch_ms) out += ", timestamp 0 = " + FormatUtcMillis(*r.epoch_ms * 1000000);
  out += "\n";
  if (r.rows_outside_window > 0 || r.segments_outside_window > 0) {
    out += "  window: " + std::to_string(r.rows_outside_window) + " rows read and left out, " +
           std::to_string(r.segments_outside_window) + " segments outside it not read\n";
  }
  if (r.session_ids_qualified && r.session_rows_qualified > 0) {
    out += "  session ids: " + std::to_string(r.session_rows_qualified) +
           " rows have theirs written as <replica>:<id>, so that replicas' ids stay distinct "
           "(--keep-session-ids writes them as they are)\n";
  }
  if (!r.replicas_filtered_out.empty()) {
    out += "  --replica left out:";
    for (const std::string& f : r.replicas_filtered_out) out += " " + f;
    out += "\n";
  }
  constexpr size_t kListed = 40;
  uint64_t rest_rows = 0;
  for (size_t i = 0; i < r.inputs.size(); ++i) {
    const MergeInputSummary& in = r.inputs[i];
    if (i >= kListed) {
      rest_rows += in.rows;
      continue;
    }
    out += "  " + std::to_string(in.rows) + " rows from " + in.path;
    if (in.epoch_ms) out += " (epoch " + FormatUtcMillis(*in.epoch_ms * 1000000) + ")";
    out += "\n";
  }
  if (r.inputs.size() > kListed) {
    out += "  ... " + std::to_string(rest_rows) + " rows from " +
           std::to_string(r.inputs.size() - kListed) + " more segments\n";
  }
  if (r.inputs.size() > 1) {
    out += "  " + std::to_string(r.inputs.size()) + " segments, at most " +
           std::to_string(r.max_open) + " open at once, read " + MiB(r.chunk_bytes) +
           " at a time\n";
  }
  if (!r.out_manifest.empty()) out += "  manifest: " + r.out_manifest + "\n";
  return out;
}

Status ParseTimeArg(std::string_view text, int64_t* unix_ms) {
  // (Built with append: GCC 12 sees a false -Wrestrict in "'" + std::string.)
  const std::string quoted = std::string(1, '\'').append(text).append(1, '\'');
  const std::string bad = quoted +
                          " is not a time: give ISO-8601 UTC (2026-12-04T10:00:00Z, "
                          "2026-12-04T10:00:00.250Z) or Unix milliseconds (1796378400000)";
  if (text.empty()) return Status::InvalidArgument(bad);
  if (std::all_of(text.begin(), text.end(), [](char ch) { return ch >= '0' && ch <= '9'; })) {
    if (text.size() > 15) return Status::InvalidArgument(bad);
    int64_t v = std::stoll(std::string(text));
    if (v < 100000000000) {
      // 1e11 ms is March 1973: a smaller number is almost surely seconds.
      return Status::InvalidArgument(quoted + " looks like Unix seconds; give milliseconds (" +
                                     std::string(text) + "000) or ISO-8601 UTC");
    }
    *unix_ms = v;
    return Status::Ok();
  }
  // YYYY-MM-DDTHH:MM:SS[.fraction](Z|+00:00)
  auto digits = [&](size_t pos, size_t n, int* out) {
    if (pos + n > text.size()) return false;
    int v = 0;
    for (size_t i = pos; i < pos + n; ++i) {
      if (!std::isdigit(static_cast<unsigned char>(text[i]))) return false;
      v = v * 10 + (text[i] - '0');
    }
    *out = v;
    return true;
  };
  int year, month, day, hour, minute, second;
  if (!digits(0, 4, &year) || text.size() < 19 || text[4] != '-' || !digits(5, 2, &month) ||
      text[7] != '-' || !digits(8, 2, &day) ||
      (text[10] != 'T' && text[10] != 't' && text[10] != ' ') || !digits(11, 2, &hour) ||
      text[13] != ':' || !digits(14, 2, &minute) || text[16] != ':' || !digits(17, 2, &second)) {
    return Status::InvalidArgument(bad);
  }
  size_t pos = 19;
  int millis = 0;
  if (pos < text.size() && text[pos] == '.') {
    size_t n = 0;
    for (++pos; pos < text.size() && std::isdigit(static_cast<unsigned char>(text[pos])); ++pos) {
      if (n < 3) millis = millis * 10 + (text[pos] - '0');
      ++n;
    }
    if (n == 0) return Status::InvalidArgument(bad);
    for (; n < 3; ++n) millis *= 10;
  }
  std::string_view zone = text.substr(pos);
  if (zone != "Z" && zone != "z" && zone != "+00:00") {
    return Status::InvalidArgument(
        bad + (zone.empty() ? " (the time needs its zone: 'Z' for UTC)" : " (UTC only)"));
  }
  if (month < 1 || month > 12 || day < 1 || day > 31 || hour > 23 || minute > 59 || second > 60) {
    return Status::InvalidArgument(bad);
  }
  struct tm tm = {};
  tm.tm_year = year - 1900;
  tm.tm_mon = month - 1;
  tm.tm_mday = day;
  tm.tm_hour = hour;
  tm.tm_min = minute;
  tm.tm_sec = second;
  time_t secs = ::timegm(&tm);
  if (tm.tm_mday != day) return Status::InvalidArgument(bad);  // 2026-02-30 rolled over
  *unix_ms = static_cast<int64_t>(secs) * 1000 + millis;
  return Status::Ok();
}

}  // namespace llmtap::trace
