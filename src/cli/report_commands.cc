// `llmtap compare` and `llmtap report merge`: registration only; the logic lives in src/report.
#include "cli/commands.h"

namespace llmtap::cli {

void AddReportCommands(CLI::App& /*app*/) {}

}  // namespace llmtap::cli
