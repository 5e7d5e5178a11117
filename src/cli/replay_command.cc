// `llmtap replay`: flags in, Replay (src/replay/) out. Exit codes: 0 every request succeeded;
// 1 some requests failed or rows were skipped; 2 a usage, input or output error.
#include <fstream>
#include <iterator>
#include <memory>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "cli/fidelity_flags.h"
#include "cli/tls_flags.h"
#include "replay/lookahead.h"
#include "replay/replay.h"
#include "replay/schedule.h"
#include "replay/summary.h"
#include "report/summary.h"

namespace llmtap::cli {
namespace {

[[noreturn]] void FailReplay(const std::string& message) { FailUsage("llmtap replay", message); }

// The command line as run, for summary.json, with --header values left out (they may hold
// credentials).
std::string CommandLine() {
  std::ifstream f("/proc/self/cmdline", std::ios::binary);
  std::string raw((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  std::string out;
  bool redact_next = false;
  size_t begin = 0;
  while (begin < raw.size()) {
    size_t end = raw.find('\0', begin);
    if (end == std::string::npos) end = raw.size();
    std::string arg = raw.substr(begin, end - begin);
    begin = end + 1;
    if (redact_next) {
      arg = "<redacted>";
      redact_next = false;
    } else if (arg == "--header" || arg == "-H" || arg == "--paired-header") {
      redact_next = true;
    } else if (arg.starts_with("--header=")) {
      arg = "--header=<redacted>";
    } else if (arg.starts_with("--paired-header=")) {
      arg = "--paired-header=<redacted>";
    }
    if (!out.empty()) out.push_back(' ');
    const bool quote = arg.empty() || arg.find_first_of(" \t\"'$\\") != std::string::npos;
    out += quote ? "'" + arg + "'" : arg;
  }
  return out;
}

std::string DefinitionsText() {
  std::string text;
  for (const auto& [name, def] : report::MetricDefinitions().items()) {
    text.append("  ").append(name).append(": ").append(def.get<std::string>()).append("\n");
  }
  return text;
}

}  // namespace

void AddReplayCommand(CLI::App& app) {
  struct Flags {
    replay::ReplayOptions o;
    std::string shard, arrival = "poisson", goodput, hashed_endpoint = "completions",
                       schedule = "causal", responses_chain = "remap";
    double start_offset = -1, end_offset = -1, rate = 0, start_at = 0;
    uint32_t concurrency = 0, max_concurrency = 0;
    bool no_fidelity = false;
    FidelityFlags fidelity;
  };
  auto f = std::make_shared<Flags>();
  replay::ReplayOptions& o = f->o;
  CLI::App* cmd = app.add_subcommand(
      "replay", "Replay a trace against an OpenAI-compatible server and measure it");
  cmd->footer(
      "Rows of any kind may be mixed in one trace: mooncake_payload ({\"timestamp\",\"payload\"}), "
      "raw_payload (the request itself) and hashed Mooncake rows (hash_ids, input_length, "
      "output_length). Each request goes to its own API's path, so APIs mix in one run: the "
      "row's endpoint_type when it has one (a capture writes it for APIs other than chat and "
      "completions), else its body's shape (as `llmtap split` reads it): `messages` "
      "/v1/chat/completions (with `system`: /v1/messages, Anthropic's; give its headers with -H "
      "'x-api-key: KEY' -H 'anthropic-version: 2023-06-01'), `prompt` /v1/completions, `input` "
      "with `instructions`, `previous_response_id`, ... /v1/responses, `input` with "
      "`encoding_format` /v1/embeddings, `query` with `documents` /v1/rerank; other rows are "
      "skipped. Each API's stream is read by its own rules for TTFT, ITL and tokens (chat "
      "and completions end at [DONE], Responses at response.completed, Messages at "
      "message_stop); embeddings and rerank are never streamed. A hashed row gets a synthetic "
      "prompt: each hash id is one block of "
      "--block-size tokens whose text depends only on the id (same id, same text, so a prefix "
      "cache sees the trace's reuse); the last block holds input_length - (n-1)*block_size "
      "tokens; max_tokens = output_length.\n\n"
      "Schedule: each row is sent (timestamp - first row's timestamp) / --speedup ms after the "
      "start, whatever the responses do (open loop). Rows without timestamps need --rate (Poisson "
      "or constant arrivals) or --concurrency (closed loop); a timed trace's later row without "
      "one is skipped. Lag = actual send time - scheduled time, absolute. With --shard i/N this "
      "process sends, on the schedule of the whole trace, the rows whose index % N == i, and the "
      "rows with a session_id whose FNV-1a hash % N == i (a conversation stays in one process); "
      "give every shard the same --start-at.\n\n"
      "Sessions (--schedule causal, the default): rows with a session_id are the turns of one "
      "conversation, in file order. A turn is sent at its scheduled time, or, when the turn "
      "before it has not ended by then (or ended later than in the capture), when that turn's "
      "response ended plus the captured think time, never earlier: think time = this turn's "
      "timestamp - (previous turn's timestamp + its latency_ms in the outcomes sidecar), divided "
      "by --speedup; 0 when the sidecar has no latency for the previous turn (counted). A turn "
      "that failed or timed out releases the next one too. Sessions run concurrently; rows "
      "without a session_id keep their schedule. The lag of a moved turn is counted from its "
      "causal due time (scheduled_ms in requests.jsonl is that time); summary.json \"sessions\" "
      "gives how many turns moved and by how much. With --rate, turns wait for their "
      "predecessor with no think time; --concurrency (closed loop) does not follow sessions. "
      "--schedule timestamps sends every row at its scheduled time, as if no row had a "
      "session_id (for comparison; sharding stays by session).\n\n"
      "Responses chains: a Responses row whose previous_response_id is the response_id the "
      "outcomes sidecar gives an earlier row continues that row's conversation. The chain is a "
      "session (sent causally, with think time, on one shard), and the row is sent with the id "
      "this run's target gave its predecessor in place of the captured one. A row whose "
      "predecessor is not in the trace (or without a sidecar), failed in this run, or had not "
      "ended when the row was sent (--concurrency above 1, --schedule timestamps) is sent with the "
      "captured id; summary.json \"response_chains\" counts each case. A server that keeps "
      "no responses (llama-server: HTTP 400 naming previous_response_id) needs "
      "--responses-chain inline: each such row goes without previous_response_id, its input "
      "being the conversation so far (the earlier turns' input items and outputs: the "
      "captured response text of --capture-responses when the sidecar holds it, else what "
      "the target answered in this run).\n\n"
      "Streaming: the trace (a file, - for standard input, s3://bucket/key, .jsonl.zst) is read "
      "while it replays, a bounded distance ahead of the schedule (" +
      std::to_string(replay::Lookahead::Options().max_rows) + " rows or " +
      std::to_string(replay::Lookahead::Options().max_bytes >> 20) +
      " MiB of request bodies), so memory does not grow with the trace. Rows are sent in file "
      "order: a row whose timestamp is earlier than a row before it is sent at once, right "
      "after that row, and is named (file:line) and counted as out of order. Reading stops where "
      "the plan ends (--end-offset, --max-requests, --duration). Skipped rows are named as they "
      "are found. The progress line shows the share of the input read until its total is "
      "known.\n\n"
      "What the server reports of its own work (README: Real engines): a request's cached "
      "prompt tokens, llama.cpp's timings and per-request speculative decoding (llama.cpp, "
      "vLLM, SGLang shapes) go into its requests.jsonl line (cached_tokens, server, spec) and "
      "into summary.json \"server\" (cache hit rate, acceptance); with an outcomes sidecar, "
      "\"captured_server\" gives the capture's hit rate over the same rows, printed beside "
      "the replay's.\n\n"
      "Paired replay (--paired-url URL): every row is sent to --url and to URL at the same "
      "instant, and each row's two answers are read to the end and compared in one line of "
      "--pairs (default DIR/pairs.ndjson of --out; the format of `llmtap proxy --shadow`'s pairs, "
      "with \"line\" and \"timestamp\" the row's, \"request\" its index): status, TTFT, ITL "
      "and latency of each side measured from that one instant, tokens, finish reason and "
      "whether the outputs are equal. Both sides see the same load: a pair holds its "
      "--max-concurrency slot (or its --concurrency lane) until both answers ended, and a "
      "session's next turn waits for both (at the primary's end plus the think time, or the "
      "slower side's end). Responses chains: each server gets its own ids (the paired row names "
      "the id the paired server gave its predecessor; with --responses-chain inline, its own "
      "conversation so far). A paired request that fails still gets its "
      "line (the candidate's \"error\": connect, tls, timeout, reset, protocol); it never "
      "changes --url's statistics or the exit code. --warmup rows get no pair line.\n\n"
      "Replay fidelity (with --out and an outcomes sidecar): each replayed row is paired with "
      "its captured outcome in DIR/fidelity-pairs.ndjson (the shadow pair format, primary = "
      "captured, candidate = replayed), and the pairs are judged: the certificate (DIR/"
      "fidelity.json, summary.json \"fidelity\", the console and report.html) says per metric "
      "whether the replay reproduced the capture: prompt and (greedy rows) completion tokens "
      "and finish reasons equal, failures, the server's cache hit rate and spec-decode "
      "acceptance in points, and replayed/captured ratios of TTFT, ITL, latency and the "
      "server's own prompt and decode times. --fidelity-floor DIR gives it the A/A floor of a "
      "second replay; --certify makes the exit code 3 when it did not certify the run. `llmtap "
      "fidelity --help` explains the verdicts and their limits.\n\n"
      "Outputs (--out): requests.jsonl lists the requests in the order they ended (after an "
      "interruption, an open loop's requests read ahead but never sent come last), summary.json "
      "the statistics (and the input's counts under \"input\"), report.html plots every request "
      "and is written for runs of up to " +
      std::to_string(replay::RunOutputs::kHtmlMaxRequests) +
      " requests (`llmtap report html DIR` renders a larger one).\n\n"
      "Metrics (summary.json \"definitions\" holds the same text):\n" +
      DefinitionsText() +
      "\nExit codes: 0 every request succeeded; 1 some requests failed or rows were skipped; 3 "
      "--certify and the replay was not certified; 2 usage, input or output error (a read error "
      "mid-run ends the plan there; what was sent is "
      "still measured and written).");
  cmd->add_option("trace", o.input.path,
                  "trace (JSONL; .jsonl.zst, s3://bucket/key), or - for standard input")
      ->required();
  cmd->add_option("--url", o.run.url,
                  "server base URL, http:// or https:// (the paths /v1/... are added)")
      ->capture_default_str();
  AddTlsClientFlags(cmd, &o.run.tls, "the server");
  cmd->add_option("--server-metrics", o.server_metrics,
                  "Prometheus endpoint scraped before, every second during and after the run "
                  "(counter deltas; vLLM spec-decode acceptance rate and length, SGLang's "
                  "spec_accept_* gauges); default: the target's /metrics or /v1/metrics if one "
                  "answers; 'off' for none");
  cmd->add_option("--model", o.input.model,
                  "rewrite every request's model field (hashed rows: default the server's first "
                  "/v1/models entry, else \"default\")");
  cmd->add_flag("--stream", o.input.stream,
                "force \"stream\":true (chat and completions: and \"stream_options\":"
                "{\"include_usage\":true}; not embeddings, rerank)");
  cmd->add_option(
      "-H,--header", o.run.headers,
      "extra request header 'Name: value' on every request (repeatable; never logged), e.g. "
      "Anthropic's x-api-key and anthropic-version; also sent with the --server-metrics scrapes "
      "when that endpoint has --url's scheme, host and port");
  cmd->add_option("--paired-url", o.run.paired_url,
                  "also send every row to this server (http:// or https://) at the same instant "
                  "as to --url, read both answers to the end and write one pair line per row "
                  "comparing them (--pairs); --url's run, statistics and files are unchanged");
  cmd->add_option("--pairs", o.pairs_path,
                  "--paired-url: the pairs file (NDJSON, replaced if it exists; default: "
                  "DIR/pairs.ndjson of --out)");
  cmd->add_option("--paired-header", o.run.paired_headers,
                  "--paired-url: request header 'Name: value' replacing --header's of that name "
                  "(or added) on the paired server's requests (repeatable; never logged)");
  AddTlsClientFlags(cmd, &o.run.paired_tls, "the paired server", "paired-");
  cmd->add_option("--request-timeout", o.run.request_timeout_s,
                  "seconds a request may take in all (connect to last byte)")
      ->capture_default_str();
  cmd->add_option("--max-requests", o.schedule.max_requests,
                  "send only the first N rows of the window (0 = all)");
  cmd->add_option("--duration", o.run.duration_s,
                  "send nothing after S seconds (requests in flight finish)");
  cmd->add_option("--warmup", o.schedule.warmup,
                  "the first N requests are sent but left out of the statistics");
  cmd->add_option("--speedup", o.schedule.speedup, "divide the trace's gaps by X")
      ->capture_default_str();
  cmd->add_option("--start-offset", f->start_offset,
                  "start at this trace time (ms after the first timestamp)");
  cmd->add_option("--end-offset", f->end_offset,
                  "stop before this trace time (ms after the first timestamp)");
  auto* rate =
      cmd->add_option("--rate", f->rate, "requests per second, ignoring timestamps (open loop)");
  cmd->add_option("--arrival", f->arrival, "arrivals at --rate")
      ->check(CLI::IsMember({"poisson", "constant"}))
      ->capture_default_str();
  cmd->add_option("--seed", o.schedule.seed, "seed of the Poisson arrivals")->capture_default_str();
  cmd->add_option("--concurrency", f->concurrency,
                  "closed loop: N requests in flight, ignoring timestamps")
      ->excludes(rate);
  cmd->add_option("--max-concurrency", f->max_concurrency,
                  "open loop: hold requests beyond N in flight, counted as violations");
  cmd->add_option("--threads", o.run.threads, "event-loop threads (default: one per core)");
  cmd->add_option("--schedule", f->schedule,
                  "causal: a session's turn waits for the previous turn's end plus the captured "
                  "think time; timestamps: every row at its timestamp")
      ->check(CLI::IsMember({"causal", "timestamps"}))
      ->capture_default_str();
  cmd->add_option("--outcomes", o.input.outcomes_path,
                  "outcomes sidecar giving session turns their captured latency and Responses "
                  "rows their response ids (default: <trace>.outcomes.ndjson when present)");
  cmd->add_flag("--no-outcomes", o.input.no_outcomes,
                "ignore the outcomes sidecar (session turns get no think time; Responses rows "
                "go with their captured previous_response_id)");
  cmd->add_option("--responses-chain", f->responses_chain,
                  "remap: a Responses row continuing an earlier row's response names the id this "
                  "run's target gave it; inline: it is sent without previous_response_id, with "
                  "the conversation so far as its input (servers that keep no responses, such as "
                  "llama-server); --paired-url's target is sent the same way")
      ->check(CLI::IsMember({"remap", "inline"}))
      ->capture_default_str();
  cmd->add_option("--session-idle", o.run.session_idle_s,
                  "seconds an idle session's state is kept after its last turn ended (a later "
                  "turn is sent on its schedule)")
      ->check(CLI::Range(0.0, 31536000.0))
      ->capture_default_str();
  cmd->add_option("--shard", f->shard,
                  "i/N: send rows whose index % N == i (rows with a session_id: by its hash)");
  cmd->add_option("--start-at", f->start_at,
                  "Unix time (seconds) at which the schedule starts (for shards)");
  cmd->add_option("--block-size", o.input.block_size, "hashed rows: tokens per hash id")
      ->check(CLI::Range(1u, 1u << 20))
      ->capture_default_str();
  cmd->add_option("--hashed-endpoint", f->hashed_endpoint,
                  "hashed rows: completions (token-exact blocks) or chat (one user message); "
                  "a row with a session_id goes out after its session's conversation so far "
                  "in this run (earlier prompts, each followed by the server's answer), as "
                  "AIPerf sends it")
      ->check(CLI::IsMember({"completions", "chat"}))
      ->capture_default_str();
  cmd->add_flag("--ignore-eos", o.input.ignore_eos,
                "hashed rows: add \"ignore_eos\":true (vLLM, SGLang) to get output_length tokens");
  cmd->add_option("--tokenizer", o.tokenizer,
                  "tokenizer.json (or its directory) or 'builtin': builds hashed prompts and "
                  "counts tokens when a response reports no usage")
      ->capture_default_str();
  cmd->add_option("--goodput", f->goodput,
                  "SLOs in ms, e.g. \"ttft:200 itl:20 latency:5000\" (ttft, ttst, itl, latency, "
                  "max_chunk_gap)");
  cmd->add_option("--out", o.out_dir,
                  "write DIR/summary.json, DIR/requests.jsonl and DIR/report.html");
  cmd->add_flag("--no-fidelity", f->no_fidelity,
                "no fidelity pairs and no certificate (default: with --out and an outcomes "
                "sidecar, each replayed row is paired with its captured outcome)");
  cmd->add_flag("--certify", o.fidelity.certify,
                "exit 3 unless the replay-fidelity certificate certified the run (every gated "
                "metric reproduced; `llmtap fidelity --help` explains the verdicts)");
  cmd->add_option("--fidelity-floor", o.fidelity.floor,
                  "a second replay of the same trace (its --out directory or pairs file): the "
                  "certificate's A/A noise floor; given twice, two replays of the usual server "
                  "(to judge a replay against another one)")
      ->expected(1, 2);
  AddFidelityFlags(cmd, "fidelity-", &f->fidelity);
  cmd->add_flag("--progress", o.run.progress,
                "progress on stderr (default: only when stderr is a terminal)");
  cmd->add_option("--spin-us", o.run.spin_us,
                  "spin this long before each send instead of sleeping (lower lag on an idle "
                  "machine, higher on a busy one)")
      ->capture_default_str();
  cmd->callback([f] {
    replay::ReplayOptions& o = f->o;
    if (f->start_offset >= 0) o.schedule.start_offset_ms = f->start_offset;
    if (f->end_offset >= 0) o.schedule.end_offset_ms = f->end_offset;
    if (f->rate > 0) o.schedule.rate = f->rate;
    if (f->concurrency > 0) o.schedule.concurrency = f->concurrency;
    if (f->max_concurrency > 0) o.run.max_concurrency = f->max_concurrency;
    if (f->start_at > 0) o.run.start_at_unix_s = f->start_at;
    o.schedule.arrival =
        f->arrival == "constant" ? replay::Arrival::kConstant : replay::Arrival::kPoisson;
    o.input.hashed_chat = f->hashed_endpoint == "chat";
    o.run.causal_sessions = f->schedule == "causal";
    o.run.responses_chain = f->responses_chain == "inline" ? replay::ResponsesChain::kInline
                                                           : replay::ResponsesChain::kRemap;
    if (!o.input.outcomes_path.empty() && o.input.no_outcomes) {
      FailReplay("--outcomes and --no-outcomes conflict");
    }
    if (!f->shard.empty() &&
        !replay::ParseShard(f->shard, &o.schedule.shard_index, &o.schedule.shard_count)) {
      FailReplay("--shard must be i/N with 0 <= i < N");
    }
    if (!f->goodput.empty()) {
      std::string error;
      if (!report::ParseGoodput(f->goodput, &o.goodput, &error)) FailReplay(error);
    }
    if (o.run.max_concurrency && o.schedule.concurrency) {
      FailReplay(
          "--max-concurrency applies to open-loop schedules; --concurrency is a closed loop");
    }
    WarnIfInsecure("llmtap replay", o.run.tls, "the server");
    WarnIfInsecure("llmtap replay", o.run.paired_tls, "the paired server", "--paired-insecure");
    o.fidelity.enabled = !f->no_fidelity;
    ApplyFidelityFlags(f->fidelity, "fidelity-", "llmtap replay", &o.fidelity.options);
    o.command = CommandLine();
    ExitWith(replay::Replay(o));
  });
}

}  // namespace llmtap::cli
