// Trace input of `llmtap replay`: reads a JSONL trace whose rows may be of three kinds, detected
// per line, and turns each row into the HTTP request it stands for:
//   - mooncake_payload: {"timestamp":T,"payload":{...request...}}  (llmtap capture, AIPerf)
//   - raw_payload: the request object itself (no timestamp)
//   - hashed Mooncake: {"timestamp":T,"input_length":N,"output_length":M,"hash_ids":[...]}
//     (public Mooncake traces, `llmtap anonymize`): a synthetic prompt (SyntheticPrompts); with
//     a session_id, a turn sent after the conversation so far, as AIPerf sends it (history.h)
// A payload goes to its own API's path (api/endpoints.h: the row's endpoint_type, else its
// body's shape: `messages` chat, `prompt` completions, ...), so rows of chat, completions,
// Responses, Messages, embeddings and rerank replay together in one run.
//
// Threads: a TraceReader belongs to one thread (the Lookahead's reader thread in a replay);
// LoadTrace is a plain function.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <simdjson.h>

#include "api/endpoints.h"
#include "capture/outcome.h"
#include "replay/chains.h"
#include "replay/options.h"
#include "replay/synthetic.h"
#include "trace/line_reader.h"
#include "trace/record.h"

namespace llmtap::replay {

enum class RowKind { kMooncakePayload, kRawPayload, kHashed, kUnsupported };
std::string_view RowKindName(RowKind kind);

// The kind of one parsed row. kUnsupported: a mooncake row that is neither a payload nor a
// hashed row (text_input, messages-only rows), or a request of no API replay knows (kOther).
RowKind DetectRowKind(simdjson::dom::object row);

// One trace row, ready to send.
struct TraceRequest {
  uint64_t index = 0;  // row index in the trace (0-based, blank lines not counted)
  uint64_t line = 0;   // line number in the file (1-based, every line counted)
  std::optional<double> timestamp_ms;
  api::Endpoint endpoint = api::Endpoint::kChat;  // sent to api::EndpointPath(endpoint)
  bool stream = false;                            // the body asks for a streamed response
  bool chat() const { return endpoint == api::Endpoint::kChat; }
  // A Responses row: its body's previous_response_id ("" for none), the response id its
  // outcome names (the Lookahead sets it), and how it links to its predecessor (chains.h).
  std::string previous_response_id;
  std::string response_id;
  ChainLink chain = ChainLink::kNone;
  // --responses-chain inline: the captured response's text (the outcomes sidecar's `response`),
  // when the sidecar holds it whole (inline.h).
  std::optional<ResponseText> captured_output;
  // The row's `session_id` (a string; "" when it has none): the conversation it is a turn of.
  std::string session_id;
  // Replay fidelity (fidelity/pairs.h), for a row the outcomes sidecar has an outcome for: that
  // outcome as the pair's captured side (trace::OutcomeTable::Side; valid while the sidecar's
  // table is; "" for none), the body's model and temperature, and the row's position among its
  // session's rows in the trace (0: its first turn; -1: no session).
  std::string_view captured_side;
  std::optional<std::string> model;
  std::optional<double> temperature;
  int64_t turn = -1;
  // The body as sent. Empty until TraceReader::BuildBody (rows another shard sends never get
  // one).
  std::string body;
  // A hashed row with a session_id is a turn whose input_length / hash_ids are its new content
  // (as AIPerf reads them): body[turn_begin, turn_end) is that turn's own piece (chat: its user
  // message object; completions: its escaped prompt text), and the conversation so far goes in
  // at turn_begin when it is sent (history.h). npos: any other row, sent as it is.
  size_t turn_begin = std::string::npos;
  size_t turn_end = 0;
};

// Rewrites a request body (a JSON object) of API `endpoint` for sending, changing no other byte:
// `model` set to `model` when non-empty; with `force_stream`, "stream":true, and for chat and
// completions "stream_options":{"include_usage":true} (Responses and Messages streams report
// usage in their last events; embeddings and rerank never stream: not forced). Keys missing are
// appended at the end of the object.
std::string RewriteBody(std::string_view body, std::string_view model, bool force_stream,
                        api::Endpoint endpoint = api::Endpoint::kChat);

// Whether `--stream` makes a request of this API streamed (not embeddings, rerank).
bool CanStream(api::Endpoint endpoint);

// Requests by API, for the counts replay prints and writes ({"chat": 3, "responses": 2}).
struct ApiCounts {
  uint64_t by_api[8] = {};
  void Add(api::Endpoint e) { ++by_api[static_cast<size_t>(e)]; }
  uint64_t operator[](api::Endpoint e) const { return by_api[static_cast<size_t>(e)]; }
  // "3 chat, 2 responses" (the APIs with rows; "none" when there are none).
  std::string Text() const;
};

using trace::SetTopLevel;  // trace/record.h

struct LoadOptions {
  InputOptions input;
  // Which rows to keep the body of (this shard's); all when unset. LoadTrace only.
  std::function<bool(uint64_t index)> keep_body;
  // The model for hashed rows when InputOptions::model is empty; called at most once, on the
  // first hashed row, on the reading thread.
  std::function<std::string()> default_model;
  const SyntheticPrompts* synthetic = nullptr;  // needed for hashed rows
  std::string synthetic_error;                  // why `synthetic` is null, for the message
  size_t max_listed_skips = 20;
};

// What has been read so far.
struct InputCounts {
  uint64_t rows = 0;  // request rows handed out (every kind)
  uint64_t rows_payload = 0, rows_raw = 0, rows_hashed = 0;
  ApiCounts apis;
  uint64_t skipped = 0;  // rows that are not requests (and rows the Planner could not place)
};

// Reads a trace row by row through trace::LineReader (a local file, "-" for standard input,
// s3:// objects, .jsonl.zst), so memory holds one row, never the trace. Next() hands out the
// request rows with what the schedule needs (index, line, timestamp, endpoint); BuildBody() then
// makes the body of a row that is to be sent. Rows that are not requests are skipped, counted and
// listed by line (the first max_listed_skips).
class TraceReader {
 public:
  explicit TraceReader(const LoadOptions& options);

  // False with *error when the input cannot be opened.
  bool Open(std::string* error);

  // The next request row, without its body. False at the end of the input or on an error
  // (error() is then non-empty: a read error, or hashed rows without SyntheticPrompts).
  bool Next(TraceRequest* row);

  // Sets row->body for the row Next() handed out last (call before the next Next()).
  void BuildBody(TraceRequest* row);

  // Counts `line` as skipped for `reason` (the Planner's skips go through here too).
  void Skip(uint64_t line, std::string_view reason);

  const InputCounts& counts() const { return counts_; }
  // "line N: reason" for the first max_listed_skips skipped rows.
  const std::vector<std::string>& skip_reasons() const { return skip_reasons_; }
  const std::string& error() const { return error_; }
  // The model hashed rows were given ("" before the first hashed row).
  const std::string& hashed_model() const { return hashed_model_; }
  // Progress: stored bytes read so far and the input's stored size (0 when unknown: stdin).
  uint64_t stored_position() const { return reader_.stored_position(); }
  uint64_t file_size() const { return reader_.file_size(); }

 private:
  const LoadOptions options_;
  trace::LineReader reader_;
  trace::RowParser parser_;
  trace::Line line_;
  uint64_t next_index_ = 0;
  InputCounts counts_;
  std::vector<std::string> skip_reasons_;
  std::string error_;
  std::string hashed_model_;
  // The current row, for BuildBody.
  RowKind kind_ = RowKind::kUnsupported;
  std::string_view request_bytes_;  // payload and raw rows
  std::vector<uint64_t> hash_ids_;  // hashed rows
  uint64_t input_length_ = 0;
  std::optional<uint64_t> output_length_;
};

// A whole (small) trace in memory, for tests and tools that need every row at once; `llmtap
// replay` itself streams (lookahead.h).
struct LoadedTrace {
  std::vector<TraceRequest> requests;
  uint64_t rows_payload = 0, rows_raw = 0, rows_hashed = 0;
  ApiCounts apis;
  uint64_t skipped = 0;
  std::vector<std::string> skip_reasons;  // "line N: reason" for the first few
  std::string hashed_model;               // the model hashed rows were given
};

// False with *error when the file cannot be opened or read.
bool LoadTrace(const LoadOptions& options, LoadedTrace* out, std::string* error);

}  // namespace llmtap::replay
