#include "api/endpoints.h"

namespace llmtap::api {

std::string_view EndpointName(Endpoint endpoint) {
  switch (endpoint) {
    case Endpoint::kChat:
      return "chat";
    case Endpoint::kCompletions:
      return "completions";
    case Endpoint::kAny:
      return "any";
    case Endpoint::kResponses:
      return "responses";
    case Endpoint::kMessages:
      return "messages";
    case Endpoint::kEmbeddings:
      return "embeddings";
    case Endpoint::kRerank:
      return "rankings";
    case Endpoint::kOther:
      break;
  }
  return "other";
}

std::string_view AiperfEndpointType(Endpoint endpoint) {
  switch (endpoint) {
    case Endpoint::kOther:
    case Endpoint::kAny:
      return "";
    case Endpoint::kRerank:
      return "cohere_rankings";
    default:
      return EndpointName(endpoint);
  }
}

std::optional<Endpoint> EndpointForPath(std::string_view path) {
  if (path == "/v1/chat/completions") return Endpoint::kChat;
  if (path == "/v1/completions") return Endpoint::kCompletions;
  if (path == "/v1/responses") return Endpoint::kResponses;
  if (path == "/v1/messages") return Endpoint::kMessages;
  if (path == "/v1/embeddings") return Endpoint::kEmbeddings;
  if (path == "/v1/rerank" || path == "/v2/rerank" || path == "/rerank") return Endpoint::kRerank;
  return std::nullopt;
}

std::optional<Endpoint> EndpointForType(std::string_view type) {
  for (Endpoint e : {Endpoint::kChat, Endpoint::kCompletions, Endpoint::kResponses,
                     Endpoint::kMessages, Endpoint::kEmbeddings, Endpoint::kRerank}) {
    if (type == EndpointName(e) || type == AiperfEndpointType(e)) return e;
  }
  return std::nullopt;
}

std::string_view EndpointPath(Endpoint endpoint) {
  switch (endpoint) {
    case Endpoint::kChat:
      return "/v1/chat/completions";
    case Endpoint::kCompletions:
      return "/v1/completions";
    case Endpoint::kResponses:
      return "/v1/responses";
    case Endpoint::kMessages:
      return "/v1/messages";
    case Endpoint::kEmbeddings:
      return "/v1/embeddings";
    case Endpoint::kRerank:
      return "/v1/rerank";
    case Endpoint::kOther:
    case Endpoint::kAny:
      break;
  }
  return "";
}

bool IsGeneration(Endpoint endpoint) {
  return endpoint == Endpoint::kChat || endpoint == Endpoint::kCompletions ||
         endpoint == Endpoint::kResponses || endpoint == Endpoint::kMessages;
}

}  // namespace llmtap::api
