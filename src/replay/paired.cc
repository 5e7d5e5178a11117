// --paired-url (runner_internal.h): every row goes to the --url target and, at the same instant,
// to the paired target; each side's response is read to the end and measured from that instant
// (shadow::BodyTiming), and the row's pair line compares the two (shadow/pair.h).
//
// What makes the two sides' load identical: the pair is the unit of the schedule. Both requests
// are written one right after the other on the same event loop (which goes first alternates from
// row to row), a row holds its --max-concurrency slot until both ended, a closed loop's lane takes
// its next row once both ended, and a session's next turn is released once both sides of this
// one ended (at the primary's end plus the think time, or at the slower side's end when that is
// later), so each side sees the same arrivals at the same instants.
#include <cmath>
#include <cstdio>

#include <boost/asio/error.hpp>
#include <boost/beast/http/error.hpp>

#include "replay/runner_internal.h"

namespace llmtap::replay::internal {

PairState::PairState(const DueRequest& due, Clock::time_point at_time, int64_t unix_ms)
    : at(at_time),
      at_unix_ms(unix_ms),
      primary{ResponseOutcome(), shadow::BodyTiming(at_time)},
      candidate{ResponseOutcome(), shadow::BodyTiming(at_time)},
      index(due.request.index),
      line(due.request.line),
      timestamp_ms(due.request.timestamp_ms),
      endpoint(due.request.endpoint),
      traits(shadow::ReadRequestTraits(due.request.body)),
      warmup(due.warmup),
      response_id(due.request.response_id),
      session_id(due.request.session_id),
      captured_end_ms(due.captured_end_ms) {}

PairRecord PairOf(const PairState& pair, std::string_view candidate_url,
                  const tokenizer::Tokenizer* tok) {
  PairRecord rec;
  std::string members;
  shadow::PairKey key;
  key.path = api::EndpointPath(pair.endpoint);
  key.at_ms = pair.at_unix_ms;
  key.request = pair.index;
  key.shadow = 0;
  key.traits = &pair.traits;
  key.candidate_url = candidate_url;
  shadow::AppendPairMembers(key, pair.primary, pair.candidate, tok, &members);
  if (pair.timestamp_ms) {
    AppendShadowPairLine(pair.line, std::llround(*pair.timestamp_ms), members, &rec.line);
  } else {
    // A row without a timestamp (raw_payload): its line still joins it to the trace.
    rec.line.append("{\"line\":").append(std::to_string(pair.line));
    rec.line.append(",\"timestamp\":null,").append(members).push_back('}');
  }
  const ResponseOutcome& p = pair.primary.outcome;
  const ResponseOutcome& c = pair.candidate.outcome;
  rec.candidate_failed = c.error != nullptr || c.status / 100 != 2;
  // As AppendPairMembers decides whether "output" compares.
  rec.compared = p.error == nullptr && p.has_response && p.status / 100 == 2 &&
                 c.error == nullptr && c.has_response && c.status / 100 == 2;
  if (rec.compared) {
    rec.equal = shadow::ComparableOutput(p.response) == shadow::ComparableOutput(c.response);
  }
  rec.primary_ttft_us = pair.primary.timing.ttft_us();
  rec.candidate_ttft_us = pair.candidate.timing.ttft_us();
  return rec;
}

const char* PairErrorName(ErrorKind kind, const error_code& transport) {
  switch (kind) {
    case ErrorKind::kNone:
    case ErrorKind::kHttp4xx:
    case ErrorKind::kHttp5xx:
      return nullptr;
    case ErrorKind::kProtocol:
      break;
    default:
      return ErrorKindName(kind).data();  // "connect", "tls", "timeout", "cancelled": literals
  }
  // The connection ended or broke inside the response: "reset", as the proxy's shadow says;
  // anything else (a malformed response) "protocol".
  namespace http = beast::http;
  if (transport == asio::error::connection_reset || transport == asio::error::eof ||
      transport == asio::error::broken_pipe || transport == http::error::partial_message ||
      transport == http::error::end_of_stream) {
    return "reset";
  }
  return "protocol";
}

std::shared_ptr<PairState> Runner::StartPair(Worker& w, Job& job, Start* primary, Start* paired,
                                             std::string* paired_body) {
  TraceRequest& req = job.due.request;
  // The paired target continues its own chain: the captured previous_response_id replaced by
  // the id it gave the predecessor (the body as captured, before the primary's id goes in).
  // With --responses-chain inline, its own conversation: its own answers when the capture holds
  // none.
  const bool linked = req.chain == ChainLink::kLinked;
  const bool own_chain = linked || (inline_chains_ && req.endpoint == api::Endpoint::kResponses);
  if (own_chain) *paired_body = req.body;
  if (inline_chains_ && own_chain) {
    paired_inliner_.Compose(req, paired_body, Ms(Clock::now() - t0_));
  }
  Compose(&job);
  if (linked && !inline_chains_) {
    paired_ids_.Relink(req.previous_response_id, paired_body, Ms(Clock::now() - t0_));
  } else if (!own_chain) {
    // Hashed session turns carry the primary's answers in their history: both sides get the
    // same prompt, so their outputs compare like for like.
    *paired_body = req.body;
  }
  const auto sys_now = std::chrono::system_clock::now();
  const Clock::time_point at = Clock::now();
  const int64_t at_unix_ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(sys_now.time_since_epoch()).count();
  // Which side is written first alternates, so that neither is always the later one.
  if (req.index % 2 == 0) {
    *primary = Prepare(w, kPrimary, req, req.body);
    *paired = Prepare(w, kPaired, req, *paired_body);
  } else {
    *paired = Prepare(w, kPaired, req, *paired_body);
    *primary = Prepare(w, kPrimary, req, req.body);
  }
  return std::make_shared<PairState>(job.due, at, at_unix_ms);
}

awaitable<void> Runner::PairedExchange(Worker& w, std::shared_ptr<PairState> pair, std::string body,
                                       Start start) {
  Active act;
  act.deadline = start.sent + timeout_;
  act.cancelled = cancel_.load(std::memory_order_relaxed);
  w.active.insert(&act);
  const std::string head = std::move(start.head);
  ResponseMeter meter;
  const Transfer t = co_await Send(w, kPaired, start, head, body, pair->endpoint, false, false,
                                   meter, &pair->candidate.timing, act);
  const Clock::time_point done = Clock::now();
  w.active.erase(&act);
  pair->candidate.timing.OnEnd(done);
  RequestResult r;
  r.sent = true;
  if (t.complete) {
    // Tokens from the response's usage only (no counting: the pair line says what it reported).
    meter.Finish(true, done, body, nullptr, &w.reader, &r);
  } else {
    r.error = act.cancelled   ? ErrorKind::kCancelled
              : act.timed_out ? ErrorKind::kTimeout
                              : t.transport;
  }
  if (inline_chains_ && !pair->response_id.empty()) {
    paired_inliner_.Answered(pair->response_id, OutputOf(r, meter), Ms(done - t0_));
  }
  meter.TakeOutcome(PairErrorName(r.error, t.ec), &pair->candidate.outcome);
  if (!pair->response_id.empty()) {
    paired_ids_.Answered(pair->response_id, r.ok() ? meter.response_id() : std::string(),
                         Ms(done - t0_));
  }
  if (r.error == ErrorKind::kConnect && !peers_[kPaired]->connect_failure_told.exchange(true)) {
    std::fprintf(stderr,
                 "llmtap replay: cannot connect to the --paired-url target (%s); its side of each "
                 "pair says so (\"error\":\"connect\")\n",
                 t.ec.message().c_str());
  }
  SideEnded(w, pair);
}

void Runner::SideEnded(Worker& w, const std::shared_ptr<PairState>& pair) {
  if (--pair->sides_left > 0) return;
  // Warmup rows warm both targets up and are left out of the pairs, as out of the statistics.
  if (!pair->warmup) {
    PairRecord rec = PairOf(*pair, options_.paired_url, tok_);
    std::lock_guard lock(results_mu_);
    pairs_.push_back(std::move(rec));
  }
  if (pair->joined) pair->joined->cancel();
  // The next turn is counted in outstanding_ before this one leaves it.
  if (causal_ && !pair->session_id.empty()) {
    TurnEnded(w, pair->session_id, pair->captured_end_ms, pair->primary_ended_ms);
  }
  if (!closed_loop_) Finished(w);
}

}  // namespace llmtap::replay::internal
