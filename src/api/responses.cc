#include "api/responses.h"

#include <simdjson.h>

#include <charconv>

#include "api/chat_messages.h"
#include "api/chat_template.h"
#include "api/document_internal.h"
#include "api/json_write.h"
#include "api/prompt.h"
#include "common/json_escape.h"

namespace llmtap::api {

using namespace std::string_view_literals;
using simdjson::dom::element;
using simdjson::dom::element_type;

namespace {

bool IsNull(element e) { return e.type() == element_type::NULL_VALUE; }

// A message's content, or a function_call_output's output: a string, or a list of content parts
// (input_text / output_text / text: their text; refusal: its refusal; anything else, an image or
// a file: a placeholder).
bool AppendContent(element content, std::string* out, RequestProblem* problem) {
  if (content.type() == element_type::STRING) {
    out->append(std::string_view(content.get_string().value_unsafe()));
    return true;
  }
  if (content.type() != element_type::ARRAY) {
    return Refuse(problem, "Each input item's content must be a string or a list of content parts.",
                  "input");
  }
  const simdjson::dom::array parts = content.get_array().value_unsafe();
  for (element part : parts) {
    std::string_view type;
    if (part.type() != element_type::OBJECT || part["type"].get(type) != simdjson::SUCCESS) {
      return Refuse(problem, "Each content part must be an object with a string 'type'.", "input");
    }
    std::string_view text;
    if ((type == "input_text"sv || type == "output_text"sv || type == "text"sv) &&
        part["text"].get(text) == simdjson::SUCCESS) {
      out->append(text);
    } else if (type == "refusal"sv && part["refusal"].get(text) == simdjson::SUCCESS) {
      out->append(text);
    } else {
      AppendPartPlaceholder(type, out);
    }
  }
  return true;
}

bool RenderItem(element item, std::string* out, RequestProblem* problem) {
  if (item.type() != element_type::OBJECT) {
    return Refuse(problem, "Each input item must be an object.", "input");
  }
  std::string_view type = "message";  // an item with a role and no type is a message
  element type_field;
  if (item["type"].get(type_field) == simdjson::SUCCESS &&
      type_field.get(type) != simdjson::SUCCESS) {
    return Refuse(problem, "An input item's 'type' must be a string.", "input");
  }
  if (type == "message"sv) {
    std::string_view role;
    if (item["role"].get(role) != simdjson::SUCCESS) {
      return Refuse(problem, "Each message needs a string 'role'.", "input");
    }
    AppendTurnStart(role, out);
    element content;
    if (item["content"].get(content) != simdjson::SUCCESS) {
      return Refuse(problem, "Each message needs 'content'.", "input");
    }
    if (!AppendContent(content, out, problem)) return false;
    AppendTurnEnd(out);
    return true;
  }
  if (type == "function_call"sv) {
    std::string_view call_id, name, arguments;
    if (item["call_id"].get(call_id) != simdjson::SUCCESS ||
        item["name"].get(name) != simdjson::SUCCESS ||
        item["arguments"].get(arguments) != simdjson::SUCCESS) {
      return Refuse(problem, "A function_call item needs string 'call_id', 'name' and 'arguments'.",
                    "input");
    }
    AppendFunctionCallTurn(call_id, name, arguments, out);
    return true;
  }
  if (type == "function_call_output"sv) {
    std::string_view call_id;
    element output;
    if (item["call_id"].get(call_id) != simdjson::SUCCESS ||
        item["output"].get(output) != simdjson::SUCCESS) {
      return Refuse(problem, "A function_call_output item needs a string 'call_id' and 'output'.",
                    "input");
    }
    // As chat's {"role":"tool","content":OUTPUT} renders.
    AppendTurnStart("tool", out);
    if (!AppendContent(output, out, problem)) return false;
    AppendTurnEnd(out);
    return true;
  }
  if (type == "reasoning"sv) return true;  // the model's own reasoning: not part of the prompt
  return Refuse(problem,
                "Input items of type '" + std::string(type.substr(0, 64)) +
                    "' are not supported; send messages, function_call and function_call_output "
                    "items.",
                "input");
}

// tool_choice: "required" -> the first function tool's name; {"type":"function","name":N} -> N;
// "auto", "none", anything else -> none.
bool ReadForcedTool(element choice, const simdjson::dom::array* tools, std::string* out,
                    RequestProblem* problem) {
  std::string_view name;
  if (choice.type() == element_type::STRING) {
    if (std::string_view(choice.get_string().value_unsafe()) != "required"sv) return true;
    if (tools != nullptr) {
      for (element tool : *tools) {
        std::string_view type;
        if (tool["type"].get(type) == simdjson::SUCCESS && type == "function"sv &&
            tool["name"].get(name) == simdjson::SUCCESS) {
          break;
        }
      }
    }
    if (name.empty()) {
      return Refuse(problem, "'tool_choice' is 'required' but 'tools' names no function.",
                    "tool_choice");
    }
  } else if (choice.type() == element_type::OBJECT) {
    std::string_view type;
    if (choice["type"].get(type) != simdjson::SUCCESS || type != "function"sv) return true;
    if (choice["name"].get(name) != simdjson::SUCCESS) {
      return Refuse(problem,
                    "'tool_choice' must name a function: {\"type\":\"function\",\"name\":...}.",
                    "tool_choice");
    }
  } else {
    return true;
  }
  out->assign(name);
  return true;
}

bool ReadBool(element v, const char* key, bool* out, RequestProblem* problem) {
  if (IsNull(v)) return true;
  if (v.get(*out) != simdjson::SUCCESS) {
    return Refuse(problem, std::string("'") + key + "' must be a boolean.", key);
  }
  return true;
}

bool ReadNumber(element v, const char* key, std::optional<double>* out, RequestProblem* problem) {
  if (IsNull(v)) return true;
  double d;
  if (v.get(d) != simdjson::SUCCESS) {
    return Refuse(problem, std::string("'") + key + "' must be a number.", key);
  }
  *out = d;
  return true;
}

void AppendOptionalString(std::string* out, const std::optional<std::string>& s) {
  if (s) {
    AppendJsonString(out, *s);
  } else {
    out->append("null"sv);
  }
}

// The output item; `status` "in_progress" leaves its content empty.
void AppendItem(const ResponseAnswer& a, std::string_view status, std::string* out) {
  const bool done = status != "in_progress"sv;
  out->append("{\"id\":"sv);
  AppendJsonString(out, a.item_id);
  if (!a.function_name.empty()) {
    out->append(",\"type\":\"function_call\",\"status\":\""sv);
    out->append(status);
    out->append("\",\"call_id\":"sv);
    AppendJsonString(out, a.call_id);
    out->append(",\"name\":"sv);
    AppendJsonString(out, a.function_name);
    out->append(",\"arguments\":"sv);
    AppendJsonString(out, done ? a.content : ""sv);
    out->push_back('}');
    return;
  }
  out->append(",\"type\":\"message\",\"status\":\""sv);
  out->append(status);
  out->append("\",\"role\":\"assistant\",\"content\":["sv);
  if (done) {
    out->append("{\"type\":\"output_text\",\"text\":"sv);
    AppendJsonString(out, a.content);
    out->append(",\"annotations\":[],\"logprobs\":[]}"sv);
  }
  out->append("]}"sv);
}

std::string_view ItemStatus(const ResponseAnswer& a) {
  return a.incomplete ? "incomplete"sv : "completed"sv;
}

// The response object; `done` false: in progress, no output, no usage.
void AppendResponse(const ResponsesRequest& r, const ResponseAnswer& a, bool done,
                    std::string* out) {
  out->append("{\"id\":"sv);
  AppendJsonString(out, a.id);
  out->append(",\"object\":\"response\",\"created_at\":"sv);
  AppendUint(out, a.created_at);
  out->append(",\"status\":\""sv);
  out->append(!done ? "in_progress"sv : ItemStatus(a));
  out->append("\",\"background\":false,\"error\":null,\"incomplete_details\":"sv);
  out->append(done && a.incomplete ? "{\"reason\":\"max_output_tokens\"}"sv : "null"sv);
  out->append(",\"instructions\":"sv);
  AppendOptionalString(out, r.instructions);
  out->append(",\"max_output_tokens\":"sv);
  if (r.max_output_tokens) {
    AppendUint(out, *r.max_output_tokens);
  } else {
    out->append("null"sv);
  }
  out->append(",\"max_tool_calls\":null,\"metadata\":"sv);
  out->append(r.metadata_json);
  out->append(",\"model\":"sv);
  AppendJsonString(out, a.model);
  out->append(",\"output\":["sv);
  if (done) AppendItem(a, ItemStatus(a), out);
  out->append("],\"parallel_tool_calls\":true,\"previous_response_id\":"sv);
  if (r.previous_response_id.empty()) {
    out->append("null"sv);
  } else {
    AppendJsonString(out, r.previous_response_id);
  }
  out->append(",\"reasoning\":null,\"service_tier\":\"auto\",\"store\":"sv);
  out->append(r.store ? "true"sv : "false"sv);
  out->append(",\"temperature\":"sv);
  AppendDouble(out, r.temperature.value_or(1.0));
  out->append(",\"text\":{\"format\":{\"type\":\"text\"}},\"tool_choice\":"sv);
  out->append(r.tool_choice_json);
  out->append(",\"tools\":"sv);
  out->append(r.tools_json);
  out->append(",\"top_logprobs\":0,\"top_p\":"sv);
  AppendDouble(out, r.top_p.value_or(1.0));
  out->append(",\"truncation\":\"disabled\",\"usage\":"sv);
  if (done) {
    out->append("{\"input_tokens\":"sv);
    AppendUint(out, a.input_tokens);
    out->append(",\"input_tokens_details\":{\"cached_tokens\":"sv);
    AppendUint(out, a.cached_tokens);
    out->append("},\"output_tokens\":"sv);
    AppendUint(out, a.output_tokens);
    out->append(",\"output_tokens_details\":{\"reasoning_tokens\":0},\"total_tokens\":"sv);
    AppendUint(out, a.input_tokens + a.output_tokens);
    out->push_back('}');
  } else {
    out->append("null"sv);
  }
  out->append(",\"user\":null}"sv);
}

// `event: TYPE\ndata: {"type":TYPE,"sequence_number":N` (the caller closes the object with
// EndEvent).
void BeginEvent(std::string_view type, uint64_t* sequence, std::string* out) {
  out->append("event: "sv);
  out->append(type);
  out->append("\ndata: {\"type\":\""sv);
  out->append(type);
  out->append("\",\"sequence_number\":"sv);
  AppendUint(out, (*sequence)++);
}

void EndEvent(std::string* out) { out->append("}\n\n"sv); }

// `,"output_index":0,"item_id":ID` (every output event names the one item).
void AppendItemRef(const ResponseAnswer& a, std::string* out) {
  out->append(",\"output_index\":0,\"item_id\":"sv);
  AppendJsonString(out, a.item_id);
}

void AppendTextPart(std::string_view text, std::string* out) {
  out->append(",\"content_index\":0,\"part\":{\"type\":\"output_text\",\"text\":"sv);
  AppendJsonString(out, text);
  out->append(",\"annotations\":[],\"logprobs\":[]}"sv);
}

}  // namespace

bool ParseResponsesRequest(std::string_view body, uint32_t max_output_tokens_limit,
                           ResponsesRequest* out, RequestProblem* problem) {
  thread_local simdjson::dom::parser parser;
  *out = ResponsesRequest{};
  simdjson::dom::object root;
  if (parser.parse(body.data(), body.size(), true).get(root) != simdjson::SUCCESS) {
    return Refuse(problem, "The request body is not a valid JSON object.", "");
  }
  element v;
  if (root["model"].get(v) == simdjson::SUCCESS && !IsNull(v)) {
    std::string_view model;
    if (v.get(model) != simdjson::SUCCESS)
      return Refuse(problem, "'model' must be a string.", "model");
    out->model = model;
  }
  element input;
  if (root["input"].get(input) != simdjson::SUCCESS || IsNull(input)) {
    return Refuse(problem, "Missing required parameter: 'input'.", "input");
  }
  if (input.type() == element_type::STRING) {
    AppendTurnStart("user", &out->input_text);
    out->input_text.append(std::string_view(input.get_string().value_unsafe()));
    AppendTurnEnd(&out->input_text);
  } else if (input.type() == element_type::ARRAY) {
    const simdjson::dom::array items = input.get_array().value_unsafe();
    for (element item : items) {
      if (!RenderItem(item, &out->input_text, problem)) return false;
    }
  } else {
    return Refuse(problem, "'input' must be a string or a list of input items.", "input");
  }
  if (root["instructions"].get(v) == simdjson::SUCCESS && !IsNull(v)) {
    std::string_view s;
    if (v.get(s) != simdjson::SUCCESS) {
      return Refuse(problem, "'instructions' must be a string.", "instructions");
    }
    out->instructions.emplace(s);
  }
  if (root["max_output_tokens"].get(v) == simdjson::SUCCESS && !IsNull(v)) {
    int64_t n = 0;
    if (v.get(n) != simdjson::SUCCESS || n < 1) {
      return Refuse(problem, "'max_output_tokens' must be a positive integer.",
                    "max_output_tokens");
    }
    if (static_cast<uint64_t>(n) > max_output_tokens_limit) {
      return Refuse(problem,
                    "'max_output_tokens' is " + std::to_string(n) +
                        ", more than this server's maximum of " +
                        std::to_string(max_output_tokens_limit) + ".",
                    "max_output_tokens");
    }
    out->max_output_tokens = static_cast<uint32_t>(n);
  }
  if (root["stream"].get(v) == simdjson::SUCCESS && !ReadBool(v, "stream", &out->stream, problem)) {
    return false;
  }
  if (root["store"].get(v) == simdjson::SUCCESS && !ReadBool(v, "store", &out->store, problem)) {
    return false;
  }
  if (root["previous_response_id"].get(v) == simdjson::SUCCESS && !IsNull(v)) {
    std::string_view id;
    if (v.get(id) != simdjson::SUCCESS) {
      return Refuse(problem, "'previous_response_id' must be a string.", "previous_response_id");
    }
    out->previous_response_id = id;
  }
  if (root["temperature"].get(v) == simdjson::SUCCESS &&
      !ReadNumber(v, "temperature", &out->temperature, problem)) {
    return false;
  }
  if (root["top_p"].get(v) == simdjson::SUCCESS && !ReadNumber(v, "top_p", &out->top_p, problem)) {
    return false;
  }
  if (root["metadata"].get(v) == simdjson::SUCCESS && v.type() == element_type::OBJECT) {
    out->metadata_json = simdjson::minify(v);
  }
  simdjson::dom::array tools;
  bool has_tools = false;
  if (root["tools"].get(v) == simdjson::SUCCESS && !IsNull(v)) {
    if (v.get(tools) != simdjson::SUCCESS) {
      return Refuse(problem, "'tools' must be a list.", "tools");
    }
    has_tools = true;
    out->tools_json = simdjson::minify(v);
  }
  if (root["tool_choice"].get(v) == simdjson::SUCCESS && !IsNull(v)) {
    out->tool_choice_json = simdjson::minify(v);
    if (!ReadForcedTool(v, has_tools ? &tools : nullptr, &out->forced_tool, problem)) return false;
  }
  return true;
}

void RenderResponsesPrompt(const ResponsesRequest& request, std::string_view history,
                           std::string* out) {
  if (request.instructions) {
    AppendTurnStart("system", out);
    out->append(*request.instructions);
    AppendTurnEnd(out);
  }
  out->append(history);
  out->append(request.input_text);
  AppendGenerationPrompt(out);
}

void AppendFunctionCallTurn(std::string_view call_id, std::string_view name,
                            std::string_view arguments, std::string* out) {
  AppendTurnStart("assistant", out);
  out->append("[{\"id\":"sv);
  AppendJsonString(out, call_id);
  out->append(",\"type\":\"function\",\"function\":{\"name\":"sv);
  AppendJsonString(out, name);
  out->append(",\"arguments\":"sv);
  AppendJsonString(out, arguments);
  out->append("}}]"sv);
  AppendTurnEnd(out);
}

void AppendAnswerTurn(const ResponseAnswer& answer, std::string* out) {
  if (!answer.function_name.empty()) {
    AppendFunctionCallTurn(answer.call_id, answer.function_name, answer.content, out);
    return;
  }
  AppendTurnStart("assistant", out);
  out->append(answer.content);
  AppendTurnEnd(out);
}

void AppendResponseObject(const ResponsesRequest& request, const ResponseAnswer& answer,
                          std::string* out) {
  AppendResponse(request, answer, /*done=*/true, out);
}

void AppendStreamStart(const ResponsesRequest& request, const ResponseAnswer& answer,
                       uint64_t* sequence, std::string* out) {
  for (std::string_view type : {"response.created"sv, "response.in_progress"sv}) {
    BeginEvent(type, sequence, out);
    out->append(",\"response\":"sv);
    AppendResponse(request, answer, /*done=*/false, out);
    EndEvent(out);
  }
  BeginEvent("response.output_item.added"sv, sequence, out);
  out->append(",\"output_index\":0,\"item\":"sv);
  AppendItem(answer, "in_progress"sv, out);
  EndEvent(out);
  if (answer.function_name.empty()) {
    BeginEvent("response.content_part.added"sv, sequence, out);
    AppendItemRef(answer, out);
    AppendTextPart(""sv, out);
    EndEvent(out);
  }
}

void AppendStreamDelta(const ResponseAnswer& answer, std::string_view delta, uint64_t* sequence,
                       std::string* out) {
  if (!answer.function_name.empty()) {
    BeginEvent("response.function_call_arguments.delta"sv, sequence, out);
    AppendItemRef(answer, out);
  } else {
    BeginEvent("response.output_text.delta"sv, sequence, out);
    AppendItemRef(answer, out);
    out->append(",\"content_index\":0,\"logprobs\":[]"sv);
  }
  out->append(",\"delta\":"sv);
  AppendJsonString(out, delta);
  EndEvent(out);
}

void AppendStreamEnd(const ResponsesRequest& request, const ResponseAnswer& answer,
                     uint64_t* sequence, std::string* out, std::string_view completed_members) {
  if (!answer.function_name.empty()) {
    BeginEvent("response.function_call_arguments.done"sv, sequence, out);
    AppendItemRef(answer, out);
    out->append(",\"name\":"sv);
    AppendJsonString(out, answer.function_name);
    out->append(",\"arguments\":"sv);
    AppendJsonString(out, answer.content);
    EndEvent(out);
  } else {
    BeginEvent("response.output_text.done"sv, sequence, out);
    AppendItemRef(answer, out);
    out->append(",\"content_index\":0,\"logprobs\":[],\"text\":"sv);
    AppendJsonString(out, answer.content);
    EndEvent(out);
    BeginEvent("response.content_part.done"sv, sequence, out);
    AppendItemRef(answer, out);
    AppendTextPart(answer.content, out);
    EndEvent(out);
  }
  BeginEvent("response.output_item.done"sv, sequence, out);
  out->append(",\"output_index\":0,\"item\":"sv);
  AppendItem(answer, ItemStatus(answer), out);
  EndEvent(out);
  BeginEvent("response.completed"sv, sequence, out);
  out->append(",\"response\":"sv);
  AppendResponse(request, answer, /*done=*/true, out);
  out->append(completed_members);
  EndEvent(out);
}

// ---- Reading an answer (api/response_document.h) ----

namespace {

// A response object (a whole body, or the "response" of a response.* event): its id, status,
// usage, and (a whole body) its output items.
void ReadResponseObject(const simdjson::dom::object& r, bool with_output, DocumentFacts* facts,
                        OutputSink* sink) {
  if (const std::string_view id = document::String(r, "id"); !id.empty()) {
    facts->response_id.assign(id);
  }
  if (document::HasError(r)) facts->error = true;
  simdjson::dom::object details, usage;
  std::string_view reason;
  if (document::Object(r, "incomplete_details", &details)) {
    reason = document::String(details, "reason");
  }
  const std::string_view status = document::String(r, "status");
  if (status == "failed") facts->error = true;
  // An answer in progress has no finish reason yet.
  if (status != "in_progress" && status != "queued") {
    document::SetFinish(reason.empty() ? status : reason, facts);
  }
  if (document::Object(r, "usage", &usage)) {
    if (auto v = document::Count(usage, "input_tokens")) facts->input_tokens = v;
    if (auto v = document::Count(usage, "output_tokens")) facts->output_tokens = v;
    document::ReadCachedTokens(usage, "input_tokens_details", &facts->server);
  }
  simdjson::dom::array output;
  if (!with_output || !document::Array(r, "output", &output)) return;
  int64_t index = 0;
  for (simdjson::dom::element e : output) {
    simdjson::dom::object item;
    const int64_t output_index = index++;
    if (e.get(item) != simdjson::SUCCESS) continue;
    const std::string_view type = document::String(item, "type");
    if (type == "function_call") {
      facts->output = true;
      if (sink) {
        sink->ToolCall(output_index, document::String(item, "name"),
                       document::String(item, "arguments"));
      }
      continue;
    }
    const bool reasoning = type == "reasoning";
    if (!reasoning && type != "message") continue;
    simdjson::dom::array parts;
    if (!document::Array(item, "content", &parts)) continue;
    for (simdjson::dom::element p : parts) {
      simdjson::dom::object part;
      if (p.get(part) != simdjson::SUCCESS) continue;
      const std::string_view part_type = document::String(part, "type");
      const std::string_view text = document::String(part, "text");
      if (text.empty()) continue;
      if (part_type == "output_text" && !reasoning) {
        if (sink) sink->Text(text);
      } else if (part_type == "reasoning_text" && reasoning) {
        if (sink) sink->Reasoning(text);
      } else {
        continue;
      }
      facts->output = true;
    }
  }
}

}  // namespace

void ReadResponsesDocument(const simdjson::dom::object& o, DocumentFacts* facts, OutputSink* sink) {
  const std::string_view type = document::String(o, "type");
  if (type.empty()) {  // a whole response body, or an error body
    ReadResponseObject(o, /*with_output=*/true, facts, sink);
    return;
  }
  // One event of a stream.
  if (type == "response.output_text.delta" || type == "response.reasoning_text.delta") {
    const std::string_view delta = document::String(o, "delta");
    if (delta.empty()) return;
    facts->output = true;
    if (sink) {
      if (type == "response.output_text.delta") {
        sink->Text(delta);
      } else {
        sink->Reasoning(delta);
      }
    }
  } else if (type == "response.function_call_arguments.delta") {
    const std::string_view delta = document::String(o, "delta");
    if (delta.empty()) return;
    facts->output = true;
    if (sink) sink->ToolCall(document::Index(o, "output_index", 0), {}, delta);
  } else if (type == "response.output_item.added") {
    // A function call's name comes with its item, before its arguments.
    simdjson::dom::object item;
    if (sink && document::Object(o, "item", &item) &&
        document::String(item, "type") == "function_call") {
      sink->ToolCall(document::Index(o, "output_index", 0), document::String(item, "name"), {});
    }
  } else if (type.starts_with("response.") && type.find('.', 9) == std::string_view::npos) {
    // response.created, in_progress, completed, incomplete, failed: the response object
    // (without its output: the deltas carried it).
    simdjson::dom::object r;
    if (document::Object(o, "response", &r)) ReadResponseObject(r, false, facts, sink);
    if (type == "response.completed" || type == "response.incomplete" ||
        type == "response.failed") {
      facts->done = true;
    }
    if (type == "response.failed") facts->error = true;
  } else if (type == "error") {
    facts->error = true;
  }
}

// ---- The request as chat messages (api/prompt.h) ----

bool ResponsesChatBody(std::string_view body, std::string* chat_body) {
  simdjson::dom::parser parser;
  simdjson::dom::object o;
  if (parser.parse(body.data(), body.size()).get(o) != simdjson::SUCCESS) return false;
  simdjson::dom::element input;
  if (o.at_key("input").get(input) != simdjson::SUCCESS) return false;
  std::string out;
  ChatMessagesWriter w(&out);
  if (const std::string_view instructions = document::String(o, "instructions");
      !instructions.empty()) {
    w.Message("system", instructions);
  }
  std::string_view text;
  simdjson::dom::array items;
  if (input.get(text) == simdjson::SUCCESS) {
    w.Message("user", text);
  } else if (input.get(items) == simdjson::SUCCESS) {
    bool in_calls = false;  // an assistant message of tool calls is open
    for (simdjson::dom::element e : items) {
      simdjson::dom::object item;
      if (e.get(item) != simdjson::SUCCESS) continue;
      std::string_view type = document::String(item, "type");
      if (type == "function_call") {
        if (!in_calls) w.BeginToolCalls({});
        in_calls = true;
        w.ToolCall(document::String(item, "call_id"), document::String(item, "name"),
                   document::String(item, "arguments"));
        continue;
      }
      if (in_calls) w.EndToolCalls();
      in_calls = false;
      simdjson::dom::element content;
      if (type == "function_call_output") {
        std::string output;
        if (item.at_key("output").get(content) == simdjson::SUCCESS)
          output = document::PartsText(content);
        w.ToolResult(document::String(item, "call_id"), output);
      } else if ((type.empty() || type == "message") &&
                 item.at_key("content").get(content) == simdjson::SUCCESS) {
        std::string_view role = document::String(item, "role");
        if (role == "developer") role = "system";
        w.Message(role.empty() ? "user" : role, document::PartsText(content));
      }
    }
    if (in_calls) w.EndToolCalls();
  } else {
    return false;
  }
  w.Finish();
  *chat_body = std::move(out);
  return true;
}

}  // namespace llmtap::api
