// `llmtap anonymize`: flags in, AnonymizeTrace (src/anonymize/) out, summary printed. Exit codes
// as the trace tools: 0 success; 1 some rows were skipped (listed as file:line: reason); 2 a
// usage, key, tokenizer, open, read or write error (no output is left behind).
#include <memory>
#include <string>

#include "anonymize/anonymize.h"
#include "cli/commands.h"
#include "cli/file_tools.h"
#include "tokenizer/tokenizer.h"

namespace llmtap::cli {
namespace {

[[noreturn]] void FailAnonymize(const std::string& message) {
  FailUsage("llmtap anonymize", message);
}

}  // namespace

void AddAnonymizeCommand(CLI::App& app) {
  struct Flags {
    anonymize::AnonymizeOptions o;
    std::string tokenizer, key_file, new_key_file, session_key_file, replayer = "aiperf";
  };
  auto f = std::make_shared<Flags>();
  anonymize::AnonymizeOptions& o = f->o;
  CLI::App* cmd = app.add_subcommand(
      "anonymize", "Turn a capture into a block-hashed Mooncake trace that holds no prompt");
  cmd->footer(
      "Turn a capture into a Mooncake trace with no prompt in it: one row per request, "
      "{\"timestamp\":T,\"input_length\":N,\"output_length\":M,\"hash_ids\":[...]}. Each "
      "prompt is tokenized (chat requests through the model family's chat template) and cut "
      "into blocks of --block-size tokens; block i is named HMAC-SHA256(key, id of block i-1 "
      "|| its tokens), so two rows share leading ids exactly when they share leading blocks, "
      "as a prefix cache sees them. The ids are then renumbered 0, 1, 2, ... in the order "
      "first seen. The key is random per run and never written anywhere, unless --key-file "
      "(or --new-key-file) names one; with the same key file, --id-map continues one numbering "
      "across several files. Timestamps are kept from mooncake_payload rows; raw_payload rows "
      "get none (run `llmtap convert --to mooncake_payload --rate R` first to give them a "
      "schedule). output_length: the completion tokens in the outcomes sidecar "
      "(<input>.outcomes.ndjson) when the response ended normally, else the request's "
      "max_completion_tokens / max_tokens, else --default-output-length; an outcome counts "
      "only when its timestamp equals its row's, and a sidecar that belongs to another file "
      "(an outcome past the input's last line, or more outcomes mismatching than matching) "
      "fails the run; an output_length of 0 is written as 1 (AIPerf refuses 0) and counted. "
      "Block size: AIPerf rebuilds prompts in blocks of 512 tokens and takes no other size for "
      "a trace file, so --block-size other than 512 is refused unless --replayer llmtap says "
      "the trace is for `llmtap replay --block-size B`. session_id: a row's session id is "
      "written as a keyed hash of it "
      "(HMAC-SHA256, the first 96 bits as 16 base64url characters), never the id itself; the "
      "rows of one session keep one hashed id. AIPerf (and llmtap replay) send a session's "
      "later turn after the conversation so far (earlier prompts and the answers the server "
      "gave), so such a turn is written as what it adds: input_length = its prompt's tokens - "
      "the previous turn's - the previous output_length, hash_ids naming those new blocks. A "
      "turn whose prompt does not continue the previous turn's, or adds no more than its "
      "output_length, starts a new part of the session: written whole under a session id of "
      "its own. The session key is --session-key-file, else "
      "random per run and never written (then the hashes match no other run: give runs whose "
      "ids must agree, such as two replicas' captures, the same session key file). Rows are "
      "tokenized "
      "on every core; the output keeps the input order. The output is created 0600 and never "
      "overwrites an existing file unless --force.\n\nKey file: 32 to 4096 bytes, all of it "
      "the key (for example `head -c 32 /dev/urandom > anon.key && chmod 600 anon.key`); "
      "refused when other users can read it.\n\nExit codes: 0 success; 1 some rows were "
      "skipped (listed as file:line: reason); 2 usage, key, tokenizer, open, read or write "
      "error.");
  cmd->add_option("input", o.path, "capture file (JSONL), or - for standard input")->required();
  cmd->add_option("--tokenizer", f->tokenizer,
                  "the model's tokenizer.json or its directory (a tokenizer_config.json beside "
                  "it picks the chat rendering), or 'builtin' (approximate, needs no files)")
      ->required();
  cmd->add_option("-o,--output", o.out,
                  "output file (default: <input name>.anonymized.jsonl beside the input)");
  cmd->add_option("--block-size", o.block_size,
                  "tokens per block (AIPerf replays 512 only; another size needs --replayer "
                  "llmtap)")
      ->check(CLI::Range(1u, 1u << 20))
      ->capture_default_str();
  cmd->add_option("--replayer", f->replayer,
                  "what replays the output: aiperf (block size 512) or llmtap (`llmtap replay "
                  "--block-size B`, any block size)")
      ->check(CLI::IsMember({"aiperf", "llmtap"}))
      ->capture_default_str();
  auto* key = cmd->add_option("--key-file", f->key_file,
                              "secret key, to get the same ids from other runs and files");
  cmd->add_option("--new-key-file", f->new_key_file,
                  "create this key file (32 random bytes, 0600) and use it")
      ->excludes(key);
  cmd->add_option("--session-key-file", f->session_key_file,
                  "secret key for the session_id hashes, to give the same id the same hash in "
                  "other runs (default: random per run)");
  cmd->add_option("--id-map", o.id_map_path,
                  "keyed id -> dense id map to continue and extend (needs a key file; created "
                  "when missing)");
  cmd->add_option("--outcomes", o.outcomes_path,
                  "response outcomes sidecar (default: <input>.outcomes.ndjson when present)");
  cmd->add_flag("--no-outcomes", o.no_outcomes, "ignore the outcomes sidecar");
  cmd->add_option("--default-output-length", o.default_output_length,
                  "output_length of rows with neither an outcome nor max_tokens")
      ->capture_default_str();
  cmd->add_option("--threads", o.threads, "worker threads (default: one per core)");
  AddFormatFlag(cmd, &o.format);
  cmd->add_option("--max-errors", o.max_failures, "skipped rows listed (all are counted)")
      ->capture_default_str();
  cmd->add_flag("--force", o.force, "overwrite an existing output file");
  AddProgressFlag(cmd, &o.progress);
  cmd->callback([f] {
    anonymize::AnonymizeOptions& o = f->o;
    o.replayer =
        f->replayer == "llmtap" ? anonymize::Replayer::kLlmtap : anonymize::Replayer::kAiperf;
    if (!o.id_map_path.empty() && f->key_file.empty() && f->new_key_file.empty()) {
      FailAnonymize(
          "--id-map needs --key-file (or --new-key-file): ids made with a random key match "
          "nothing in any map");
    }
    if (o.no_outcomes && !o.outcomes_path.empty())
      FailAnonymize("--outcomes and --no-outcomes conflict");
    Status status;
    std::vector<std::string> key_warnings;
    std::unique_ptr<anonymize::BlockKey> block_key;
    std::string key_note;
    if (!f->key_file.empty()) {
      block_key = anonymize::BlockKey::FromFile(f->key_file, &status, &key_warnings);
      key_note = "key file " + f->key_file;
    } else if (!f->new_key_file.empty()) {
      block_key = anonymize::BlockKey::CreateFile(f->new_key_file, &status);
      key_note = "new key file " + f->new_key_file;
    } else {
      block_key = anonymize::BlockKey::Random(&status);
      key_note = "random, not saved (ids match no other run)";
    }
    if (!block_key) FailAnonymize(status.ToString());
    std::unique_ptr<anonymize::BlockKey> session_key;
    if (!f->session_key_file.empty()) {
      session_key = anonymize::BlockKey::FromFile(f->session_key_file, &status, &key_warnings);
      if (!session_key) FailAnonymize("--session-key-file: " + status.ToString());
    }
    std::string error;
    std::unique_ptr<tokenizer::Tokenizer> tok = tokenizer::Tokenizer::Load(f->tokenizer, &error);
    if (!tok) FailAnonymize("--tokenizer " + f->tokenizer + ": " + error);

    o.tokenizer = tok.get();
    o.key = block_key.get();
    o.session_key = session_key.get();  // null: AnonymizeTrace makes a random one
    if (session_key) o.session_key_note = "key file " + f->session_key_file;
    anonymize::AnonymizeReport r = anonymize::AnonymizeTrace(o);
    r.warnings.insert(r.warnings.begin(), key_warnings.begin(), key_warnings.end());
    PrintReport(anonymize::RenderAnonymizeText(r, tok->Describe(), key_note), r.io.ok(),
                r.exit_code());
  });
}

}  // namespace llmtap::cli
