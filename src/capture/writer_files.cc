// CaptureWriter's files (writer.h): rotation, the finished file's hand-over to the uploader,
// the outcomes sidecar and the manifest. Runs on the writer thread only.
#include <cerrno>
#include <cstring>
#include <iterator>
#include <utility>

#include "capture/capture_file.h"
#include "capture/manifest.h"
#include "capture/writer.h"

namespace llmtap {

bool CaptureWriter::RotationDue(const Record& r, size_t group_bytes, size_t line_bytes) const {
  if (options_.config.rotate_bytes > 0 &&
      file_size_ + group_bytes + line_bytes > static_cast<uint64_t>(options_.config.rotate_bytes)) {
    return env_->NowMonotonicNanos() >= next_rotation_try_ns_;
  }
  if (options_.config.rotate_ms > 0 &&
      r.mono_ns - *file_t0_mono_ns_ >= options_.config.rotate_ms * 1000000) {
    return env_->NowMonotonicNanos() >= next_rotation_try_ns_;
  }
  return false;
}

bool CaptureWriter::StillAtPath() {
  FileInfo own, named;
  if (!file_->Stat(&own).ok() || !env_->Stat(options_.config.path, &named).ok()) return true;
  return own.exists && named.exists && own.device == named.device && own.inode == named.inode;
}

void CaptureWriter::Rotate(bool still_at_path, bool stopping) {
  const std::string& path = options_.config.path;
  if (!still_at_path) {
    // Someone moved or deleted the file: what this run wrote to it is wherever they put it
    // (or gone). A new file starts at `path`; nothing is renamed (a file now at `path` is
    // not ours).
    logger_->Log(LogLevel::kWarning,
                 "capture file " + path + " was moved or deleted while capturing (" +
                     std::to_string(file_lines_) + " records had been written to it); starting " +
                     "a new file there");
    last_error_ = "capture file moved or deleted while capturing; a new file was started";
  } else if (file_lines_ == 0 || !file_t0_mono_ns_) {
    return;  // an empty file stays
  }
  const int64_t now = env_->NowMonotonicNanos();
  if (file_) {
    Status s = file_->Sync();
    if (!s.ok()) write_warning_.Hit(now, [&] { return "capture fsync failed: " + s.ToString(); });
    file_.reset();
    dirty_since_sync_ = false;
  }
  std::string rotated;
  Status s = Status::IoError("not renamed", ENOENT);
  // A name is never used twice in a run, even once its file has gone (uploaded, compressed):
  // files whose first records fall in the same millisecond take the next free suffix. First
  // record times never decrease, so the last one used is all there is to remember.
  const int64_t zero_ms = FileZeroWallNanos() / 1000000;
  const int first_attempt = zero_ms == last_rotated_ms_ ? last_rotated_attempt_ + 1 : 0;
  int attempt = first_attempt;
  for (; still_at_path; ++attempt) {
    rotated = RotatedName(path, FileZeroWallNanos(), attempt);
    FileInfo compressed;
    if (env_->Stat(rotated + ".zst", &compressed).ok() && compressed.exists) continue;
    s = env_->RenameNoReplace(path, rotated);
    if (s.ok() || s.err() != EEXIST || attempt >= first_attempt + 1000) break;
  }
  if (s.ok()) {
    last_rotated_ms_ = zero_ms;
    last_rotated_attempt_ = attempt;
  }
  if (!s.ok() && s.err() != ENOENT) {
    // Keep appending to the same file (EnsureFile reopens it) and try again later.
    next_rotation_try_ns_ =
        now +
        std::max<int64_t>(
            1000000000,
            std::chrono::duration_cast<std::chrono::nanoseconds>(options_.initial_backoff).count());
    write_warning_.Hit(now, [&] {
      return "capture rotation failed (" + s.ToString() + "); still writing to " + path;
    });
    return;
  }
  if (!s.ok() && still_at_path) {
    logger_->Log(LogLevel::kWarning, "capture file " + path +
                                         " disappeared before rotation; "
                                         "starting a new file");
  }
  // The finished file's outcomes sidecar follows it (by the name rotation would have given
  // it, when the file itself went elsewhere), so the new file's sidecar starts empty.
  OutcomesFile* outcomes = options_.config.outcomes ? OutcomesFileFor(file_sequence_) : nullptr;
  if (outcomes != nullptr) {
    FileInfo info;
    const bool exists = env_->Stat(outcomes->path, &info).ok() && info.exists;
    for (int attempt = 0;; ++attempt) {
      const std::string to =
          OutcomesPathFor(s.ok() ? rotated : RotatedName(path, FileZeroWallNanos(), attempt));
      Status os = exists ? env_->RenameNoReplace(outcomes->path, to) : Status::Ok();
      if (os.ok()) {
        outcomes->path = to;
        break;
      }
      if (s.ok() || os.err() != EEXIST || attempt >= 1000) {
        logger_->Log(LogLevel::kWarning, os.ToString());
        break;
      }
    }
    // The shadow pairs sidecar follows the outcomes sidecar's name (pairs ride on outcomes, so
    // the ones still due for this file land beside it too).
    const std::string finished =
        outcomes->path.substr(0, outcomes->path.size() - OutcomesPathFor("").size());
    const std::string to = ShadowPairsPathFor(finished);
    FileInfo pairs_info;
    const bool pairs_exist =
        env_->Stat(outcomes->pairs.path, &pairs_info).ok() && pairs_info.exists;
    Status ps = pairs_exist ? env_->RenameNoReplace(outcomes->pairs.path, to) : Status::Ok();
    if (ps.ok()) {
      outcomes->pairs.path = to;
    } else {
      logger_->Log(LogLevel::kWarning, ps.ToString());
    }
  }
  if (s.ok()) {
    WriteManifestFor(rotated, outcomes != nullptr ? outcomes->path : std::string(), true, stopping);
    logger_->Log(LogLevel::kInfo, (stopping ? "finished the capture: " : "rotated the capture: ") +
                                      std::to_string(file_lines_) + " records in " + rotated);
    if (!stopping) counters_->files_rotated.fetch_add(1, std::memory_order_relaxed);
    last_finished_path_ = rotated;
    FileFinished(rotated, file_lines_, outcomes);
  }
  if (outcomes != nullptr && outcomes->pending == 0) {
    outcomes_files_.erase(outcomes_files_.begin() + (outcomes - outcomes_files_.data()));
  }
  ++file_sequence_;
  file_lines_ = 0;
  file_apis_ = {};
  file_size_ = 0;
  file_last_timestamp_ms_ = 0;
  counters_->open_file_bytes.store(live_manifest_bytes_, std::memory_order_relaxed);
  file_t0_mono_ns_.reset();
  opened_once_ = false;  // the next file is a new capture at `path`
  next_rotation_try_ns_ = 0;
  if (stopping) {
    // Nothing is left at the capture path: its running manifest would describe no file.
    (void)env_->RemoveFile(ManifestPathFor(path));
    return;
  }
  EnsureFile();  // a failure here is retried (and counted) like any other
  WriteManifest(false);
}

void CaptureWriter::FileFinished(const std::string& data_path, uint64_t records,
                                 OutcomesFile* outcomes) {
  if (uploader_ == nullptr) return;
  if (outcomes == nullptr) {
    uploader_->FileFinished(data_path, "", static_cast<int64_t>(records));
  } else if (outcomes->pending == 0) {
    FileInfo info;
    const bool exists = env_->Stat(outcomes->path, &info).ok() && info.exists;
    uploader_->FileFinished(data_path, exists ? outcomes->path : std::string(),
                            static_cast<int64_t>(records));
  } else {
    // Handed over once its last outcome is written.
    outcomes->finished_data_path = data_path;
    outcomes->finished_records = records;
  }
}

CaptureWriter::OutcomesFile* CaptureWriter::OutcomesFileFor(uint64_t file_sequence) {
  for (OutcomesFile& f : outcomes_files_) {
    if (f.file_sequence == file_sequence) return &f;
  }
  if (file_sequence != file_sequence_) return nullptr;
  OutcomesFile& f = outcomes_files_.emplace_back();
  f.file_sequence = file_sequence;
  f.path = OutcomesPathFor(options_.config.path);
  f.pairs.path = ShadowPairsPathFor(options_.config.path);
  return &f;
}

void CaptureWriter::WriteOutcomes(bool stopping) {
  if (outcome_batch_.empty() && outcome_waiting_.empty()) return;
  // Waiting outcomes are older than the new ones; keep that order.
  outcome_waiting_.insert(outcome_waiting_.end(), std::make_move_iterator(outcome_batch_.begin()),
                          std::make_move_iterator(outcome_batch_.end()));
  outcome_batch_.clear();
  size_t kept = 0;
  for (Outcome& o : outcome_waiting_) {
    if (o.seq == 0) {
      // A pair alone (Capture::ReportShadowPair): a mirrored request capture did not record.
      OutcomesFile* f = OutcomesFileFor(file_sequence_);
      f->pairs.buffered += ForEachShadowPair(o.outcome.shadow_pair, [&](std::string_view one) {
        AppendShadowPairLine(0, 0, one, &f->pairs.buffer);
        f->pairs.buffer.push_back('\n');
      });
      continue;
    }
    auto it = placements_.find(o.seq);
    if (it == placements_.end()) {
      if (o.seq > resolved_seq_ && !stopping) {
        // Its record is still queued (the writer backs off).
        if (&outcome_waiting_[kept] != &o) outcome_waiting_[kept] = std::move(o);
        ++kept;
      } else {
        counters_->outcomes_lost.fetch_add(1, std::memory_order_relaxed);  // record lost
        counters_->shadow_pairs_lost.fetch_add(
            ForEachShadowPair(o.outcome.shadow_pair, [](auto) {}), std::memory_order_relaxed);
      }
      continue;
    }
    OutcomesFile* f = OutcomesFileFor(it->second.file_sequence);
    if (f != nullptr) {
      AppendOutcomeLine(it->second.line, it->second.timestamp_ms, o.outcome,
                        options_.config.capture_responses, &f->buffer);
      f->buffer.push_back('\n');
      ++f->buffered;
      --f->pending;
      f->pairs.buffered += ForEachShadowPair(o.outcome.shadow_pair, [&](std::string_view one) {
        AppendShadowPairLine(it->second.line, it->second.timestamp_ms, one, &f->pairs.buffer);
        f->pairs.buffer.push_back('\n');
      });
    } else {
      counters_->outcomes_lost.fetch_add(1, std::memory_order_relaxed);
    }
    placements_.erase(it);
  }
  outcome_waiting_.resize(kept);
  for (OutcomesFile& f : outcomes_files_) {
    if (f.buffered > 0) FlushOutcomesFile(&f);
    if (f.pairs.buffered > 0) {
      FlushSidecar(&f.pairs, &counters_->shadow_pairs_written, &counters_->shadow_pairs_lost,
                   "shadow pairs");
    }
  }
  CloseFinishedSidecars(stopping);
}

void CaptureWriter::CloseFinishedSidecars(bool stopping) {
  // A finished file's sidecar closes once every outcome it waited for is written (at stop,
  // whatever is still due will never come), and the file goes to the uploader.
  std::erase_if(outcomes_files_, [this, stopping](OutcomesFile& f) {
    if (f.file_sequence == file_sequence_ || (f.pending > 0 && !stopping)) return false;
    if (!f.finished_data_path.empty()) {
      f.pending = 0;
      FileFinished(f.finished_data_path, f.finished_records, &f);
    }
    return true;
  });
}

void CaptureWriter::FlushOutcomesFile(OutcomesFile* f) {
  FlushSidecar(f, &counters_->outcomes_written, &counters_->outcomes_lost, "outcomes");
}

void CaptureWriter::FlushSidecar(SidecarFile* f, std::atomic<uint64_t>* written,
                                 std::atomic<uint64_t>* lost, const char* what) {
  Status s;
  if (!f->file) {
    s = env_->OpenAppend(f->path, &f->file);
    if (s.ok()) s = f->file->Size(&f->size);
  }
  size_t done = 0;
  int err = 0;
  while (s.ok() && done < f->buffer.size()) {
    WriteResult r = f->file->Write(f->buffer.data() + done, f->buffer.size() - done);
    if (r.written < 0 && r.err == EINTR) continue;
    if (r.written <= 0) {
      err = r.written < 0 && r.err != 0 ? r.err : EIO;
      break;
    }
    done += static_cast<size_t>(r.written);
  }
  if (s.ok() && err == 0) {
    f->size += f->buffer.size();
    written->fetch_add(f->buffered, std::memory_order_relaxed);
  } else {
    // Whole lines only: cut back what this attempt wrote, reopen next time.
    if (f->file && done > 0) f->file->Truncate(f->size);
    f->file.reset();
    lost->fetch_add(f->buffered, std::memory_order_relaxed);
    const std::string why = !s.ok() ? s.ToString() : std::strerror(err);
    write_warning_.Hit(env_->NowMonotonicNanos(), [&] {
      return std::string(what) + " write to " + f->path + " failed: " + why + "; those " + what +
             " lines are lost";
    });
  }
  f->buffer.clear();
  f->buffered = 0;
}

Status CaptureWriter::WriteManifest(bool stopped) {
  std::string outcomes_path;
  if (options_.config.outcomes) outcomes_path = OutcomesPathFor(options_.config.path);
  return WriteManifestFor(options_.config.path, outcomes_path, false, stopped);
}

Status CaptureWriter::WriteManifestFor(const std::string& capture_path,
                                       const std::string& outcomes_path, bool rotated,
                                       bool stopped) {
  ManifestInfo info;
  info.capture_path = capture_path;
  info.outcomes_path = outcomes_path;
  info.config = options_.config;
  if (file_t0_mono_ns_) info.timestamp_zero_wall_nanos = FileZeroWallNanos();
  info.started_wall_nanos = started_wall_ns_;
  info.updated_wall_nanos = env_->NowWallNanos();
  info.host = env_->HostName();
  info.pid = env_->ProcessId();
  info.stopped = stopped;
  info.rotated = rotated;
  info.file_sequence = file_sequence_;
  info.file_records = file_lines_;
  info.file_apis = file_apis_;
  info.file_bytes = file_size_;
  info.file_last_timestamp_ms = file_last_timestamp_ms_;
  info.last_error = last_error_;
  if (uploader_ != nullptr) {
    info.replica = uploader_->replica();
    info.last_upload_error = uploader_->last_error();
  }
  info.counters = counters_->Snapshot();
  const std::string text = RenderManifest(info);
  Status s = env_->WriteFileAtomic(ManifestPathFor(capture_path), text);
  if (s.ok() && capture_path == options_.config.path) live_manifest_bytes_ = text.size();
  if (!s.ok()) {
    manifest_warning_.Hit(env_->NowMonotonicNanos(),
                          [&] { return "capture manifest not written: " + s.ToString(); });
  }
  return s;
}

}  // namespace llmtap
