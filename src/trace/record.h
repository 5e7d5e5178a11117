// What a trace row is: its format (AIPerf mooncake_trace or raw_payload), the request it
// carries and the endpoint that request is for; plus byte-level helpers that rewrite a row's
// timestamp or extract its payload without touching any other byte. Pure functions and a
// per-thread RowParser (one simdjson parser reused for every line).
#pragma once

#include <simdjson.h>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "api/endpoints.h"
#include "trace/line_reader.h"

namespace llmtap::trace {

// The AIPerf dataset type a file loads as.
enum class TraceFormat { kUnknown, kMooncake, kRaw };
// "mooncake_trace", "raw_payload", "unknown" (AIPerf --custom-dataset-type names).
std::string_view TraceFormatName(TraceFormat format);
// Accepts AIPerf's and llmtap's capture names: mooncake_trace / mooncake_payload, raw_payload.
std::optional<TraceFormat> ParseTraceFormat(std::string_view name);

// The endpoint (API) a row's request is for (api/endpoints.h). kAny: a mooncake row AIPerf
// synthesizes for whatever endpoint type the run uses (input_length or text_input rows).
using api::Endpoint;
using api::EndpointName;

enum class ParseStatus {
  kOk,
  kBlank,             // empty or whitespace only; AIPerf skips these
  kInvalidJson,       // not JSON
  kNumberOutOfRange,  // valid JSON holding a number no double can hold (1e400)
  kNotObject,         // valid JSON, top level is not an object
};

struct ParsedRow {
  ParseStatus status = ParseStatus::kBlank;
  std::string error;             // why, for kInvalidJson
  simdjson::dom::object object;  // the row (valid until the next Parse)
  // The row held an integer beyond 64 bits (above 2^64-1, below -2^63): as orjson, AIPerf's
  // JSON parser, does, it was read as a float, and `object` was parsed from `text`, the line
  // with each such integer widened ("...6" -> "...6.0"). Otherwise `text` is the line itself.
  bool big_integers = false;
  // Nested deeper than simdjson's default 1024 levels (orjson reads any depth): parsed with a
  // deeper parser.
  bool deep = false;
  std::string_view text;  // valid until the next Parse
};

// A row is mooncake-shaped when it has any key AIPerf's mooncake_trace defines
// (timestamp, payload, input_length, text_input, hash_ids, output_length, delay, session_id).
// An OpenAI request body has none of them.
TraceFormat RowFormat(simdjson::dom::object row);

// The request a row carries: the row itself for raw rows, `payload` for mooncake payload
// rows; nullopt for mooncake rows without a payload object.
std::optional<simdjson::dom::object> RowRequest(simdjson::dom::object row, TraceFormat format);

// The API a row's request is for. A mooncake row's "endpoint_type" (AIPerf's name, written by
// the capture for every API but chat and completions) says it. Otherwise the request's shape:
// `messages` with a top-level `system` or `anthropic_version` -> messages, `messages` ->
// chat, `prompt` -> completions, `query` with `documents` -> rerank, `input` with
// `instructions`, `previous_response_id`, `max_output_tokens`, `tools` or `reasoning` ->
// responses, `input` with `encoding_format` or `dimensions` -> embeddings; other shapes (a bare
// `input` could be either of the last two) -> kOther. Mooncake rows without payload:
// `messages` -> kChat; input_length / text_input -> kAny.
Endpoint RowEndpoint(simdjson::dom::object row, TraceFormat format);

// A row RowEndpoint reads as chat by its shape alone (no endpoint_type) that Anthropic's
// Messages API would take as it is: nothing in it is only chat's (a system-role turn, `n`,
// `stop`, an image_url block, no max_tokens...). Which API it was sent to is unknown; the
// tools read it as chat and report it. A capture by llmtap records the API (endpoint_type on
// every row that is not chat or completions), so in its files such a row is chat.
bool RowChatOrMessages(simdjson::dom::object row, TraceFormat format);

// A file's rows RowChatOrMessages reports: how many, and the first one's line.
struct ChatOrMessagesRows {
  uint64_t rows = 0;
  uint64_t first_line = 0;
  void Note(simdjson::dom::object row, TraceFormat format, uint64_t line) {
    if (!RowChatOrMessages(row, format)) return;
    if (rows++ == 0) first_line = line;
  }
  // The file's warning ("" with no such row): how many, where, `taken_as` (what the tool did
  // with them: "read as chat"), `note` (why the manifest could not tell: ApiRecord::Note) and
  // how to say which API they were for.
  std::string Warning(std::string_view taken_as, std::string_view note = "") const;
};

// The row's numeric `timestamp`, when it has one.
std::optional<double> RowTimestamp(simdjson::dom::object row);

// Appends `line` to `out` (cleared first) with every integer literal beyond 64 bits (above
// 2^64-1, below -2^63) outside strings made a float literal ("...6" -> "...6.0"), as orjson
// reads such integers. False, with `out` left unspecified, when the line holds none.
bool WidenBigIntegers(std::string_view line, std::string* out);

class RowParser {
 public:
  // Parses a line from LineReader (it must have LineReader::kPadding readable bytes after
  // it). Full RFC 8259 validation. A row holding an integer beyond 64 bits, or nested deeper
  // than 1024 levels, is read as AIPerf reads it (ParsedRow::big_integers, deep); a number no
  // double can hold (1e400) is refused (kNumberOutOfRange), as AIPerf refuses it.
  const ParsedRow& Parse(std::string_view line);

 private:
  simdjson::dom::parser parser_;
  ParsedRow row_;
  std::string widened_;  // the line with its big integers widened, padded for simdjson
};

// Byte span [begin, end) of the value of top-level key `key` in `line`, a valid JSON object.
// Keys written with escapes are not matched. nullopt when absent.
struct Span {
  size_t begin = 0;
  size_t end = 0;
};
std::optional<Span> FindTopLevelValue(std::string_view line, std::string_view key);

// Sets top-level `key` of the JSON object `*json` to the JSON text `value` (replaced in place,
// or appended before the closing brace).
void SetTopLevel(std::string* json, std::string_view key, std::string_view value);

// Removes top-level `key` (written without escapes) and its value from the JSON object `*json`,
// with the comma that separated it. False when there is no such key.
bool RemoveTopLevel(std::string* json, std::string_view key);

// Span of the top-level "session_id" string value of `line` (a valid JSON object), quotes
// included; nullopt when there is none, it is not a string, or it is "". The capture writer
// puts session_id last (`...},"session_id":"ID"}`), found from the end of the row without a
// scan of the payload; any other layout falls back to FindTopLevelValue.
std::optional<Span> FindSessionId(std::string_view line);

// Appends `line` with the value of its top-level `timestamp` replaced by `timestamp`
// (every other byte unchanged). False (nothing appended) when there is no such key.
bool AppendWithTimestamp(std::string_view line, double timestamp, std::string* out);

// Integral values print as integers, others in shortest round-trip form.
void AppendNumber(double value, std::string* out);

// Trims JSON whitespace from both ends.
std::string_view TrimJsonWhitespace(std::string_view s);

// The capture writer's own framing of a row (capture/writer.cc): `{"timestamp":N,"payload":`,
// the payload, `}`, with N a JSON integer of at most 15 digits (exact in a double). For such a
// row (whitespace already trimmed) that holds nothing a parse could refuse where the capture's
// validator (capture/json_compact.h) accepted it, sets *timestamp_ms to N and returns true:
// its format is mooncake and its timestamp N, what a parse would find. It returns false,
// leaving the row to RowParser, for any other shape, and for a row holding a `\uD` escape (a
// surrogate: the parser refuses a lone one), or outside strings a digit before 'e'/'E' (an
// exponent: 1e400 has no double), a run of 19 or more digits (an integer beyond 64 bits) or a
// thousand or more '{'/'[' (nesting deeper than the parser takes). It does NOT validate the JSON:
// only use it where the bytes are known to be the capture writer's (see merge.cc).
bool MatchCaptureRow(std::string_view row, double* timestamp_ms);

}  // namespace llmtap::trace
