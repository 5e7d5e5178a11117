// Parsing of OpenAI-style request bodies into what the simulator needs. Any thread may call
// ParseRequest (each thread reuses its own simdjson parser).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace llmtap::sim {

// kResponses: POST /v1/responses, parsed by api/responses.h (not ParseRequest) into a SimRequest
// that generates as a chat request does.
enum class Endpoint { kChatCompletions, kCompletions, kResponses };

struct SimRequest {
  Endpoint endpoint = Endpoint::kChatCompletions;
  std::string model;        // as sent; empty when absent
  std::string prompt_text;  // the prompt (chat: messages rendered with a ChatML-like template)
  bool stream = false;
  bool include_usage = false;          // stream_options.include_usage
  std::optional<uint32_t> max_tokens;  // max_completion_tokens, else max_tokens
  uint32_t n = 1;                      // choices to generate
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

// Parses `body` for `endpoint`. On failure returns false and fills *error.
bool ParseRequest(Endpoint endpoint, std::string_view body, const RequestLimits& limits,
                  SimRequest* out, RequestError* error);

}  // namespace llmtap::sim
