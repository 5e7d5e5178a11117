// libFuzzer target for the capture line builder: the request-body validator/compactor that
// makes every record one line (the AVX-512 kernel where the CPU has it, the simdjson path,
// and the byte-level reference), and the outcomes line. Beyond memory errors and undefined
// behaviour it checks that every path agrees with the reference, byte for byte, and that an
// accepted body's line holds no newline.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

#include "capture/capture.h"
#include "capture/json_compact.h"
#include "capture/json_compact_internal.h"

namespace {

void Check(bool ok) {
  if (!ok) __builtin_trap();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view body(reinterpret_cast<const char*>(data), size);
  std::string reference;
  const llmtap::CompactError want = llmtap::CompactJsonReference(body, &reference);

  std::string out;
  const llmtap::CompactError got = llmtap::ThreadLocalJsonCompactor().Compact(body, &out);
  Check((got == llmtap::CompactError::kOk) == (want == llmtap::CompactError::kOk));
  if (want == llmtap::CompactError::kOk) {
    Check(out == reference);
    Check(out.find('\n') == std::string::npos);
  }
  std::string simd;
  if (llmtap::json_compact_internal::TryCompactSimdjsonForTest(body, &simd)) {
    Check(want == llmtap::CompactError::kOk && simd == reference);
  }
  std::string avx;
  if (llmtap::json_compact_internal::HasAvx512Kernel() &&
      llmtap::json_compact_internal::TryCompactAvx512ForTest(body, &avx)) {
    Check(want == llmtap::CompactError::kOk && avx == reference);
  }

  // The outcomes line from arbitrary values: always one line.
  llmtap::ResponseOutcome o;
  int64_t v[4] = {0, 0, 0, 0};
  std::memcpy(v, data, std::min(size, sizeof v));
  o.status = static_cast<int>(v[0]);
  o.ttft_us = v[1];
  o.total_us = v[2];
  o.prompt_tokens = v[3];
  o.SetFinishReason(body.substr(std::min(size, sizeof v)));
  std::string line;
  llmtap::AppendOutcomeLine(static_cast<uint64_t>(v[0]), v[1], o, &line);
  Check(line.find('\n') == std::string::npos && line.front() == '{' && line.back() == '}');
  return 0;
}
