#include <algorithm>
#include <cctype>

#include "trace/merge_internal.h"

namespace llmtap::trace::merge_internal {

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
    SegmentManifest* m = c->manifest ? &*c->manifest : nullptr;
    if (m && !m->timestamp_zero_unix_ms && m->empty_at_unix_ms && o_.recover_epochs) {
      // A file an unclean stop left, recovered by a version that did not describe it: its
      // manifest is the killed run's, written while the file was open and empty.
      m->timestamp_zero_unix_ms = m->empty_at_unix_ms;
      ++r_.epochs_recovered;
      r_.warnings.push_back(c->path + ": no epoch in its manifest; placed from " +
                            FormatUtcMillis(*m->empty_at_unix_ms * 1000000) +
                            " (--recover-epochs: its file was open and empty then, so its rows "
                            "may sit earlier than they came, by up to the wait for its first)");
    }
    if (c->listed && !m->timestamp_zero_unix_ms) {
      Issue(*c, std::string("its manifest has no timestamp_zero_unix_ms; skipped") +
                    (m->empty_at_unix_ms
                         ? " (a file an unclean stop left, uploaded before llmtap described "
                           "such files: --recover-epochs places it from when it was opened)"
                         : ""));
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

}  // namespace llmtap::trace::merge_internal
