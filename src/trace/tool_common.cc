#include "trace/tool_common.h"

namespace llmtap::trace {

std::string RenderIssues(const std::string& path, const FailureList& failures,
                         std::string_view more, const std::vector<std::string>& warnings) {
  std::string out;
  for (const LineFailure& f : failures.kept) {
    out += (path.empty() ? f.reason : Located(path, f.line, f.reason)) + "\n";
  }
  if (failures.total > failures.kept.size()) {
    out += "... " + std::to_string(failures.total - failures.kept.size()) + " " +
           std::string(more) + "\n";
  }
  for (const std::string& w : warnings) out += "warning: " + w + "\n";
  return out;
}

}  // namespace llmtap::trace
