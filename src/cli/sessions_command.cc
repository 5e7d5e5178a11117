// `llmtap sessions`: flags in, InferSessions (src/sessions/) out, report printed. Exit codes as
// the trace tools: 0 success; 1 some rows were bad (listed as file:line: reason, passed through
// without an id); 2 a usage, open, read or write error (no output is left behind).
#include <memory>
#include <string>

#include "cli/commands.h"
#include "cli/file_tools.h"
#include "sessions/sessions.h"

namespace llmtap::cli {
namespace {

[[noreturn]] void FailSessions(const std::string& message) {
  FailUsage("llmtap sessions", message);
}

const char* kHelp =
    "Find the conversations in a capture whose clients did not name them, and write every row "
    "of a conversation with one session_id (AIPerf sends the rows of a session one after "
    "another; llmtap replay keeps their order).\n\n"
    "Linking rule: a chat request continues an earlier request when that request's whole "
    "'messages' list, followed by an assistant message (the answer it got, which only the next "
    "request shows), is a prefix of its own. Tool calls (an assistant message with "
    "tool_calls) and tool results ('tool' messages) are messages like any other, so agent "
    "loops link the same way. Messages are compared by their JSON bytes (a chained 64-bit "
    "hash per message; no content is parsed). Of the join points a request offers, the "
    "longest prefix that an open conversation ends with wins. A conversation is only "
    "continued once per turn: a second request with the same history starts a new "
    "conversation (retries, and two users sending the same first message, never merge). "
    "When several open conversations end with the same turn (same system prompt, same first "
    "messages: look-alikes), the response text tells them apart when the outcomes sidecar "
    "holds it (captured with capture_responses): the assistant message at the join point is "
    "the answer its predecessor got, so the one look-alike whose response had the same "
    "content text and tool calls (names and arguments, compared as decoded strings; reasoning "
    "ignored) is the predecessor, certainly. Otherwise (no response text, text cut at "
    "max_response_bytes, no match, or several with the same answer) it is a guess, counted in "
    "the report: among those whose answer matched, else those whose text is unknown, the one "
    "whose response ended last before the request wins (its start when the end is unknown), "
    "then the later line (the likelier predecessor when think times are mostly short; the 256 "
    "most recently active look-alikes are examined). "
    "With the outcomes sidecar, a conversation whose response had not ended when the request "
    "was sent (2 ms slack for millisecond timestamps) is not its predecessor while another "
    "that had ended qualifies, which tells many look-alikes apart; when none had, one whose "
    "recorded end is at most 100 ms after the request continues (the earliest end; counted "
    "as late): the request holds its answer, and a loaded host records ends late. A request whose history was edited, truncated or not captured "
    "starts a new conversation and is counted as not linked.\n\n"
    "Output: every input line, in order, byte for byte (CRLF line ends become LF), so the "
    "outcomes sidecar's line numbers still fit (copy it to OUT.outcomes.ndjson). Each chat row "
    "(mooncake_payload with payload.messages) ends with ,\"session_id\":\"<prefix><line>\"} "
    "exactly as the capture writes one, <line> being the line of the conversation's first "
    "turn (default prefix conv-, so conv-17 starts on line 17); a conversation of one request "
    "gets its own id too (a session of one turn replays as the row alone). Rows that already "
    "have a session_id (named at capture) keep it and take no part in linking (an unnamed "
    "request never inherits a client's id). Rows without messages "
    "(completions, embeddings) and bad rows stay as they are, with no id. The output is "
    "created 0600 and never overwrites an existing file unless --force; OUT may be .zst or "
    "s3://.\n\n"
    "Window: a conversation idle for longer than --window in trace time (since its last "
    "response ended, or its last request when the end is unknown) is closed; memory is bounded "
    "by the conversations open at once (about 150 bytes each), not by the file. A request "
    "that nobody continues stays open for the whole window (a million of them: about 150 MB); "
    "a shorter window bounds that but cannot link a turn sent later than that after the "
    "previous answer. Default 30m.\n\n"
    "Report: rows, sessions (multi-turn and single-turn), turns linked, turns told from "
    "look-alikes by the response text, turns guessed among look-alikes (by reason), rows not "
    "linked, turns per session (distribution), the gap between turn "
    "starts and, with outcomes, the think time from a response's end (timestamp + latency_ms) "
    "to the next turn's start.\n\n"
    "Outcomes: the capture's sidecar is used when it exists: <input>.outcomes.ndjson[.zst], for "
    "X.jsonl.zst X.jsonl.outcomes.ndjson[.zst], also in the store (--outcomes FILE names another, "
    "--no-outcomes ignores it). Each outcome is joined by line and used only when its "
    "timestamp equals the row's; a sidecar that belongs to another file is refused.\n\n"
    "Input: a capture file (JSONL), - for standard input, .zst, or an s3:// object, read as a "
    "stream. raw_payload captures have no timestamps: convert them first (llmtap convert "
    "--to mooncake_payload).\n\n"
    "Examples:\n"
    "  llmtap sessions requests.jsonl -o requests.sessions.jsonl\n"
    "  llmtap sessions s3://captures/prod/gpu-a/requests.20261204T100000.000Z.jsonl.zst "
    "--no-outcomes --window 2h -o sessions.jsonl.zst\n\n"
    "Exit codes: 0 success; 1 some rows were bad (listed as file:line: reason, written "
    "unchanged); 2 usage, open, read or write error.";

}  // namespace

void AddSessionsCommand(CLI::App& app) {
  struct Flags {
    sessions::SessionsOptions o;
    std::string window = "30m";
    bool json = false;
  };
  auto f = std::make_shared<Flags>();
  sessions::SessionsOptions& o = f->o;
  CLI::App* cmd = app.add_subcommand(
      "sessions", "Link multi-turn and agent requests into conversations (session_id)");
  cmd->footer(kHelp);
  cmd->add_option("input", o.path, "capture file (JSONL, .zst, s3://), or - for standard input")
      ->required();
  cmd->add_option("-o,--output", o.out, "output trace: a file, FILE.zst, or s3://bucket/key")
      ->required();
  cmd->add_option("--window", f->window,
                  "close a conversation idle this long in trace time: 90s, 30m, 2h, 500ms, or "
                  "seconds")
      ->capture_default_str();
  cmd->add_option("--outcomes", o.outcomes,
                  "outcomes sidecar (default: <input>.outcomes.ndjson when it exists)");
  cmd->add_flag("--no-outcomes", o.no_outcomes, "do not use an outcomes sidecar");
  cmd->add_option("--id-prefix", o.id_prefix,
                  "generated ids are this prefix + the line of the conversation's first turn")
      ->capture_default_str();
  cmd->add_flag("--force", o.force, "overwrite an existing output");
  cmd->add_flag("--json", f->json, "print the report as JSON");
  cmd->add_option("--max-errors", o.max_failures, "bad rows listed in the report (all are counted)")
      ->capture_default_str();
  AddProgressFlag(cmd, &o.progress);
  cmd->callback([f] {
    sessions::SessionsOptions& o = f->o;
    if (!sessions::ParseWindow(f->window, &o.linker.window_ms)) {
      FailSessions("--window " + f->window + ": give a positive duration such as 90s, 30m or 2h");
    }
    if (o.no_outcomes && !o.outcomes.empty()) FailSessions("--outcomes and --no-outcomes conflict");
    if (o.id_prefix.empty()) FailSessions("--id-prefix must not be empty");
    sessions::SessionsReport r = sessions::InferSessions(o);
    std::string text = f->json ? sessions::RenderSessionsJson(r) : sessions::RenderSessionsText(r);
    PrintReport(text, r.io.ok() || f->json, r.exit_code());
  });
}

}  // namespace llmtap::cli
