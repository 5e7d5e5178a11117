#include "cli/commands.h"
namespace llmtap::cli {
void AddCaptureDemoCommand(CLI::App& app) { app.add_subcommand("capture-demo", "demo"); }
}  // namespace llmtap::cli
