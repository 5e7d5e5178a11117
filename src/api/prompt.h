// A generation request of any API as the chat completions request a server renders through the
// same chat template: vLLM and SGLang turn Responses instructions and input items, and Anthropic
// Messages system and content blocks, into chat messages before templating. The tools that
// tokenize prompts (anonymize, specdec, replay's input token count) go through this, so one
// conversation gives the same tokens whichever API carried it. Pure functions, any thread.
#pragma once

#include <string>
#include <string_view>

#include "api/endpoints.h"

namespace llmtap::api {

// For a Responses or Messages request body: *chat_body = {"messages":[...]} in chat's shape, and
// true. The turns, in order:
// - Responses: `instructions` as a system message; `input` a string (one user message) or items:
//   a message (its role, "developer" as "system", its text parts joined), function_call items
//   (consecutive ones as one assistant message's tool_calls), function_call_output (a tool
//   message); reasoning items are left out. A previous_response_id's history lives on the
//   server and is not in the body: such a request renders its new input only.
// - Messages: `system` (a string or text blocks) as a system message; each message's text
//   blocks joined as its content, tool_use blocks as the assistant's tool_calls (the input
//   object's JSON as the arguments), tool_result blocks as tool messages (before the user's
//   text); thinking, image and document blocks are left out.
// False for the other APIs (their bodies are used as they are) and for a body that is not a
// JSON object with the API's fields (*chat_body untouched).
bool ChatBodyFor(Endpoint endpoint, std::string_view body, std::string* chat_body);

bool ResponsesChatBody(std::string_view body, std::string* chat_body);
bool MessagesChatBody(std::string_view body, std::string* chat_body);

// Whether a finish reason says the model ended its turn itself (it generated its end-of-turn
// token): chat "stop" and "tool_calls", Messages "end_turn", "tool_use" and "stop_sequence",
// Responses "completed". Not: "length", "max_tokens", "max_output_tokens", "" ...
bool StoppedByItself(std::string_view finish_reason);

}  // namespace llmtap::api
