// llmtap: one binary, one subcommand per part. See `llmtap --help`.
#include <CLI/CLI.hpp>

#include "cli/commands.h"
#include "common/version.h"

int main(int argc, char** argv) {
  CLI::App app{
      "llmtap: capture the requests that reach an OpenAI-compatible inference server as "
      "JSONL traces, and replay them."};
  app.set_version_flag("--version", std::string("llmtap ") + llmtap::kVersion);
  app.require_subcommand(1);
  llmtap::cli::AddCaptureDemoCommand(app);
  llmtap::cli::AddSimCommand(app);
  llmtap::cli::AddProxyCommand(app);
  llmtap::cli::AddTraceCommands(app);
  llmtap::cli::AddAnonymizeCommand(app);
  llmtap::cli::AddReplayCommand(app);
  llmtap::cli::AddReportCommands(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::RuntimeError& e) {
    return e.get_exit_code();  // a subcommand's own exit code; it has said why
  } catch (const CLI::ParseError& e) {
    // --help and --version exit 0; every usage error exits 2, as each command's --help says
    // (CLI11's own codes, 105 to 114, mean nothing to a script).
    return app.exit(e) == 0 ? 0 : 2;
  }
  return 0;
}
