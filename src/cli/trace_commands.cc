// The trace tools: `llmtap split`, `validate`, `stats`, `merge`, `convert`. Thin: flags in,
// library call (src/trace/), report out. Exit codes, the same for every tool:
//   0 success; 1 the input has rows that fail or were skipped (reported with file:line);
//   2 a usage, open, read or write error (nothing trustworthy was produced).
#include <memory>
#include <string>
#include <tuple>

#include "api/endpoints.h"
#include "cli/commands.h"
#include "cli/file_tools.h"
#include "trace/convert.h"
#include "trace/merge.h"
#include "trace/split.h"
#include "trace/stats.h"
#include "trace/validate.h"

namespace llmtap::cli {
namespace {

using trace::Endpoint;
using trace::TraceFormat;

const char* kExitCodes =
    "\n\nExit codes: 0 success; 1 some rows failed or were skipped (listed as file:line: "
    "reason); 2 usage, open, read or write error.";

const char* kLineRules =
    "\n\nInput: JSONL, one row per line, read as a stream (memory does not grow with the "
    "file). CRLF line ends are accepted. Blank lines are skipped, as AIPerf does. A last line "
    "without a newline (a capture cut mid-write) is reported, never fatal. The format "
    "(mooncake_trace or raw_payload) comes from --format, else the manifest next to the file "
    "(<file>.manifest.json), else the first valid row.";

// The positional input of the tools that read one trace.
void AddTraceInput(CLI::App* cmd, std::string* path) {
  cmd->add_option("input", *path, "trace file (JSONL), or - for standard input")->required();
}

void AddValidate(CLI::App& app) {
  struct Flags {
    trace::ValidateOptions o;
    std::string endpoint;
    bool json = false;
  };
  auto f = std::make_shared<Flags>();
  const std::string aiperf = "AIPerf " + std::string(trace::kValidateAIPerfVersion);
  CLI::App* cmd =
      app.add_subcommand("validate", "Check that every row of a trace would load in " + aiperf);
  std::string rules;
  for (const trace::ValidateWarningRule& w : trace::ValidateWarningRules()) {
    rules += "\n  " + std::string(w.id) + ": " + std::string(w.help) + ".";
  }
  cmd->footer(
      "Check that every row of a trace would load in " + aiperf +
      ", with the rules its loaders apply (checked against AIPerf's own code by the test "
      "suite's differential corpus, tests/aiperf/corpus).\n\n"
      "Lines: a mooncake_trace file is read as text, as AIPerf does: a lone carriage return "
      "ends a line too, and Python's whitespace is stripped from each end; a raw_payload file "
      "as bytes (ASCII whitespace stripped). JSON as orjson reads it: a key written twice "
      "keeps its last value, an integer beyond 64 bits is a float, and a number no double can "
      "hold (1e400) fails the row (orjson refuses it).\n\n"
      "mooncake_trace rows (AIPerf's MooncakeTrace model, pydantic's lax conversions): exactly "
      "one of input_length, text_input, messages, payload (null counts as absent); "
      "input_length, output_length and hash ids integers (a float without a fraction, a "
      "boolean, or a string such as \"100\" or \" 1_000 \" is converted); timestamp and "
      "delay numbers (or strings holding one: \"1e3\", \"nan\"); text_input and "
      "session_id strings; messages and tools non-empty lists of objects, each message with "
      "a 'role' key, tools only with messages; payload and extra objects, payload not empty; "
      "hash_ids only with input_length; type, when present, \"mooncake_trace\". The turn a "
      "row becomes: output_length at least 1 (AIPerf's max_tokens). The prompt AIPerf "
      "synthesizes: n hash_ids are n blocks of 512 tokens, the last one partial, so "
      "input_length must be above (n-1)*512 and at most n*512 (AIPerf " +
      std::string(trace::kValidateAIPerfVersion) +
      " uses 512 for mooncake_trace files and refuses --isl-block-size with --input-file). A "
      "session (rows sharing a session_id) keeps one input mode: payload, messages, or "
      "synthesized (input_length, text_input). Schedule: AIPerf replays a mooncake_trace file "
      "on its timestamps when its first row has one (or with --fixed-schedule), and then "
      "every session's first row (every row without a session_id) needs a timestamp; "
      "otherwise timestamps are not used. A delay is at least 0 (AIPerf's turn metadata).\n\n"
      "raw_payload rows: a JSON object with a 'messages' list, whatever the endpoint type "
      "(AIPerf's raw_payload loader refuses a completions request). --fixed-schedule does "
      "not apply to raw_payload files (AIPerf refuses it).\n\n"
      "A failure in any row makes AIPerf refuse the whole file.\n\n"
      "Deliberate warnings: these rows pass, because " +
      aiperf +
      " loads them; validate warns, naming the rule, because llmtap's other tools or a "
      "server would not take them as meant:" +
      rules + kLineRules + kExitCodes);
  AddTraceInput(cmd, &f->o.path);
  cmd->add_option("--endpoint-type", f->endpoint,
                  "the AIPerf run's --endpoint-type: rows with a request of another API pass "
                  "with a warning")
      ->check(CLI::IsMember({"chat", "completions", "responses", "messages", "embeddings",
                             "cohere_rankings", "rankings"}));
  cmd->add_flag("--fixed-schedule", f->o.fixed_schedule,
                "the AIPerf run has --fixed-schedule: every session's first row needs a "
                "timestamp (without it, only when the first row has one)");
  AddFormatFlag(cmd, &f->o.format);
  cmd->add_flag("--json", f->json, "print a machine-readable report (JSON) instead of text");
  cmd->add_option("--max-errors", f->o.max_failures,
                  "failing rows (and row warnings) listed in the report (all are counted)")
      ->capture_default_str();
  AddProgressFlag(cmd, &f->o.progress);
  cmd->callback([f] {
    if (!f->endpoint.empty()) f->o.endpoint_type = api::EndpointForType(f->endpoint);
    trace::ValidateReport r = trace::ValidateTrace(f->o);
    std::string text = f->json ? trace::RenderValidateJson(r) : trace::RenderValidateText(r);
    PrintReport(text, /*to_stdout=*/true, r.exit_code());
  });
}

void AddSplit(CLI::App& app) {
  auto o = std::make_shared<trace::SplitOptions>();
  CLI::App* cmd = app.add_subcommand(
      "split",
      "Split a mixed capture into one file per API (chat, completions, responses, messages, "
      "embeddings, rankings, other)");
  cmd->footer(
      std::string(
          "Split a mixed capture into one file per endpoint type, because AIPerf "
          "replays one endpoint type per run: <name>.chat.jsonl, "
          "<name>.completions.jsonl, <name>.responses.jsonl, <name>.messages.jsonl, "
          "<name>.embeddings.jsonl, <name>.rankings.jsonl (rerank) and "
          "<name>.other.jsonl (any other request), each written only when it has rows. "
          "A row's API is the one the capture recorded (its \"endpoint_type\", written "
          "for every API but chat and completions), else its request's shape: "
          "'messages' chat (Anthropic messages with a top-level 'system' or 'stop_sequences', or a "
          "tool_use, tool_result, thinking, document or source-image block), "
          "'prompt' completions, "
          "'query' and 'documents' rankings, 'input' with 'instructions', "
          "'previous_response_id', 'max_output_tokens', 'tools' or 'reasoning' "
          "responses, 'input' with 'encoding_format' or 'dimensions' embeddings; a bare "
          "'input' could be either and goes to other. A chat row a Messages server would take "
          "as it is (no endpoint_type, user and assistant text turns, max_tokens, no key only "
          "chat has) goes to chat and is counted in a warning with its first line, unless the "
          "file's manifest shows llmtap captured it as mooncake_payload, or counts the rows of "
          "a raw_payload capture by API (file.apis): no /v1/messages request, chat; Messages "
          "requests only, messages; both, the warning. Rows keep their format and every "
          "byte; timestamps are unchanged unless --rebase. One exception: from a "
          "raw_payload input, rows without 'messages' (completions, responses, "
          "embeddings, rankings) are written as mooncake_payload rows "
          "{\"payload\":<request>} without a timestamp (with the API's \"endpoint_type\" "
          "but for completions), since AIPerf's raw_payload loader takes requests with "
          "'messages' only; they replay verbatim and unscheduled, as raw_payload rows "
          "would. Prints the row count per "
          "file and the AIPerf command that replays it (on its schedule: "
          "--fixed-schedule, with --fixed-schedule-auto-offset when its first row is "
          "not at 0, so that AIPerf does not wait that long before the first request). "
          "Outputs are created 0600 and never overwrite an existing file unless "
          "--force.\n\n"
          "Outcomes: when the input has an outcomes sidecar (<input>.outcomes.ndjson, "
          "or --outcomes FILE), each output gets <output>.outcomes.ndjson with the "
          "outcomes of its rows, 'line' renumbered to the row's line in the output and "
          "'timestamp' to its timestamp there (rebased with --rebase), so that "
          "`llmtap anonymize` on an output still finds each request's real output "
          "length. An outcome is used only when its timestamp equals its row's; one "
          "that differs is dropped and counted, and a sidecar that belongs to another "
          "file (an outcome past the input's last line, or more outcomes mismatching "
          "than matching) fails the run with exit 2 and no outputs.\n\n"
          "Sessions: the rows of one session_id stay together, in file order, in the "
          "file of the session's first chat or completions row (AIPerf replays a "
          "session's turns one after another, in a run of one endpoint type). A later "
          "row of the session of the other type (completions in a chat session, or the "
          "reverse) is not routed: it is listed by line with the line of the session's "
          "first row, and the exit code is 1. Other rows (embeddings, ...) go to the "
          "other file whatever their session. Ids are never printed.") +
      kLineRules + kExitCodes);
  cmd->add_option("input", o->path, "capture file (JSONL)")->required();
  cmd->add_option("--out-dir", o->out_dir, "directory for the outputs (default: the input's)");
  cmd->add_flag("--rebase", o->rebase,
                "make each output start at timestamp 0 (only the timestamp value changes)");
  cmd->add_flag("--force", o->force, "overwrite existing output files");
  CLI::Option* outcomes = cmd->add_option("--outcomes", o->outcomes_path,
                                          "response outcomes sidecar to split along (default: "
                                          "<input>.outcomes.ndjson when present)");
  cmd->add_flag("--no-outcomes", o->no_outcomes, "write no outcomes sidecars")->excludes(outcomes);
  AddFormatFlag(cmd, &o->format);
  AddProgressFlag(cmd, &o->progress);
  cmd->callback([o] {
    trace::SplitReport r = trace::SplitTrace(*o);
    PrintReport(trace::RenderSplitText(r), r.io.ok(), r.exit_code());
  });
}

void AddStats(CLI::App& app) {
  struct Flags {
    trace::StatsOptions o;
    bool json = false;
  };
  auto f = std::make_shared<Flags>();
  CLI::App* cmd = app.add_subcommand(
      "stats",
      "Describe a trace: rates, endpoint mix, models, prompt sizes, max_tokens, prefix reuse");
  cmd->footer(
      std::string("Describe a trace in one pass: rows, duration, mean and peak per-second "
                  "rate, endpoint mix, models, streaming share, prompt size in characters "
                  "(message text or prompt), the max_tokens distribution (percentiles within "
                  "0.1%), and prefix reuse: for hash_ids traces as AIPerf's analyze-trace "
                  "defines it (cache hit rate with an infinite cache, prefix reuse ratio), for "
                  "payload traces the same over message prefixes. With a manifest next to the "
                  "file: its counters and the effective sample rate (recorded / matched).\n\n"
                  "Sessions (rows with a session_id): how many, turns per session, the gap "
                  "between a turn's start and the next's, and the think time from the end of a "
                  "turn's response to the next turn's start, which needs the outcomes sidecar "
                  "(<input>.outcomes.ndjson, or --outcomes FILE; an outcome counts only when its "
                  "timestamp equals its row's, and a sidecar of another file is set aside with "
                  "a warning). Turns sent before the previous one ended are counted apart.\n\n"
                  "Server cache: when the sidecar's outcomes carry prompt_tokens and "
                  "cached_tokens (servers that report their prompt cache: vLLM, SGLang, "
                  "llama.cpp), the share of prompt tokens the capture's server reused, beside "
                  "llmtap's estimate (the share of message characters in a prefix seen before, "
                  "an infinite cache of whole messages) and their ratio (README: Real engines).") +
      kLineRules + kExitCodes);
  AddTraceInput(cmd, &f->o.path);
  AddFormatFlag(cmd, &f->o.format);
  CLI::Option* outcomes =
      cmd->add_option("--outcomes", f->o.outcomes_path,
                      "response outcomes sidecar for think times and the server cache (default: "
                      "<input>.outcomes.ndjson when present)");
  cmd->add_flag("--no-outcomes", f->o.no_outcomes, "read no outcomes sidecar")->excludes(outcomes);
  cmd->add_flag("--json", f->json, "print JSON instead of text");
  AddProgressFlag(cmd, &f->o.progress);
  cmd->callback([f] {
    trace::StatsReport r = trace::ComputeStats(f->o);
    std::string text = f->json ? trace::RenderStatsJson(r) : trace::RenderStatsText(r);
    PrintReport(text, r.io.ok(), r.exit_code());
  });
}

void AddConvert(CLI::App& app) {
  struct Flags {
    trace::ConvertOptions o;
    std::string to, arrival = "poisson";
  };
  auto f = std::make_shared<Flags>();
  CLI::App* cmd = app.add_subcommand("convert", "Convert between mooncake_payload and raw_payload");
  cmd->footer(
      std::string("Convert between llmtap's capture formats. mooncake_payload -> raw_payload "
                  "writes each payload's bytes unchanged and drops the timestamps (rows "
                  "without a payload object are skipped), for chat requests only: AIPerf's "
                  "raw_payload loader refuses a whole file if one row lacks 'messages', so "
                  "completions and other requests are skipped, named by line (exit 1); keep "
                  "them in mooncake_payload, which AIPerf replays verbatim too. "
                  "raw_payload -> mooncake_payload "
                  "needs timestamps: --rate R gives arrivals at R requests per second "
                  "(--arrival poisson, seeded by --seed, or constant), otherwise every row "
                  "gets timestamp 0. The output is created 0600 and never overwrites an "
                  "existing file unless --force.") +
      kLineRules + kExitCodes);
  trace::ConvertOptions& o = f->o;
  AddTraceInput(cmd, &o.path);
  cmd->add_option("--to", f->to, "target format")
      ->required()
      ->check(CLI::IsMember({"raw_payload", "mooncake_payload", "mooncake_trace"}));
  cmd->add_option("-o,--output", o.out,
                  "output file (default: <input name>.<target format>.jsonl beside the input)");
  cmd->add_option("--rate", o.rate, "raw -> mooncake: arrivals per second (0: all at 0)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--arrival", f->arrival, "arrival process for --rate")
      ->check(CLI::IsMember({"poisson", "constant"}))
      ->capture_default_str();
  cmd->add_option("--seed", o.seed, "random seed for --arrival poisson")->capture_default_str();
  cmd->add_flag("--force", o.force, "overwrite an existing output file");
  AddFormatFlag(cmd, &o.format);
  AddProgressFlag(cmd, &o.progress);
  cmd->callback([f] {
    trace::ConvertOptions& o = f->o;
    o.to = *trace::ParseTraceFormat(f->to);
    o.arrival = f->arrival == "constant" ? trace::Arrival::kConstant : trace::Arrival::kPoisson;
    if (o.to == TraceFormat::kRaw && o.rate > 0) {
      FailUsage("llmtap convert", "--rate only applies with --to mooncake_payload");
    }
    trace::ConvertReport r = trace::ConvertTrace(o);
    PrintReport(trace::RenderConvertText(r), r.io.ok(), r.exit_code());
  });
}

void AddMerge(CLI::App& app) {
  struct Flags {
    trace::MergeOptions o;
    std::string from, to;
  };
  auto f = std::make_shared<Flags>();
  CLI::App* cmd =
      app.add_subcommand("merge", "Merge replica captures on absolute time (manifest epochs)");
  cmd->footer(
      std::string(
          "Merge the captures of several replicas into one trace on absolute time. "
          "Each input's timestamp 0 is placed at its manifest's "
          "timestamp_zero_unix_ms; output timestamps count from the earliest row written; "
          "rows at the same instant keep input order, then line order. Inputs must "
          "be mooncake rows in time order (as captures are); raw_payload inputs and "
          "inputs in different formats are refused, and so are inputs without a "
          "manifest unless --assume-aligned. Rows with a negative or decreasing timestamp are "
          "reported and skipped.\n\n"
          "Inputs: local files (- for standard input), s3://bucket/key objects, and "
          "s3://bucket/prefix/ prefixes, mixed freely; .zst (zstd) data is read as plain. A "
          "prefix stands for every complete capture segment under it, as the capture's "
          "upload_url leaves them: one folder per replica (<prefix>/<replica>/), in each a data "
          "object <name>.<time>.jsonl[.zst] and its manifest <name>.<time>.jsonl.manifest.json, "
          "which the uploader writes last. A segment without a manifest is still uploading (or "
          "its upload was cut short): it is named and skipped (exit code 1), and so is one "
          "whose size differs from its manifest's or whose manifest is damaged. While a "
          "segment is read, its SHA-256 and line count are checked against the manifest, and "
          "damaged zstd data is caught; such a fault is only known once the rows before it "
          "were merged: the segment is named, with how many rows it gave, and the exit code is "
          "1. --replica GLOB keeps the replica folders it matches (fnmatch; repeat for "
          "several).\n\n"
          "Crashes: a file a capture process left open when it died (SIGKILL, crash) is "
          "described at its next start (state \"recovered\") and merged like any other. Such "
          "files uploaded by llmtap before it described them have no epoch in their manifest: "
          "they are skipped (exit code 1) unless --recover-epochs places each from when its "
          "file was open and still empty, which is at most the wait for its first row "
          "early.\n\n"
          "Window: --from and --to (ISO-8601 UTC such as 2026-12-04T10:00:00Z or "
          "2026-12-04T10:00:00.250Z, or Unix milliseconds) keep the rows whose wall-clock time "
          "is in [from, to). A segment wholly outside (by its manifest's epoch and "
          "file.last_timestamp_ms) is not read at all; reading a segment stops at --to.\n\n"
          "Sessions: when the inputs come from several replicas (a replica is the store folder, "
          "else the manifest's replica or host, else the input as named), a row's session_id "
          "is written as <replica>:<id>, so that ids each replica chose alone (such as those "
          "`llmtap sessions` infers) stay distinct; --keep-session-ids writes them as they "
          "are. A session's rows keep their order.\n\n"
          "Memory: one streaming cursor per segment, and a segment whose manifest gives its "
          "epoch and format is opened only when the merge reaches its first row and closed at "
          "its end, so only segments overlapping in time are open together (about one per "
          "replica). Their read buffers share 256 MiB: each open segment gets two (lines, and "
          "its download buffer) of 256 KiB to 8 MiB, plus zstd's window when compressed (up to "
          "16 MiB as the capture's uploader compresses); an s3:// segment streams in on a "
          "thread of its own, ahead of the merge, over a connection from a shared pool. "
          "Credentials "
          "and endpoint come from AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN, "
          "AWS_REGION, AWS_ENDPOINT_URL_S3.\n\n"
          "Writes OUT (a local file, OUT.zst compressed, or s3://; 0600, never over an existing "
          "file or object unless --force) and its manifest (OUT without .zst + "
          ".manifest.json) with the merged epoch, the segments merged (merged_from), the "
          "window, the segments skipped, file.records, and the counters of the capture runs "
          "merged (per run the latest segment's, since every segment of a rotated run repeats "
          "the run's counters; summed over runs).\n\n"
          "Examples:\n"
          "  llmtap merge s3://captures/fleet/ -o merged.jsonl.zst\n"
          "  llmtap merge s3://captures/fleet/ --replica 'gpu-a*' --from 2026-12-04T10:00:00Z "
          "--to 2026-12-04T11:00:00Z -o s3://captures/merged/hour10.jsonl.zst\n"
          "  llmtap merge a/requests.jsonl s3://captures/fleet/b/requests.20261204T100000.000Z."
          "jsonl.zst -o ab.jsonl") +
      kExitCodes);
  trace::MergeOptions& o = f->o;
  cmd->add_option("inputs", o.inputs,
                  "capture files (JSONL, .zst), s3:// objects, s3://bucket/prefix/ prefixes")
      ->required();
  cmd->add_option("-o,--output", o.out, "merged trace: a file, FILE.zst, or s3://bucket/key")
      ->required();
  cmd->add_option("--from", f->from,
                  "keep rows at or after this wall-clock time (ISO-8601 UTC or Unix ms)");
  cmd->add_option("--to", f->to, "keep rows before this wall-clock time (ISO-8601 UTC or Unix ms)");
  cmd->add_option("--replica", o.replica_globs,
                  "under s3:// prefixes, merge only the replica folders matching GLOB "
                  "(fnmatch; repeatable)")
      ->type_name("GLOB");
  cmd->add_flag("--assume-aligned", o.assume_aligned,
                "inputs without a manifest epoch: treat every input's timestamp 0 as the same "
                "instant");
  cmd->add_flag("--recover-epochs", o.recover_epochs,
                "segments whose manifest has no epoch (files a crash left, uploaded by llmtap "
                "before it described them): place each from when its file was open and empty, "
                "with a warning, instead of skipping it");
  cmd->add_flag("--keep-session-ids", o.keep_session_ids,
                "write session ids as they are, also when the inputs come from several "
                "replicas (default: <replica>:<id> then, so that each replica's ids stay its "
                "own; keep them when clients' ids name conversations across the fleet)");
  cmd->add_flag("--force", o.force, "overwrite existing output files");
  AddProgressFlag(cmd, &o.progress);
  cmd->callback([f] {
    trace::MergeOptions& o = f->o;
    for (auto [flag, text, dst] : {std::tuple{"--from", &f->from, &o.from_unix_ms},
                                   std::tuple{"--to", &f->to, &o.to_unix_ms}}) {
      if (text->empty()) continue;
      int64_t ms = 0;
      Status s = trace::ParseTimeArg(*text, &ms);
      if (!s.ok()) FailUsage("llmtap merge", std::string(flag) + " " + s.message());
      *dst = ms;
    }
    trace::MergeReport r = trace::MergeTraces(o);
    PrintReport(trace::RenderMergeText(r), r.io.ok(), r.exit_code());
  });
}

}  // namespace

void AddTraceCommands(CLI::App& app) {
  AddSplit(app);
  AddValidate(app);
  AddStats(app);
  AddMerge(app);
  AddConvert(app);
}

}  // namespace llmtap::cli
