// Which API a request is for: the endpoint types llmtap tells apart, the path each is served on,
// and the name AIPerf gives each (`--endpoint-type`, and the per-row `endpoint_type` key a
// mooncake_trace row may carry). Pure functions, any thread.
//
// A capture knows each request's path, so it records the API of every row whose body alone
// does not tell it (capture.cc): a mooncake_payload row for an API other than chat or
// completions carries "endpoint_type" after its payload, with AIPerf's name. AIPerf 0.11 loads
// such a row (its row model allows extra keys) and sends it to the run's --endpoint-type;
// AIPerf's per-row routing proposal reads the same key to send it to its own endpoint.
#pragma once

#include <optional>
#include <string_view>

namespace llmtap::api {

enum class Endpoint {
  kChat,         // POST /v1/chat/completions
  kCompletions,  // POST /v1/completions
  kOther,        // any other request shape or path
  kAny,          // a hashed or text row (input_length / text_input): AIPerf synthesizes it for
                 // whatever endpoint type the run uses
  kResponses,    // POST /v1/responses (OpenAI Responses API)
  kMessages,     // POST /v1/messages (Anthropic Messages API)
  kEmbeddings,   // POST /v1/embeddings
  kRerank,       // POST /v1/rerank, /v2/rerank, /rerank (vLLM's Jina/Cohere rerank)
};

// llmtap's short name: chat, completions, other, any, responses, messages, embeddings,
// rankings (split's file names, stats, messages).
std::string_view EndpointName(Endpoint endpoint);

// AIPerf's --endpoint-type (and per-row endpoint_type) for it: chat, completions, responses,
// messages, embeddings, cohere_rankings (AIPerf's rerank body: query + documents);
// "" for kOther and kAny.
std::string_view AiperfEndpointType(Endpoint endpoint);

// The API served on `path` (without its query string); nullopt for another path.
std::optional<Endpoint> EndpointForPath(std::string_view path);

// The API a row's "endpoint_type" names: AIPerf's names above, and llmtap's short names;
// nullopt for another string.
std::optional<Endpoint> EndpointForType(std::string_view endpoint_type);

// The path llmtap replays a request of this API to (its first path above); "" for kOther and
// kAny.
std::string_view EndpointPath(Endpoint endpoint);

// A generation API: its requests produce tokens (chat, completions, responses, messages).
bool IsGeneration(Endpoint endpoint);

}  // namespace llmtap::api
