#include "capture/writer.h"

#include <pthread.h>
#include <sched.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <new>

#include "capture/capture_file.h"
#include "capture/manifest.h"
#include "common/thread_name.h"

namespace llmtap {
namespace {

constexpr std::string_view kMooncakePrefix = "{\"timestamp\":";
constexpr std::string_view kMooncakeMiddle = ",\"payload\":";

size_t DecimalDigits(int64_t v) {
  size_t n = 1;
  while (v >= 10) {
    v /= 10;
    ++n;
  }
  return n;
}

std::string ErrnoText(int err) { return std::strerror(err); }

}  // namespace

CaptureWriter::CaptureWriter(const CaptureOptions& options, Env* env, Logger* logger,
                             CaptureCounters* counters, Uploader* uploader)
    : options_(options),
      env_(env),
      logger_(logger),
      counters_(counters),
      uploader_(uploader),
      queue_full_warning_(logger, options.warning_interval),
      write_warning_(logger, options.warning_interval),
      manifest_warning_(logger, options.warning_interval) {
  if (options.config.format == CaptureFormat::kMooncakePayload) {
    session_fields_ = SessionFieldPaths(options.config.session_fields);
  }
}

void CaptureWriter::ResolveSessionFields() {
  if (session_fields_.empty()) {
    sessions_resolved_ = batch_.size();
    return;
  }
  for (; sessions_resolved_ < batch_.size(); ++sessions_resolved_) {
    Record& r = batch_[sessions_resolved_];
    if (r.has_session) continue;
    try {
      // Built aside: the id may be a view into the body, which appending could move.
      session_member_.clear();
      if (session_fields_.AppendFromBody(r.body, &session_scratch_, &session_member_)) {
        r.body.append(session_member_);
        r.has_session = true;
        r.writer_added = static_cast<uint32_t>(session_member_.size());
      }
    } catch (const std::bad_alloc&) {
      // No id rather than a torn one (append is all or nothing).
    }
  }
  if (session_scratch_.capacity() > 64 * 1024) std::string().swap(session_scratch_);
}

CaptureWriter::~CaptureWriter() { Stop(); }

size_t CaptureWriter::LineBytes(const Record& r) const {
  if (options_.config.format == CaptureFormat::kRawPayload) return r.body.size() + 1;
  return kMooncakePrefix.size() + DecimalDigits(r.timestamp_ms) + kMooncakeMiddle.size() +
         r.body.size() + 2;
}

void CaptureWriter::AddLine(const Record& r, size_t* framing_used) {
  static const char kMooncakeEnd[] = "}\n";
  static const char kNewline[] = "\n";
  auto add = [this](const void* data, size_t len) {
    iov_.push_back(iovec{const_cast<void*>(data), len});
  };
  if (options_.config.format == CaptureFormat::kMooncakePayload) {
    char* start = framing_.data() + *framing_used;
    char* p = start;
    std::memcpy(p, kMooncakePrefix.data(), kMooncakePrefix.size());
    p += kMooncakePrefix.size();
    p = std::to_chars(p, p + 20, r.timestamp_ms).ptr;
    std::memcpy(p, kMooncakeMiddle.data(), kMooncakeMiddle.size());
    p += kMooncakeMiddle.size();
    *framing_used += static_cast<size_t>(p - start);
    add(start, static_cast<size_t>(p - start));
    add(r.body.data(), r.body.size());
    add(kMooncakeEnd, 2);
  } else {
    add(r.body.data(), r.body.size());
    add(kNewline, 1);
  }
}

Status CaptureWriter::Start() {
  started_wall_ns_ = env_->NowWallNanos();
  anchor_mono_ns_ = env_->NowMonotonicNanos();
  anchor_wall_ns_ = started_wall_ns_;
  MoveStraySidecarsAside(env_, logger_, options_.config.path);
  Status s = OpenNewCapture(env_, logger_, options_.config.path, &file_);
  if (s.ok()) {
    opened_once_ = true;
    s = file_->Size(&file_size_);
  }
  if (!s.ok()) {
    file_.reset();
    last_error_ = s.ToString();
    logger_->Log(LogLevel::kWarning,
                 "capture destination cannot be written: " + last_error_ +
                     ". Serving continues; capture retries and counts every record it loses. "
                     "Point NIM_CAPTURE_ARGS \"path\" at a writable location.");
  } else {
    logger_->Log(LogLevel::kInfo, "capturing to " + options_.config.path + " (" +
                                      std::string(CaptureFormatName(options_.config.format)) + ")");
  }
  WriteManifest(false);
  next_manifest_ns_ =
      env_->NowMonotonicNanos() +
      std::chrono::duration_cast<std::chrono::nanoseconds>(options_.manifest_interval).count();
  thread_ = std::thread(&CaptureWriter::Run, this);
  return s;
}

uint64_t CaptureWriter::Enqueue(std::string&& body, std::string* spare, bool has_session,
                                api::Endpoint api) {
  const uint64_t bytes = body.size();
  bool notify = false;
  uint64_t seq = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!closed_ &&
        queue_bytes_ + bytes <= static_cast<uint64_t>(options_.config.max_queue_bytes)) {
      // The arrival time is taken under the lock, so file order is timestamp order.
      seq = next_seq_++;
      queue_.push_back(
          Record{env_->NowMonotonicNanos(), seq, 0, std::move(body), has_session, api});
      queue_bytes_ += bytes;
      counters_->queued_records.fetch_add(1, std::memory_order_relaxed);
      counters_->queue_bytes.fetch_add(bytes, std::memory_order_relaxed);
      if (spare != nullptr && !spares_.empty()) {
        *spare = std::move(spares_.back());
        spares_.pop_back();
      }
      // A lingering writer is woken early only once a full group is waiting.
      notify = writer_waiting_ || (writer_lingering_ && queue_bytes_ >= options_.max_group_bytes);
      if (notify) writer_waiting_ = writer_lingering_ = false;
    } else {
      counters_->dropped_queue_full.fetch_add(1, std::memory_order_relaxed);
      const bool closed = closed_;
      queue_full_warning_.Hit(env_->NowMonotonicNanos(), [closed] {
        return std::string(closed ? "capture is stopping; request not recorded"
                                  : "capture queue full (max_queue_bytes); request not recorded. "
                                    "The disk is not keeping up: lower sample_rate or raise "
                                    "max_queue_bytes");
      });
      return 0;
    }
  }
  if (notify) cv_.notify_one();
  return seq;
}

void CaptureWriter::EnqueueOutcome(uint64_t seq, ResponseOutcome&& outcome) {
  bool notify = false;
  // A captured response's text counts against max_queue_bytes too.
  const uint64_t bytes = kOutcomeQueueBytes + outcome.response.bytes() + outcome.shadow_pair.size();
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (closed_ || queue_bytes_ + bytes > static_cast<uint64_t>(options_.config.max_queue_bytes)) {
      if (seq != 0) counters_->outcomes_lost.fetch_add(1, std::memory_order_relaxed);
      counters_->shadow_pairs_lost.fetch_add(ForEachShadowPair(outcome.shadow_pair, [](auto) {}),
                                             std::memory_order_relaxed);
      return;
    }
    outcome_queue_.push_back(Outcome{seq, bytes, std::move(outcome)});
    queue_bytes_ += bytes;
    notify = writer_waiting_;
    writer_waiting_ = false;
  }
  if (notify) cv_.notify_one();
}

void CaptureWriter::RequestRotation() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    rotation_requested_ = true;
  }
  cv_.notify_one();
}

int64_t CaptureWriter::FileZeroWallNanos() const {
  return anchor_wall_ns_ + (file_t0_mono_ns_.value_or(anchor_mono_ns_) - anchor_mono_ns_);
}

void CaptureWriter::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    closed_ = true;
    stop_requested_ = true;
  }
  cv_.notify_one();
  if (thread_.joinable()) thread_.join();
}

void CaptureWriter::Run() {
  NameThisThread("llmtap-capture");
#ifdef SCHED_BATCH
  // Background work: a SCHED_BATCH thread never preempts the thread that wakes it (the
  // scheduler skips wake-up preemption for batch tasks), so a record's hand-off does not
  // push an event loop off its CPU in the middle of forwarding; the writer still gets its
  // fair share of CPU. Allowed without privileges; on failure the policy just stays.
  sched_param batch{};
  pthread_setschedparam(pthread_self(), SCHED_BATCH, &batch);
#endif
  const int64_t manifest_interval_ns =
      std::chrono::duration_cast<std::chrono::nanoseconds>(options_.manifest_interval).count();
  const int64_t rotate_ns = options_.config.rotate_ms * 1000000;
  // When the current file is due to be finished by rotate_seconds even if no record comes.
  auto timed_rotation_at = [&] {
    if (rotate_ns <= 0 || file_lines_ == 0 || !file_t0_mono_ns_) return INT64_MAX;
    return std::max(*file_t0_mono_ns_ + rotate_ns, next_rotation_try_ns_);
  };
  const int64_t group_ns =
      std::chrono::duration_cast<std::chrono::nanoseconds>(options_.group_commit_delay).count();
  // After a round that wrote records, the writer sleeps one group-commit delay at a time
  // without asking to be woken: while requests keep coming, it ticks at that period and the
  // request path never pays for a wake-up (a futex call, and on a shared CPU a context switch
  // in the middle of forwarding). Only idle_tick_period of empty ticks puts it to sleep until
  // the next record notifies it. `linger`: empty ticks left (refilled by every round with
  // records; at least one).
  const int64_t idle_ns = std::chrono::nanoseconds(options_.idle_tick_period).count();
  const int64_t idle_ticks = group_ns > 0 ? std::max<int64_t>(1, idle_ns / group_ns) : 0;
  int64_t linger = 0;
  std::unique_lock<std::mutex> lock(mu_);
  while (true) {
    bool gathered = false;  // records had a full delay to gather while lingering
    while (!stop_requested_ && !rotation_requested_) {
      const int64_t now = env_->NowMonotonicNanos();
      if (now >= next_manifest_ns_ || now >= timed_rotation_at()) break;
      const bool in_backoff = now < backoff_until_ns_;
      if (!in_backoff &&
          (batch_pos_ < batch_.size() || !queue_.empty() || !outcome_queue_.empty())) {
        break;
      }
      int64_t wake = std::min(next_manifest_ns_, timed_rotation_at());
      if (in_backoff) wake = std::min(wake, backoff_until_ns_);
      if (linger > 0 && !in_backoff && group_ns > 0) {
        --linger;
        writer_lingering_ = true;
        cv_.wait_for(lock, std::chrono::nanoseconds(std::min(wake - now, group_ns)));
        writer_lingering_ = false;
        gathered = true;
        continue;
      }
      gathered = false;
      writer_waiting_ = !in_backoff;
      cv_.wait_for(lock, std::chrono::nanoseconds(wake - now));
      writer_waiting_ = false;
    }
    if (!gathered && !stop_requested_ && !queue_.empty() && batch_pos_ >= batch_.size() &&
        group_ns > 0 && queue_bytes_ < options_.max_group_bytes) {
      // Group commit: let more records arrive. Enqueue notifies meanwhile only once a full
      // group is waiting; Stop() does too.
      writer_lingering_ = true;
      cv_.wait_for(lock, options_.group_commit_delay,
                   [this] { return stop_requested_ || queue_bytes_ >= options_.max_group_bytes; });
      writer_lingering_ = false;
    }
    const bool stopping = stop_requested_;
    const bool rotation_requested = rotation_requested_;
    rotation_requested_ = false;
    if (batch_pos_ >= batch_.size()) {
      batch_.clear();
      batch_pos_ = 0;
      batch_.swap(queue_);
      sessions_resolved_ = 0;
    }
    if (!batch_.empty() || !outcome_queue_.empty()) linger = idle_ticks;
    if (!outcome_queue_.empty()) {
      for (const Outcome& o : outcome_queue_) queue_bytes_ -= o.queue_bytes;
      outcome_batch_.swap(outcome_queue_);  // outcome_batch_ is empty between loops
    }
    lock.unlock();

    if (sessions_resolved_ < batch_.size()) ResolveSessionFields();
    if (batch_pos_ < batch_.size() &&
        (stopping || env_->NowMonotonicNanos() >= backoff_until_ns_)) {
      WriteSome(stopping);
    }
    if (!stopping && (rotation_requested || env_->NowMonotonicNanos() >= timed_rotation_at())) {
      Rotate();
    }
    WriteOutcomes(stopping);
    const int64_t now = env_->NowMonotonicNanos();
    if (now >= next_manifest_ns_ && !stopping) {
      if (file_ && dirty_since_sync_) {
        Status s = file_->Sync();
        if (!s.ok())
          write_warning_.Hit(now, [&] { return "capture fsync failed: " + s.ToString(); });
        dirty_since_sync_ = false;
      }
      for (OutcomesFile& f : outcomes_files_) {
        if (f.file) f.file->Sync();
        if (f.pairs.file) f.pairs.file->Sync();
      }
      WriteManifest(false);
      next_manifest_ns_ = now + manifest_interval_ns;
    }

    lock.lock();
    if (stopping && queue_.empty() && outcome_queue_.empty() && batch_pos_ >= batch_.size()) {
      break;
    }
  }
  lock.unlock();
  if (file_) {
    Status s = file_->Sync();
    if (!s.ok()) logger_->Log(LogLevel::kWarning, "capture fsync at stop failed: " + s.ToString());
  }
  for (OutcomesFile& f : outcomes_files_) {
    if (f.file) f.file->Sync();
    if (f.pairs.file) f.pairs.file->Sync();
  }
  std::string manifest = ManifestPathFor(options_.config.path);
  Status manifest_written;
  if (uploader_ != nullptr && file_lines_ > 0) {
    // The last file goes to the store too: finished under its time name like a rotation.
    Rotate(/*still_at_path=*/true, /*stopping=*/true);
    if (!last_finished_path_.empty()) manifest = ManifestPathFor(last_finished_path_);
  } else if (uploader_ != nullptr && file_ && file_size_ == 0) {
    // Every record went up with an earlier file: leave no empty capture and manifest behind.
    file_.reset();
    (void)env_->RemoveFile(options_.config.path);
    (void)env_->RemoveFile(ManifestPathFor(options_.config.path));
    manifest.clear();
  } else {
    manifest_written = WriteManifest(true);
  }
  CloseFinishedSidecars(/*stopping=*/true);
  const CaptureCountersSnapshot c = counters_->Snapshot();
  logger_->Log(
      LogLevel::kInfo,
      "capture stopped: " + std::to_string(c.recorded) + " recorded, " +
          std::to_string(c.skipped_too_large + c.sampled_out + c.invalid_body +
                         c.non_standard_json + c.dropped_queue_full + c.skipped_upload_backlog +
                         c.write_failed_records) +
          " not recorded" +
          (!manifest_written.ok()
               ? " (the manifest could not be written: " + manifest_written.ToString() + ")"
           : manifest.empty() ? std::string()
                              : " (see " + manifest + ")"));
}

bool CaptureWriter::EnsureFile() {
  if (file_) return true;
  Status s;
  if (!opened_once_) {
    s = OpenNewCapture(env_, logger_, options_.config.path, &file_);
    if (s.ok()) s = file_->Size(&file_size_);
    if (s.ok()) opened_once_ = true;
  } else {
    s = ReopenOwnCapture(env_, options_.config.path, file_size_, &file_, &file_size_);
  }
  if (!s.ok()) {
    file_.reset();
    last_error_ = s.ToString();
    return false;
  }
  return true;
}

void CaptureWriter::FailAttempt(const std::string& what, int err) {
  last_error_ = err != 0 ? what + ": " + ErrnoText(err) : what;
  backoff_ns_ =
      backoff_ns_ == 0
          ? std::chrono::duration_cast<std::chrono::nanoseconds>(options_.initial_backoff).count()
          : std::min<int64_t>(
                backoff_ns_ * 2,
                std::chrono::duration_cast<std::chrono::nanoseconds>(options_.max_backoff).count());
  const int64_t now = env_->NowMonotonicNanos();
  backoff_until_ns_ = now + backoff_ns_;
  write_warning_.Hit(now, [&] {
    return last_error_ + "; records lost so far: " +
           std::to_string(counters_->write_failed_records.load(std::memory_order_relaxed)) +
           "; retrying in " + std::to_string(backoff_ns_ / 1000000) + " ms";
  });
}

void CaptureWriter::WriteSome(bool stopping) {
  // Three iovecs per record at most; stay within IOV_MAX (1024 on Linux).
  constexpr size_t kMaxRecordsPerGroup = 1024 / 3;
  constexpr size_t kMaxFramingBytes = 64;  // {"timestamp":<20 digits>,"payload":
  const size_t max_group = std::max<size_t>(options_.max_group_bytes, 1);
  if (framing_.empty()) framing_.resize(kMaxRecordsPerGroup * kMaxFramingBytes);
  while (batch_pos_ < batch_.size()) {
    if (file_ && env_->NowMonotonicNanos() >= next_identity_check_ns_) {
      next_identity_check_ns_ = env_->NowMonotonicNanos() + kIdentityCheckNs;
      if (!StillAtPath()) Rotate(/*still_at_path=*/false);
    }
    bool have_file = EnsureFile();
    // Gather one group: whole lines, at most max_group bytes (or one oversized line).
    iov_.clear();
    line_ends_.clear();
    size_t framing_used = 0;
    size_t group_bytes = 0;
    const size_t first = batch_pos_;
    uint64_t payload_bytes = 0;
    while (batch_pos_ < batch_.size() && line_ends_.size() < kMaxRecordsPerGroup) {
      Record& r = batch_[batch_pos_];
      // A file's timestamps count from its own first record.
      const bool first_in_file = file_lines_ == 0 && line_ends_.empty();
      if (first_in_file) file_t0_mono_ns_ = r.mono_ns;
      r.timestamp_ms = (r.mono_ns - *file_t0_mono_ns_) / 1000000;
      const size_t line = LineBytes(r);
      if (!first_in_file && have_file && RotationDue(r, group_bytes, line)) {
        if (!line_ends_.empty()) break;  // write this group to the current file first
        Rotate();
        have_file = EnsureFile();
        continue;  // the record is the new file's first
      }
      if (!line_ends_.empty() && group_bytes + line > max_group) break;
      if (have_file) AddLine(r, &framing_used);
      group_bytes += line;
      line_ends_.push_back(group_bytes);
      payload_bytes += r.body.size() - r.writer_added;
      ++batch_pos_;
    }
    const size_t n = batch_pos_ - first;
    if (have_file && n > 0 && file_lines_ == 0) {
      // The file's first records: its epoch goes to disk before they do, so whatever a crash
      // leaves in the file can be placed on wall-clock time (capture_file.h, recovery).
      WriteManifest(false);
    }

    size_t done = 0;
    int err = 0;
    size_t next_iov = 0;
    while (have_file && done < group_bytes) {
      WriteResult r =
          file_->Writev(iov_.data() + next_iov, static_cast<int>(iov_.size() - next_iov));
      if (r.written < 0) {
        if (r.err == EINTR) continue;
        err = r.err != 0 ? r.err : EIO;
        break;
      }
      if (r.written == 0) {  // no progress: treat as an I/O error rather than spin
        err = EIO;
        break;
      }
      done += static_cast<size_t>(r.written);
      // Skip what was written; a partly written iovec is advanced in place.
      size_t advance = static_cast<size_t>(r.written);
      while (advance > 0 && advance >= iov_[next_iov].iov_len) {
        advance -= iov_[next_iov].iov_len;
        ++next_iov;
      }
      if (advance > 0) {
        iov_[next_iov].iov_base = static_cast<char*>(iov_[next_iov].iov_base) + advance;
        iov_[next_iov].iov_len -= advance;
      }
    }
    size_t complete = 0;
    size_t complete_bytes = 0;
    if (have_file) {
      complete = static_cast<size_t>(std::upper_bound(line_ends_.begin(), line_ends_.end(), done) -
                                     line_ends_.begin());
      complete_bytes = complete > 0 ? line_ends_[complete - 1] : 0;
      if (err != 0) {
        // Cut back to the last complete line, then reopen on the next attempt.
        if (done > complete_bytes) {
          Status ts = file_->Truncate(file_size_ + complete_bytes);
          if (!ts.ok()) last_error_ = ts.ToString();
        }
        file_.reset();
      }
      file_size_ += complete_bytes;
      counters_->open_file_bytes.store(file_size_ + live_manifest_bytes_,
                                       std::memory_order_relaxed);
      if (complete > 0) dirty_since_sync_ = true;
    }
    if (options_.config.outcomes && complete > 0) {
      for (size_t i = 0; i < complete; ++i) {
        const Record& r = batch_[first + i];
        placements_[r.seq] = Placement{file_sequence_, file_lines_ + i + 1, r.timestamp_ms};
      }
      OutcomesFileFor(file_sequence_)->pending += complete;
    }
    if (complete > 0 && options_.config.format == CaptureFormat::kMooncakePayload) {
      uint64_t with_session = 0;
      for (size_t i = 0; i < complete; ++i) with_session += batch_[first + i].has_session;
      if (with_session > 0) {
        counters_->with_session_id.fetch_add(with_session, std::memory_order_relaxed);
      }
    }
    for (size_t i = 0; i < complete; ++i) ++file_apis_[static_cast<size_t>(batch_[first + i].api)];
    file_lines_ += complete;
    if (complete > 0) file_last_timestamp_ms_ = batch_[first + complete - 1].timestamp_ms;
    if (file_lines_ == 0) file_t0_mono_ns_.reset();
    if (n > 0) resolved_seq_ = batch_[batch_pos_ - 1].seq;
    counters_->recorded.fetch_add(complete, std::memory_order_relaxed);
    counters_->bytes_written.fetch_add(complete_bytes, std::memory_order_relaxed);
    counters_->write_failed_records.fetch_add(n - complete, std::memory_order_relaxed);
    counters_->queued_records.fetch_sub(n, std::memory_order_relaxed);
    counters_->queue_bytes.fetch_sub(payload_bytes, std::memory_order_relaxed);
    {
      // Written bodies go back to the request threads as spare buffers (see Enqueue): in a
      // steady stream no record is malloc'ed or freed, and the writer and the request
      // threads never contend for the allocator's locks. Gathered outside the lock; handed
      // over under it with a swap when the request threads have used up the previous ones.
      for (size_t i = first; i < batch_pos_; ++i) {
        std::string& body = batch_[i].body;
        const size_t capacity = body.capacity();
        if (capacity > kMaxSpareCapacity || returning_bytes_ + capacity > kMaxSpareBytes) continue;
        body.clear();
        returning_.push_back(std::move(body));
        returning_bytes_ += capacity;
      }
      std::lock_guard<std::mutex> lock(mu_);
      queue_bytes_ -= payload_bytes;
      if (spares_.empty()) {
        spares_.swap(returning_);
        returning_bytes_ = 0;
      }
    }
    for (size_t i = first; i < batch_pos_; ++i) std::string().swap(batch_[i].body);
    if (!have_file || err != 0) {
      FailAttempt(have_file ? "capture write to " + options_.config.path + " failed"
                            : "capture destination unavailable (" + last_error_ + ")",
                  have_file ? err : 0);
      if (!stopping) return;
    } else {
      backoff_ns_ = 0;
    }
  }
}

}  // namespace llmtap
