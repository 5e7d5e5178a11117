// Shadow traffic: `llmtap proxy --shadow URL` mirrors matched requests to a candidate server and
// compares each request's two responses (issue 36).
//
// A POST whose path matches the shadow's endpoint pattern and that the sample picks is, once its
// body has been read whole, also sent to the candidate: by a coroutine of its own on the
// request's event loop, over that loop's own pool of candidate connections (ShadowLane). The
// relay never waits for it: the mirror starts after the client's request is on its way, and the
// candidate's response is read to the end, parsed with the primary's ResponseReader, compared
// and thrown away. At most max_in_flight mirrors run at once; a request over that limit, or
// arriving while the proxy stops, is dropped, as is a mirror whose connection to the candidate
// fails: each drop is counted by reason, so sent + dropped = matched. A mirror sent whose
// response then fails (timeout, reset, protocol) is counted as an error.
//
// Each mirrored request gives one pair line (shadow/pair.h): with capture on, in the capture
// file's shadow sidecar, joined to its row (the pair rides on the row's outcome: the capture
// observer hands the outcome to the pair, OutcomeHold, which reports it once both sides ended);
// with capture off, in --shadow-pairs when given. /llmtap/metrics gets the counters and the
// paired-delta histograms (candidate minus primary, TTFT and ITL).
//
// Internal to src/proxy. Threads: Begin and a pair's methods on the request's loop thread (the
// mirror runs there too, so a pair is never touched by two threads); Start/Stop from the
// controlling thread; AppendPrometheus and in_flight from any thread.
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_set>
#include <vector>

#include <re2/re2.h>

#include "api/endpoints.h"
#include "api/response_id_map.h"
#include "common/asio_types.h"
#include "common/log.h"
#include "common/prometheus.h"
#include "net/tls.h"
#include "proxy/observer.h"
#include "proxy/options.h"
#include "proxy/response_reader.h"
#include "proxy/shadow_headers.h"
#include "proxy/upstream_pool.h"
#include "proxy/upstream_target.h"
#include "shadow/pair.h"

namespace llmtap::proxy {

using shadow::BodyTiming;
using shadow::ShadowSide;

class RequestReader;
class PairsFile;
class Shadow;
struct ShadowRun;

// Why a matched request was not mirrored.
enum class ShadowDrop : uint8_t {
  kInFlightLimit,  // max_in_flight mirrors were running
  kConnect,        // the candidate refused or did not accept the connection in time
  kTls,            // the TLS handshake with the candidate failed
  kStopping,       // the proxy was stopping
  // A connection to the candidate failed (connect or tls) on this loop less than the back-off
  // ago: not tried (ShadowLane::down_until)
  kCandidateDown,
  // A Responses API request continuing a response (previous_response_id) whose request this
  // candidate never got (not mirrored: sampled out, or before the proxy started): it would
  // answer 404. A chain once mirrored is mirrored whole, whatever the sample.
  kChainUnknown,
  // ... whose request's mirror to this candidate failed or named no id, or was still running
  // --read-timeout-s after this request came.
  kChainFailed,
};
inline constexpr int kShadowDropReasons = 7;
std::string_view ShadowDropName(ShadowDrop reason);

// A loop's share of the shadow: its idle candidate connections and the mirrors running on it.
// Touched only by that loop's thread.
struct ShadowLane {
  UpstreamPool pool;
  net::TlsSessionSlot tls_session;
  std::unordered_set<ShadowRun*> runs;
  bool closed = false;  // CloseAll came: a mirror that starts now is dropped (stopping)
  // After a failed connection to the candidate, mirrors are not tried until down_until (a dead
  // or unreachable candidate then costs no connect per request, and no slot held for
  // --connect-timeout-s); the back-off doubles from kMinBackoff to kMaxBackoff while the
  // connections keep failing, and a connection that succeeds resets it.
  static constexpr std::chrono::milliseconds kMinBackoff{250};
  static constexpr std::chrono::milliseconds kMaxBackoff{8000};
  Clock::time_point down_until{};
  Clock::duration backoff{0};
  // Shutdown: cuts every mirror in flight and closes the pooled connections.
  void CloseAll();
};

// With `--shadow` given twice, each request chosen goes to both candidates (A/A: the same
// candidate twice, or a copy of the primary and a candidate): one pair line per candidate.
inline constexpr int kMaxShadows = 2;
// A loop's lanes, one per candidate (index = the --shadow's order).
using ShadowLanes = std::array<ShadowLane, kMaxShadows>;

// One mirrored request: the primary's side as the relay reports it, each candidate's as its
// mirror reads it. When all have ended (and a held capture outcome, if any, came), the pair's
// lines are written (one per candidate mirrored).
class ShadowPair final : public OutcomeHold {
 public:
  ShadowPair(Shadow& shadow, std::string path, api::Endpoint endpoint);
  ~ShadowPair();

  // The primary's request written upstream (each side's clock starts when its request is out:
  // TTFT and latency compare the servers, not the proxy's order of sending), then its response,
  // from the relay.
  void PrimarySent(Clock::time_point at) { primary_.timing.Restart(at); }
  void PrimaryHeaders(const HeaderView& headers);
  void PrimaryChunk(std::string_view bytes);
  void PrimaryDone(const RelayResult& result);
  // The capture observer's outcome of this request, reported with the pair on it once both
  // sides have ended.
  void Hold(uint64_t ticket, ResponseOutcome&& outcome) noexcept override;

  // The mirror's, of candidate k.
  void CandidateSent(int k, Clock::time_point at) { candidates_[k].side.timing.Restart(at); }
  void CandidateHeaders(int k, int status, const HeaderView& headers);
  void CandidateChunk(int k, std::string_view bytes);
  void CandidateDone(int k, const char* error);  // error: null, "timeout", "reset" or "protocol"
  void CandidateDropped(int k);                  // never sent: no pair line
  // The request's model and temperature, read by its first mirror from its copy of the body.
  bool needs_traits() const { return !traits_read_; }
  void SetTraits(shadow::RequestTraits traits) {
    traits_ = std::move(traits);
    traits_read_ = true;
  }

 private:
  friend class Shadow;
  struct Candidate {
    ShadowSide side;
    ResponseReader reader;
    bool mirrored = false;  // Begin chose it; else done and dropped from the start
    bool done = true, dropped = true;
    bool mapped = false;  // its Responses id is in the candidate's ResponseIdMap
  };
  void MaybeFinish();
  // A Responses request: the candidates' ids for the primary's response id, as each ends.
  void MapResponseIds();

  Shadow& shadow_;
  const std::string path_;
  const api::Endpoint endpoint_;
  const int64_t at_ms_;
  const uint64_t request_;
  shadow::RequestTraits traits_;
  bool traits_read_ = false;
  const size_t text_bytes_;  // of each output kept for the comparison (0: no pair line is written)
  ShadowSide primary_;
  ResponseReader primary_reader_;
  std::array<Candidate, kMaxShadows> candidates_;
  bool primary_done_ = false, finished_ = false;
  uint64_t ticket_ = 0;
  std::optional<ResponseOutcome> held_;
};

class Shadow final : public MetricsSource {
 public:
  Shadow(const ProxyOptions& options, Logger* logger);
  ~Shadow() override;
  Shadow(const Shadow&) = delete;
  Shadow& operator=(const Shadow&) = delete;

  // Parses and resolves the candidates, compiles the pattern, checks the header rules and opens
  // the pairs file. False with a reason in *error.
  bool Start(std::string* error);
  // After the loops have stopped: writes the pairs file's last lines.
  void Stop();

  // Called by the relay once the observers had the whole body (OnBodyComplete), before it is
  // forwarded: a pair when the request is mirrored to at least one candidate (its mirrors then
  // are already on their way, on `loop`), else null. Counts every decision.
  std::shared_ptr<ShadowPair> Begin(ShadowLanes& lanes, const Executor& loop,
                                    const RequestContext& ctx, const RequestReader& reader,
                                    bool stopping);

  int64_t in_flight() const;  // all candidates' mirrors
  // Pair lines go somewhere: capture is on, or --shadow-pairs was given.
  bool writes_pairs() const { return options_.capture != nullptr || pairs_file_ != nullptr; }
  void AppendPrometheus(std::string* out) const override;

 private:
  friend class ShadowPair;
  friend struct ShadowRun;

  struct Candidate;
  bool Sampled();
  // `previous`: the request's previous_response_id (the primary's id; "" for none), sent as the
  // candidate's own id for that response once it has one.
  awaitable<void> Mirror(std::shared_ptr<ShadowPair> pair, Candidate* c, ShadowLane* lane,
                         std::string head, std::string body, std::string previous);
  // A finished pair: each sent candidate's deltas into its histograms, its lines (`members`, one
  // per candidate sent, '\n' between them; empty when they go nowhere) to where pairs go, and the
  // held capture outcome, if any, reported.
  void PairFinished(ShadowPair& pair, std::string members);

  // A histogram of candidate-minus-primary differences, in seconds.
  struct DeltaHistogram {
    static constexpr std::array<double, 15> kBounds = {
        -1, -0.3, -0.1, -0.03, -0.01, -0.003, -0.001, 0, 0.001, 0.003, 0.01, 0.03, 0.1, 0.3, 1};
    std::array<std::atomic<uint64_t>, kBounds.size() + 1> counts{};
    std::atomic<int64_t> sum_us{0};
    void Observe(int64_t delta_us);
    // Its lines under `label` (empty name: none); the header is the caller's.
    void Append(PromWriter& w, std::string_view name, PromLabel label) const;
  };

  // One --shadow: its target and counters.
  struct Candidate {
    int index = 0;
    std::string url;
    UpstreamTarget target;
    std::optional<RateLimitedWarning> connect_warning;
    std::atomic<int64_t> in_flight{0};
    std::atomic<uint64_t> sent{0}, completed{0}, pairs{0};
    std::array<std::atomic<uint64_t>, kShadowDropReasons> dropped{};
    std::array<std::atomic<uint64_t>, kUpstreamErrorKinds> errors{};
    DeltaHistogram ttft_delta, itl_delta;
    // Responses API chains: the candidate's id for each response id of the primary.
    api::ResponseIdMap ids;
    void CountDrop(ShadowDrop reason) {
      dropped[static_cast<int>(reason)].fetch_add(1, std::memory_order_relaxed);
    }
  };

  const ShadowOptions options_;
  const ProxyOptions& proxy_;
  Logger* const logger_;
  std::vector<std::unique_ptr<Candidate>> candidates_;
  std::optional<RE2> pattern_;
  ShadowHeaderRules headers_;
  std::unique_ptr<PairsFile> pairs_file_;
  uint64_t sample_threshold_ = UINT64_MAX;
  std::atomic<uint64_t> sample_state_{0};
  std::atomic<uint64_t> next_request_{1};  // a pair line's "request"
  std::atomic<uint64_t> matched_{0}, sampled_out_{0};
};

}  // namespace llmtap::proxy
