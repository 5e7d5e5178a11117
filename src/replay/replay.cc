#include "replay/replay.h"

#include <malloc.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>

#include "fidelity/certificate.h"
#include "fidelity/pairs.h"
#include "net/tls.h"
#include "replay/input.h"
#include "replay/lookahead.h"
#include "replay/runner.h"
#include "replay/schedule.h"
#include "replay/summary.h"
#include "replay/synthetic.h"
#include "report/run_dir.h"
#include "report/server_metrics.h"
#include "store/stream.h"
#include "tokenizer/tokenizer.h"
#include "trace/outcomes.h"

namespace llmtap::replay {
namespace {

int Fail(const std::string& message) {
  std::fflush(stdout);
  std::fprintf(stderr, "llmtap replay: %s\n", message.c_str());
  return 2;
}

// What the input said so far (rows skipped, rows out of order), on stderr as it is found.
void PrintNotes(Lookahead& input, bool progress_line) {
  std::vector<std::string> notes = input.TakeNotes();
  if (notes.empty()) return;
  if (progress_line) std::fputc('\n', stderr);
  for (const std::string& note : notes) std::fprintf(stderr, "%s\n", note.c_str());
}

// The look-ahead's options: what to read, how to schedule it, and for hashed rows (prompts
// synthesized from their block ids) the model to name, asked of `target` at the first one.
Lookahead::Options LookaheadOptions(const ReplayOptions& o, const Target& target,
                                    const SyntheticPrompts* synthetic,
                                    const std::string& synthetic_error,
                                    std::shared_ptr<const net::TlsClientContext> tls) {
  Lookahead::Options in;
  in.load.input = o.input;
  in.load.synthetic = synthetic;
  in.load.synthetic_error = synthetic_error;
  // Called on the reader thread at the first hashed row; `o` and `target` outlive the reader.
  in.load.default_model = [&o, &target, tls] {
    std::optional<std::string> model = FetchFirstModel(target, o.run.headers, 5.0, tls.get());
    std::fprintf(stderr, "llmtap replay: hashed rows use model \"%s\" (%s)\n",
                 model.value_or("default").c_str(),
                 model ? "the server's first /v1/models entry" : "/v1/models did not answer");
    return model.value_or("default");
  };
  in.schedule = o.schedule;
  in.duration_s = o.run.duration_s;
  in.note_prefix = o.input.path + ":";
  return in;
}

// Reads the outcomes sidecar (in->captured, over *join): its latencies give session turns their
// think time in a causal replay on the trace's timestamps, and its response ids link the rows of
// Responses chains (chains.h).
Status JoinOutcomes(const ReplayOptions& o, trace::OutcomeTable* outcomes,
                    std::unique_ptr<trace::OutcomeJoin>* join, Lookahead::Options* in) {
  bool loaded = false;
  std::vector<std::string> warnings;
  Status s = outcomes->LoadFor(o.input.path, o.input.outcomes_path, o.input.no_outcomes,
                               {.response_ids = true,
                                .responses = o.run.responses_chain == ResponsesChain::kInline,
                                .sides = !o.out_dir.empty() && o.fidelity.enabled},
                               &loaded, &warnings);
  if (!s.ok()) return s;
  for (const std::string& w : warnings) std::fprintf(stderr, "llmtap replay: %s\n", w.c_str());
  if (loaded) {
    *join = std::make_unique<trace::OutcomeJoin>(outcomes, o.input.path);
    // Called on the reader thread only, which owns the join until it is stopped.
    in->captured = [j = join->get(), outcomes](uint64_t line, std::optional<double> timestamp_ms)
        -> std::optional<Lookahead::Options::Captured> {
      const trace::Outcome* outcome = j->Join(line, timestamp_ms);
      if (outcome == nullptr) return std::nullopt;
      Lookahead::Options::Captured c;
      c.latency_ms = outcome->latency_ms;
      c.response_id = outcomes->ResponseId(*outcome);
      c.response = outcomes->Response(*outcome);
      c.side = outcomes->Side(*outcome);
      if (outcome->cached_tokens != trace::Outcome::kNoCache) {
        c.prompt_tokens = outcome->prompt_tokens;
        c.cached_tokens = outcome->cached_tokens;
      }
      return c;
    };
  }
  return Status::Ok();
}

// The server-metrics sampler of --server-metrics, hooked into the run. It scrapes on its own
// thread, never on an event loop.
std::unique_ptr<report::ServerMetricsSampler> AttachServerMetrics(const ReplayOptions& o,
                                                                  RunOptions* run) {
  auto sampler = std::make_unique<report::ServerMetricsSampler>(
      report::ServerMetricsSampler::Options{.url = o.server_metrics,
                                            .target_url = o.run.url,
                                            .headers = o.run.headers,
                                            .tls = run->tls_context});
  report::ServerMetricsSampler* s = sampler.get();
  run->server_metrics_hook = [s](RunPhase phase, double) {
    if (phase == RunPhase::kBefore) {
      std::string why;
      if (s->Start(&why)) {
        s->StartBackground();
        std::printf("server metrics: %s, every second\n", s->url().c_str());
      } else {
        std::printf("server metrics: none (%s)\n", why.c_str());
      }
      std::fflush(stdout);
    } else if (phase == RunPhase::kAfter) {
      s->Finish();
    }
  };
  run->server_metrics_json = [s] { return s->ToJson().dump(); };
  return sampler;
}

void PrintJoin(const trace::OutcomeJoin& join, const trace::OutcomeTable& outcomes) {
  // Every row joins: session turns for their latency, Responses rows for their response id, every
  // row for the capture's server cache report.
  std::printf(
      "outcomes: %s: %llu rows joined to their outcome (captured latency, response id, "
      "server cache)\n",
      outcomes.path().c_str(), static_cast<unsigned long long>(join.matched()));
  if (join.refused()) {
    std::printf("outcomes: %s; turns after the refusal get no think time from it\n",
                join.RefusedStatus().ToString().c_str());
  } else if (!join.MismatchSummary().empty()) {
    std::printf("outcomes: %s\n", join.MismatchSummary().c_str());
  }
}

// What was read and planned, after the run.
void PrintTotals(const ReplayOptions& o, Lookahead& input, const Lookahead::Totals& t,
                 bool interrupted) {
  const uint32_t shard = o.schedule.shard_index, shards = o.schedule.shard_count;
  const InputCounts& c = t.counts;
  std::printf(
      "llmtap replay: %s: %llu rows (%llu mooncake_payload, %llu raw_payload, %llu hashed; %s), "
      "%llu skipped, %llu out of order%s\n",
      o.input.path.c_str(), static_cast<unsigned long long>(c.rows),
      static_cast<unsigned long long>(c.rows_payload), static_cast<unsigned long long>(c.rows_raw),
      static_cast<unsigned long long>(c.rows_hashed), c.apis.Text().c_str(),
      static_cast<unsigned long long>(c.skipped), static_cast<unsigned long long>(t.out_of_order),
      interrupted ? " (reading stopped at the interruption)" : "");
  std::printf("plan: %s; %llu requests%s -> %s\n", input.mode().c_str(),
              static_cast<unsigned long long>(input.planned()),
              shards > 1 ? (" (shard " + std::to_string(shard) + "/" + std::to_string(shards) +
                            " of " + std::to_string(t.planned_total) + ")")
                               .c_str()
                         : "",
              o.run.url.c_str());
  if (t.out_of_order > 0) {
    std::printf(
        "note: %llu rows had a timestamp earlier than a row before them and were sent at once, "
        "in file order (their lag is counted from that time)\n",
        static_cast<unsigned long long>(t.out_of_order));
  }
}

// summary.json's run fields, and what was read (the sessions are added by the caller).
RunFacts FactsOf(const ReplayOptions& o, const RunOutcome& outcome, const Lookahead::Totals& t) {
  RunFacts facts;
  facts.command = o.command;
  facts.url = o.run.url;
  facts.trace = o.input.path;
  facts.shard_index = o.schedule.shard_index;
  facts.shard_count = o.schedule.shard_count;
  facts.started_at_unix_ms = outcome.started_at_unix_ms;
  facts.server_metrics_json = outcome.server_metrics_json;
  nlohmann::json apis = nlohmann::json::object();
  for (size_t i = 0; i < std::size(t.counts.apis.by_api); ++i) {
    if (t.counts.apis.by_api[i] == 0) continue;
    apis[std::string(api::EndpointName(static_cast<api::Endpoint>(i)))] = t.counts.apis.by_api[i];
  }
  facts.input = {{"rows", t.counts.rows},
                 {"apis", std::move(apis)},
                 {"skipped", t.counts.skipped},
                 {"out_of_order", t.out_of_order},
                 {"planned_all_shards", t.planned_total}};
  const Lookahead::Totals::Cache& cache = t.captured_cache;
  if (cache.requests > 0) {
    facts.captured_server = {
        {"cache", report::CacheJson(cache.requests, cache.prompt_tokens, cache.cached_tokens)}};
  }
  return facts;
}

// summary.json, requests.jsonl and (unless the run is too large) report.html in --out.
// The certificate of the pairs at `pairs_path` (fidelity.json's document), with the A/A floor of
// `options.floor`'s pairs when given.
bool Certify(const FidelityOptions& options, const std::string& pairs_path, nlohmann::json* out,
             std::string* error) {
  fidelity::PairFile pairs;
  if (!fidelity::ReadPairFile(pairs_path, &pairs, error)) return false;
  fidelity::FloorRuns floor;
  if (!floor.Load(options.floor, error)) return false;
  *out = fidelity::BuildCertificate(pairs, floor.floor(), options.options);
  return true;
}

bool WriteFiles(const ReplayOptions& o, const nlohmann::json& summary, RunOutputs* outputs,
                std::string* error) {
  bool html_skipped = false;
  if (!outputs->Finish(summary, &html_skipped, error)) return false;
  if (summary.contains("fidelity") &&
      !report::WriteFileAtomically(
          (std::filesystem::path(o.out_dir) / fidelity::kCertificateFile).string(),
          summary["fidelity"].dump(2) + "\n", error)) {
    return false;
  }
  if (html_skipped) {
    std::printf(
        "wrote %s/summary.json and requests.jsonl; not report.html: it plots every request and "
        "this run has %llu (more than %zu); `llmtap report html %s` renders it\n",
        o.out_dir.c_str(), static_cast<unsigned long long>(outputs->requests()),
        RunOutputs::kHtmlMaxRequests, o.out_dir.c_str());
  } else {
    std::printf("wrote %s/summary.json, requests.jsonl and report.html\n", o.out_dir.c_str());
  }
  return true;
}

// --paired-url's pairs file: the lines as the pairs end (on the thread running the replay), in
// groups, and the counts the console's summary of the pairs gives.
class PairsOutput {
 public:
  static constexpr size_t kBufferBytes = size_t{1} << 20;

  Status Open(const std::string& path) {
    path_ = path;
    return store::OpenSink(path, &sink_, store::SinkOptions{.force = true});
  }
  void Add(std::vector<PairRecord>& pairs) {
    for (PairRecord& p : pairs) {
      ++lines_;
      failed_ += p.candidate_failed;
      compared_ += p.compared;
      equal_ += p.equal;
      if (p.primary_ttft_us >= 0 && p.candidate_ttft_us >= 0) {
        ++timed_;
        primary_ttft_us_ += static_cast<double>(p.primary_ttft_us);
        candidate_ttft_us_ += static_cast<double>(p.candidate_ttft_us);
      }
      buffer_.append(p.line).push_back('\n');
    }
    if (buffer_.size() >= kBufferBytes) Flush();
  }
  Status Finish() {
    Flush();
    if (status_.ok()) status_ = sink_->Close();
    sink_.reset();
    return status_;
  }
  // "paired: 200 pairs -> PATH; candidate: 0 failed; outputs: 200 equal, 0 differ, 0 not
  // compared; TTFT (mean) candidate / primary: 1.004 (31.2 / 31.1 ms)"
  void Print(const std::string& url) const {
    std::printf(
        "paired: %llu pairs with %s -> %s; candidate failed: %llu; outputs: %llu equal, "
        "%llu differ, %llu not compared",
        static_cast<unsigned long long>(lines_), url.c_str(), path_.c_str(),
        static_cast<unsigned long long>(failed_), static_cast<unsigned long long>(equal_),
        static_cast<unsigned long long>(compared_ - equal_),
        static_cast<unsigned long long>(lines_ - compared_));
    if (timed_ > 0 && primary_ttft_us_ > 0) {
      std::printf("; TTFT (mean over %llu pairs) candidate / primary: %.4f (%.3f / %.3f ms)",
                  static_cast<unsigned long long>(timed_), candidate_ttft_us_ / primary_ttft_us_,
                  candidate_ttft_us_ / static_cast<double>(timed_) / 1000,
                  primary_ttft_us_ / static_cast<double>(timed_) / 1000);
    }
    std::printf("\n");
  }

 private:
  void Flush() {
    if (status_.ok() && !buffer_.empty()) status_ = sink_->Write(buffer_);
    buffer_.clear();
  }
  std::string path_;
  std::unique_ptr<store::ByteSink> sink_;
  Status status_ = Status::Ok();
  std::string buffer_;
  uint64_t lines_ = 0, failed_ = 0, compared_ = 0, equal_ = 0, timed_ = 0;
  double primary_ttft_us_ = 0, candidate_ttft_us_ = 0;
};

}  // namespace

int Replay(const ReplayOptions& o) {
  std::string error;
  std::unique_ptr<tokenizer::Tokenizer> tok = tokenizer::Tokenizer::Load(o.tokenizer, &error);
  if (!tok) return Fail("--tokenizer " + o.tokenizer + ": " + error);
  std::string synthetic_error;
  std::unique_ptr<SyntheticPrompts> synthetic =
      SyntheticPrompts::Make(*tok, o.input.block_size, &synthetic_error);
  Target target;
  if (!ParseUrl(o.run.url, &target, &error)) return Fail(error);
  if ((o.fidelity.certify || !o.fidelity.floor.empty()) &&
      (o.out_dir.empty() || !o.fidelity.enabled || o.input.no_outcomes)) {
    return Fail(std::string(o.fidelity.certify ? "--certify" : "--fidelity-floor") +
                " judges the fidelity pairs, which need --out DIR and the trace's outcomes "
                "sidecar (not --no-fidelity or --no-outcomes)");
  }
  // One TLS context for the requests, the model probe and the metrics scrapes.
  std::shared_ptr<const net::TlsClientContext> tls;
  if (target.tls || o.server_metrics.starts_with("https://")) {
    tls = net::TlsClientContext::Make(o.run.tls, &error);
    if (!tls) return Fail(error);
  } else if (const char* flag = o.run.tls.first_flag(); flag != nullptr) {
    return Fail(std::string(flag) +
                " applies to an https:// --url (or --server-metrics); --url is " + o.run.url);
  }
  // --paired-url: where its pairs go, and its own TLS context.
  std::string pairs_path = o.pairs_path;
  std::shared_ptr<const net::TlsClientContext> paired_tls;
  if (!o.run.paired_url.empty()) {
    Target paired;
    if (!ParseUrl(o.run.paired_url, &paired, &error)) {
      if (const size_t at = error.find("--url"); at != std::string::npos) {
        error.replace(at, 5, "--paired-url");
      }
      return Fail(error);
    }
    if (paired.tls) {
      paired_tls = net::TlsClientContext::Make(o.run.paired_tls, &error);
      if (!paired_tls) return Fail(error);
    } else if (const char* flag = o.run.paired_tls.first_flag(); flag != nullptr) {
      return Fail("--paired-" + std::string(flag).substr(2) +
                  " applies to an https:// --paired-url; --paired-url is " + o.run.paired_url);
    }
    if (pairs_path.empty() && o.out_dir.empty()) {
      return Fail("--paired-url needs --pairs PATH or --out DIR (its pairs.ndjson)");
    }
    if (pairs_path.empty()) {
      std::string_view dir = o.out_dir;
      while (dir.size() > 1 && dir.ends_with('/')) dir.remove_suffix(1);
      pairs_path = std::string(dir) + "/pairs.ndjson";
    }
  } else if (!o.pairs_path.empty() || !o.run.paired_headers.empty() ||
             o.run.paired_tls.first_flag() != nullptr) {
    return Fail("--pairs, --paired-header and the --paired-* TLS flags need --paired-url");
  }

  Lookahead::Options in = LookaheadOptions(o, target, synthetic.get(), synthetic_error, tls);
  // The sidecar's latencies give session turns their think time; only a causal replay on the
  // trace's timestamps uses them.
  trace::OutcomeTable outcomes;
  std::unique_ptr<trace::OutcomeJoin> join;
  // Sessions are followed in an open loop; think time needs the trace's timestamps (--rate
  // replaces them, so turns there only wait for their predecessor).
  const bool causal = o.run.causal_sessions && !o.schedule.concurrency;
  in.think_times = causal && !o.schedule.rate;
  Status st = JoinOutcomes(o, &outcomes, &join, &in);
  if (!st.ok()) return Fail(st.ToString());
  Lookahead input(in);
  if (!input.Start(&error)) return Fail(error);

  const uint32_t shard = o.schedule.shard_index, shards = o.schedule.shard_count;
  const std::string shard_text =
      shards > 1 ? " (shard " + std::to_string(shard) + "/" + std::to_string(shards) + ")" : "";
  std::printf("llmtap replay: %s -> %s; plan: %s%s; reading ahead up to %zu rows or %zu MiB\n",
              o.input.path.c_str(), o.run.url.c_str(), input.mode().c_str(), shard_text.c_str(),
              in.max_rows, in.max_bytes >> 20);
  std::fflush(stdout);
  // The first second of the schedule parsed before the clock starts.
  input.WaitPrimed(1000, 2000);
  PrintNotes(input, false);
  if (input.finished() && input.planned() == 0) {
    input.Stop();
    PrintNotes(input, false);
    if (!input.error().empty()) return Fail(o.input.path + ": " + input.error());
    return Fail("nothing to send (the window, shard or limits leave no row)");
  }
  // Requests go to the outputs as they end, so --out must be writable before the first is sent.
  report::SummaryOptions summary_options;
  summary_options.goodput = o.goodput;
  summary_options.max_concurrency = o.run.max_concurrency;
  RunOutputs outputs(summary_options, shard, causal);
  std::string warning;
  if (!outputs.Open(o.out_dir, &error, &warning)) return Fail(error);
  if (!warning.empty()) std::fprintf(stderr, "llmtap replay: %s\n", warning.c_str());

  PairsOutput pairs;
  if (!o.run.paired_url.empty()) {
    // After outputs.Open: the default path is in --out, which that made.
    if (Status ps = pairs.Open(pairs_path); !ps.ok()) return Fail(ps.ToString());
  }

  // The sampler scrapes on its own thread, never on an event loop.
  RunOptions run = o.run;
  run.tls_context = tls;
  run.paired_tls_context = paired_tls;
  run.on_pairs = [&](std::vector<PairRecord>& ended) { pairs.Add(ended); };
  std::unique_ptr<report::ServerMetricsSampler> sampler;
  if (o.server_metrics != "off") sampler = AttachServerMetrics(o, &run);
  const bool progress_line = o.run.progress || isatty(STDERR_FILENO);
  run.on_results = [&](std::vector<RequestResult>& ended) {
    for (const RequestResult& r : ended) outputs.Add(r);
  };
  run.on_tick = [&] { PrintNotes(input, progress_line); };
  RunOutcome outcome;
  if (!RunPlan(input, run, tok.get(), &outcome, &error)) return Fail(error);
  input.Stop();
  PrintNotes(input, false);
  if (join != nullptr && (join->matched() > 0 || join->mismatched() > 0 || join->refused())) {
    PrintJoin(*join, outcomes);
  }
  // The look-ahead's bodies were freed by the event loops into the reader thread's malloc arena,
  // which the outputs below (made on this thread) would not reuse: give them back first.
  malloc_trim(0);

  const Lookahead::Totals t = input.totals();
  const InputCounts& c = t.counts;
  PrintTotals(o, input, t, outcome.interrupted);
  if (!o.run.paired_url.empty()) {
    if (Status ps = pairs.Finish(); !ps.ok()) return Fail(ps.ToString());
    pairs.Print(o.run.paired_url);
  }
  std::fflush(stdout);
  const std::string input_error = input.error();
  if (outputs.requests() == 0 && !outcome.interrupted) {
    if (!input_error.empty()) return Fail(o.input.path + ": " + input_error);
    return Fail("nothing to send (the window, shard or limits leave no row)");
  }

  nlohmann::json statistics;
  if (!outputs.Summarize(&statistics, &error)) return Fail(error);
  RunFacts facts = FactsOf(o, outcome, t);
  const std::string sessions_schedule = causal                   ? "causal"
                                        : o.schedule.concurrency ? "closed loop"
                                                                 : "timestamps";
  if (!outputs.Sessions(sessions_schedule, &facts.sessions, &error)) return Fail(error);
  facts.response_chains = outputs.Chains(o.run.responses_chain);
  if (!outputs.CloseFidelityPairs(&error)) return Fail(error);
  if (outputs.fidelity_pairs() > 0 &&
      !Certify(o.fidelity, outputs.FidelityPairsPath(), &facts.fidelity, &error)) {
    return Fail(error);
  }
  const nlohmann::json summary = BuildSummary(std::move(statistics), facts);
  std::fputs(RenderConsole(summary).c_str(), stdout);
  if (!facts.fidelity.is_null()) {
    std::fputs(fidelity::RenderCertificateText(facts.fidelity).c_str(), stdout);
  } else if (o.fidelity.certify) {
    std::printf("fidelity: no certificate: no replayed row had a captured outcome\n");
  }
  if (!o.out_dir.empty() && !WriteFiles(o, summary, &outputs, &error)) return Fail(error);
  std::fflush(stdout);
  // A read error mid-run ended the plan early: what was sent is measured and written, but the
  // run did not replay the trace.
  if (!input_error.empty()) return Fail(o.input.path + ": " + input_error);
  if (o.fidelity.certify &&
      !(facts.fidelity.is_object() && facts.fidelity.value("certified", false))) {
    return kNotCertified;
  }
  const bool all_ok = outputs.failed() == 0 && !outcome.interrupted && c.skipped == 0;
  return all_ok ? 0 : 1;
}

}  // namespace llmtap::replay
