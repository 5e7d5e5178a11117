// The OpenAI Responses API (POST /v1/responses) as vLLM serves it: what a request asks for, its
// conversation rendered to prompt text (api/chat_template.h, as chat messages render), and the
// bytes of an answer: the response object, or its stream of SSE events. One place for this API's
// shape, used by the simulator (which supplies the text, the ids and the token counts).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "api/problem.h"

namespace llmtap::api {

inline constexpr std::string_view kResponsesPath = "/v1/responses";

struct ResponsesRequest {
  std::string model;  // as sent; empty when absent
  // `input` rendered as chat turns (a string: one user turn; a list: each message, function_call
  // and function_call_output item a turn of its own), without `instructions` and without the
  // generation prompt (RenderResponsesPrompt adds both).
  std::string input_text;
  std::optional<std::string> instructions;    // a string; null or absent: none
  std::optional<uint32_t> max_output_tokens;  // a positive integer
  bool stream = false;
  bool store = true;                 // default true, as OpenAI and vLLM
  std::string previous_response_id;  // empty: none
  // tool_choice "required" (the first function of `tools`) or {"type":"function","name":N}: the
  // answer is one function_call item calling this function. Empty otherwise ("auto", "none").
  std::string forced_tool;
  // Echoed in the response object, as JSON text.
  std::string tools_json = "[]";
  std::string tool_choice_json = "\"auto\"";
  std::string metadata_json = "null";
  std::optional<double> temperature, top_p;
};

// Parses `body`. False, with *problem, for what a server refuses (400): not a JSON object, a
// `model` that is not a string, no `input`, an input that is neither a string nor a list, an item
// that is not an object or of a type not served (only messages, function_call,
// function_call_output; reasoning items are skipped), a message without a string role or with
// content neither a string nor a list of parts, a function_call without string call_id, name and
// arguments, a function_call_output without string call_id and output (string or parts),
// `instructions` or `previous_response_id` not a string, `stream` or `store` not a boolean,
// `max_output_tokens` not a positive integer or above `max_output_tokens_limit`, `tools` not a
// list, tool_choice "required" with no function tool or a tool_choice object naming none.
bool ParseResponsesRequest(std::string_view body, uint32_t max_output_tokens_limit,
                           ResponsesRequest* out, RequestProblem* problem);

// The prompt the model sees: `instructions` as a system turn, then `history` (the rendered
// conversation of the previous response, ResponseStore's text; instructions are not carried
// over, as OpenAI documents), then the request's input, then the generation prompt.
void RenderResponsesPrompt(const ResponsesRequest& request, std::string_view history,
                           std::string* out);

// A function call as a turn of the conversation: the assistant turn that chat's tool_calls
// render to, [{"id":CALL_ID,"type":"function","function":{"name":NAME,"arguments":ARGS}}]. Input
// function_call items and an answer's function_call item both render so.
void AppendFunctionCallTurn(std::string_view call_id, std::string_view name,
                            std::string_view arguments, std::string* out);

// What an answer holds, besides the request it answers.
struct ResponseAnswer {
  std::string_view id;       // "resp_..."
  std::string_view item_id;  // the output item's id: "msg_..." or "fc_..."
  std::string_view call_id;  // a function call's "call_..."
  uint64_t created_at = 0;   // Unix seconds
  std::string_view model;
  // Non-empty: the output is one function_call item calling this function; else one message
  // item with one output_text part.
  std::string_view function_name;
  // The output's text: the message's text, or the function call's arguments (JSON text).
  std::string_view content;
  bool incomplete = false;  // max_output_tokens reached: status "incomplete"
  uint64_t input_tokens = 0, output_tokens = 0, cached_tokens = 0;
};

// The answer as a turn of the conversation (what ResponseStore keeps after the input).
void AppendAnswerTurn(const ResponseAnswer& answer, std::string* out);

// The response object: {"id","object":"response","created_at","status":"completed" or
// "incomplete","incomplete_details":null or {"reason":"max_output_tokens"},"model","output":[
// the item],"usage":{"input_tokens","input_tokens_details":{"cached_tokens"},"output_tokens",
// "output_tokens_details":{"reasoning_tokens":0},"total_tokens"}, and the request's settings
// echoed (instructions, max_output_tokens, previous_response_id, store, tools, tool_choice, ...)}.
void AppendResponseObject(const ResponsesRequest& request, const ResponseAnswer& answer,
                          std::string* out);

// The stream: SSE events `event: TYPE\ndata: JSON\n\n`, each with the next `*sequence` (start at
// 0). The start: response.created and response.in_progress (the response in progress, no
// output), response.output_item.added, and for a message response.content_part.added.
// `answer.content` is not read.
void AppendStreamStart(const ResponsesRequest& request, const ResponseAnswer& answer,
                       uint64_t* sequence, std::string* out);
// One piece of the output's content: response.output_text.delta, or for a function call
// response.function_call_arguments.delta.
void AppendStreamDelta(const ResponseAnswer& answer, std::string_view delta, uint64_t* sequence,
                       std::string* out);
// The end, `answer.content` whole: response.output_text.done and response.content_part.done (or
// response.function_call_arguments.done), response.output_item.done, response.completed (vLLM
// sends it for an incomplete response too, its status "incomplete"). `completed_members` (each
// after a comma) go into response.completed's data after "response" (llama-server's timings).
void AppendStreamEnd(const ResponsesRequest& request, const ResponseAnswer& answer,
                     uint64_t* sequence, std::string* out, std::string_view completed_members = {});

}  // namespace llmtap::api
