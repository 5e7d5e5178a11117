#include "api/messages.h"

#include <simdjson.h>

#include <algorithm>
#include <vector>

#include "api/chat_messages.h"
#include "api/chat_template.h"
#include "api/document_internal.h"
#include "api/json_write.h"
#include "api/prompt.h"
#include "api/tool_input.h"
#include "common/json_escape.h"

namespace llmtap::api {

using namespace std::string_view_literals;
using simdjson::dom::element;
using simdjson::dom::element_type;

namespace {

std::string Path(std::string_view base, size_t index) {
  std::string p(base);
  p.push_back('.');
  AppendUint(&p, index);
  return p;
}

// A tool_result's content: a string, or a list of blocks (text as it is, others a placeholder).
bool AppendToolResult(element block, const std::string& where, std::string* out,
                      RequestProblem* problem) {
  element content;
  if (block["content"].get(content) != simdjson::SUCCESS || content.is_null()) return true;
  if (content.type() == element_type::STRING) {
    out->append(std::string_view(content.get_string().value_unsafe()));
    return true;
  }
  simdjson::dom::array parts;
  if (content.get(parts) != simdjson::SUCCESS) {
    return Refuse(problem, where + ".content: Input should be a string or a list of blocks.",
                  where + ".content");
  }
  for (element part : parts) {
    std::string_view type, text;
    if (part["type"].get(type) != simdjson::SUCCESS) {
      return Refuse(problem, where + ".content: each block needs a string 'type'.",
                    where + ".content");
    }
    if (type == "text"sv && part["text"].get(text) == simdjson::SUCCESS) {
      out->append(text);
    } else {
      AppendPartPlaceholder(type, out);
    }
  }
  return true;
}

// A message's or the system prompt's content blocks, in order.
bool AppendBlocks(simdjson::dom::array blocks, const std::string& where, bool system,
                  std::string* out, RequestProblem* problem) {
  size_t i = 0;
  for (element block : blocks) {
    const std::string at = Path(where, i++);
    std::string_view type;
    if (block.type() != element_type::OBJECT || block["type"].get(type) != simdjson::SUCCESS) {
      return Refuse(problem, at + ": each content block must be an object with a string 'type'.",
                    at);
    }
    if (type == "text"sv) {
      std::string_view text;
      if (block["text"].get(text) != simdjson::SUCCESS) {
        return Refuse(problem, at + ".text: Field required (a string).", at + ".text");
      }
      out->append(text);
    } else if (system) {
      return Refuse(problem, at + ".type: the system prompt holds text blocks only.", at + ".type");
    } else if (type == "tool_use"sv) {
      std::string_view name;
      element input;
      if (block["name"].get(name) != simdjson::SUCCESS) {
        return Refuse(problem, at + ".name: Field required (a string).", at + ".name");
      }
      if (block["input"].get(input) != simdjson::SUCCESS || input.type() != element_type::OBJECT) {
        return Refuse(problem, at + ".input: Field required (an object).", at + ".input");
      }
      out->append(simdjson::minify(block));  // as the chat template renders tool_calls
    } else if (type == "tool_result"sv) {
      std::string_view id;
      if (block["tool_use_id"].get(id) != simdjson::SUCCESS) {
        return Refuse(problem, at + ".tool_use_id: Field required (a string).",
                      at + ".tool_use_id");
      }
      if (!AppendToolResult(block, at, out, problem)) return false;
    } else {
      AppendPartPlaceholder(type, out);  // image, document, thinking, ...
    }
  }
  return true;
}

bool RenderSystem(element system, std::string* out, RequestProblem* problem) {
  if (system.is_null()) return true;
  AppendTurnStart("system", out);
  if (system.type() == element_type::STRING) {
    out->append(std::string_view(system.get_string().value_unsafe()));
  } else if (system.type() == element_type::ARRAY) {
    if (!AppendBlocks(system.get_array().value_unsafe(), "system", true, out, problem)) {
      return false;
    }
  } else {
    return Refuse(problem, "system: Input should be a string or a list of text blocks.", "system");
  }
  AppendTurnEnd(out);
  return true;
}

bool RenderMessages(element messages, std::string* out, RequestProblem* problem) {
  simdjson::dom::array list;
  if (messages.get(list) != simdjson::SUCCESS) {
    return Refuse(problem, "messages: Input should be a valid list.", "messages");
  }
  if (list.size() == 0) {
    return Refuse(problem, "messages: at least one message is required.", "messages");
  }
  size_t i = 0;
  for (element m : list) {
    const std::string at = Path("messages", i++);
    std::string_view role;
    if (m.type() != element_type::OBJECT || m["role"].get(role) != simdjson::SUCCESS ||
        (role != "user"sv && role != "assistant"sv)) {
      return Refuse(problem, at + ".role: Input should be 'user' or 'assistant'.", at + ".role");
    }
    AppendTurnStart(role, out);
    element content;
    if (m["content"].get(content) != simdjson::SUCCESS) {
      return Refuse(problem, at + ".content: Field required.", at + ".content");
    }
    if (content.type() == element_type::STRING) {
      out->append(std::string_view(content.get_string().value_unsafe()));
    } else if (content.type() == element_type::ARRAY) {
      if (!AppendBlocks(content.get_array().value_unsafe(), at + ".content", false, out, problem)) {
        return false;
      }
    } else {
      return Refuse(problem, at + ".content: Input should be a string or a list of blocks.",
                    at + ".content");
    }
    AppendTurnEnd(out);
  }
  AppendGenerationPrompt(out);
  return true;
}

bool ReadToolChoice(element choice, const std::vector<std::string_view>& tools, std::string* out,
                    RequestProblem* problem) {
  if (choice.is_null()) return true;
  std::string_view type;
  if (choice.type() != element_type::OBJECT || choice["type"].get(type) != simdjson::SUCCESS) {
    return Refuse(problem, "tool_choice: Input should be an object with a string 'type'.",
                  "tool_choice");
  }
  if (type == "auto"sv || type == "none"sv) return true;
  if (type == "any"sv) {
    if (tools.empty()) {
      return Refuse(problem, "tool_choice: 'any' requires at least one tool in 'tools'.",
                    "tool_choice");
    }
    out->assign(tools.front());
    return true;
  }
  if (type == "tool"sv) {
    std::string_view name;
    if (choice["name"].get(name) != simdjson::SUCCESS) {
      return Refuse(problem, "tool_choice.name: Field required (a string).", "tool_choice.name");
    }
    if (std::find(tools.begin(), tools.end(), name) == tools.end()) {
      return Refuse(problem,
                    "tool_choice.name: no tool named '" + std::string(name) + "' in 'tools'.",
                    "tool_choice.name");
    }
    out->assign(name);
    return true;
  }
  return Refuse(problem, "tool_choice.type: Input should be 'auto', 'any', 'tool' or 'none'.",
                "tool_choice.type");
}

// A text block's JSON, or the tool_use block's with `input` given.
void AppendBlockHead(const MessageHead& head, std::string* out) {
  if (head.tool_name.empty()) {
    out->append(R"({"type":"text","text":")"sv);
    return;
  }
  out->append(R"({"type":"tool_use","id":")"sv);
  AppendJsonEscaped(out, head.tool_id);
  out->append(R"(","name":")"sv);
  AppendJsonEscaped(out, head.tool_name);
  out->append(R"(","input":)"sv);
}

void AppendUsage(const MessagesUsage& usage, bool output, std::string* out) {
  out->append(R"("usage":{"input_tokens":)"sv);
  AppendUint(out, usage.input_tokens);
  out->append(R"(,"cache_creation_input_tokens":)"sv);
  AppendUint(out, usage.cache_creation_input_tokens);
  out->append(R"(,"cache_read_input_tokens":)"sv);
  AppendUint(out, usage.cache_read_input_tokens);
  out->append(R"(,"output_tokens":)"sv);
  AppendUint(out, output ? usage.output_tokens : 0);
  out->push_back('}');
}

// {"id":...,"type":"message","role":"assistant","model":...,"content":[ (left open).
void AppendMessageOpen(const MessageHead& head, std::string* out) {
  out->append(R"({"id":")"sv);
  AppendJsonEscaped(out, head.id);
  out->append(R"(","type":"message","role":"assistant","model":")"sv);
  AppendJsonEscaped(out, head.model);
  out->append(R"(","content":[)"sv);
}

}  // namespace

bool ParseMessagesRequest(std::string_view body, uint32_t max_tokens_limit, MessagesRequest* out,
                          RequestProblem* problem) {
  thread_local simdjson::dom::parser parser;
  out->model.clear();
  out->prompt_text.clear();
  out->max_tokens = 0;
  out->stream = false;
  out->forced_tool.clear();
  simdjson::dom::object root;
  if (parser.parse(body.data(), body.size(), true).get(root) != simdjson::SUCCESS) {
    return Refuse(problem, "The request body is not a valid JSON object.", "");
  }
  element model, messages, system, max_tokens, stream, tools, tool_choice;
  bool has_model = false, has_messages = false, has_system = false, has_max_tokens = false,
       has_stream = false, has_tools = false, has_tool_choice = false;
  for (simdjson::dom::key_value_pair field : root) {
    const std::string_view k = field.key;
    if (k == "model"sv) {
      model = field.value, has_model = true;
    } else if (k == "messages"sv) {
      messages = field.value, has_messages = true;
    } else if (k == "system"sv) {
      system = field.value, has_system = true;
    } else if (k == "max_tokens"sv) {
      max_tokens = field.value, has_max_tokens = true;
    } else if (k == "stream"sv) {
      stream = field.value, has_stream = true;
    } else if (k == "tools"sv) {
      tools = field.value, has_tools = true;
    } else if (k == "tool_choice"sv) {
      tool_choice = field.value, has_tool_choice = true;
    }
  }
  std::string_view name;
  if (!has_model || model.get(name) != simdjson::SUCCESS) {
    return Refuse(problem, "model: Field required (a string).", "model");
  }
  out->model.assign(name);
  if (!has_max_tokens || max_tokens.is_null()) {
    return Refuse(problem, "max_tokens: Field required.", "max_tokens");
  }
  int64_t limit = 0;
  if (max_tokens.get_int64().get(limit) != simdjson::SUCCESS || limit < 1) {
    return Refuse(problem, "max_tokens: Input should be an integer greater than or equal to 1.",
                  "max_tokens");
  }
  if (static_cast<uint64_t>(limit) > max_tokens_limit) {
    return Refuse(
        problem,
        "max_tokens: " + std::to_string(limit) + " > " + std::to_string(max_tokens_limit) +
            ", which is the maximum allowed number of output tokens for " + out->model + ".",
        "max_tokens");
  }
  out->max_tokens = static_cast<uint32_t>(limit);
  if (!has_messages) return Refuse(problem, "messages: Field required.", "messages");
  if (has_system && !RenderSystem(system, &out->prompt_text, problem)) return false;
  if (!RenderMessages(messages, &out->prompt_text, problem)) return false;
  if (has_stream && !stream.is_null() && stream.get(out->stream) != simdjson::SUCCESS) {
    return Refuse(problem, "stream: Input should be a valid boolean.", "stream");
  }
  std::vector<std::string_view> tool_names;
  if (has_tools && !tools.is_null()) {
    simdjson::dom::array list;
    if (tools.get(list) != simdjson::SUCCESS) {
      return Refuse(problem, "tools: Input should be a valid list.", "tools");
    }
    size_t i = 0;
    for (element tool : list) {
      std::string_view tool_name;
      if (tool.type() != element_type::OBJECT || tool["name"].get(tool_name) != simdjson::SUCCESS) {
        const std::string at = Path("tools", i);
        return Refuse(problem, at + ".name: Field required (a string).", at + ".name");
      }
      tool_names.push_back(tool_name);
      ++i;
    }
  }
  if (has_tool_choice && !ReadToolChoice(tool_choice, tool_names, &out->forced_tool, problem)) {
    return false;
  }
  return true;
}

std::string_view StopReasonName(StopReason reason) {
  switch (reason) {
    case StopReason::kMaxTokens:
      return "max_tokens";
    case StopReason::kToolUse:
      return "tool_use";
    default:
      return "end_turn";
  }
}

void AppendMessageResponse(const MessageHead& head, std::string_view text, StopReason stop_reason,
                           const MessagesUsage& usage, std::string* out) {
  AppendMessageOpen(head, out);
  AppendBlockHead(head, out);
  if (head.tool_name.empty()) {
    AppendJsonEscaped(out, text);
    out->append(R"("})"sv);
  } else {
    AppendToolInputPiece(text, 0, text.size(), out);
    out->push_back('}');
  }
  out->append(R"(],"stop_reason":")"sv);
  out->append(StopReasonName(stop_reason));
  out->append(R"(","stop_sequence":null,)"sv);
  AppendUsage(usage, true, out);
  out->push_back('}');
}

void AppendMessageStreamStart(const MessageHead& head, const MessagesUsage& usage,
                              std::string* out) {
  out->append("event: message_start\ndata: {\"type\":\"message_start\",\"message\":"sv);
  AppendMessageOpen(head, out);
  out->append(R"(],"stop_reason":null,"stop_sequence":null,)"sv);
  AppendUsage(usage, false, out);
  out->append("}}\n\n"sv);
  out->append(
      "event: content_block_start\ndata: "
      "{\"type\":\"content_block_start\",\"index\":0,\"content_block\":"sv);
  AppendBlockHead(head, out);
  out->append(head.tool_name.empty() ? R"("}})"sv : R"({}}})"sv);
  out->append("\n\nevent: ping\ndata: {\"type\":\"ping\"}\n\n"sv);
}

void AppendMessageStreamDelta(const MessageHead& head, std::string_view text, size_t begin,
                              size_t end, std::string* out) {
  out->append(
      "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,"
      "\"delta\":{\"type\":"sv);
  if (head.tool_name.empty()) {
    out->append(R"("text_delta","text":")"sv);
    AppendJsonEscaped(out, text.substr(begin, end - begin));
  } else {
    // The piece of the input's JSON text, then that text as a JSON string.
    thread_local std::string json;
    json.clear();
    AppendToolInputPiece(text, begin, end, &json);
    out->append(R"("input_json_delta","partial_json":")"sv);
    AppendJsonEscaped(out, json);
  }
  out->append("\"}}\n\n"sv);
}

void AppendMessageStreamEnd(StopReason stop_reason, const MessagesUsage& usage, std::string* out) {
  out->append(
      "event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":0}\n\n"
      "event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\""sv);
  out->append(StopReasonName(stop_reason));
  out->append(R"(","stop_sequence":null},)"sv);
  AppendUsage(usage, true, out);
  out->append("}\n\nevent: message_stop\ndata: {\"type\":\"message_stop\"}\n\n"sv);
}

std::string_view MessagesErrorType(int status) {
  switch (status) {
    case 401:
      return "authentication_error";
    case 403:
      return "permission_error";
    case 404:
      return "not_found_error";
    case 413:
      return "request_too_large";
    case 429:
      return "rate_limit_error";
    case 529:
      return "overloaded_error";
    default:
      return status >= 500 ? "api_error" : "invalid_request_error";
  }
}

void AppendMessagesError(int status, std::string_view message, std::string* out) {
  out->append(R"({"type":"error","error":{"type":")"sv);
  out->append(MessagesErrorType(status));
  out->append(R"(","message":")"sv);
  AppendJsonEscaped(out, message);
  out->append(R"("}})"sv);
}

// ---- Reading an answer (api/response_document.h) ----

namespace {

// Anthropic counts the prompt's cached tokens apart: the whole prompt is their sum.
void ReadMessagesUsage(const simdjson::dom::object& usage, DocumentFacts* facts) {
  if (auto v = document::Count(usage, "output_tokens")) facts->output_tokens = v;
  if (auto v = document::Count(usage, "cache_read_input_tokens")) facts->server.cached_tokens = *v;
  const auto input = document::Count(usage, "input_tokens");
  if (!input) return;
  int64_t whole = *input;
  for (std::string_view key : {"cache_read_input_tokens"sv, "cache_creation_input_tokens"sv}) {
    if (auto v = document::Count(usage, key)) whole += *v;
  }
  facts->input_tokens = whole;
}

// One content block (a whole message's, or a content_block_start's) at `index`.
void ReadBlock(const simdjson::dom::object& block, int64_t index, DocumentFacts* facts,
               OutputSink* sink) {
  const std::string_view type = document::String(block, "type");
  if (type == "text" || type == "thinking") {
    const std::string_view text = document::String(block, type == "text" ? "text" : "thinking");
    if (text.empty()) return;
    facts->output = true;
    if (!sink) return;
    if (type == "text") {
      sink->Text(text);
    } else {
      sink->Reasoning(text);
    }
  } else if (type == "tool_use") {
    // A whole message's block has its input as an object (its JSON text is the arguments); a
    // stream's content_block_start has an empty one, and input_json_delta pieces follow.
    simdjson::dom::object input;
    std::string arguments;
    if (document::Object(block, "input", &input) && input.size() > 0) {
      arguments = simdjson::minify(input);
      facts->output = true;
    }
    if (sink) sink->ToolCall(index, document::String(block, "name"), arguments);
  }
}

}  // namespace

void ReadMessagesDocument(const simdjson::dom::object& o, DocumentFacts* facts, OutputSink* sink) {
  const std::string_view type = document::String(o, "type");
  simdjson::dom::object usage, inner;
  if (type == "message") {  // a whole answer
    if (const std::string_view id = document::String(o, "id"); !id.empty()) {
      facts->response_id.assign(id);
    }
    document::SetFinish(document::String(o, "stop_reason"), facts);
    if (document::Object(o, "usage", &usage)) ReadMessagesUsage(usage, facts);
    simdjson::dom::array content;
    if (document::Array(o, "content", &content)) {
      int64_t index = 0;
      for (simdjson::dom::element e : content) {
        simdjson::dom::object block;
        if (e.get(block) == simdjson::SUCCESS) ReadBlock(block, index, facts, sink);
        ++index;
      }
    }
  } else if (type == "content_block_delta") {
    if (!document::Object(o, "delta", &inner)) return;
    const std::string_view delta_type = document::String(inner, "type");
    const int64_t index = document::Index(o, "index", 0);
    std::string_view piece;
    if (delta_type == "text_delta") {
      piece = document::String(inner, "text");
      if (sink && !piece.empty()) sink->Text(piece);
    } else if (delta_type == "thinking_delta") {
      piece = document::String(inner, "thinking");
      if (sink && !piece.empty()) sink->Reasoning(piece);
    } else if (delta_type == "input_json_delta") {
      piece = document::String(inner, "partial_json");
      if (sink && !piece.empty()) sink->ToolCall(index, {}, piece);
    }
    if (!piece.empty()) facts->output = true;
  } else if (type == "content_block_start") {
    if (document::Object(o, "content_block", &inner)) {
      ReadBlock(inner, document::Index(o, "index", 0), facts, sink);
    }
  } else if (type == "message_start") {
    if (!document::Object(o, "message", &inner)) return;
    if (const std::string_view id = document::String(inner, "id"); !id.empty()) {
      facts->response_id.assign(id);
    }
    if (document::Object(inner, "usage", &usage)) ReadMessagesUsage(usage, facts);
  } else if (type == "message_delta") {
    if (document::Object(o, "delta", &inner)) {
      document::SetFinish(document::String(inner, "stop_reason"), facts);
    }
    if (document::Object(o, "usage", &usage)) ReadMessagesUsage(usage, facts);
  } else if (type == "message_stop") {
    facts->done = true;
  } else if (type == "error" || document::HasError(o)) {
    facts->error = true;
  }
}

// ---- The request as chat messages (api/prompt.h) ----

bool MessagesChatBody(std::string_view body, std::string* chat_body) {
  simdjson::dom::parser parser;
  simdjson::dom::object o;
  simdjson::dom::array messages;
  if (parser.parse(body.data(), body.size()).get(o) != simdjson::SUCCESS ||
      !document::Array(o, "messages", &messages)) {
    return false;
  }
  std::string out;
  ChatMessagesWriter w(&out);
  simdjson::dom::element e;
  if (o.at_key("system").get(e) == simdjson::SUCCESS) {
    if (const std::string system = document::PartsText(e); !system.empty())
      w.Message("system", system);
  }
  for (simdjson::dom::element m : messages) {
    simdjson::dom::object message;
    if (m.get(message) != simdjson::SUCCESS) continue;
    const std::string_view role = document::String(message, "role");
    simdjson::dom::element content;
    if (message.at_key("content").get(content) != simdjson::SUCCESS) continue;
    std::string_view s;
    if (content.get(s) == simdjson::SUCCESS) {
      w.Message(role, s);
      continue;
    }
    simdjson::dom::array blocks;
    if (content.get(blocks) != simdjson::SUCCESS) continue;
    std::string text;
    bool calls = false;
    for (simdjson::dom::element b : blocks) {
      simdjson::dom::object block;
      if (b.get(block) != simdjson::SUCCESS) continue;
      const std::string_view type = document::String(block, "type");
      if (type == "text") {
        text.append(document::String(block, "text"));
      } else if (type == "tool_use") {
        calls = true;
      } else if (type == "tool_result") {
        std::string result;
        if (block.at_key("content").get(e) == simdjson::SUCCESS) result = document::PartsText(e);
        w.ToolResult(document::String(block, "tool_use_id"), result);
      }
    }
    if (!calls) {
      if (!text.empty() || role != "user") w.Message(role, text);
      continue;
    }
    w.BeginToolCalls(text);
    for (simdjson::dom::element b : blocks) {
      simdjson::dom::object block, input;
      if (b.get(block) != simdjson::SUCCESS || document::String(block, "type") != "tool_use") {
        continue;
      }
      const std::string arguments =
          document::Object(block, "input", &input) ? simdjson::minify(input) : "{}";
      w.ToolCall(document::String(block, "id"), document::String(block, "name"), arguments);
    }
    w.EndToolCalls();
  }
  w.Finish();
  *chat_body = std::move(out);
  return true;
}

}  // namespace llmtap::api
