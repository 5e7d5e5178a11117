#include <cstdio>

#include "cli/commands.h"

namespace llmtap::cli {

int RunCli(CLI::App& app, int argc, char** argv) {
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
