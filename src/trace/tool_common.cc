#include "trace/tool_common.h"

#include "trace/hash_bytes.h"

namespace llmtap::trace {

bool LineBatch::Read(LineReader* reader, Progress* progress, size_t max_lines, size_t max_bytes,
                     const LineCounts& counts) {
  bytes.clear();
  lines.clear();
  Line line;
  while ((lines.empty() || (lines.size() < max_lines && bytes.size() < max_bytes)) &&
         reader->Next(&line)) {
    progress->Update(reader->stored_position(), reader->file_size());
    if (counts.lines) ++*counts.lines;
    if (line.crlf && counts.crlf) ++*counts.crlf;
    if (line.torn && counts.torn_tail) *counts.torn_tail = true;
    if (TrimJsonWhitespace(line.bytes).empty()) {
      if (counts.blank) ++*counts.blank;
      continue;
    }
    lines.push_back({bytes.size(), line.bytes.size(), line.number, line.torn});
    bytes.append(line.bytes);
    bytes.push_back('\n');
  }
  bytes.append(LineReader::kPadding, '\0');
  return !lines.empty();
}

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
