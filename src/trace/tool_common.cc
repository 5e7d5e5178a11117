#include "trace/tool_common.h"

#include "trace/hash_bytes.h"

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

std::pair<SessionEndpoints::Session*, bool> SessionEndpoints::Add(std::string_view id,
                                                                  Endpoint endpoint,
                                                                  uint64_t line, uint8_t tag) {
  auto [it, added] = sessions_.try_emplace(HashSessionId(id), Session{endpoint, line, tag});
  return {&it->second, added};
}

}  // namespace llmtap::trace
