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
    case ShadowDrop::kChainUnknown:
      return "chain_unknown";
    case ShadowDrop::kChainFailed:
      return "chain_failed";
  }
  return "?";
}

namespace {

// The clock of the Responses id maps.
double SteadyMs() {
  return std::chrono::duration<double, std::milli>(Clock::now().time_since_epoch()).count();
}

// A head BuildUpstreamHead made (Content-Length is its last field), for a body now `n` bytes.
void SetContentLength(std::string* head, size_t n) {
  constexpr std::string_view kField = "\r\nContent-Length: ";
  const size_t at = head->rfind(kField);
  if (at == std::string::npos) return;
  const size_t begin = at + kField.size();
  head->replace(begin, head->find("\r\n", begin) - begin, std::to_string(n));
}

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
      text_bytes_(shadow.writes_pairs() ? shadow::kMaxCompareBytes : 0) {
  // Every side's clock starts now: the primary's body is complete and about to go upstream.
  for (Candidate& c : candidates_) c.side.timing = primary_.timing;
}

ShadowPair::~ShadowPair() {
  // A pair cut before every side ended (the loops stopped) still owes the capture its outcome.
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
  MapResponseIds();
  MaybeFinish();
}

void ShadowPair::MapResponseIds() {
  const std::string& primary_id = primary_.outcome.response_id;
  if (endpoint_ != api::Endpoint::kResponses || !primary_done_ || primary_id.empty()) return;
  for (int k = 0; k < kMaxShadows; ++k) {
    Candidate& c = candidates_[k];
    if (!c.mirrored || c.mapped) continue;
    api::ResponseIdMap& ids = shadow_.candidates_[k]->ids;
    if (!c.done) {
      // A request continuing this response may come before the candidate has answered: it
      // waits for the answer.
      ids.Pending(primary_id, SteadyMs());
      continue;
    }
    const ResponseOutcome& o = c.side.outcome;
    const bool ok = !c.dropped && o.error == nullptr && o.status / 100 == 2;
    ids.Answered(primary_id, ok ? std::string_view(o.response_id) : std::string_view(), SteadyMs());
    c.mapped = true;
  }
}

void ShadowPair::Hold(uint64_t ticket, ResponseOutcome&& outcome) noexcept {
  try {
    held_.emplace(std::move(outcome));
    ticket_ = ticket;
  } catch (...) {
  }
}

void ShadowPair::CandidateHeaders(int k, int status, const HeaderView& headers) {
  Candidate& c = candidates_[k];
  c.side.outcome.status = status;
  c.reader = ResponseReader(endpoint_, headers.Get("content-type"), headers.Get("content-encoding"),
                            text_bytes_);
}

void ShadowPair::CandidateChunk(int k, std::string_view bytes) {
  Candidate& c = candidates_[k];
  c.side.timing.OnBody(Clock::now());
  c.reader.Feed(bytes);
}

void ShadowPair::CandidateDone(int k, const char* error) {
  Candidate& c = candidates_[k];
  c.side.timing.OnEnd(Clock::now());
  c.side.outcome.error = error;
  c.reader.Finish(&c.side.outcome);
  c.done = true;
  MapResponseIds();
  MaybeFinish();
}

void ShadowPair::CandidateDropped(int k) {
  Candidate& c = candidates_[k];
  c.dropped = true;
  c.done = true;
  MapResponseIds();
  MaybeFinish();
}

void ShadowPair::MaybeFinish() {
  if (!primary_done_ || finished_) return;
  for (const Candidate& c : candidates_) {
    if (!c.done) return;
  }
  finished_ = true;
  // The lines only when they go somewhere (capture on, or --shadow-pairs): metrics alone need
  // the timings.
  std::string members;
  if (shadow_.writes_pairs()) {
    try {
      for (int k = 0; k < kMaxShadows; ++k) {
        const Candidate& c = candidates_[k];
        if (c.dropped) continue;
        if (!members.empty()) members.push_back('\n');
        shadow::AppendPairMembers(
            {path_, at_ms_, request_, k, &traits_, shadow_.candidates_[k]->url}, primary_, c.side,
            shadow_.options_.tokenizer, &members);
      }
    } catch (...) {
      members.clear();
    }
  }
  shadow_.PairFinished(*this, std::move(members));
}

// --- Shadow ---

Shadow::Shadow(const ProxyOptions& options, Logger* logger)
    : options_(options.shadow), proxy_(options), logger_(logger) {}

Shadow::~Shadow() { Stop(); }

bool Shadow::Start(std::string* error) {
  if (options_.urls.size() > kMaxShadows) {
    *error = "--shadow is given " + std::to_string(options_.urls.size()) + " times; at most " +
             std::to_string(kMaxShadows) + " candidates (two: an A/A comparison)";
    return false;
  }
  for (const std::string& url : options_.urls) {
    auto c = std::make_unique<Candidate>();
    c->index = static_cast<int>(candidates_.size());
    c->url = url;
    // The TLS flags are the https candidates' (an http one next to them takes none).
    const net::TlsClientOptions tls =
        url.starts_with("https://") ? options_.tls : net::TlsClientOptions{};
    if (!ResolveUpstreamTarget(url, tls, "shadow", &c->target, error)) return false;
    c->connect_warning.emplace(logger_, std::chrono::seconds(1));
    candidates_.push_back(std::move(c));
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
    // A restarted proxy numbers on after the file's last run: pairs join on "request".
    next_request_.store(pairs_file_->highest_request() + 1, std::memory_order_relaxed);
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

int64_t Shadow::in_flight() const {
  int64_t n = 0;
  for (const auto& c : candidates_) n += c->in_flight.load(std::memory_order_relaxed);
  return n;
}

std::shared_ptr<ShadowPair> Shadow::Begin(ShadowLanes& lanes, const Executor& loop,
                                          const RequestContext& ctx, const RequestReader& reader,
                                          bool stopping) {
  if (ctx.method != "POST") return nullptr;
  const std::string_view target = ctx.target;
  const std::string_view path = target.substr(0, target.find('?'));
  if (!RE2::PartialMatch(re2::StringPiece(path.data(), path.size()), *pattern_)) return nullptr;
  const api::Endpoint endpoint = api::EndpointForPath(path).value_or(api::Endpoint::kOther);
  // A Responses request continuing a response: mirrored, whatever the sample, when its chain
  // was (a chain is mirrored whole or not at all), to the candidates that know the response.
  const std::string& body = reader.request().body;
  std::optional<shadow::RequestTraits> traits;
  std::array<api::ResponseIdMap::Lookup, kMaxShadows> chain{};
  bool chained = false;
  if (endpoint == api::Endpoint::kResponses &&
      body.find("\"previous_response_id\"") != std::string::npos) {
    traits = shadow::ReadRequestTraits(body);
    if (!traits->previous_response_id.empty()) {
      std::string ignored;
      for (const auto& c : candidates_) {
        chain[c->index] = c->ids.Find(traits->previous_response_id, SteadyMs(), &ignored);
        chained |= chain[c->index] != api::ResponseIdMap::Lookup::kUnknown;
      }
      if (!chained) chain.fill(api::ResponseIdMap::Lookup::kUnknown);
    }
  }
  const bool continues = traits && !traits->previous_response_id.empty();
  if (!chained && !Sampled()) {
    sampled_out_.fetch_add(1, std::memory_order_relaxed);
    return nullptr;
  }
  matched_.fetch_add(1, std::memory_order_relaxed);
  // Each candidate decides on its own (one may be down while the other answers): a request
  // matched is sent or dropped once per candidate.
  std::array<bool, kMaxShadows> go{};
  bool any = false;
  for (const auto& c : candidates_) {
    const ShadowLane& lane = lanes[c->index];
    if (stopping) {
      c->CountDrop(ShadowDrop::kStopping);
    } else if (continues && chain[c->index] == api::ResponseIdMap::Lookup::kUnknown) {
      c->CountDrop(ShadowDrop::kChainUnknown);
    } else if (continues && chain[c->index] == api::ResponseIdMap::Lookup::kFailed) {
      c->CountDrop(ShadowDrop::kChainFailed);
    } else if (lane.backoff.count() != 0 && CoarseNow() < lane.down_until) {
      c->CountDrop(ShadowDrop::kCandidateDown);
    } else if (c->in_flight.fetch_add(1, std::memory_order_relaxed) >= options_.max_in_flight) {
      c->in_flight.fetch_sub(1, std::memory_order_relaxed);
      c->CountDrop(ShadowDrop::kInFlightLimit);
    } else {
      go[c->index] = any = true;
    }
  }
  if (!any) return nullptr;
  std::shared_ptr<ShadowPair> pair;
  try {
    pair = std::make_shared<ShadowPair>(*this, std::string(path), endpoint);
    if (traits) pair->SetTraits(std::move(*traits));
    for (const auto& c : candidates_) {
      if (!go[c->index]) continue;
      ShadowPair::Candidate& pc = pair->candidates_[c->index];
      pc.mirrored = true;
      pc.done = pc.dropped = false;
    }
  } catch (...) {
    pair = nullptr;
  }
  for (const auto& c : candidates_) {
    if (!go[c->index]) continue;
    bool spawned = false;
    if (pair != nullptr) {
      try {
        std::string head;
        reader.BuildUpstreamHead(c->target.authority, &head, &headers_.skipped(),
                                 headers_.extra_fields());
        asio::co_spawn(loop,
                       Mirror(pair, c.get(), &lanes[c->index], std::move(head), body,
                              continues ? pair->traits_.previous_response_id : std::string()),
                       [](std::exception_ptr) {});
        spawned = true;
      } catch (...) {
      }
    }
    if (!spawned) {
      c->in_flight.fetch_sub(1, std::memory_order_relaxed);
      c->CountDrop(ShadowDrop::kConnect);
      if (pair != nullptr) pair->CandidateDropped(c->index);
    }
  }
  return pair;
}

awaitable<void> Shadow::Mirror(std::shared_ptr<ShadowPair> pair, Candidate* c, ShadowLane* lane,
                               std::string head, std::string body, std::string previous) {
  const Executor ex = co_await asio::this_coro::executor;
  const int k = c->index;
  if (writes_pairs() && pair->needs_traits()) pair->SetTraits(shadow::ReadRequestTraits(body));
  auto run = std::make_shared<ShadowRun>(*lane, ex);
  bool sent = false;
  const char* error = nullptr;  // a sent mirror's failure
  std::optional<ShadowDrop> drop;
  if (!previous.empty()) {
    // The candidate's id for the response this request continues: its answer to the request
    // before may still be on its way (the client's follow-up comes as soon as the primary's
    // answer ends), so wait for it, polling, at most --read-timeout-s.
    const Clock::time_point give_up = Clock::now() + proxy_.read_timeout;
    Timer poll(ex);
    for (;;) {
      std::string id;
      const api::ResponseIdMap::Lookup r = c->ids.Find(previous, SteadyMs(), &id);
      if (r == api::ResponseIdMap::Lookup::kFound) {
        shadow::SetPreviousResponseId(&body, id);
        SetContentLength(&head, body.size());
        break;
      }
      if (run->cut) {
        drop = ShadowDrop::kStopping;
      } else if (r != api::ResponseIdMap::Lookup::kPending || Clock::now() >= give_up) {
        drop = r == api::ResponseIdMap::Lookup::kUnknown ? ShadowDrop::kChainUnknown
                                                         : ShadowDrop::kChainFailed;
      }
      if (drop) break;
      poll.expires_after(std::chrono::milliseconds(5));
      error_code ec;
      co_await poll.async_wait(asio::redirect_error(use_awaitable, ec));
    }
  }
  for (int attempt = 0; !drop; ++attempt) {
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
      ec = co_await ConnectFirst(*up, c->target.endpoints,
                                 [&run] { return run->expired || run->cut; });
      const bool connected = !ec;
      if (connected && c->target.tls) {
        ec = co_await net::ClientHandshake(up->socket, *c->target.tls, c->target.host,
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
        drop = run->cut    ? ShadowDrop::kStopping
               : connected ? ShadowDrop::kTls
                           : ShadowDrop::kConnect;
        const std::string why = run->expired ? std::string("timed out") : ec.message();
        c->connect_warning->Hit(Clock::now().time_since_epoch().count(), [&] {
          return "llmtap proxy: shadow: cannot reach the candidate " + c->url + " (" + why +
                 "); mirrors are dropped and counted, and not tried again on this event loop for " +
                 std::to_string(
                     std::chrono::duration_cast<std::chrono::milliseconds>(lane->backoff).count()) +
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
      if (!sent) c->sent.fetch_add(1, std::memory_order_relaxed);
      sent = true;
      pair->CandidateSent(k, Clock::now());
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
            pair->CandidateHeaders(k, status, resp.headers);
          }
          if (!resp.body.empty()) {
            pair->CandidateChunk(k, resp.body);
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
    c->CountDrop(*drop);
    pair->CandidateDropped(k);
  } else {
    if (error == nullptr) {
      c->completed.fetch_add(1, std::memory_order_relaxed);
    } else {
      const int kind =
          std::string_view(error) == "timeout"    ? static_cast<int>(UpstreamError::kTimeout)
          : std::string_view(error) == "protocol" ? static_cast<int>(UpstreamError::kProtocol)
                                                  : static_cast<int>(UpstreamError::kReset);
      c->errors[kind].fetch_add(1, std::memory_order_relaxed);
    }
    pair->CandidateDone(k, error);
  }
  c->in_flight.fetch_sub(1, std::memory_order_relaxed);
}

void Shadow::PairFinished(ShadowPair& pair, std::string members) {
  const ShadowSide& primary = pair.primary_;
  for (const auto& c : candidates_) {
    const ShadowPair::Candidate& pc = pair.candidates_[c->index];
    if (pc.dropped) continue;
    const ShadowSide& candidate = pc.side;
    c->pairs.fetch_add(1, std::memory_order_relaxed);
    if (primary.timing.ttft_us() >= 0 && candidate.timing.ttft_us() >= 0) {
      c->ttft_delta.Observe(candidate.timing.ttft_us() - primary.timing.ttft_us());
    }
    if (primary.timing.itl_p50_us() >= 0 && candidate.timing.itl_p50_us() >= 0) {
      c->itl_delta.Observe(candidate.timing.itl_p50_us() - primary.timing.itl_p50_us());
    }
  }
  Capture* capture = options_.capture;
  if (pair.held_.has_value()) {
    // Recorded by capture: the pairs ride on the row's outcome.
    pair.held_->shadow_pair = std::move(members);
    if (capture != nullptr) capture->ReportOutcome(pair.ticket_, std::move(*pair.held_));
    pair.held_.reset();
    return;
  }
  if (members.empty()) return;
  if (capture != nullptr && capture->enabled()) {
    capture->ReportShadowPair(std::move(members));
  } else if (pairs_file_) {
    ForEachShadowPair(members, [&](std::string_view one) {
      std::string line;
      AppendShadowPairLine(0, 0, one, &line);
      pairs_file_->Append(std::move(line));
    });
  }
}

void Shadow::DeltaHistogram::Observe(int64_t delta_us) {
  const double seconds = static_cast<double>(delta_us) / 1e6;
  size_t i = 0;
  while (i < kBounds.size() && seconds > kBounds[i]) ++i;
  counts[i].fetch_add(1, std::memory_order_relaxed);
  sum_us.fetch_add(delta_us, std::memory_order_relaxed);
}

void Shadow::DeltaHistogram::Append(PromWriter& w, std::string_view name, PromLabel label) const {
  std::array<uint64_t, kBounds.size() + 1> c{};
  for (size_t i = 0; i < c.size(); ++i) c[i] = counts[i].load(std::memory_order_relaxed);
  const double sum = static_cast<double>(sum_us.load(std::memory_order_relaxed)) / 1e6;
  w.HistogramSeries(name, label, kBounds, c, sum);
}

void Shadow::AppendPrometheus(std::string* out) const {
  PromWriter w(out);
  w.Counter("llmtap_shadow_matched_total",
            "POST requests matching --shadow-endpoint-pattern and chosen by "
            "--shadow-sample-rate: sent + dropped, for each candidate.",
            matched_.load(std::memory_order_relaxed));
  w.Counter("llmtap_shadow_sampled_out_total",
            "Matching requests not chosen by --shadow-sample-rate.",
            sampled_out_.load(std::memory_order_relaxed));
  // A candidate's series: labelled shadow="0", shadow="1" when --shadow was given twice.
  const bool labelled = candidates_.size() > 1;
  std::array<std::string, kMaxShadows> index;
  for (size_t i = 0; i < index.size(); ++i) index[i] = std::to_string(i);
  auto each = [&](std::string_view name, PromType type, std::string_view help, auto value) {
    w.Header(name, type, help);
    for (const auto& c : candidates_) {
      if (labelled) {
        w.Sample(name, {{"shadow", index[c->index]}}, value(*c));
      } else {
        w.Sample(name, value(*c));
      }
    }
  };
  auto load = [](const auto& a) { return a.load(std::memory_order_relaxed); };
  each("llmtap_shadow_sent_total", PromType::kCounter,
       "Mirrors whose request reached the candidate.",
       [&](const Candidate& c) { return load(c.sent); });
  each("llmtap_shadow_completed_total", PromType::kCounter,
       "Mirrors whose response was read to the end (any status).",
       [&](const Candidate& c) { return load(c.completed); });
  w.Header("llmtap_shadow_dropped_total", PromType::kCounter,
           "Matched requests not mirrored, by reason.");
  for (const auto& c : candidates_) {
    for (int i = 0; i < kShadowDropReasons; ++i) {
      const std::string_view reason = ShadowDropName(static_cast<ShadowDrop>(i));
      if (labelled) {
        w.Sample("llmtap_shadow_dropped_total", {{"shadow", index[c->index]}, {"reason", reason}},
                 load(c->dropped[i]));
      } else {
        w.Sample("llmtap_shadow_dropped_total", {{"reason", reason}}, load(c->dropped[i]));
      }
    }
  }
  w.Header("llmtap_shadow_errors_total", PromType::kCounter,
           "Mirrors sent whose response failed, by kind.");
  for (const auto& c : candidates_) {
    for (UpstreamError e :
         {UpstreamError::kTimeout, UpstreamError::kReset, UpstreamError::kProtocol}) {
      const uint64_t v = load(c->errors[static_cast<int>(e)]);
      if (labelled) {
        w.Sample("llmtap_shadow_errors_total",
                 {{"shadow", index[c->index]}, {"kind", UpstreamErrorName(e)}}, v);
      } else {
        w.Sample("llmtap_shadow_errors_total", {{"kind", UpstreamErrorName(e)}}, v);
      }
    }
  }
  each("llmtap_shadow_in_flight", PromType::kGauge, "Mirrors running now.",
       [&](const Candidate& c) { return load(c.in_flight); });
  each("llmtap_shadow_pairs_total", PromType::kCounter,
       "Pairs finished (the primary and the candidate ended; one line each).",
       [&](const Candidate& c) { return load(c.pairs); });
  if (pairs_file_) {
    w.Counter("llmtap_shadow_pairs_written_total", "Pair lines written to --shadow-pairs.",
              pairs_file_->written());
    w.Counter("llmtap_shadow_pairs_lost_total",
              "Pair lines not written to --shadow-pairs (queue full or a failed write).",
              pairs_file_->lost());
  }
  auto histogram = [&](std::string_view name, std::string_view help, auto member) {
    w.Header(name, PromType::kHistogram, help);
    for (const auto& c : candidates_) {
      const DeltaHistogram& h = (*c).*member;
      h.Append(w, name, labelled ? PromLabel{"shadow", index[c->index]} : PromLabel{});
    }
  };
  histogram("llmtap_shadow_ttft_delta_seconds",
            "Paired TTFT difference, candidate minus primary, per mirrored request.",
            &Candidate::ttft_delta);
  histogram("llmtap_shadow_itl_delta_seconds",
            "Paired median inter-token-latency difference, candidate minus primary.",
            &Candidate::itl_delta);
}

}  // namespace llmtap::proxy
