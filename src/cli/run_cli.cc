#include <cstdio>
#include <string>

#include "cli/commands.h"
#include "cli/llmtap_main.h"
#include "common/version.h"

namespace llmtap::cli {

int RunCli(CLI::App& app, int argc, char** argv) {
  try {
    app.parse(argc, argv);
  } catch (const CLI::RuntimeError& e) {
    return e.get_exit_code();  // a subcommand's own exit code; it has said why
  } catch (const CLI::ParseError& e) {
    // --help and --version exit 0; every usage error exits 2, as each command's --help says
    // (CLI11's own codes, 105 to 114, mean nothing to a script), with one line that names the
    // command and the flag.
    if (e.get_exit_code() == 0) return app.exit(e);
    std::string who = "llmtap";
    for (const CLI::App* a = &app; !a->get_subcommands().empty();) {
      a = a->get_subcommands().front();
      who += " " + a->get_name();
    }
    std::string what = e.what();
    for (char& c : what) {
      if (c == '\n') c = ' ';
    }
    std::fprintf(stderr, "%s: %s (see %s --help)\n", who.c_str(), what.c_str(), who.c_str());
    return 2;
  }
  return 0;
}

int LlmtapMain(int argc, char** argv) {
  CLI::App app{
      "llmtap: capture the requests that reach an OpenAI-compatible inference server as "
      "JSONL traces, and replay them."};
  app.set_version_flag("--version", std::string("llmtap ") + kVersion);
  app.require_subcommand(1);
  AddCaptureDemoCommand(app);
  AddSimCommand(app);
  AddProxyCommand(app);
  AddTraceCommands(app);
  AddAnonymizeCommand(app);
  AddSpecdecCommand(app);
  AddSessionsCommand(app);
  AddReplayCommand(app);
  AddReportCommands(app);
  AddShadowCommand(app);
  AddFidelityCommand(app);
  return RunCli(app, argc, argv);
}

void FailUsage(const char* who, const std::string& message) {
  std::fprintf(stderr, "%s: %s\n", who, message.c_str());
  std::fflush(stdout);
  throw CLI::RuntimeError(2);
}

void ExitWith(int rc) {
  std::fflush(stdout);
  if (rc != 0) throw CLI::RuntimeError(rc);
}

}  // namespace llmtap::cli
