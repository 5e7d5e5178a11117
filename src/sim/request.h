// Parsing of OpenAI-style request bodies into what the simulator needs. Any thread may call
// ParseRequest (each thread reuses its own simdjson parser).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace llmtap::sim {

// kResponses: POST /v1/responses, parsed by api/responses.h; kMessages: Anthropic's POST
// /v1/messages, parsed by api/messages.h. Not ParseRequest: each is parsed into a SimRequest
// (n = 1) that generates as a chat request does.
enum class Endpoint { kChatCompletions, kCompletions, kResponses, kMessages };

struct SimRequest {
  Endpoint endpoint = Endpoint::kChatCompletions;
  std::string model;        // as sent; empty when absent
  std::string prompt_text;  // the prompt (chat: messages rendered with a ChatML-like template)
  bool stream = false;
  bool include_usage = false;          // stream_options.include_usage
  std::optional<uint32_t> max_tokens;  // max_completion_tokens, else max_tokens
  // Anthropic's max_tokens (always sent: the API requires it): a cap on the length the timing
  // model draws, as on a model that stops by itself, not the exact length max_tokens is for
  // chat and completions (an answer cut by it ends with stop_reason "max_tokens", else
  // "end_turn").
  std::optional<uint32_t> length_cap;
  uint32_t n = 1;  // choices to generate
  // Chat with tool_choice "required" (the first of `tools`) or {"type":"function","function":
  // {"name":N}}: the answer is one call of this function, its arguments {"input":"<generated
  // text>"} (finish_reason "tool_calls"), so agent loops can be exercised. Empty otherwise:
  // with tool_choice "auto" (the default) or "none" the sim answers in text, as before.
  std::string forced_tool;
  // The OpenAI `seed` (an integer; null means absent): mixed into the request's seed, so equal
  // prompts with different seeds get different answers, as from a sampling server. Without
  // it the answer depends on the server's --seed and the prompt alone.
  std::optional<int64_t> seed;
};

// A request the server must refuse with 400.
struct RequestError {
  std::string message;
  std::string param;  // empty: null
};

// What a request may ask for at most (400 above).
struct RequestLimits {
  uint32_t max_model_len = 131072;  // max_tokens / max_completion_tokens
  uint32_t max_n = 128;             // n
};

// Parses `body` for `endpoint` (chat or completions). On failure returns false and fills *error.
bool ParseRequest(Endpoint endpoint, std::string_view body, const RequestLimits& limits,
                  SimRequest* out, RequestError* error);

// The prompt text of a chat body's `messages` (api/prompt.h's chat equivalent of another API's
// request), as a chat request's renders; false when it has no messages array.
bool RenderChatMessages(std::string_view chat_body, std::string* prompt_text);

}  // namespace llmtap::sim
