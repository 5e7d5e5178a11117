// Capture counters. Every request offered to an enabled capture ends in exactly one
// outcome counter, so at any quiescent point:
//   matched == recorded + skipped_too_large + sampled_out + invalid_body + non_standard_json
//              + dropped_queue_full + skipped_upload_backlog + write_failed_records
//              + queued_records
// Updated with relaxed atomics from any thread; Snapshot() may be called from any thread.
#pragma once

#include <atomic>
#include <cstdint>

namespace llmtap {

struct CaptureCountersSnapshot {
  uint64_t offered = 0;                 // Offer() calls while enabled
  uint64_t matched = 0;                 // path matched endpoint_pattern
  uint64_t recorded = 0;                // lines now in the capture file
  uint64_t bytes_written = 0;           // bytes of those lines
  uint64_t skipped_too_large = 0;       // body > max_request_bytes
  uint64_t sampled_out = 0;             // not chosen by sample_rate
  uint64_t invalid_body = 0;            // not a JSON object
  uint64_t non_standard_json = 0;       // an object with NaN/Infinity or a lone surrogate escape
  uint64_t dropped_queue_full = 0;      // did not fit in max_queue_bytes
  uint64_t skipped_upload_backlog = 0;  // files waiting to upload held max_local_bytes
  uint64_t write_failed_records = 0;    // lost to a failed write or an unopenable file
  uint64_t queued_records = 0;          // accepted, not yet written or failed
  uint64_t queue_bytes = 0;             // bytes of those records
  // Not request outcomes (outside the sum above):
  uint64_t outcomes_written = 0;  // lines in the outcomes sidecars
  uint64_t outcomes_lost = 0;     // outcomes of records that were never written, or not written
  uint64_t shadow_pairs_written = 0;  // lines in the shadow pairs sidecars (proxy --shadow)
  uint64_t shadow_pairs_lost = 0;     // pair lines whose write failed
  uint64_t files_rotated = 0;     // capture files finished by rotation
  // Upload to the store (upload_url), all outside the sum above:
  uint64_t files_uploaded = 0;          // finished files whose manifest reached the store
  uint64_t bytes_uploaded = 0;          // bytes of the objects of those files (as stored)
  uint64_t upload_requests_failed = 0;  // store requests that failed (each is retried)
  uint64_t upload_retries = 0;          // store requests repeated after a failure
  uint64_t upload_files_waiting = 0;    // finished files not yet in the store
  uint64_t upload_bytes_waiting = 0;    // their bytes on local disk
  uint64_t open_file_bytes = 0;         // bytes of the capture file being written and its manifest
  uint64_t with_session_id = 0;         // recorded rows that carry a session_id
  uint64_t responses_truncated = 0;     // captured response texts cut at max_response_bytes

  // matched minus the sum of all outcomes; 0 when every request is accounted for.
  int64_t Unaccounted() const {
    return static_cast<int64_t>(matched) -
           static_cast<int64_t>(recorded + skipped_too_large + sampled_out + invalid_body +
                                non_standard_json + dropped_queue_full + skipped_upload_backlog +
                                write_failed_records + queued_records);
  }
};

struct CaptureCounters {
  std::atomic<uint64_t> offered{0};
  std::atomic<uint64_t> matched{0};
  std::atomic<uint64_t> recorded{0};
  std::atomic<uint64_t> bytes_written{0};
  std::atomic<uint64_t> skipped_too_large{0};
  std::atomic<uint64_t> sampled_out{0};
  std::atomic<uint64_t> invalid_body{0};
  std::atomic<uint64_t> non_standard_json{0};
  std::atomic<uint64_t> dropped_queue_full{0};
  std::atomic<uint64_t> skipped_upload_backlog{0};
  std::atomic<uint64_t> write_failed_records{0};
  std::atomic<uint64_t> queued_records{0};
  std::atomic<uint64_t> queue_bytes{0};
  std::atomic<uint64_t> outcomes_written{0};
  std::atomic<uint64_t> outcomes_lost{0};
  std::atomic<uint64_t> shadow_pairs_written{0};
  std::atomic<uint64_t> shadow_pairs_lost{0};
  std::atomic<uint64_t> files_rotated{0};
  std::atomic<uint64_t> files_uploaded{0};
  std::atomic<uint64_t> bytes_uploaded{0};
  std::atomic<uint64_t> upload_requests_failed{0};
  std::atomic<uint64_t> upload_retries{0};
  std::atomic<uint64_t> upload_files_waiting{0};
  std::atomic<uint64_t> upload_bytes_waiting{0};
  std::atomic<uint64_t> open_file_bytes{0};
  std::atomic<uint64_t> with_session_id{0};
  std::atomic<uint64_t> responses_truncated{0};

  CaptureCountersSnapshot Snapshot() const {
    CaptureCountersSnapshot s;
    auto get = [](const std::atomic<uint64_t>& a) { return a.load(std::memory_order_relaxed); };
    s.offered = get(offered);
    s.matched = get(matched);
    s.recorded = get(recorded);
    s.bytes_written = get(bytes_written);
    s.skipped_too_large = get(skipped_too_large);
    s.sampled_out = get(sampled_out);
    s.invalid_body = get(invalid_body);
    s.non_standard_json = get(non_standard_json);
    s.dropped_queue_full = get(dropped_queue_full);
    s.skipped_upload_backlog = get(skipped_upload_backlog);
    s.write_failed_records = get(write_failed_records);
    s.queued_records = get(queued_records);
    s.queue_bytes = get(queue_bytes);
    s.outcomes_written = get(outcomes_written);
    s.outcomes_lost = get(outcomes_lost);
    s.shadow_pairs_written = get(shadow_pairs_written);
    s.shadow_pairs_lost = get(shadow_pairs_lost);
    s.files_rotated = get(files_rotated);
    s.files_uploaded = get(files_uploaded);
    s.bytes_uploaded = get(bytes_uploaded);
    s.upload_requests_failed = get(upload_requests_failed);
    s.upload_retries = get(upload_retries);
    s.upload_files_waiting = get(upload_files_waiting);
    s.upload_bytes_waiting = get(upload_bytes_waiting);
    s.open_file_bytes = get(open_file_bytes);
    s.with_session_id = get(with_session_id);
    s.responses_truncated = get(responses_truncated);
    return s;
  }
};

}  // namespace llmtap
