// libFuzzer target for the JSONL trace reader behind every trace tool: LineReader over a file
// (a memfd holding the input), each line through RowParser and the row classifiers. Beyond
// memory errors and undefined behaviour it checks the line rules: the lines handed out, with
// their '\n' (and CRLF '\r') put back, rebuild the input exactly, and numbering has no gaps.
#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "trace/line_reader.h"
#include "trace/record.h"

namespace {

void Check(bool ok) {
  if (!ok) __builtin_trap();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const int fd = memfd_create("trace_reader_fuzz", 0);
  Check(fd >= 0);
  Check(ftruncate(fd, 0) == 0);
  Check(pwrite(fd, data, size, 0) == static_cast<ssize_t>(size));
  // Small chunks so that lines cross chunk boundaries and the buffer grows.
  llmtap::trace::LineReader reader(size % 7 == 0 ? 64 : 4096);
  Check(reader.Open("/proc/self/fd/" + std::to_string(fd)).ok());
  llmtap::trace::RowParser parser;
  llmtap::trace::Line line;
  std::string rebuilt;
  uint64_t expected_number = 1;
  while (reader.Next(&line)) {
    Check(line.number == expected_number++);
    rebuilt.append(line.bytes);
    if (line.crlf) rebuilt.push_back('\r');
    if (!line.torn) rebuilt.push_back('\n');
    const llmtap::trace::ParsedRow& row = parser.Parse(line.bytes);
    if (row.status == llmtap::trace::ParseStatus::kOk) {
      const llmtap::trace::TraceFormat format = llmtap::trace::RowFormat(row.object);
      llmtap::trace::RowRequest(row.object, format);
      llmtap::trace::RowEndpoint(row.object, format);
      llmtap::trace::RowTimestamp(row.object);
    }
  }
  Check(reader.status().ok());
  Check(rebuilt == std::string(reinterpret_cast<const char*>(data), size));
  return 0;
}
