// CaptureWriter: the bounded, byte-accounted record queue and the one background thread
// that drains it to the capture file (and, when configured, rotates files and writes the
// outcomes sidecar). Internal to the capture core (Capture owns one).
//
// Enqueue(), EnqueueOutcome() and RequestRotation() may be called from any thread; they hold
// a mutex only to push, and never wait on disk. Start() and Stop() from the owning thread.
//
// Record numbering: only the writer knows which line a record lands on (a failed write
// loses records and shifts the rest), so Enqueue hands out a sequence number and the writer
// maps it to (file, line) once written; an outcome names its record by that number.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "capture/manifest.h"
#include "capture/options.h"
#include "capture/outcome.h"
#include "capture/session.h"
#include "capture/uploader.h"

namespace llmtap {

class CaptureWriter {
 public:
  // `counters` and `uploader` (nullptr: files stay where they are) must outlive the writer.
  CaptureWriter(const CaptureOptions& options, Env* env, Logger* logger, CaptureCounters* counters,
                Uploader* uploader = nullptr);
  ~CaptureWriter();

  // Prepares the destination (see OpenNewCapture) and starts the thread. A failure is
  // logged as a warning and returned; the thread runs anyway and keeps retrying.
  Status Start();

  // Takes a compact JSON object (one line, no trailing newline) and notes its arrival time.
  // Returns its sequence number (from 1), or 0 (and counts dropped_queue_full) when it does
  // not fit in max_queue_bytes or the writer has stopped. When `spare` is given and a
  // written record's buffer is available, it is moved into `*spare` (empty, with capacity)
  // for the caller's next record.
  // `has_session`: `body` ends with the row's session member (see session.h); otherwise the
  // writer looks for session_fields in it. `api`: the API of the path it was sent to, counted
  // per file in the manifest ("file"."apis").
  uint64_t Enqueue(std::string&& body, std::string* spare = nullptr, bool has_session = false,
                   api::Endpoint api = api::Endpoint::kOther);

  // Queues the outcome of record `seq` for the outcomes sidecar (and its shadow_pair, if any, for
  // the pairs sidecar); seq 0 queues a shadow pair alone (no record). Counted as outcomes_lost
  // (shadow_pairs_lost) when the queue is full or stopped.
  void EnqueueOutcome(uint64_t seq, ResponseOutcome&& outcome);

  // The next loop of the writer finishes the current file (if it holds a record).
  void RequestRotation();

  // Writes everything queued, fsyncs, writes the final manifest, joins the thread.
  void Stop();

 private:
  struct Record {
    int64_t mono_ns;       // arrival (Env::NowMonotonicNanos), taken in queue order
    uint64_t seq;          // from Enqueue
    int64_t timestamp_ms;  // set by the writer: ms since its file's first record
    std::string body;      // the compact payload, then its session member if it has one
    bool has_session = false;
    api::Endpoint api = api::Endpoint::kOther;
    uint32_t writer_added = 0;  // bytes of body the writer appended (not in queue_bytes)
  };
  struct Outcome {
    uint64_t seq;
    uint64_t queue_bytes;  // counted in queue_bytes_ while queued
    ResponseOutcome outcome;
  };
  // Where a written record is, until its outcome arrives.
  struct Placement {
    uint64_t file_sequence;
    uint64_t line;  // 1-based
    int64_t timestamp_ms;
  };
  // A sidecar file written line by line, opened at its first write.
  struct SidecarFile {
    std::string path;
    std::unique_ptr<AppendFile> file;
    uint64_t size = 0;   // bytes of complete lines
    std::string buffer;  // lines gathered for the next write
    uint64_t buffered = 0;
  };
  // The outcomes sidecar of one capture file, and its shadow pairs sidecar (the pairs ride on
  // the outcomes: ResponseOutcome::shadow_pair). A finished (rotated) file's sidecars stay
  // open while outcomes of its records are still due: long streams outlive rotations.
  struct OutcomesFile : SidecarFile {
    uint64_t file_sequence = 0;
    uint64_t pending = 0;  // records written to its capture file, outcome not yet written
    SidecarFile pairs;
    // The finished capture file this sidecar belongs to, once rotation renamed it: handed to
    // the uploader when the sidecar is complete.
    std::string finished_data_path;
    uint64_t finished_records = 0;
  };
  static constexpr uint64_t kOutcomeQueueBytes = sizeof(Outcome);

  void Run();
  // Writes records [pos, end of batch_) in groups; returns early after a failed attempt.
  void WriteSome(bool stopping);
  bool EnsureFile();
  void FailAttempt(const std::string& what, int err);
  // The current file's manifest; what writing it gave (it warns on a failure, rate-limited).
  Status WriteManifest(bool stopped);
  Status WriteManifestFor(const std::string& capture_path, const std::string& outcomes_path,
                        bool rotated, bool stopped);
  bool RotationDue(const Record& r, size_t group_bytes, size_t line_bytes) const;
  // Finishes the current file: fsync, rename to RotatedName, final manifest, new file (none
  // when `stopping`: the last file of an uploading capture). With `still_at_path` false the
  // file was moved or deleted by someone else: no rename.
  void Rotate(bool still_at_path = true, bool stopping = false);
  // Removes the sidecars of finished files that wait for no more outcomes (all of them when
  // `stopping`), handing their files to the uploader.
  void CloseFinishedSidecars(bool stopping);
  // Hands a finished file to the uploader once its outcomes sidecar is complete.
  void FileFinished(const std::string& data_path, uint64_t records, OutcomesFile* outcomes);
  // Whether the open file is still the one named by the capture path (not moved or deleted).
  bool StillAtPath();
  int64_t FileZeroWallNanos() const;
  // Writes the outcomes whose records have been dealt with; keeps the others.
  void WriteOutcomes(bool stopping);
  OutcomesFile* OutcomesFileFor(uint64_t file_sequence);
  // Writes what `f` gathered (whole lines only), counting its lines into `written` or `lost`.
  void FlushSidecar(SidecarFile* f, std::atomic<uint64_t>* written, std::atomic<uint64_t>* lost,
                    const char* what);
  void FlushOutcomesFile(OutcomesFile* f);
  size_t LineBytes(const Record& r) const;
  // Adds the iovecs of one record's line; its framing goes to framing_ at `*framing_used`.
  void AddLine(const Record& r, size_t* framing_used);
  // Appends the session member that session_fields give to records of batch_ from
  // sessions_resolved_ on that have none.
  void ResolveSessionFields();

  const CaptureOptions options_;
  Env* const env_;
  Logger* const logger_;
  CaptureCounters* const counters_;
  Uploader* const uploader_;
  RateLimitedWarning queue_full_warning_;
  RateLimitedWarning write_warning_;
  RateLimitedWarning manifest_warning_;

  // Guarded by mu_.
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<Record> queue_;
  // Buffers of written records, handed back by Enqueue. returning_ gathers up to
  // kMaxSpareBytes of capacity and is handed over whole, so idle spares (here and in
  // returning_) hold at most 2 * kMaxSpareBytes (4 MiB). That is a whole group's worth at
  // tens of thousands of 1 KB records per second, so a steady stream allocates nothing.
  // Records over kMaxSpareCapacity are freed; their cost dwarfs one malloc.
  static constexpr size_t kMaxSpareBytes = 2 * 1024 * 1024;
  static constexpr size_t kMaxSpareCapacity = 16 * 1024;
  std::vector<std::string> spares_;
  std::vector<std::string> returning_;  // writer thread only: spares not yet handed over
  size_t returning_bytes_ = 0;          // writer thread only: capacity held in returning_
  uint64_t queue_bytes_ = 0;            // queued + in the writer's hands, released once written
  std::vector<Outcome> outcome_queue_;
  uint64_t next_seq_ = 1;
  bool writer_waiting_ = false;    // asleep until the next record: Enqueue notifies
  bool writer_lingering_ = false;  // gathering a group: Enqueue notifies once max_group_bytes wait
  bool stop_requested_ = false;
  bool rotation_requested_ = false;
  bool closed_ = false;
  // Clock anchor taken at Start(): wall time of a monotonic instant.
  int64_t anchor_mono_ns_ = 0;
  int64_t anchor_wall_ns_ = 0;

  // Writer thread only (and Start/Stop before/after it runs).
  std::thread thread_;
  std::vector<Record> batch_;
  size_t batch_pos_ = 0;
  std::unique_ptr<AppendFile> file_;
  bool opened_once_ = false;
  uint64_t file_size_ = 0;  // bytes of complete lines in file_
  // The current file: its place in the run, complete lines, and its first record's arrival.
  uint64_t file_sequence_ = 1;
  uint64_t file_lines_ = 0;
  EndpointCounts file_apis_{};  // file_lines_ by API
  int64_t file_last_timestamp_ms_ = 0;
  std::optional<int64_t> file_t0_mono_ns_;
  int64_t next_rotation_try_ns_ = 0;  // after a failed rename, when to try again
  // How often, at most, a write checks that the file is still at the capture path: records
  // written in between go to the moved file.
  static constexpr int64_t kIdentityCheckNs = 20'000'000;
  int64_t next_identity_check_ns_ = 0;
  // Outcomes (writer thread only).
  uint64_t resolved_seq_ = 0;  // every record up to this one is written or lost
  std::vector<Outcome> outcome_batch_;
  std::vector<Outcome> outcome_waiting_;  // records not yet dealt with (writer in back-off)
  std::unordered_map<uint64_t, Placement> placements_;
  std::vector<OutcomesFile> outcomes_files_;
  std::string outcome_line_;
  // One group = one writev(2): the records' bodies are written in place, with their
  // framing ({"timestamp":N,"payload": ... }\n) from framing_, never copied.
  std::vector<struct iovec> iov_;
  std::vector<char> framing_;
  std::vector<size_t> line_ends_;
  int64_t backoff_until_ns_ = 0;
  int64_t backoff_ns_ = 0;
  int64_t next_manifest_ns_ = 0;
  int64_t started_wall_ns_ = 0;
  std::string last_error_;
  std::string last_finished_path_;  // the name the last finished file got
  int64_t last_rotated_ms_ = -1;    // its first record's wall-clock ms, and its name's suffix
  int last_rotated_attempt_ = 0;
  uint64_t live_manifest_bytes_ = 0;  // the open file's manifest, for open_file_bytes
  bool dirty_since_sync_ = false;
  // session_fields, split once (mooncake_payload only; empty otherwise).
  SessionFieldPaths session_fields_;
  size_t sessions_resolved_ = 0;  // records of batch_ looked at by ResolveSessionFields
  std::string session_scratch_;
  std::string session_member_;
};

}  // namespace llmtap
