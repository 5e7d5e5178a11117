// Trace input of `llmtap replay`: reads a JSONL trace whose rows may be of three kinds, detected
// per line, and turns each row into the HTTP request it stands for:
//   - mooncake_payload: {"timestamp":T,"payload":{...request...}}  (llmtap capture, AIPerf)
//   - raw_payload: the request object itself (no timestamp)
//   - hashed Mooncake: {"timestamp":T,"input_length":N,"output_length":M,"hash_ids":[...]}
//     (public Mooncake traces, `llmtap anonymize`): a synthetic prompt (SyntheticPrompts)
// A payload goes to /v1/chat/completions when it has `messages`, /v1/completions when it has
// `prompt`, so chat and completion rows replay together in one run.
//
// Threads: LoadTrace is a plain function; call it from one thread.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <simdjson.h>

#include "replay/options.h"
#include "replay/synthetic.h"

namespace llmtap::replay {

enum class RowKind { kMooncakePayload, kRawPayload, kHashed, kUnsupported };
std::string_view RowKindName(RowKind kind);

// The kind of one parsed row. kUnsupported: a mooncake row that is neither a payload nor a
// hashed row (text_input, messages-only rows), or a request of neither chat nor completion shape.
RowKind DetectRowKind(simdjson::dom::object row);

// One trace row, ready to send.
struct TraceRequest {
  uint64_t index = 0;  // row index in the trace (0-based, blank lines not counted)
  std::optional<double> timestamp_ms;
  bool chat = true;     // /v1/chat/completions, else /v1/completions
  bool stream = false;  // the body asks for a streamed response
  // The body as sent. Empty for rows another shard sends (LoadOptions::keep_body).
  std::string body;
};

// Rewrites a request body (a JSON object) for sending, changing no other byte: `model` set to
// `model` when non-empty; with `force_stream`, "stream":true and
// "stream_options":{"include_usage":true}. Keys missing are appended at the end of the object.
std::string RewriteBody(std::string_view body, std::string_view model, bool force_stream);

// Sets top-level `key` of the JSON object `*json` to the JSON text `value` (replaced in place,
// or appended before the closing brace).
void SetTopLevel(std::string* json, std::string_view key, std::string_view value);

struct LoadOptions {
  InputOptions input;
  // Which rows to keep the body of (this shard's); all when unset.
  std::function<bool(uint64_t index)> keep_body;
  // The model for hashed rows when InputOptions::model is empty; called at most once, on the
  // first hashed row.
  std::function<std::string()> default_model;
  const SyntheticPrompts* synthetic = nullptr;  // needed for hashed rows
  size_t max_listed_skips = 20;
};

struct LoadedTrace {
  std::vector<TraceRequest> requests;
  uint64_t rows_payload = 0, rows_raw = 0, rows_hashed = 0;
  uint64_t chat = 0, completions = 0;
  uint64_t skipped = 0;
  std::vector<std::string> skip_reasons;  // "line N: reason" for the first few
  std::string hashed_model;               // the model hashed rows were given
};

// False with *error when the file cannot be opened or read.
bool LoadTrace(const LoadOptions& options, LoadedTrace* out, std::string* error);

}  // namespace llmtap::replay
