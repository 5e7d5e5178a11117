// Subcommand registration. Each Add*Command attaches one subcommand to the root app; the
// subcommand's logic lives in its part's library, not here.
#pragma once

#include <string>

#include <CLI/CLI.hpp>

#include "common/env.h"

namespace llmtap::cli {

// Parses argv into `app` (whose subcommands are added) and runs the chosen one. Returns the
// process exit code: 0, the subcommand's own code, or 2 for every usage error.
int RunCli(CLI::App& app, int argc, char** argv);

// Ends a subcommand on a usage, input or output error: says "<who>: <message>" on stderr
// (who: "llmtap replay", ...) and exits 2 through RunCli.
[[noreturn]] void FailUsage(const char* who, const std::string& message);

// Ends a subcommand with its exit code: flushes stdout and, unless `rc` is 0, exits with `rc`
// through RunCli. Every subcommand's callback ends here.
void ExitWith(int rc);

void AddCaptureDemoCommand(CLI::App& app);
void AddSimCommand(CLI::App& app);
// capture_env: the capture core's file-system seam (nullptr: the real one). Only tests pass
// another (tests/reliability/slow_disk_proxy.cc).
void AddProxyCommand(CLI::App& app, Env* capture_env = nullptr);
void AddTraceCommands(CLI::App& app);  // split, validate, stats, merge, convert
void AddAnonymizeCommand(CLI::App& app);
void AddSpecdecCommand(CLI::App& app);
void AddSessionsCommand(CLI::App& app);
void AddReplayCommand(CLI::App& app);
void AddReportCommands(CLI::App& app);  // compare, report merge
void AddShadowCommand(CLI::App& app);   // shadow report
void AddFidelityCommand(CLI::App& app);

}  // namespace llmtap::cli
