#include "api/prompt.h"

namespace llmtap::api {

bool ChatBodyFor(Endpoint endpoint, std::string_view body, std::string* chat_body) {
  switch (endpoint) {
    case Endpoint::kResponses:
      return ResponsesChatBody(body, chat_body);
    case Endpoint::kMessages:
      return MessagesChatBody(body, chat_body);
    default:
      return false;
  }
}

bool StoppedByItself(std::string_view finish_reason) {
  return finish_reason == "stop" || finish_reason == "tool_calls" || finish_reason == "end_turn" ||
         finish_reason == "tool_use" || finish_reason == "stop_sequence" ||
         finish_reason == "completed";
}

}  // namespace llmtap::api
