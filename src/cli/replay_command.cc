// `llmtap replay`: registration only; the logic lives in src/replay.
#include "cli/commands.h"

namespace llmtap::cli {

void AddReplayCommand(CLI::App& /*app*/) {}

}  // namespace llmtap::cli
