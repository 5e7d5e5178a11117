#include "cli/file_tools.h"

#include <cstdio>

#include "cli/commands.h"

namespace llmtap::cli {

CLI::Option* AddFormatFlag(CLI::App* cmd, std::optional<trace::TraceFormat>* format) {
  return cmd
      ->add_option_function<std::string>(
          "--format",
          [format](const std::string& name) { *format = trace::ParseTraceFormat(name); },
          "input format when neither the manifest nor the rows should decide: "
          "mooncake_trace (alias mooncake_payload) or raw_payload")
      ->check(CLI::IsMember({"mooncake_trace", "mooncake_payload", "raw_payload"}));
}

void AddProgressFlag(CLI::App* cmd, bool* progress) {
  cmd->add_flag("--progress", *progress,
                "progress on stderr every 2 s (default: only when stderr is a terminal)");
}

void PrintReport(const std::string& text, bool to_stdout, int exit_code) {
  std::fputs(text.c_str(), to_stdout ? stdout : stderr);
  ExitWith(exit_code);
}

}  // namespace llmtap::cli
