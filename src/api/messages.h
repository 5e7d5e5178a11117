// Anthropic's Messages API (POST /v1/messages): what a request asks for, rendered as the sim's
// prompt text, and the bytes of an answer: the whole message, the stream's events, the errors.
// One place for this API's shape, used by the simulator (which supplies the generated text, the
// token counts and the timing).
//
// The answer has one content block: a text block, or, when tool_choice forces a tool, one
// tool_use block whose input is {"input":"<generated text>"} (as the sim's forced chat tool
// call's arguments), so agent loops can be exercised.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "api/problem.h"

namespace llmtap::api {

inline constexpr std::string_view kMessagesPath = "/v1/messages";

struct MessagesRequest {
  std::string model;
  // `system` and `messages` in the sim's chat template (api/chat_template.h): a system turn
  // first, then each message; blocks in order: text as it is, tool_use as its JSON, a
  // tool_result's content, other blocks (image, document, ...) a placeholder. `tools` are not
  // rendered (as the sim's chat does not render them). The sim itself renders the request's chat
  // equivalent instead (api/prompt.h, as vLLM serves Messages), so that one conversation renders
  // alike through chat and Messages; this text is what the parse walked, kept for its tests.
  std::string prompt_text;
  uint32_t max_tokens = 0;  // required
  bool stream = false;
  // tool_choice {"type":"any"}: the first of `tools`; {"type":"tool","name":N}: N. Empty for
  // "auto" (the default) and "none": the answer is text.
  std::string forced_tool;
};

// Parses `body`. False, with *problem, for what Anthropic's API refuses (400
// invalid_request_error): not a JSON object; `model` missing or not a string; `max_tokens`
// missing, not an integer >= 1, or above `max_tokens_limit`; `messages` missing, empty, or not a
// list of {role: "user"|"assistant", content: string or list of blocks}; a block without a
// string `type`, a text block without a string `text`, a tool_use block without a string `name`
// or an object `input`, a tool_result without a string `tool_use_id` or whose content is neither
// a string nor a list of blocks; `system` neither a string nor a list of text blocks; `tools` not
// a list of objects with a string `name`; `tool_choice` not {type: auto|any|tool|none}, "any"
// without tools, "tool" without a `name` among the tools; `stream` not a boolean.
// `stop_sequences`, `temperature`, `metadata` and other fields are accepted and ignored.
bool ParseMessagesRequest(std::string_view body, uint32_t max_tokens_limit, MessagesRequest* out,
                          RequestProblem* problem);

enum class StopReason { kEndTurn, kMaxTokens, kToolUse };
std::string_view StopReasonName(StopReason reason);  // "end_turn", "max_tokens", "tool_use"

// What every piece of one answer names.
struct MessageHead {
  std::string_view id;     // "msg_..."
  std::string_view model;  // the model answering
  // A forced tool's name and its tool_use block's id ("toolu_..."); empty name: a text block.
  std::string_view tool_name;
  std::string_view tool_id;
};

// Anthropic counts a prompt's tokens read from its cache apart from the rest: input_tokens +
// cache_read_input_tokens + cache_creation_input_tokens is the whole prompt.
struct MessagesUsage {
  uint64_t input_tokens = 0;
  uint64_t output_tokens = 0;
  uint64_t cache_read_input_tokens = 0;
  uint64_t cache_creation_input_tokens = 0;
};

// The whole answer: {"id","type":"message","role":"assistant","model","content":[{"type":"text",
// "text"} or {"type":"tool_use","id","name","input":{"input":TEXT}}],"stop_reason",
// "stop_sequence":null,"usage":{...}}.
void AppendMessageResponse(const MessageHead& head, std::string_view text, StopReason stop_reason,
                           const MessagesUsage& usage, std::string* out);

// The stream, as server-sent events "event: NAME\ndata: JSON\n\n". Its start: message_start (the
// message with empty content, no stop reason, the prompt's usage and output_tokens 0),
// content_block_start (block 0: an empty text block, or the tool_use block with input {}), ping.
void AppendMessageStreamStart(const MessageHead& head, const MessagesUsage& usage,
                              std::string* out);
// One content_block_delta carrying bytes [begin, end) of `text` (the whole answer's text): a
// text_delta, or for a tool_use block an input_json_delta whose partial_json pieces, joined,
// are the block's input {"input":TEXT} (the first piece opens it, the one ending at
// text.size() closes it).
void AppendMessageStreamDelta(const MessageHead& head, std::string_view text, size_t begin,
                              size_t end, std::string* out);
// The stream's end: content_block_stop, message_delta (stop_reason, the final usage),
// message_stop.
void AppendMessageStreamEnd(StopReason stop_reason, const MessagesUsage& usage, std::string* out);

// An error's "type" for an HTTP status, as Anthropic names them: 400 invalid_request_error, 401
// authentication_error, 403 permission_error, 404 not_found_error, 413 request_too_large, 429
// rate_limit_error, 529 overloaded_error, other 4xx invalid_request_error, 5xx api_error.
std::string_view MessagesErrorType(int status);
// The error body: {"type":"error","error":{"type":MessagesErrorType(status),"message":...}}.
void AppendMessagesError(int status, std::string_view message, std::string* out);

}  // namespace llmtap::api
