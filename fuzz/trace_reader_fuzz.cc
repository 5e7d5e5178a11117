// libFuzzer target for the JSONL trace reader behind every trace tool: LineReader over a file
// (a memfd holding the input), each line through RowParser and the row classifiers. Beyond
// memory errors and undefined behaviour it checks the line rules: the lines handed out, with
// their '\n' (and CRLF '\r') put back, rebuild the input exactly, and numbering has no gaps.
// Input that starts with zstd's magic number is read as zstd (as every trace tool does): then the
// lines rebuild what libzstd's own streaming decoder makes of it, and input that decoder rejects
// (corrupt or truncated) must end the reader with an error, never with lines that look whole.
// Every line also goes through merge's parse-free MatchCaptureRow (memory errors and UB only).
#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

#include <zstd.h>

#include "trace/line_reader.h"
#include "trace/record.h"

namespace {

void Check(bool ok) {
  if (!ok) __builtin_trap();
}

enum class Reference { kOk, kRejected, kTooLarge };

// What libzstd's streaming decoder makes of `data`, up to `limit` bytes of output, with one
// rule on top: a frame that states its content size must decode to that many bytes (libzstd
// checks it only when the whole frame fits in the output buffer; the reader checks it always).
Reference DecodeZstd(const uint8_t* data, size_t size, size_t limit, std::string* out) {
  ZSTD_DStream* ds = ZSTD_createDStream();
  ZSTD_inBuffer in{data, size, 0};
  std::string chunk(ZSTD_DStreamOutSize(), '\0');
  Reference result = Reference::kOk;
  bool frame_open = true;  // a call that did nothing after a frame answers with a hint, not 0
  size_t frame_start = 0, frame_out = 0;  // the current frame's first byte and its output so far
  for (;;) {
    ZSTD_outBuffer o{chunk.data(), chunk.size(), 0};
    const size_t before = in.pos;
    const size_t r = ZSTD_decompressStream(ds, &o, &in);
    if (ZSTD_isError(r)) {
      result = Reference::kRejected;
      break;
    }
    out->append(chunk.data(), o.pos);
    frame_out += o.pos;
    if (out->size() > limit) {
      result = Reference::kTooLarge;
      break;
    }
    if (in.pos == before && o.pos == 0) {
      if (frame_open) result = Reference::kRejected;  // ends inside a frame
      break;
    }
    frame_open = r != 0;
    if (r == 0) {  // a frame ended: the input from frame_start holds its header
      const unsigned long long stated =
          ZSTD_getFrameContentSize(data + frame_start, size - frame_start);
      if (stated != ZSTD_CONTENTSIZE_UNKNOWN && stated != ZSTD_CONTENTSIZE_ERROR &&
          stated != frame_out) {
        result = Reference::kRejected;
        break;
      }
      frame_start = in.pos;
      frame_out = 0;
    }
  }
  ZSTD_freeDStream(ds);
  return result;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string expected(reinterpret_cast<const char*>(data), size);
  Reference reference = Reference::kOk;
  if (size >= 4 && std::memcmp(data, "\x28\xb5\x2f\xfd", 4) == 0) {
    expected.clear();
    reference = DecodeZstd(data, size, 1 << 24, &expected);
    if (reference == Reference::kTooLarge) return 0;  // a decompression bomb: too slow to check
  }
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
    double framed_ms = 0;  // merge's parse-free reading of capture rows: memory and UB only
    llmtap::trace::MatchCaptureRow(llmtap::trace::TrimJsonWhitespace(line.bytes), &framed_ms);
    const llmtap::trace::ParsedRow& row = parser.Parse(line.bytes);
    if (row.status == llmtap::trace::ParseStatus::kOk) {
      const llmtap::trace::TraceFormat format = llmtap::trace::RowFormat(row.object);
      llmtap::trace::RowRequest(row.object, format);
      llmtap::trace::RowEndpoint(row.object, format);
      llmtap::trace::RowTimestamp(row.object);
    }
  }
  if (reference == Reference::kRejected) {
    Check(!reader.status().ok());
    return 0;
  }
  Check(reader.status().ok());
  Check(rebuilt == expected);
  return 0;
}
