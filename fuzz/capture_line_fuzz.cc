// libFuzzer target for the capture line builder: the request-body validator/compactor that
// makes every record one line (the AVX-512 kernel where the CPU has it, the simdjson path,
// and the byte-level reference), and the outcomes line. Beyond memory errors and undefined
// behaviour it checks that every path agrees with the reference, byte for byte, and that an
// accepted body's line holds no newline. And for an accepted body framed as the capture
// writer frames a row (with and without a session id), merge's parse-free reading of that
// framing (trace::MatchCaptureRow) either declines or finds what a full parse finds, and its
// FindSessionId finds the session id as written (none in a row without one); and the writer's
// session_fields scanner finds in it the id a full parse (nlohmann) finds.
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

#include "capture/capture.h"
#include "capture/json_compact.h"
#include "capture/json_compact_internal.h"
#include "capture/session.h"
#include "common/json_escape.h"
#include "trace/line_reader.h"
#include "trace/record.h"

namespace {

void Check(bool ok) {
  if (!ok) __builtin_trap();
}

// A row as the capture writer writes it: {"timestamp":N,"payload":BODY[,"session_id":"..."]}.
void CheckFramedRow(const std::string& body, int64_t timestamp, const std::string* session) {
  std::string row = "{\"timestamp\":" + std::to_string(timestamp) + ",\"payload\":" + body;
  std::string id;  // as written, quotes included
  if (session != nullptr) {
    id = "\"";
    llmtap::AppendJsonEscaped(&id, *session);
    id += '"';
    row += ",\"session_id\":" + id;
  }
  row += '}';
  // merge's FindSessionId: the id as written (found from the row's end), never a payload field.
  const std::optional<llmtap::trace::Span> span = llmtap::trace::FindSessionId(row);
  if (session == nullptr || session->empty()) {
    Check(!span.has_value());
  } else {
    Check(span.has_value() && row.substr(span->begin, span->end - span->begin) == id);
  }
  double fast = 0;
  if (!llmtap::trace::MatchCaptureRow(row, &fast)) return;
  static llmtap::trace::RowParser parser;
  const size_t length = row.size();
  row.append(llmtap::trace::LineReader::kPadding, ' ');  // the parser reads past the row
  const llmtap::trace::ParsedRow& parsed = parser.Parse(std::string_view(row).substr(0, length));
  Check(parsed.status == llmtap::trace::ParseStatus::kOk);
  Check(llmtap::trace::RowFormat(parsed.object) == llmtap::trace::TraceFormat::kMooncake);
  const std::optional<double> ts = llmtap::trace::RowTimestamp(parsed.object);
  Check(ts.has_value() && *ts == fast);
}

// session_fields over an accepted body against nlohmann's reading of the same body (a key
// written twice is read at its last occurrence by both).
void CheckSessionFields(const std::string& body) {
  static const std::vector<std::string> kDotted = {"user", "a.b", "a", "metadata.session_id"};
  static const llmtap::SessionFieldPaths kPaths(kDotted);
  std::string scratch, got;
  const bool found = kPaths.AppendFromBody(body, &scratch, &got);
  const nlohmann::json doc = nlohmann::json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded()) return;  // e.g. a lone surrogate escape, which nlohmann refuses
  for (const std::string& dotted : kDotted) {
    const nlohmann::json* v = &doc;
    size_t start = 0;
    for (;;) {
      const size_t dot = dotted.find('.', start);
      const std::string key = dotted.substr(start, dot - start);
      if (!v->is_object() || !v->contains(key)) {
        v = nullptr;
        break;
      }
      v = &(*v)[key];
      if (dot == std::string::npos) break;
      start = dot + 1;
    }
    if (v == nullptr) continue;
    if (v->is_string() && !v->get_ref<const std::string&>().empty()) {
      std::string want;
      Check(llmtap::AppendSessionIdMember(v->get_ref<const std::string&>(), &want) == found);
      Check(got == want);
      return;
    }
    if (v->is_number_integer()) {  // written as its text (-0 stays -0): only found is checked
      Check(found);
      return;
    }
    // nlohmann reads an integer past 64 bits as a float, the scanner as an integer: unknowable.
    if (v->is_number_float()) return;
  }
  Check(!found);
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
    const int64_t timestamp = size == 0 ? 0 : static_cast<int64_t>(data[0]) * 1000003;
    CheckFramedRow(out, timestamp, nullptr);
    // A session id is valid UTF-8 (the capture cuts it at a character boundary): the start of
    // the accepted body, cut before a continuation byte.
    size_t cut = std::min<size_t>(out.size(), 40);
    while (cut > 0 && cut < out.size() && (static_cast<unsigned char>(out[cut]) & 0xC0) == 0x80) {
      --cut;
    }
    const std::string session = out.substr(0, cut);
    CheckFramedRow(out, timestamp, &session);
    CheckSessionFields(out);
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

  // The outcomes line from arbitrary values, with and without a response text made of arbitrary
  // bytes (capture_responses): always one line of valid JSON, whose response strings are the
  // bytes given when they are valid UTF-8.
  llmtap::ResponseOutcome o;
  int64_t v[4] = {0, 0, 0, 0};
  std::memcpy(v, data, std::min(size, sizeof v));
  o.status = static_cast<int>(v[0]);
  o.ttft_us = v[1];
  o.total_us = v[2];
  o.prompt_tokens = v[3];
  const std::string_view rest = body.substr(std::min(size, sizeof v));
  o.SetFinishReason(rest);
  const bool with_response = (v[0] & 1) != 0;
  o.has_response = (v[0] & 2) != 0;
  o.response.text.assign(rest);
  o.response.tool_calls.push_back({0, std::string(rest.substr(0, rest.size() / 2)), "{}"});
  std::string line;
  llmtap::AppendOutcomeLine(static_cast<uint64_t>(v[0]), v[1], o, with_response, &line);
  Check(line.find('\n') == std::string::npos && line.front() == '{' && line.back() == '}');
  const nlohmann::json parsed = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
  Check(!parsed.is_discarded());
  Check(parsed.contains("response") == with_response);
  bool valid_utf8 = true;  // nlohmann's dump refuses ill-formed UTF-8
  try {
    (void)nlohmann::json(std::string(rest)).dump();
  } catch (const nlohmann::json::exception&) {
    valid_utf8 = false;
  }
  if (with_response && o.has_response && valid_utf8) Check(parsed["response"]["text"] == rest);
  return 0;
}
