#include "api/response_document.h"

#include <simdjson.h>

#include "api/document_internal.h"

namespace llmtap::api {

DocumentReader::DocumentReader() : parser_(std::make_unique<simdjson::dom::parser>()) {}
DocumentReader::~DocumentReader() = default;

DocumentReader& DocumentReader::ForThisThread() {
  thread_local DocumentReader reader;
  return reader;
}

bool DocumentReader::Read(Endpoint endpoint, std::string_view json, DocumentFacts* facts,
                          OutputSink* sink) {
  simdjson::dom::object o;
  if (parser_->parse(json.data(), json.size()).get(o) != simdjson::SUCCESS) return false;
  switch (endpoint) {
    case Endpoint::kResponses:
      ReadResponsesDocument(o, facts, sink);
      break;
    case Endpoint::kMessages:
      ReadMessagesDocument(o, facts, sink);
      break;
    case Endpoint::kEmbeddings:
      ReadEmbeddingsDocument(o, facts);
      break;
    case Endpoint::kRerank:
      ReadRerankDocument(o, facts);
      break;
    case Endpoint::kChat:
    case Endpoint::kCompletions:
    case Endpoint::kOther:
    case Endpoint::kAny:
      ReadChatDocument(o, facts, sink);
      break;
  }
  document::ReadServerReport(o, &facts->server);
  return true;
}

}  // namespace llmtap::api
