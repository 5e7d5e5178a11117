#include "trace/merge.h"

#include <sys/stat.h>

#include <algorithm>
#include <cctype>
#include <ctime>
#include <limits>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <queue>
#include <set>

#include "capture/file_names.h"
#include "capture/manifest.h"
#include "common/json_escape.h"
#include "store/s3_url.h"
#include "store/sha256.h"
#include "store/stream.h"
#include "trace/line_reader.h"
#include "trace/trace_io.h"

namespace llmtap::trace {

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

std::string_view BaseName(std::string_view path) {
  size_t slash = path.rfind('/');
  return slash == std::string_view::npos ? path : path.substr(slash + 1);
}

// A compressed file's manifest is named after the uncompressed file it describes.
std::string WithoutZst(const std::string& path) {
  return path.ends_with(".zst") ? path.substr(0, path.size() - 4) : path;
}

std::string MiB(size_t n) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2g MiB", static_cast<double>(n) / (1 << 20));
  return buf;
}

// One segment to read and its place in the merge.
struct Cursor {
  enum class State { kPending, kOpen, kDone };
  size_t index = 0;
  std::string path;
  std::string replica;                   // folder under a prefix; empty for inputs named one by one
  bool listed = false;                   // found under a prefix (a bad one is skipped, not fatal)
  std::optional<uint64_t> stored_bytes;  // size known before opening (listing, HEAD, stat)
  std::optional<SegmentManifest> manifest;
  double epoch_ms = 0;
  State state = State::kPending;
  // Opened when the merge reaches key_ms (its epoch), not before: see merge.h.
  bool lazy = false;
  double key_ms = 0;
  // Made when the segment is opened (with the read size of the merge), closed at its end.
  std::optional<LineReader> reader;
  std::unique_ptr<store::Sha256> sha;  // of the stored bytes, when the manifest gives one
  // Rows in the capture writer's framing are taken without a parse (see Open).
  bool capture_rows = false;
  Line line;
  double abs_ms = 0;  // of the current row
  double ts_ms = 0;
  bool has_row = false;
  TraceFormat format = TraceFormat::kUnknown;  // the manifest's, else of the first valid row
  uint64_t rows = 0;
  std::optional<double> last_ts;
  bool cut = false;     // reading stopped at --to, before the end
  bool merged = false;  // opened and read (not skipped)
  // Written before each row's session_id when the inputs come from several replicas: the
  // replica's name and ':', escaped for a JSON string (empty: ids written as they are).
  std::string session_prefix;

  double when() const { return state == State::kPending ? key_ms : abs_ms; }
};

struct Later {
  // priority_queue keeps the largest on top: "a after b" puts the earliest first; ties go
  // to the lower input index (line order within an input is the cursor's own order). A
  // pending segment sorts at its epoch, a lower bound of its rows (timestamps are >= 0), so
  // it is opened before any of its rows is due.
  bool operator()(const Cursor* a, const Cursor* b) const {
    if (a->when() != b->when()) return a->when() > b->when();
    return a->index > b->index;
  }
};

class Merger {
 public:
  Merger(const MergeOptions& options, MergeReport* r) : o_(options), r_(*r) {
    r_.out = options.out;
    r_.skipped.limit = options.max_failures;
  }
  void Run();

 private:
  Status Client(const std::string& input);
  Status AddInput(const std::string& input);
  Status AddNamed(const std::string& path, std::optional<uint64_t> stored_bytes);
  Status Plan();
  void Advance(Cursor* c);
  Status Open(Cursor* c);
  Status Finish(Cursor* c);
  void WriteManifest(const std::optional<double>& last_ts);
  void QualifySessionIds();
  // Named after the uncompressed output, as every reader (and the uploader) names it.
  std::string ManifestPath() const { return ManifestPathFor(WithoutZst(o_.out)); }
  void Issue(const Cursor& c, std::string why) {
    r_.segment_issues.push_back({c.path, std::move(why)});
  }

  const MergeOptions& o_;
  MergeReport& r_;
  // Every S3 request of the merge borrows from this: the listing, HEADs, and each open
  // segment's read-ahead (a connection per segment being downloaded, reused by the next).
  std::unique_ptr<store::S3ClientPool> pool_;
  store::S3ClientPool::Lease client_;  // for listing and HEADs, while planning
  std::vector<std::unique_ptr<Cursor>> cursors_;
  std::set<std::string> seen_;
  std::vector<std::string> prefixes_;  // the s3:// prefixes listed
  RowParser parser_;  // one for all cursors: a row is parsed, placed, and its parse dropped
  size_t open_ = 0;
  uint64_t done_bytes_ = 0;
  uint64_t total_bytes_ = 0;
  bool all_epochs_ = true;
};

// The S3 clients of the merge, made at the first s3:// input.
Status Merger::Client(const std::string& input) {
  if (client_) return Status::Ok();
  if (!pool_) {
    Status s = store::S3ClientPool::FromEnvironment(&pool_);
    if (!s.ok()) return Status::InvalidArgument(input + ": " + s.message());
  }
  client_ = pool_->Acquire();
  return Status::Ok();
}

// A local file or one s3:// object, with the manifest beside it.
Status Merger::AddNamed(const std::string& path, std::optional<uint64_t> stored_bytes) {
  auto c = std::make_unique<Cursor>();
  c->path = path;
  c->stored_bytes = stored_bytes;
  if (path != "-") {
    const std::string mpath = ManifestPathFor(WithoutZst(path));
    std::string text;
    Status s = store::ReadWhole(mpath, &text);
    if (s.ok()) {
      SegmentManifest m;
      s = ParseSegmentManifest(text, mpath, &m);
      if (!s.ok()) return s;
      c->manifest = std::move(m);
    } else if (s.code() != Status::Code::kNotFound) {
      return s;
    }
    if (!store::IsS3Url(path)) {
      struct stat st;
      if (::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode)) {
        c->stored_bytes = static_cast<uint64_t>(st.st_size);
      }
    }
  }
  cursors_.push_back(std::move(c));
  return Status::Ok();
}

Status Merger::AddInput(const std::string& input) {
  if (!store::IsS3Url(input)) return AddNamed(input, std::nullopt);
  store::S3Url url;
  Status s = store::ParseS3Url(input, &url);
  if (!s.ok()) return s;
  s = Client(input);
  if (!s.ok()) return s;
  if (!url.key.empty() && url.key.back() != '/') {
    uint64_t size = 0;
    s = client_->HeadObject(url.bucket, url.key, &size);
    if (s.ok()) return AddNamed(input, size);
    if (s.code() != Status::Code::kNotFound) {
      std::string hint = store::S3Hint(client_->last_http_status(), client_->last_error_code());
      return Status::IoError(input + ": " + s.message() + (hint.empty() ? "" : "; " + hint));
    }
    // "s3://bucket/fleet" typed without its slash: a prefix, if anything is under it.
  }
  ListOptions lo;
  lo.replica_globs = o_.replica_globs;
  StoreListing listing;
  s = ListStoreSegments(client_.get(), input, lo, &listing);
  if (!s.ok()) {
    if (!url.key.empty() && url.key.back() != '/' && s.code() == Status::Code::kNotFound &&
        listing.objects == 0 && client_->last_error_code() != "NoSuchBucket") {
      return Status::NotFound("no object " + input + " (HTTP 404), and nothing under " + input +
                              "/ either: check the address");
    }
    return s;
  }
  prefixes_.push_back(listing.url);
  for (SegmentIssue& i : listing.skipped) r_.segment_issues.push_back(std::move(i));
  for (const std::string& f : listing.filtered_out) r_.replicas_filtered_out.push_back(f);
  for (StoreSegment& seg : listing.segments) {
    auto c = std::make_unique<Cursor>();
    c->path = std::move(seg.data);
    c->replica = std::move(seg.replica);
    c->listed = true;
    c->stored_bytes = seg.listed_bytes;
    c->manifest = std::move(seg.manifest);
    cursors_.push_back(std::move(c));
  }
  return Status::Ok();
}

// Inputs into cursors: epochs, formats, the window, which segments are opened lazily, and
// the read size.
Status Merger::Plan() {
  for (const std::string& in : o_.inputs) {
    Status s = AddInput(in);
    if (!s.ok()) return s;
  }
  if (!o_.replica_globs.empty() && prefixes_.empty()) {
    r_.warnings.push_back("--replica applies to s3:// prefixes, and no input is one: ignored");
  }
  for (const std::string& p : prefixes_) {
    if (o_.out.starts_with(p)) {
      r_.warnings.push_back(o_.out + " is under the input prefix " + p +
                            ": a later merge of that prefix would take it for a segment");
    }
  }
  // The same segment named twice (a prefix and an object in it) would be merged twice.
  std::vector<std::unique_ptr<Cursor>> unique;
  for (auto& c : cursors_) {
    if (c->path != "-" && !seen_.insert(c->path).second) {
      r_.warnings.push_back(c->path + " is given more than once; merged once");
      continue;
    }
    unique.push_back(std::move(c));
  }
  cursors_.clear();
  // Segments under a prefix with no usable epoch are skipped; inputs named one by one follow
  // the --assume-aligned rule.
  std::string missing_epoch;
  for (auto& c : unique) {
    const SegmentManifest* m = c->manifest ? &*c->manifest : nullptr;
    if (c->listed && !m->timestamp_zero_unix_ms) {
      Issue(*c, "its manifest has no timestamp_zero_unix_ms; skipped");
      continue;
    }
    if (!m || !m->timestamp_zero_unix_ms) {
      all_epochs_ = false;
      if (missing_epoch.empty()) missing_epoch = c->path;
      if (!o_.assume_aligned) {
        return Status::InvalidArgument(
            c->path +
            (m ? ": its manifest has no timestamp_zero_unix_ms (no row recorded?)"
               : ": no manifest (" + ManifestPathFor(WithoutZst(c->path)) + ")") +
            "; merge places replicas on wall-clock time from each manifest. Pass "
            "--assume-aligned if the inputs' timestamp 0 are the same instant.");
      }
    }
    if (m && ParseTraceFormat(m->format) == TraceFormat::kRaw) {
      return Status::InvalidArgument(
          c->path +
          " is raw_payload: its rows have no timestamps to merge on; convert it with "
          "`llmtap convert --to mooncake_payload` first" +
          (c->listed ? " (or leave its replica out with --replica)" : ""));
    }
    cursors_.push_back(std::move(c));
  }
  if (!all_epochs_ && (o_.from_unix_ms || o_.to_unix_ms)) {
    return Status::InvalidArgument("--from/--to are wall-clock times, and " + missing_epoch +
                                   " has no manifest epoch to place its rows on that clock");
  }
  if (!all_epochs_ && std::any_of(cursors_.begin(), cursors_.end(), [](auto& c) {
        return c->manifest && c->manifest->timestamp_zero_unix_ms;
      })) {
    // With --assume-aligned, mixing inputs with and without epochs would misplace rows.
    r_.warnings.push_back(
        "some inputs have a manifest epoch and some do not; with "
        "--assume-aligned every input is taken to start at the same "
        "instant and the epochs are ignored");
  }

  // The window: segments wholly outside it are dropped unread.
  std::vector<std::unique_ptr<Cursor>> kept;
  for (auto& c : cursors_) {
    const SegmentManifest* m = c->manifest ? &*c->manifest : nullptr;
    c->epoch_ms = all_epochs_ ? static_cast<double>(*m->timestamp_zero_unix_ms) : 0.0;
    if (all_epochs_) {
      const double start = c->epoch_ms;
      const double end =
          m->last_timestamp_ms ? start + static_cast<double>(*m->last_timestamp_ms) : kInf;
      if ((o_.to_unix_ms && start >= static_cast<double>(*o_.to_unix_ms)) ||
          (o_.from_unix_ms && end < static_cast<double>(*o_.from_unix_ms))) {
        ++r_.segments_outside_window;
        continue;
      }
    }
    kept.push_back(std::move(c));
  }
  cursors_ = std::move(kept);
  for (size_t i = 0; i < cursors_.size(); ++i) cursors_[i]->index = i;

  // One format for all, from the manifests where they say it.
  const Cursor* first = nullptr;
  for (auto& c : cursors_) {
    if (!c->manifest) continue;
    std::optional<TraceFormat> f = ParseTraceFormat(c->manifest->format);
    if (!f) continue;
    c->format = *f;
    c->lazy = all_epochs_;
    c->key_ms = c->epoch_ms;
    if (!first) {
      first = c.get();
      r_.format = *f;
    } else if (*f != r_.format) {
      return Status::InvalidArgument("inputs in different formats: " + first->path + " vs " +
                                     c->path + "; convert them to one format first");
    }
  }

  // The read size: the budget over the most segments open at once. A lazy segment is open
  // over [epoch, epoch + last_timestamp_ms] (to the end of time when the manifest does not
  // say); the others from the start. Two buffers each: lines, and an s3:// segment's read-ahead.
  std::vector<std::pair<double, int>> events;
  for (auto& c : cursors_) {
    const SegmentManifest* m = c->manifest ? &*c->manifest : nullptr;
    const double start = c->lazy ? c->epoch_ms : -kInf;
    const double end = c->lazy && m->last_timestamp_ms
                           ? c->epoch_ms + static_cast<double>(*m->last_timestamp_ms)
                           : kInf;
    events.push_back({start, -1});  // starts sort before ends at the same instant
    events.push_back({end, +1});
  }
  std::sort(events.begin(), events.end());
  size_t now = 0;
  for (auto& [t, kind] : events) {
    if (kind < 0) {
      r_.planned_open = std::max(r_.planned_open, ++now);
    } else {
      --now;
    }
  }
  const size_t share = o_.read_budget_bytes / (2 * std::max<size_t>(r_.planned_open, 1));
  r_.chunk_bytes =
      std::clamp(share, o_.min_chunk_bytes, std::max(o_.min_chunk_bytes, o_.max_chunk_bytes));
  for (auto& c : cursors_) total_bytes_ += c->stored_bytes.value_or(0);
  QualifySessionIds();
  return Status::Ok();
}

// A session id names a conversation within the replica that recorded it (ids inferred by
// `llmtap sessions` per replica are "s1", "s2", ... everywhere), so when the inputs come from
// several replicas each id is written as "<replica>:<id>". A replica is the folder it was
// listed from, else its manifest's replica (uploader) or host, else the input as named.
// --keep-session-ids writes them unchanged (ids that already name conversations fleet-wide).
void Merger::QualifySessionIds() {
  std::set<std::string> names;
  std::vector<std::string> of(cursors_.size());
  for (size_t i = 0; i < cursors_.size(); ++i) {
    const Cursor& c = *cursors_[i];
    const SegmentManifest* m = c.manifest ? &*c.manifest : nullptr;
    if (!c.replica.empty()) {
      of[i] = c.replica;
    } else if (m && !m->replica.empty()) {
      of[i] = m->replica;
    } else if (m && !m->run.empty()) {
      of[i] = m->run.substr(0, m->run.find('|'));
    } else {
      of[i] = c.path;
    }
    names.insert(of[i]);
  }
  if (names.size() < 2 || o_.keep_session_ids) return;
  r_.session_ids_qualified = true;
  for (size_t i = 0; i < cursors_.size(); ++i) {
    AppendJsonEscaped(&cursors_[i]->session_prefix, of[i]);
    cursors_[i]->session_prefix.push_back(':');
  }
}

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

}  // namespace

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
