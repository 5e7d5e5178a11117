// Subcommand registration. Each Add*Command attaches one subcommand to the root app; the
// subcommand's logic lives in its part's library, not here.
#pragma once

#include <CLI/CLI.hpp>

namespace llmtap::cli {

void AddCaptureDemoCommand(CLI::App& app);
void AddSimCommand(CLI::App& app);
void AddProxyCommand(CLI::App& app);
void AddTraceCommands(CLI::App& app);  // split, validate, stats, merge, convert
void AddAnonymizeCommand(CLI::App& app);
void AddReplayCommand(CLI::App& app);
void AddReportCommands(CLI::App& app);  // compare, report merge

}  // namespace llmtap::cli
