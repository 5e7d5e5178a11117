// What a response says, API by API: one JSON document of an answer (a whole response body, or
// the data of one server-sent event of a stream) read into the facts every tool wants (tokens,
// finish reason, the response's id, whether it carries generated output or an error) and its
// generated output handed to an OutputSink. Each API's rules live in that API's module
// (chat.cc, responses.cc, messages.cc, embeddings.cc, rerank.cc); this is their one seam, used
// by the proxy and the ASGI middleware (proxy/response_reader.h) and by replay.
//
// Threads: a DocumentReader (it owns a JSON parser) belongs to one thread at a time.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "api/endpoints.h"
#include "api/server_report.h"

namespace simdjson::dom {
class object;
class parser;
}  // namespace simdjson::dom

namespace llmtap::api {

// Where a response's generated output goes, piece by piece, in the order the document (or the
// stream) gives it. The pieces of a stream concatenate.
class OutputSink {
 public:
  virtual ~OutputSink() = default;
  // The answer's text: chat message/delta content, completions text, a Responses output_text,
  // a Messages text block.
  virtual void Text(std::string_view piece) = 0;
  // Reasoning: chat reasoning_content (or reasoning), Responses reasoning_text, Messages
  // thinking.
  virtual void Reasoning(std::string_view piece) = 0;
  // A tool call's name (when this piece names it) and a piece of its arguments (JSON text as
  // the model wrote it). `index` tells the calls apart: chat's tool_calls[*].index, the
  // Responses output_index, the Messages content block index.
  virtual void ToolCall(int64_t index, std::string_view name, std::string_view arguments) = 0;
};

// What one document says. Unset members: the document does not say.
struct DocumentFacts {
  bool error = false;   // an error instead of an answer (an "error" object, an error event)
  bool done = false;    // the API's last event (Responses response.completed, Messages
                        // message_stop; chat's "[DONE]" is not JSON and is the caller's)
  bool output = false;  // carries generated output: text, reasoning or a tool call's arguments
                        // (what a stream's token timing counts)
  std::optional<int64_t> input_tokens;   // the whole prompt (Messages: cached tokens included)
  std::optional<int64_t> output_tokens;  // generated tokens
  // How generation ended, in the API's own words: chat finish_reason ("stop", "length", ...);
  // Responses incomplete_details.reason ("max_output_tokens", ...) or else its status
  // ("completed", "failed", ...); Messages stop_reason ("end_turn", "max_tokens", "tool_use").
  std::string finish_reason;
  std::string response_id;  // Responses "resp_..." and Messages "msg_..." ids; "" for others
  // What the server reported of its own work (cached prompt tokens, its timings, speculative
  // decoding): each member as the last document that held it said.
  ServerReport server;
};

class DocumentReader {
 public:
  DocumentReader();
  ~DocumentReader();
  DocumentReader(const DocumentReader&) = delete;
  DocumentReader& operator=(const DocumentReader&) = delete;

  // Reads `json` as a document of an answer of `endpoint` (kOther and kAny: as chat). False when
  // it is not a JSON object (*facts is then untouched). `sink` may be null.
  bool Read(Endpoint endpoint, std::string_view json, DocumentFacts* facts, OutputSink* sink);

  // This thread's reader, for hosts that read many small documents on their own threads.
  static DocumentReader& ForThisThread();

 private:
  std::unique_ptr<simdjson::dom::parser> parser_;
};

// Each API's rules (each defined in that API's module). `o` is the document's top-level object.
void ReadChatDocument(const simdjson::dom::object& o, DocumentFacts* facts, OutputSink* sink);
void ReadResponsesDocument(const simdjson::dom::object& o, DocumentFacts* facts, OutputSink* sink);
void ReadMessagesDocument(const simdjson::dom::object& o, DocumentFacts* facts, OutputSink* sink);
void ReadEmbeddingsDocument(const simdjson::dom::object& o, DocumentFacts* facts);
void ReadRerankDocument(const simdjson::dom::object& o, DocumentFacts* facts);

}  // namespace llmtap::api
