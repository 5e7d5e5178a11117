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
  llmtap::cli::AddSpecdecCommand(app);
  llmtap::cli::AddSessionsCommand(app);
  llmtap::cli::AddReplayCommand(app);
  llmtap::cli::AddReportCommands(app);
  return llmtap::cli::RunCli(app, argc, argv);
}
