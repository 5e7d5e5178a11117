#include "api/rerank.h"

#include <simdjson.h>

#include <algorithm>
#include <charconv>
#include <numeric>

#include "api/document_internal.h"
#include "api/endpoints.h"
#include "common/json_escape.h"

namespace llmtap::api {

using namespace std::string_view_literals;
using simdjson::dom::element;
using simdjson::dom::element_type;

bool IsRerankPath(std::string_view path) { return EndpointForPath(path) == Endpoint::kRerank; }

bool ParseRerankRequest(std::string_view body, RerankRequest* out, RequestProblem* problem) {
  thread_local simdjson::dom::parser parser;
  *out = RerankRequest{};
  simdjson::dom::object root;
  if (parser.parse(body.data(), body.size(), true).get(root) != simdjson::SUCCESS) {
    return Refuse(problem, "The request body is not a valid JSON object.", "");
  }
  std::string_view s;
  if (root["model"].get(s) == simdjson::SUCCESS) out->model = s;
  if (root["query"].get(s) != simdjson::SUCCESS) {
    return Refuse(problem, "'query' must be a string.", "query");
  }
  out->query = s;
  simdjson::dom::array documents;
  if (root["documents"].get(documents) != simdjson::SUCCESS) {
    return Refuse(problem, "'documents' must be a list.", "documents");
  }
  for (element d : documents) {
    if (d.get(s) == simdjson::SUCCESS || d["text"].get(s) == simdjson::SUCCESS) {
      out->documents.emplace_back(s);
      continue;
    }
    return Refuse(problem, "Each document must be a string or an object with a string 'text'.",
                  "documents");
  }
  element top_n;
  if (root["top_n"].get(top_n) == simdjson::SUCCESS && !top_n.is_null()) {
    uint64_t n;
    if (top_n.get(n) != simdjson::SUCCESS || n > UINT32_MAX) {
      return Refuse(problem, "'top_n' must be a non-negative integer.", "top_n");
    }
    out->top_n = static_cast<uint32_t>(n);
  }
  bool flag;
  if (root["return_documents"].get(flag) == simdjson::SUCCESS) out->return_documents = flag;
  return true;
}

void AppendRerankResponse(const RerankRequest& request, std::string_view id, std::string_view model,
                          const std::vector<double>& scores, uint64_t total_tokens,
                          std::string* out) {
  std::vector<size_t> order(scores.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return scores[a] > scores[b]; });
  if (request.top_n && *request.top_n > 0 && *request.top_n < order.size()) {
    order.resize(*request.top_n);
  }
  char buf[32];
  out->append("{\"id\":\""sv);
  AppendJsonEscaped(out, id);
  out->append("\",\"model\":\""sv);
  AppendJsonEscaped(out, model);
  out->append("\",\"usage\":{\"total_tokens\":"sv);
  out->append(buf, std::to_chars(buf, buf + sizeof buf, total_tokens).ptr);
  out->append("},\"results\":["sv);
  for (size_t k = 0; k < order.size(); ++k) {
    const size_t i = order[k];
    if (k > 0) out->push_back(',');
    out->append("{\"index\":"sv);
    out->append(buf, std::to_chars(buf, buf + sizeof buf, i).ptr);
    if (request.return_documents) {
      out->append(",\"document\":{\"text\":\""sv);
      AppendJsonEscaped(out, request.documents[i]);
      out->append("\"}"sv);
    }
    out->append(",\"relevance_score\":"sv);
    out->append(buf, std::to_chars(buf, buf + sizeof buf, scores[i]).ptr);
    out->push_back('}');
  }
  out->append("]}"sv);
}

// ---- Reading an answer (api/response_document.h) ----

// vLLM's rerank usage has total_tokens (the query and documents as the model read them); some
// servers say prompt_tokens too, which then wins.
void ReadRerankDocument(const simdjson::dom::object& o, DocumentFacts* facts) {
  if (document::HasError(o)) facts->error = true;
  simdjson::dom::object usage;
  if (!document::Object(o, "usage", &usage)) return;
  if (auto v = document::Count(usage, "prompt_tokens")) {
    facts->input_tokens = v;
  } else if (auto t = document::Count(usage, "total_tokens")) {
    facts->input_tokens = t;
  }
}

}  // namespace llmtap::api
