#include "capture/capture.h"

#include <re2/re2.h>

#include <algorithm>
#include <atomic>
#include <charconv>
#include <cstring>
#include <new>
#include <random>
#include <thread>

#include "api/endpoints.h"
#include "capture/capture_file.h"
#include "capture/json_compact.h"
#include "capture/writer.h"
#include "common/json_escape.h"
#include "common/mix64.h"

namespace llmtap {

std::string_view OfferDecisionName(OfferDecision outcome) {
  switch (outcome) {
    case OfferDecision::kDisabled:
      return "disabled";
    case OfferDecision::kNotMatched:
      return "not_matched";
    case OfferDecision::kTooLarge:
      return "skipped_too_large";
    case OfferDecision::kSampledOut:
      return "sampled_out";
    case OfferDecision::kInvalidBody:
      return "invalid_body";
    case OfferDecision::kNonStandardJson:
      return "non_standard_json";
    case OfferDecision::kDroppedQueueFull:
      return "dropped_queue_full";
    case OfferDecision::kUploadBacklog:
      return "skipped_upload_backlog";
    case OfferDecision::kQueued:
      return "queued";
  }
  return "?";
}

namespace {

// splitmix64: a tiny, good-enough generator for Bernoulli sampling, one per thread.
struct SplitMix64 {
  uint64_t state;
  uint64_t Next() {
    uint64_t z = (state += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  }
};

// What endpoint_pattern is matched against: the request target without its query.
std::string_view WithoutQuery(std::string_view target) {
  return target.substr(0, target.find('?'));
}

// Remembers recent endpoint_pattern decisions per thread, so that the common case (a few
// distinct paths, most of them not captured) costs a compare instead of a regex search.
// Fixed-size and inline: looking up never allocates.
class PathDecisionCache {
 public:
  static constexpr size_t kMaxPath = 55;

  // Returns 1 (match), 0 (no match) or -1 (unknown) for `path` under pattern `owner_id`.
  int Lookup(uint64_t owner_id, std::string_view path) const {
    if (path.size() > kMaxPath) return -1;
    const Entry& e = entries_[Slot(path)];
    if (e.owner_id != owner_id || e.len != path.size() ||
        std::memcmp(e.path, path.data(), path.size()) != 0) {
      return -1;
    }
    return e.match ? 1 : 0;
  }
  void Store(uint64_t owner_id, std::string_view path, bool match) {
    if (path.size() > kMaxPath) return;
    Entry& e = entries_[Slot(path)];
    e.owner_id = owner_id;
    e.len = static_cast<uint8_t>(path.size());
    e.match = match;
    std::memcpy(e.path, path.data(), path.size());
  }

 private:
  struct Entry {
    uint64_t owner_id = 0;  // 0: empty
    uint8_t len = 0;
    bool match = false;
    char path[kMaxPath];
  };
  static size_t Slot(std::string_view path) {
    if (path.empty()) return 0;
    const auto* p = reinterpret_cast<const unsigned char*>(path.data());
    return (path.size() * 31u + p[path.size() - 1] * 7u + p[path.size() / 2]) % kSlots;
  }
  static constexpr size_t kSlots = 16;
  Entry entries_[kSlots];
};

std::atomic<uint64_t> next_capture_id{1};

// A request thread keeps one spare record buffer; a large one is not worth holding on to.
void ReleaseIfLarge(std::string* buffer) {
  if (buffer->capacity() > 64 * 1024) std::string().swap(*buffer);
}

}  // namespace

struct Capture::Impl {
  explicit Impl(CaptureOptions opts)
      : options(std::move(opts)),
        env(options.env != nullptr ? options.env : Env::Default()),
        logger(options.logger != nullptr ? options.logger : Logger::Stderr()),
        id(next_capture_id.fetch_add(1, std::memory_order_relaxed)),
        pattern(options.config.endpoint_pattern, RE2::Quiet),
        sample_threshold(SampleThreshold(options.config.sample_rate)),
        too_large_warning(logger, options.warning_interval),
        invalid_body_warning(logger, options.warning_interval),
        non_standard_warning(logger, options.warning_interval),
        upload_backlog_warning(logger, options.warning_interval),
        uploader(options.config.upload_url.empty()
                     ? nullptr
                     : std::make_unique<Uploader>(options.config, options.upload, env, logger,
                                                  &counters)),
        writer(options, env, logger, &counters, uploader.get()) {}

  bool Sampled() {
    if (sample_threshold == UINT64_MAX) return true;
    if (sample_threshold == 0) return false;
    thread_local SplitMix64 rng{0};
    thread_local bool seeded = false;
    if (!seeded) {
      uint64_t seed = options.sample_seed;
      if (seed == 0) {
        std::random_device rd;
        seed = (static_cast<uint64_t>(rd()) << 32) ^ rd();
      }
      rng.state = seed ^ std::hash<std::thread::id>()(std::this_thread::get_id());
      seeded = true;
    }
    return rng.Next() < sample_threshold;
  }

  bool PathMatches(std::string_view path) {
    thread_local PathDecisionCache cache;
    int cached = cache.Lookup(id, path);
    if (cached >= 0) return cached == 1;
    bool match = RE2::PartialMatch(re2::StringPiece(path.data(), path.size()), pattern);
    cache.Store(id, path, match);
    return match;
  }

  CaptureOptions options;
  Env* env;
  Logger* logger;
  const uint64_t id;  // unique per process; keys the per-thread path cache
  RE2 pattern;
  uint64_t sample_threshold;
  CaptureCounters counters;
  RateLimitedWarning too_large_warning;
  RateLimitedWarning invalid_body_warning;
  RateLimitedWarning non_standard_warning;
  RateLimitedWarning upload_backlog_warning;
  std::unique_ptr<Uploader> uploader;  // with upload_url; before the writer, which uses it
  CaptureWriter writer;
  std::atomic<bool> running{false};
  bool started = false;
  bool stopped = false;
};

Capture::Capture(CaptureOptions options) : enabled_(options.enabled) {
  if (!enabled_) return;
  impl_ = std::make_unique<Impl>(std::move(options));
  if (!impl_->pattern.ok()) {
    // ParseCaptureConfig never lets this through; an embedder passing a raw config might.
    impl_->logger->Log(LogLevel::kError, "capture disabled: endpoint_pattern does not compile: " +
                                             impl_->pattern.error());
    enabled_ = false;
    impl_.reset();
  }
}

Capture::~Capture() { Stop(); }

Status Capture::Start() {
  if (!enabled_ || impl_->started) return Status::Ok();
  impl_->started = true;
  Status s = impl_->writer.Start();
  if (impl_->options.config.capture_responses) {
    impl_->logger->Log(LogLevel::kWarning,
                       "capture_responses is on: the outcomes sidecar holds the text of every "
                       "recorded response, which may contain sensitive data as the prompts may; "
                       "protect it as you protect the capture files.");
  }
  // After the writer's start, which moved an earlier run's file aside: the uploader finds it.
  if (impl_->uploader) impl_->uploader->Start();
  impl_->running.store(true, std::memory_order_release);
  return s;
}

OfferDecision Capture::Offer(std::string_view path, std::string_view body) noexcept {
  uint64_t ticket = 0;
  return Offer(path, body, &ticket);
}

OfferDecision Capture::Offer(std::string_view path, std::string_view body,
                             uint64_t* ticket) noexcept {
  return Offer(path, body, OfferContext(), ticket);
}

bool Capture::wants_headers() const {
  return enabled_ && impl_->options.config.format == CaptureFormat::kMooncakePayload &&
         !impl_->options.config.session_headers.empty();
}

bool Capture::WouldRecord(std::string_view path) const {
  if (!enabled_ || !impl_->running.load(std::memory_order_acquire)) return false;
  return impl_->PathMatches(WithoutQuery(path));
}

// A mooncake_payload row for an API other than chat or completions names it, as AIPerf names
// it (api/endpoints.h): `,"endpoint_type":"responses"` after the payload. Chat and completions
// rows stay as they were: their bodies tell them apart, and AIPerf's runs default to them.
namespace {
void AppendEndpointTypeMember(api::Endpoint e, std::string* record) {
  if (e == api::Endpoint::kOther || e == api::Endpoint::kChat || e == api::Endpoint::kCompletions) {
    return;
  }
  record->append(",\"endpoint_type\":\"");
  record->append(api::AiperfEndpointType(e));
  record->push_back('"');
}
}  // namespace

// The decisions that need no byte of the body, counted: std::nullopt when the body is to be
// compacted and queued. Inlined into Offer, whose "capture off" path then costs what it did as
// one function (3.6 ns, where a call made it 9 ns: capture_bench BM_OfferDisabled).
[[gnu::always_inline]] inline std::optional<OfferDecision> Capture::Screen(
    std::string_view path, uint64_t body_size) noexcept {
  if (!enabled_) return OfferDecision::kDisabled;
  Impl& im = *impl_;
  if (!im.running.load(std::memory_order_acquire)) return OfferDecision::kDisabled;
  im.counters.offered.fetch_add(1, std::memory_order_relaxed);

  if (!im.PathMatches(WithoutQuery(path))) {
    return OfferDecision::kNotMatched;
  }
  im.counters.matched.fetch_add(1, std::memory_order_relaxed);

  if (body_size > static_cast<uint64_t>(im.options.config.max_request_bytes)) {
    im.counters.skipped_too_large.fetch_add(1, std::memory_order_relaxed);
    im.too_large_warning.Hit(im.env->NowMonotonicNanos(), [&] {
      return "request body of " + std::to_string(body_size) +
             " bytes is larger than max_request_bytes (" +
             std::to_string(im.options.config.max_request_bytes) + "); forwarded but not recorded";
    });
    return OfferDecision::kTooLarge;
  }
  if (!im.Sampled()) {
    im.counters.sampled_out.fetch_add(1, std::memory_order_relaxed);
    return OfferDecision::kSampledOut;
  }
  if (im.uploader && im.uploader->OverBudget()) {
    im.counters.skipped_upload_backlog.fetch_add(1, std::memory_order_relaxed);
    im.upload_backlog_warning.Hit(im.env->NowMonotonicNanos(), [&] {
      return "files waiting to upload hold max_local_bytes (" +
             std::to_string(im.options.config.max_local_bytes) +
             " bytes); request not recorded until the store takes them (" +
             im.uploader->last_error() + ")";
    });
    return OfferDecision::kUploadBacklog;
  }
  return std::nullopt;
}

OfferDecision Capture::OfferOversized(std::string_view path, uint64_t body_size) noexcept {
  const uint64_t over =
      enabled_ ? static_cast<uint64_t>(impl_->options.config.max_request_bytes) + 1 : 0;
  // A size over the limit never passes Screen, so nothing is left to compact.
  return Screen(path, std::max(body_size, over)).value_or(OfferDecision::kTooLarge);
}

OfferDecision Capture::Offer(std::string_view path, std::string_view body,
                             const OfferContext& context, uint64_t* ticket) noexcept {
  *ticket = 0;
  if (std::optional<OfferDecision> screened = Screen(path, body.size())) return *screened;
  Impl& im = *impl_;

  // Compact into this thread's spare buffer (a recycled record, see CaptureWriter::Enqueue);
  // the spare is replaced by another one as the record is queued.
  thread_local std::string record;
  record.clear();
  CompactError err = ThreadLocalJsonCompactor().Compact(body, &record);
  if (err != CompactError::kOk) {
    ReleaseIfLarge(&record);
    if (err == CompactError::kNonStandardJson) {
      im.counters.non_standard_json.fetch_add(1, std::memory_order_relaxed);
      im.non_standard_warning.Hit(im.env->NowMonotonicNanos(), [&] {
        return "request body holds NaN, Infinity or a lone surrogate escape (" +
               std::to_string(body.size()) +
               " bytes), which Python servers accept but no JSON replayer loads; not recorded";
      });
      return OfferDecision::kNonStandardJson;
    }
    im.counters.invalid_body.fetch_add(1, std::memory_order_relaxed);
    im.invalid_body_warning.Hit(im.env->NowMonotonicNanos(), [&] {
      return "request body is not a JSON object (" + std::string(CompactErrorName(err)) + ", " +
             std::to_string(body.size()) + " bytes); not recorded";
    });
    return OfferDecision::kInvalidBody;
  }
  try {
    // The API and the session id follow the payload in the same buffer (the writer writes them
    // in one piece); body fields are left to the writer.
    bool has_session = false;
    const api::Endpoint endpoint =
        api::EndpointForPath(WithoutQuery(path)).value_or(api::Endpoint::kOther);
    if (im.options.config.format == CaptureFormat::kMooncakePayload) {
      AppendEndpointTypeMember(endpoint, &record);
      if (!context.session_id.empty()) {
        has_session = AppendSessionIdMember(context.session_id, &record);
      }
      if (!has_session && context.headers != nullptr &&
          !im.options.config.session_headers.empty()) {
        has_session = AppendSessionIdFromHeaders(*context.headers,
                                                 im.options.config.session_headers, &record);
      }
    }
    const uint64_t seq = im.writer.Enqueue(std::move(record), &record, has_session, endpoint);
    if (seq == 0) {
      ReleaseIfLarge(&record);
      return OfferDecision::kDroppedQueueFull;
    }
    if (im.options.config.outcomes) *ticket = seq;
  } catch (const std::bad_alloc&) {
    // Out of memory while queueing: the request still goes through; the record is a drop.
    im.counters.dropped_queue_full.fetch_add(1, std::memory_order_relaxed);
    return OfferDecision::kDroppedQueueFull;
  }
  return OfferDecision::kQueued;
}

void Capture::ReportOutcome(uint64_t ticket, ResponseOutcome outcome) noexcept {
  if (!enabled_ || ticket == 0) return;
  if (outcome.response.truncated) {
    impl_->counters.responses_truncated.fetch_add(1, std::memory_order_relaxed);
  }
  try {
    impl_->writer.EnqueueOutcome(ticket, std::move(outcome));
  } catch (const std::bad_alloc&) {
    impl_->counters.outcomes_lost.fetch_add(1, std::memory_order_relaxed);
  }
}

void Capture::ReportShadowPair(std::string members) noexcept {
  if (!enabled_ || members.empty()) return;
  const size_t pairs = ForEachShadowPair(members, [](auto) {});
  try {
    ResponseOutcome o;
    o.shadow_pair = std::move(members);
    impl_->writer.EnqueueOutcome(0, std::move(o));
  } catch (const std::bad_alloc&) {
    impl_->counters.shadow_pairs_lost.fetch_add(pairs, std::memory_order_relaxed);
  }
}

bool Capture::outcomes_enabled() const { return enabled_ && impl_->options.config.outcomes; }

bool Capture::responses_enabled() const {
  return enabled_ && impl_->options.config.capture_responses;
}

void Capture::RequestRotation() noexcept {
  if (enabled_) impl_->writer.RequestRotation();
}

void Capture::Stop() {
  if (!enabled_ || impl_->stopped) return;
  impl_->stopped = true;
  impl_->running.store(false, std::memory_order_release);
  impl_->writer.Stop();
  if (impl_->uploader) impl_->uploader->Stop();
}

const CaptureConfig& Capture::config() const {
  static const CaptureConfig kDefault;
  return enabled_ ? impl_->options.config : kDefault;
}

CaptureCountersSnapshot Capture::counters() const {
  return enabled_ ? impl_->counters.Snapshot() : CaptureCountersSnapshot();
}

std::string Capture::manifest_path() const { return ManifestPathFor(config().path); }

}  // namespace llmtap
