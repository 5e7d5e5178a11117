// The rerank API as vLLM serves it (POST /v1/rerank, /v2/rerank and /rerank, one body shape, the
// Jina and Cohere one: a query and documents; each document's relevance back). AIPerf 0.11 sends
// it with endpoint type "cohere_rankings" (its path /v2/rerank; `--endpoint` for the others; its
// "hf_tei_rankings" and "nim_rankings" send other bodies). One place for this API's shape, used
// by the simulator (which supplies the scores).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "api/problem.h"

namespace llmtap::api {

inline constexpr std::string_view kRerankEndpointType = "cohere_rankings";  // AIPerf's name

// The paths vLLM serves the API on: /v1/rerank, /v2/rerank, /rerank.
bool IsRerankPath(std::string_view path);

struct RerankRequest {
  std::string model;
  std::string query;
  std::vector<std::string> documents;  // a string each, or an object's "text"
  std::optional<uint32_t> top_n;       // absent or 0: every document
  bool return_documents = true;        // vLLM returns each document's text unless told not to
};

// Parses `body`. False, with *problem, for what vLLM refuses: not a JSON object, no string
// `query`, no `documents` list, a document that is neither a string nor an object with a string
// "text", a negative or non-integer `top_n`.
bool ParseRerankRequest(std::string_view body, RerankRequest* out, RequestProblem* problem);

// The response body: {"id":ID,"model":MODEL,"usage":{"total_tokens":N},"results":[{"index":i,
// "document":{"text":...},"relevance_score":s}]}, results by descending score (ties by index),
// at most top_n of them.
void AppendRerankResponse(const RerankRequest& request, std::string_view id, std::string_view model,
                          const std::vector<double>& scores, uint64_t total_tokens,
                          std::string* out);

}  // namespace llmtap::api
