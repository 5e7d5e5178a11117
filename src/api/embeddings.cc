#include "api/embeddings.h"

#include <simdjson.h>

#include <charconv>
#include <cstring>

#include "api/document_internal.h"
#include "api/json_write.h"
#include "common/json_escape.h"

namespace llmtap::api {

using namespace std::string_view_literals;
using simdjson::dom::element;
using simdjson::dom::element_type;

namespace {

void AppendBase64(std::string* out, const unsigned char* data, size_t size) {
  static constexpr char kAlphabet[] =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  size_t i = 0;
  for (; i + 3 <= size; i += 3) {
    const uint32_t v = (uint32_t{data[i]} << 16) | (uint32_t{data[i + 1]} << 8) | data[i + 2];
    out->push_back(kAlphabet[(v >> 18) & 63]);
    out->push_back(kAlphabet[(v >> 12) & 63]);
    out->push_back(kAlphabet[(v >> 6) & 63]);
    out->push_back(kAlphabet[v & 63]);
  }
  if (i < size) {
    uint32_t v = uint32_t{data[i]} << 16;
    if (i + 1 < size) v |= uint32_t{data[i + 1]} << 8;
    out->push_back(kAlphabet[(v >> 18) & 63]);
    out->push_back(kAlphabet[(v >> 12) & 63]);
    out->push_back(i + 1 < size ? kAlphabet[(v >> 6) & 63] : '=');
    out->push_back('=');
  }
}

// One input: a string, or an array of token ids (rendered as the ids, counted one each).
bool AddInput(element e, EmbeddingsRequest* out, RequestProblem* problem) {
  if (e.type() == element_type::STRING) {
    out->inputs.emplace_back(e.get_string().value_unsafe());
    out->input_tokens.push_back(0);
    return true;
  }
  if (e.type() == element_type::ARRAY) {
    std::string text;
    uint32_t n = 0;
    const simdjson::dom::array ids = e.get_array().value_unsafe();
    for (element id : ids) {
      uint64_t v;
      if (id.get(v) != simdjson::SUCCESS) {
        return Refuse(problem, "A token-id input must hold non-negative integers only.", "input");
      }
      if (!text.empty()) text.push_back(' ');
      AppendUint(&text, v);
      ++n;
    }
    if (n == 0) return Refuse(problem, "An input must not be empty.", "input");
    out->inputs.push_back(std::move(text));
    out->input_tokens.push_back(n);
    return true;
  }
  return Refuse(problem, "'input' must be a string, an array of strings, or token ids.", "input");
}

}  // namespace

bool ParseEmbeddingsRequest(std::string_view body, EmbeddingsRequest* out,
                            RequestProblem* problem) {
  thread_local simdjson::dom::parser parser;
  *out = EmbeddingsRequest{};
  simdjson::dom::object root;
  if (parser.parse(body.data(), body.size(), true).get(root) != simdjson::SUCCESS) {
    return Refuse(problem, "The request body is not a valid JSON object.", "");
  }
  std::string_view model;
  if (root["model"].get(model) == simdjson::SUCCESS) out->model = model;
  element input;
  if (root["input"].get(input) != simdjson::SUCCESS || input.is_null()) {
    return Refuse(problem, "'input' is required.", "input");
  }
  if (input.type() == element_type::ARRAY) {
    simdjson::dom::array items = input.get_array().value_unsafe();
    if (items.size() == 0) return Refuse(problem, "'input' must not be empty.", "input");
    // A list of integers is one tokenized input; otherwise each member is an input.
    element first = items.at(0).value_unsafe();
    if (first.type() == element_type::INT64 || first.type() == element_type::UINT64) {
      if (!AddInput(input, out, problem)) return false;
    } else {
      for (element item : items) {
        if (!AddInput(item, out, problem)) return false;
      }
    }
  } else if (!AddInput(input, out, problem)) {
    return false;
  }
  element dims;
  if (root["dimensions"].get(dims) == simdjson::SUCCESS && !dims.is_null()) {
    uint64_t d;
    if (dims.get(d) != simdjson::SUCCESS || d == 0 || d > 65536) {
      return Refuse(problem, "'dimensions' must be an integer from 1 to 65536.", "dimensions");
    }
    out->dimensions = static_cast<uint32_t>(d);
  }
  element format;
  if (root["encoding_format"].get(format) == simdjson::SUCCESS && !format.is_null()) {
    std::string_view f;
    if (format.get(f) != simdjson::SUCCESS || (f != "float" && f != "base64")) {
      return Refuse(problem, "'encoding_format' must be \"float\" or \"base64\".",
                    "encoding_format");
    }
    out->base64 = f == "base64";
  }
  return true;
}

void AppendEmbeddingsResponse(const EmbeddingsRequest& request, std::string_view model,
                              const std::vector<std::vector<float>>& vectors,
                              uint64_t prompt_tokens, std::string* out) {
  out->append("{\"object\":\"list\",\"data\":["sv);
  for (size_t i = 0; i < vectors.size(); ++i) {
    if (i > 0) out->push_back(',');
    out->append("{\"object\":\"embedding\",\"index\":"sv);
    AppendUint(out, i);
    out->append(",\"embedding\":"sv);
    const std::vector<float>& v = vectors[i];
    if (request.base64) {
      std::string bytes(v.size() * 4, '\0');
      for (size_t k = 0; k < v.size(); ++k) {
        uint32_t bits;
        std::memcpy(&bits, &v[k], 4);
        for (int b = 0; b < 4; ++b) bytes[k * 4 + b] = static_cast<char>(bits >> (8 * b));
      }
      out->push_back('"');
      AppendBase64(out, reinterpret_cast<const unsigned char*>(bytes.data()), bytes.size());
      out->push_back('"');
    } else {
      out->push_back('[');
      char buf[32];
      for (size_t k = 0; k < v.size(); ++k) {
        if (k > 0) out->push_back(',');
        out->append(buf, std::to_chars(buf, buf + sizeof buf, v[k]).ptr);
      }
      out->push_back(']');
    }
    out->push_back('}');
  }
  out->append("],\"model\":\""sv);
  AppendJsonEscaped(out, model);
  out->append("\",\"usage\":{\"prompt_tokens\":"sv);
  AppendUint(out, prompt_tokens);
  out->append(",\"total_tokens\":"sv);
  AppendUint(out, prompt_tokens);
  out->append("}}"sv);
}

// ---- Reading an answer (api/response_document.h) ----

void ReadEmbeddingsDocument(const simdjson::dom::object& o, DocumentFacts* facts) {
  if (document::HasError(o)) facts->error = true;
  simdjson::dom::object usage;
  if (!document::Object(o, "usage", &usage)) return;
  if (auto v = document::Count(usage, "prompt_tokens")) facts->input_tokens = v;
}

}  // namespace llmtap::api
