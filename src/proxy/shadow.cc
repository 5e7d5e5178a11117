#include "proxy/shadow.h"

#include <algorithm>
#include <chrono>
#include <random>
#include <span>
#include <utility>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/this_coro.hpp>

#include "capture/capture.h"
#include "common/coarse_clock.h"
#include "common/mix64.h"
#include "net/stream_io.h"
#include "proxy/http_message.h"
#include "proxy/pairs_file.h"
#include "proxy/pipe.h"

namespace llmtap::proxy {

std::string_view ShadowDropName(ShadowDrop reason) {
  switch (reason) {
    case ShadowDrop::kInFlightLimit:
      return "in_flight_limit";
    case ShadowDrop::kConnect:
      return "connect";
    case ShadowDrop::kTls:
      return "tls";
    case ShadowDrop::kStopping:
      return "stopping";
    case ShadowDrop::kCandidateDown:
      return "candidate_down";
  }
  return "?";
}

namespace {

int64_t NowUnixMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

}  // namespace

// One mirror in flight: registered with its loop's lane (a shutdown cuts it) and the deadline of
// its current wait (at the deadline the connection is closed, which fails the wait). Shared with
// the timer's handler, so that a handler already due never outlives it.
struct ShadowRun : std::enable_shared_from_this<ShadowRun> {
  ShadowRun(ShadowLane& l, const Executor& ex) : lane(l), timer(ex), cut(l.closed) {
    lane.runs.insert(this);
  }
  ~ShadowRun() { lane.runs.erase(this); }

  void Arm(Clock::duration d) {
    timer.expires_after(d);
    const uint64_t g = ++generation;
    timer.async_wait([self = shared_from_this(), g](error_code ec) {
      if (ec || g != self->generation) return;
      self->expired = true;
      if (self->pipe) self->pipe->Close();
    });
  }
  void Disarm() {
    ++generation;
    timer.cancel();
  }
  void Cut() {
    cut = true;
    if (pipe) pipe->Close();
  }

  ShadowLane& lane;
  Timer timer;
  bool cut;  // shutdown: the mirror is given up
  std::shared_ptr<Pipe> pipe;
  uint64_t generation = 0;
  bool expired = false;
};

void ShadowLane::CloseAll() {
  closed = true;
  for (ShadowRun* run : runs) run->Cut();
  pool.CloseAll();
}

// --- ShadowPair ---

ShadowPair::ShadowPair(Shadow& shadow, std::string path, api::Endpoint endpoint)
    : shadow_(shadow),
      path_(std::move(path)),
      endpoint_(endpoint),
      at_ms_(NowUnixMs()),
      request_(shadow.next_request_.fetch_add(1, std::memory_order_relaxed)),
      text_bytes_(shadow.writes_pairs() ? Shadow::kMaxCompareBytes : 0) {
  // Both sides' clocks start now: the primary's body is complete and about to go upstream.
  candidate_.timing = primary_.timing;
}

ShadowPair::~ShadowPair() {
  // A pair cut before both sides ended (the loops stopped) still owes the capture its outcome.
  if (held_ && shadow_.options_.capture != nullptr) {
    shadow_.options_.capture->ReportOutcome(ticket_, std::move(*held_));
  }
}

void ShadowPair::PrimaryHeaders(const HeaderView& headers) {
  primary_reader_ = ResponseReader(endpoint_, headers.Get("content-type"),
                                   headers.Get("content-encoding"), text_bytes_);
}

void ShadowPair::PrimaryChunk(std::string_view bytes) {
  primary_.timing.OnBody(Clock::now());
  primary_reader_.Feed(bytes);
}

void ShadowPair::PrimaryDone(const RelayResult& result) {
  primary_.timing.OnEnd(Clock::now());
  ResponseOutcome& o = primary_.outcome;
  o.status = result.status;
  o.client_cancelled = result.client_cancelled;
  if (result.upstream_error != UpstreamError::kNone) {
    o.error = UpstreamErrorName(result.upstream_error).data();  // names are literals
  } else if (result.client_cancelled) {
    o.error = "client_cancelled";
  }
  primary_reader_.Finish(&o);
  primary_done_ = true;
  MaybeFinish();
}

void ShadowPair::Hold(uint64_t ticket, ResponseOutcome&& outcome) noexcept {
  try {
    held_.emplace(std::move(outcome));
    ticket_ = ticket;
  } catch (...) {
  }
}

void ShadowPair::CandidateHeaders(int status, const HeaderView& headers) {
  candidate_.outcome.status = status;
  candidate_reader_ = ResponseReader(endpoint_, headers.Get("content-type"),
                                     headers.Get("content-encoding"), text_bytes_);
}

void ShadowPair::CandidateChunk(std::string_view bytes) {
  candidate_.timing.OnBody(Clock::now());
  candidate_reader_.Feed(bytes);
}

void ShadowPair::CandidateDone(const char* error) {
  candidate_.timing.OnEnd(Clock::now());
  candidate_.outcome.error = error;
  candidate_reader_.Finish(&candidate_.outcome);
  candidate_done_ = true;
  MaybeFinish();
}

void ShadowPair::CandidateDropped() {
  dropped_ = true;
  candidate_done_ = true;
  MaybeFinish();
}

void ShadowPair::MaybeFinish() {
  if (!primary_done_ || !candidate_done_ || finished_) return;
  finished_ = true;
  // The line only when it goes somewhere (capture on, or --shadow-pairs): metrics alone need
  // the timings.
  std::string members;
  if (!dropped_ && shadow_.writes_pairs()) {
    try {
      shadow::AppendPairMembers({path_, at_ms_, request_, 0, &traits_}, primary_, candidate_,
                                shadow_.options_.tokenizer, &members);
    } catch (...) {
      members.clear();
    }
  }
  shadow_.PairFinished(primary_, candidate_, !dropped_, std::move(members), ticket_, &held_);
}

// --- Shadow ---

Shadow::Shadow(const ProxyOptions& options, Logger* logger)
    : options_(options.shadow),
      proxy_(options),
      logger_(logger),
      connect_warning_(logger, std::chrono::seconds(1)) {}

Shadow::~Shadow() { Stop(); }

bool Shadow::Start(std::string* error) {
  if (!ResolveUpstreamTarget(options_.url, options_.tls, "shadow", &candidate_, error)) {
    return false;
  }
  pattern_.emplace(options_.endpoint_pattern, RE2::Quiet);
  if (!pattern_->ok()) {
    *error = "--shadow-endpoint-pattern does not compile: " + pattern_->error();
    return false;
  }
  for (const std::string& spec : options_.set_headers) {
    std::string why;
    if (!headers_.AddSet(spec, &why)) {
      *error = "--shadow-header " + why;
      return false;
    }
  }
  for (const std::string& name : options_.drop_headers) {
    std::string why;
    if (!headers_.AddDrop(name, &why)) {
      *error = "--shadow-drop-header " + why;
      return false;
    }
  }
  sample_threshold_ = SampleThreshold(options_.sample_rate);
  uint64_t seed = options_.sample_seed;
  if (seed == 0) {
    std::random_device rd;
    seed = (static_cast<uint64_t>(rd()) << 32) ^ rd();
  }
  sample_state_.store(seed, std::memory_order_relaxed);
  if (options_.capture == nullptr && !options_.pairs_path.empty()) {
    pairs_file_ = std::make_unique<PairsFile>(options_.pairs_path, logger_);
    if (Status s = pairs_file_->Open(); !s.ok()) {
      *error = "--shadow-pairs: " + s.ToString();
      pairs_file_.reset();
      return false;
    }
  }
  return true;
}

void Shadow::Stop() {
  if (pairs_file_) pairs_file_->Stop();
}

bool Shadow::Sampled() {
  if (sample_threshold_ == UINT64_MAX) return true;
  if (sample_threshold_ == 0) return false;
  // splitmix64 over one shared state: one relaxed add per decision.
  constexpr uint64_t kGamma = 0x9e3779b97f4a7c15ULL;
  return Mix64(sample_state_.fetch_add(kGamma, std::memory_order_relaxed) + kGamma) <
         sample_threshold_;
}

std::shared_ptr<ShadowPair> Shadow::Begin(ShadowLane& lane, const Executor& loop,
                                          const RequestContext& ctx, const RequestReader& reader,
                                          bool stopping) {
  if (ctx.method != "POST") return nullptr;
  const std::string_view target = ctx.target;
  const std::string_view path = target.substr(0, target.find('?'));
  if (!RE2::PartialMatch(re2::StringPiece(path.data(), path.size()), *pattern_)) return nullptr;
  if (!Sampled()) {
    sampled_out_.fetch_add(1, std::memory_order_relaxed);
    return nullptr;
  }
  matched_.fetch_add(1, std::memory_order_relaxed);
  if (stopping) {
    CountDrop(ShadowDrop::kStopping);
    return nullptr;
  }
  if (lane.backoff.count() != 0 && CoarseNow() < lane.down_until) {
    CountDrop(ShadowDrop::kCandidateDown);
    return nullptr;
  }
  if (in_flight_.fetch_add(1, std::memory_order_relaxed) >= options_.max_in_flight) {
    in_flight_.fetch_sub(1, std::memory_order_relaxed);
    CountDrop(ShadowDrop::kInFlightLimit);
    return nullptr;
  }
  std::shared_ptr<ShadowPair> pair;
  try {
    pair = std::make_shared<ShadowPair>(*this, std::string(path),
                                        api::EndpointForPath(path).value_or(api::Endpoint::kOther));
    std::string head;
    reader.BuildUpstreamHead(candidate_.authority, &head, &headers_.skipped(),
                             headers_.extra_fields());
    asio::co_spawn(loop, Mirror(pair, &lane, std::move(head), reader.request().body),
                   [](std::exception_ptr) {});
  } catch (...) {
    in_flight_.fetch_sub(1, std::memory_order_relaxed);
    CountDrop(ShadowDrop::kConnect);
    return nullptr;
  }
  return pair;
}

awaitable<void> Shadow::Mirror(std::shared_ptr<ShadowPair> pair, ShadowLane* lane,
                               std::string head, std::string body) {
  const Executor ex = co_await asio::this_coro::executor;
  if (writes_pairs()) pair->SetTraits(shadow::ReadRequestTraits(body));
  auto run = std::make_shared<ShadowRun>(*lane, ex);
  bool sent = false;
  const char* error = nullptr;  // a sent mirror's failure
  std::optional<ShadowDrop> drop;
  for (int attempt = 0;; ++attempt) {
    std::shared_ptr<Pipe> up =
        attempt == 0 ? lane->pool.Take(Clock::now(), proxy_.idle_timeout) : nullptr;
    const bool reused = up != nullptr;
    error_code ec;
    if (run->cut) {
      if (up != nullptr) up->Close();
      drop = ShadowDrop::kStopping;
      break;
    }
    if (up == nullptr) {
      up = std::make_shared<Pipe>(ex);
      run->pipe = up;
      run->Arm(proxy_.connect_timeout);
      ec = co_await ConnectFirst(*up, candidate_.endpoints,
                                 [&run] { return run->expired || run->cut; });
      const bool connected = !ec;
      if (connected && candidate_.tls) {
        ec = co_await net::ClientHandshake(up->socket, *candidate_.tls, candidate_.host,
                                           &lane->tls_session, &up->tls);
      }
      run->Disarm();
      if (ec && !run->cut) {
        // Back off: the next mirrors on this loop are not tried for a while.
        lane->backoff = std::clamp<Clock::duration>(2 * lane->backoff, ShadowLane::kMinBackoff,
                                                    ShadowLane::kMaxBackoff);
        lane->down_until = CoarseNow() + lane->backoff;
      } else if (!ec) {
        lane->backoff = Clock::duration(0);
      }
      if (ec) {
        drop = run->cut ? ShadowDrop::kStopping : connected ? ShadowDrop::kTls : ShadowDrop::kConnect;
        const std::string why = run->expired ? std::string("timed out") : ec.message();
        connect_warning_.Hit(Clock::now().time_since_epoch().count(), [&] {
          return "llmtap proxy: shadow: cannot reach the candidate " + options_.url + " (" + why +
                 "); mirrors are dropped and counted, and not tried again on this event loop for " +
                 std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(
                                    lane->backoff).count()) +
                 " ms";
        });
        break;
      }
    }
    run->pipe = up;
    const asio::const_buffer pieces[] = {asio::buffer(head), asio::buffer(body)};
    run->Arm(proxy_.write_timeout);
    co_await net::WriteAll(up->socket, up->tls.get(), pieces, ec);
    run->Disarm();
    bool got_some = false;
    bool keep = false;
    int status = 0;
    if (!ec) {
      if (!sent) sent_.fetch_add(1, std::memory_order_relaxed);
      sent = true;
      // The response: its head, then its body to the end, each wait bounded by read_timeout.
      UpstreamResponse resp;
      std::optional<UpstreamResponseParser> parser;
      parser.emplace(&resp, proxy_.max_header_bytes, false);
      bool head_seen = false;
      for (;;) {
        error_code pec;
        parser->Feed(up->buffer, pec);
        while (!pec && parser->is_done() && resp.status / 100 == 1 && resp.status != 101) {
          parser.emplace(&resp, proxy_.max_header_bytes, false);
          parser->Feed(up->buffer, pec);
        }
        if (pec && !parser->is_header_done()) {
          error = "protocol";
          break;
        }
        if (parser->is_header_done()) {
          got_some = true;
          if (!head_seen) {
            head_seen = true;
            status = resp.status;
            pair->CandidateHeaders(status, resp.headers);
          }
          if (!resp.body.empty()) {
            pair->CandidateChunk(resp.body);
            resp.body.clear();
          }
          if (parser->is_done()) {
            keep = parser->keep_alive();
            break;
          }
          if (pec) {
            error = "protocol";
            break;
          }
        }
        if (up->error) {
          if (up->error == asio::error::eof && parser->is_header_done() && parser->need_eof()) {
            parser->put_eof(pec);
            if (!pec) continue;
          }
          ec = up->error;
          break;
        }
        up->StartRead();
        run->Arm(proxy_.read_timeout);
        co_await up->Wait(use_awaitable);
        run->Disarm();
      }
    }
    if (ec && !got_some && reused && attempt == 0 && !run->expired && !run->cut) {
      // A pooled connection the candidate had closed: once more on a new one.
      up->Close();
      continue;
    }
    if (ec && error == nullptr) {
      error = run->expired ? "timeout" : "reset";
    }
    if (error == nullptr && keep && !up->error && !up->HasBufferedInput() && !run->cut) {
      run->pipe = nullptr;
      lane->pool.Park(std::move(up), proxy_.max_idle_upstream_per_thread);
    } else {
      up->Close();
    }
    if (!sent && ec) drop = run->cut ? ShadowDrop::kStopping : ShadowDrop::kConnect;
    break;
  }
  run->pipe = nullptr;
  if (drop) {
    CountDrop(*drop);
    pair->CandidateDropped();
  } else {
    if (error == nullptr) {
      completed_.fetch_add(1, std::memory_order_relaxed);
    } else {
      const int kind = std::string_view(error) == "timeout"    ? static_cast<int>(UpstreamError::kTimeout)
                       : std::string_view(error) == "protocol" ? static_cast<int>(UpstreamError::kProtocol)
                                                               : static_cast<int>(UpstreamError::kReset);
      errors_[kind].fetch_add(1, std::memory_order_relaxed);
    }
    pair->CandidateDone(error);
  }
  in_flight_.fetch_sub(1, std::memory_order_relaxed);
}

void Shadow::PairFinished(const ShadowSide& primary, const ShadowSide& candidate, bool paired,
                          std::string members, uint64_t ticket,
                          std::optional<ResponseOutcome>* held) {
  if (paired) {
    pairs_.fetch_add(1, std::memory_order_relaxed);
    if (primary.timing.ttft_us() >= 0 && candidate.timing.ttft_us() >= 0) {
      ttft_delta_.Observe(candidate.timing.ttft_us() - primary.timing.ttft_us());
    }
    if (primary.timing.itl_p50_us() >= 0 && candidate.timing.itl_p50_us() >= 0) {
      itl_delta_.Observe(candidate.timing.itl_p50_us() - primary.timing.itl_p50_us());
    }
  }
  Capture* capture = options_.capture;
  if (held->has_value()) {
    // Recorded by capture: the pair rides on the row's outcome.
    (*held)->shadow_pair = std::move(members);
    if (capture != nullptr) capture->ReportOutcome(ticket, std::move(**held));
    held->reset();
    return;
  }
  if (members.empty()) return;
  if (capture != nullptr && capture->enabled()) {
    capture->ReportShadowPair(std::move(members));
  } else if (pairs_file_) {
    std::string line;
    AppendShadowPairLine(0, 0, members, &line);
    pairs_file_->Append(std::move(line));
  }
}

void Shadow::DeltaHistogram::Observe(int64_t delta_us) {
  const double seconds = static_cast<double>(delta_us) / 1e6;
  size_t i = 0;
  while (i < kBounds.size() && seconds > kBounds[i]) ++i;
  counts[i].fetch_add(1, std::memory_order_relaxed);
  sum_us.fetch_add(delta_us, std::memory_order_relaxed);
}

void Shadow::DeltaHistogram::Append(PromWriter& w, std::string_view name,
                                    std::string_view help) const {
  std::array<uint64_t, kBounds.size() + 1> c{};
  for (size_t i = 0; i < c.size(); ++i) c[i] = counts[i].load(std::memory_order_relaxed);
  w.Histogram(name, help, kBounds, c,
              static_cast<double>(sum_us.load(std::memory_order_relaxed)) / 1e6);
}

void Shadow::AppendPrometheus(std::string* out) const {
  PromWriter w(out);
  w.Counter("llmtap_shadow_matched_total",
            "POST requests matching --shadow-endpoint-pattern and chosen by "
            "--shadow-sample-rate: sent + dropped.",
            matched_.load(std::memory_order_relaxed));
  w.Counter("llmtap_shadow_sampled_out_total",
            "Matching requests not chosen by --shadow-sample-rate.",
            sampled_out_.load(std::memory_order_relaxed));
  w.Counter("llmtap_shadow_sent_total", "Mirrors whose request reached the candidate.",
            sent_.load(std::memory_order_relaxed));
  w.Counter("llmtap_shadow_completed_total",
            "Mirrors whose response was read to the end (any status).",
            completed_.load(std::memory_order_relaxed));
  w.Header("llmtap_shadow_dropped_total", PromType::kCounter,
           "Matched requests not mirrored, by reason.");
  for (int i = 0; i < kShadowDropReasons; ++i) {
    w.Sample("llmtap_shadow_dropped_total", {{"reason", ShadowDropName(static_cast<ShadowDrop>(i))}},
             dropped_[i].load(std::memory_order_relaxed));
  }
  w.Header("llmtap_shadow_errors_total", PromType::kCounter,
           "Mirrors sent whose response failed, by kind.");
  for (UpstreamError e : {UpstreamError::kTimeout, UpstreamError::kReset, UpstreamError::kProtocol}) {
    w.Sample("llmtap_shadow_errors_total", {{"kind", UpstreamErrorName(e)}},
             errors_[static_cast<int>(e)].load(std::memory_order_relaxed));
  }
  w.Gauge("llmtap_shadow_in_flight", "Mirrors running now.",
          in_flight_.load(std::memory_order_relaxed));
  w.Counter("llmtap_shadow_pairs_total", "Pairs finished (both sides ended; one line each).",
            pairs_.load(std::memory_order_relaxed));
  if (pairs_file_) {
    w.Counter("llmtap_shadow_pairs_written_total", "Pair lines written to --shadow-pairs.",
              pairs_file_->written());
    w.Counter("llmtap_shadow_pairs_lost_total",
              "Pair lines not written to --shadow-pairs (queue full or a failed write).",
              pairs_file_->lost());
  }
  ttft_delta_.Append(w, "llmtap_shadow_ttft_delta_seconds",
                     "Paired TTFT difference, candidate minus primary, per mirrored request.");
  itl_delta_.Append(w, "llmtap_shadow_itl_delta_seconds",
                    "Paired median inter-token-latency difference, candidate minus primary.");
}

}  // namespace llmtap::proxy
