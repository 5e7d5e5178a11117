// The OpenAI embeddings API (POST /v1/embeddings; AIPerf's endpoint type "embeddings"): what a
// request asks for and the bytes of an answer. One place for this API's shape, used by the
// simulator (which supplies the vectors); the proxy and the trace tools will ask it too.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "api/problem.h"

namespace llmtap::api {

inline constexpr std::string_view kEmbeddingsPath = "/v1/embeddings";
inline constexpr std::string_view kEmbeddingsEndpointType = "embeddings";  // AIPerf's name

struct EmbeddingsRequest {
  std::string model;  // as sent; empty when absent
  // Each input: a string's text, or a token-id array rendered as its ids joined by spaces (it
  // then counts one token per id).
  std::vector<std::string> inputs;
  std::vector<uint32_t> input_tokens;  // token ids per input when given as ids, else 0
  std::optional<uint32_t> dimensions;  // "dimensions"
  bool base64 = false;                 // "encoding_format": "base64" (default "float")
};

// Parses `body` (any buffer; copied for the parser). False, with *problem, for a body an
// OpenAI-compatible server refuses: not a JSON object, no `input`, an empty input list or
// string list member that is not a string, `dimensions` not a positive integer,
// `encoding_format` other than "float" or "base64".
bool ParseEmbeddingsRequest(std::string_view body, EmbeddingsRequest* out, RequestProblem* problem);

// The response body, as vLLM and OpenAI write it: {"object":"list","data":[{"object":
// "embedding","index":i,"embedding":[...] or "<base64 of little-endian float32>"}],"model":
// MODEL,"usage":{"prompt_tokens":N,"total_tokens":N}}. `vectors[i]` is input i's vector.
void AppendEmbeddingsResponse(const EmbeddingsRequest& request, std::string_view model,
                              const std::vector<std::vector<float>>& vectors,
                              uint64_t prompt_tokens, std::string* out);

}  // namespace llmtap::api
