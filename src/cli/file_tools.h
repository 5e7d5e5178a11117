// What the file tools' subcommands share: `llmtap split`, `validate`, `stats`, `merge`,
// `convert` (trace_commands.cc), `sessions` and `anonymize` read a trace, report on it and exit
// 0, 1 (some rows failed or were skipped) or 2 (usage, open, read or write error). Their common
// flags are worded once here, and their reports are printed the same way.
#pragma once

#include <optional>
#include <string>

#include <CLI/CLI.hpp>

#include "trace/record.h"

namespace llmtap::cli {

// --format: the input's format when neither its manifest nor its rows should decide.
CLI::Option* AddFormatFlag(CLI::App* cmd, std::optional<trace::TraceFormat>* format);

// --progress: progress on stderr every 2 s.
void AddProgressFlag(CLI::App* cmd, bool* progress);

// Prints a tool's report (to stdout, or to stderr when `to_stdout` is false: the tool failed to
// read or write and produced nothing to keep) and exits with `exit_code`.
void PrintReport(const std::string& text, bool to_stdout, int exit_code);

}  // namespace llmtap::cli
