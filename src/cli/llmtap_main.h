// The `llmtap` program, declared apart from cli/commands.h so that main.cc does not include
// CLI11: the library's unity batch compiles CLI::App once (a unit of its own cost 17 CPU-s under
// ASan+UBSan).
#pragma once

namespace llmtap::cli {

// Every subcommand on one command line; parses argv and runs the one named. Returns the exit
// status.
int LlmtapMain(int argc, char** argv);

}  // namespace llmtap::cli
