#include "tokenizer/chat.h"

#include <simdjson.h>

#include <charconv>
#include <functional>
#include <tuple>

#include "common/json_escape.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/unicode.h"

namespace llmtap::tokenizer {
namespace {

simdjson::dom::parser& ThreadParser() {
  thread_local simdjson::dom::parser parser;
  return parser;
}

// Jinja's `tojson` as transformers defines it: json.dumps(ensure_ascii=False) with the default
// ", " and ": " separators, keys in their original order.
void AppendToJson(simdjson::dom::element e, std::string* out) {
  switch (e.type()) {
    case simdjson::dom::element_type::OBJECT: {
      out->push_back('{');
      bool first = true;
      for (auto field : simdjson::dom::object(e)) {
        if (!first) out->append(", ");
        first = false;
        out->push_back('"');
        AppendJsonEscaped(out, field.key);
        out->append("\": ");
        AppendToJson(field.value, out);
      }
      out->push_back('}');
      break;
    }
    case simdjson::dom::element_type::ARRAY: {
      out->push_back('[');
      bool first = true;
      for (auto item : simdjson::dom::array(e)) {
        if (!first) out->append(", ");
        first = false;
        AppendToJson(item, out);
      }
      out->push_back(']');
      break;
    }
    case simdjson::dom::element_type::STRING:
      out->push_back('"');
      AppendJsonEscaped(out, std::string_view(e));
      out->push_back('"');
      break;
    case simdjson::dom::element_type::INT64:
      out->append(std::to_string(int64_t(e)));
      break;
    case simdjson::dom::element_type::UINT64:
      out->append(std::to_string(uint64_t(e)));
      break;
    case simdjson::dom::element_type::DOUBLE: {
      double d = double(e);
      char buf[64];
      auto res = std::to_chars(buf, buf + sizeof buf, d);
      std::string_view s(buf, res.ptr - buf);
      out->append(s);
      // Python prints a float that has no fraction as "1.0".
      if (s.find_first_of(".eEn") == std::string_view::npos) out->append(".0");
      break;
    }
    case simdjson::dom::element_type::BOOL:
      out->append(bool(e) ? "true" : "false");
      break;
    case simdjson::dom::element_type::NULL_VALUE:
      out->append("null");
      break;
  }
}

// A message's content as text: a string; text parts joined by "\n"; null or absent: "".
std::string ContentText(simdjson::dom::object message) {
  simdjson::dom::element content;
  if (message["content"].get(content)) return {};
  std::string_view s;
  if (!content.get(s)) return std::string(s);
  std::string text;
  simdjson::dom::array parts;
  if (!content.get(parts)) {
    bool first = true;
    for (auto part : parts) {
      std::string_view type, part_text;
      if (part["type"].get(type) || type != "text" || part["text"].get(part_text)) continue;
      if (!first) text.push_back('\n');
      first = false;
      text.append(part_text);
    }
  }
  return text;
}

std::string_view Role(simdjson::dom::object message) {
  std::string_view role;
  std::ignore = message["role"].get(role);
  return role;
}

// Python's str.strip() set: Unicode whitespace plus the separators U+001C..U+001F.
bool IsPyspace(uint32_t cp) {
  return (cp >= 0x1C && cp <= 0x1F) || (cp != kInvalidCodePoint && (ClassOf(cp) & kClassSpace));
}

std::string_view Trim(std::string_view s) {
  while (!s.empty()) {
    DecodedChar c = DecodeUtf8(s, 0);
    if (!IsPyspace(c.cp)) break;
    s.remove_prefix(c.len);
  }
  while (!s.empty()) {
    size_t k = s.size() - 1;
    while (k > 0 && (static_cast<unsigned char>(s[k]) & 0xC0) == 0x80) --k;
    DecodedChar c = DecodeUtf8(s, k);
    if (k + c.len != s.size() || !IsPyspace(c.cp)) break;
    s.remove_suffix(c.len);
  }
  return s;
}

std::string_view LStripNewlines(std::string_view s) {
  while (!s.empty() && s.front() == '\n') s.remove_prefix(1);
  return s;
}
std::string_view RStripNewlines(std::string_view s) {
  while (!s.empty() && s.back() == '\n') s.remove_suffix(1);
  return s;
}

void RenderLlama3(simdjson::dom::array messages, std::string* out) {
  out->append("<|begin_of_text|>");
  for (auto m : messages) {
    simdjson::dom::object message;
    if (m.get(message)) continue;
    out->append("<|start_header_id|>");
    out->append(Role(message));
    out->append("<|end_header_id|>\n\n");
    out->append(Trim(ContentText(message)));
    out->append("<|eot_id|>");
  }
  out->append("<|start_header_id|>assistant<|end_header_id|>\n\n");
}

void RenderChatMl(simdjson::dom::object request, simdjson::dom::array messages, std::string* out) {
  std::vector<simdjson::dom::object> msgs;
  for (auto m : messages) {
    simdjson::dom::object message;
    if (!m.get(message)) msgs.push_back(message);
  }
  std::vector<std::string> contents;
  for (auto& m : msgs) contents.push_back(ContentText(m));
  size_t n = msgs.size();
  bool first_is_system = n > 0 && Role(msgs[0]) == "system";

  simdjson::dom::array tools;
  if (!request["tools"].get(tools) && tools.size() > 0) {
    out->append("<|im_start|>system\n");
    if (first_is_system) out->append(contents[0] + "\n\n");
    out->append(
        "# Tools\n\nYou may call one or more functions to assist with the user query.\n\nYou "
        "are provided with function signatures within <tools></tools> XML tags:\n<tools>");
    for (auto tool : tools) {
      out->push_back('\n');
      AppendToJson(tool, out);
    }
    out->append(
        "\n</tools>\n\nFor each function call, return a json object with function name and "
        "arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": "
        "<function-name>, \"arguments\": <args-json-object>}\n</tool_call><|im_end|>\n");
  } else if (first_is_system) {
    out->append("<|im_start|>system\n" + contents[0] + "<|im_end|>\n");
  }

  // The last user message that is not a tool response: reasoning is kept after it only.
  size_t last_query = n == 0 ? 0 : n - 1;
  for (size_t k = n; k-- > 0;) {
    const std::string& c = contents[k];
    bool tool_response = c.starts_with("<tool_response>") && c.ends_with("</tool_response>");
    if (Role(msgs[k]) == "user" && !tool_response) {
      last_query = k;
      break;
    }
  }

  for (size_t i = 0; i < n; ++i) {
    std::string_view role = Role(msgs[i]);
    const std::string& content = contents[i];
    if (role == "user" || (role == "system" && i != 0)) {
      out->append("<|im_start|>" + std::string(role) + "\n" + content + "<|im_end|>\n");
    } else if (role == "assistant") {
      std::string_view body = content, reasoning;
      std::string_view rc;
      bool has_reasoning_field = !msgs[i]["reasoning_content"].get(rc);
      if (has_reasoning_field) {
        reasoning = rc;
      } else if (size_t close = content.rfind("</think>"); close != std::string::npos) {
        body = LStripNewlines(std::string_view(content).substr(close + 8));
        std::string_view before =
            RStripNewlines(std::string_view(content).substr(0, content.find("</think>")));
        size_t open = before.rfind("<think>");
        reasoning =
            LStripNewlines(open == std::string_view::npos ? before : before.substr(open + 7));
      }
      out->append("<|im_start|>assistant\n");
      if (i > last_query && (i + 1 == n || !reasoning.empty())) {
        out->append("<think>\n");
        out->append(RStripNewlines(LStripNewlines(reasoning)));
        out->append("\n</think>\n\n");
        out->append(LStripNewlines(body));
      } else {
        out->append(body);
      }
      simdjson::dom::array calls;
      if (!msgs[i]["tool_calls"].get(calls)) {
        bool first = true;
        for (auto call : calls) {
          if (!first || !body.empty()) out->push_back('\n');
          first = false;
          simdjson::dom::element fn = call;
          simdjson::dom::element inner;
          if (!call["function"].get(inner)) fn = inner;
          std::string_view name;
          std::ignore = fn["name"].get(name);
          out->append("<tool_call>\n{\"name\": \"");
          out->append(name);
          out->append("\", \"arguments\": ");
          simdjson::dom::element args;
          std::string_view args_text;
          if (!fn["arguments"].get(args)) {
            if (!args.get(args_text)) {
              out->append(args_text);
            } else {
              AppendToJson(args, out);
            }
          }
          out->append("}\n</tool_call>");
        }
      }
      out->append("<|im_end|>\n");
    } else if (role == "tool") {
      if (i == 0 || Role(msgs[i - 1]) != "tool") out->append("<|im_start|>user");
      out->append("\n<tool_response>\n" + content + "\n</tool_response>");
      if (i + 1 == n || Role(msgs[i + 1]) != "tool") out->append("<|im_end|>\n");
    }
  }
  out->append("<|im_start|>assistant\n");
  bool enable_thinking = true;
  std::ignore = request["chat_template_kwargs"]["enable_thinking"].get(enable_thinking);
  if (!enable_thinking) out->append("<think>\n\n</think>\n\n");
}

void RenderPlain(simdjson::dom::array messages, std::string* out) {
  bool first = true;
  for (auto m : messages) {
    simdjson::dom::object message;
    if (m.get(message)) continue;
    if (!first) out->push_back('\n');
    first = false;
    out->append(ContentText(message));
  }
}

bool ParseObject(std::string_view body, simdjson::dom::object* request, std::string* error) {
  if (ThreadParser().parse(body.data(), body.size()).get(*request)) {
    *error = "request body is not a JSON object";
    return false;
  }
  return true;
}

void Render(ChatFamily family, simdjson::dom::object request, simdjson::dom::array messages,
            std::string* text) {
  switch (family) {
    case ChatFamily::kLlama3:
      RenderLlama3(messages, text);
      break;
    case ChatFamily::kChatMl:
      RenderChatMl(request, messages, text);
      break;
    case ChatFamily::kPlain:
      RenderPlain(messages, text);
      break;
  }
}

}  // namespace

bool RenderChat(ChatFamily family, std::string_view body_json, std::string* text,
                std::string* error) {
  simdjson::dom::object request;
  if (!ParseObject(body_json, &request, error)) return false;
  simdjson::dom::array messages;
  if (request["messages"].get(messages)) {
    *error = "request has no \"messages\" array";
    return false;
  }
  Render(family, request, messages, text);
  return true;
}

bool EncodeRequestBody(const Tokenizer& tok, ChatFamily family, std::string_view body_json,
                       std::vector<uint32_t>* ids, std::string* error) {
  simdjson::dom::object request;
  if (!ParseObject(body_json, &request, error)) return false;
  simdjson::dom::array messages;
  if (!request["messages"].get(messages)) {
    std::string text;
    Render(family, request, messages, &text);
    tok.Encode(text, ids);
    return true;
  }
  simdjson::dom::element prompt;
  if (request["prompt"].get(prompt)) {
    *error = "request has neither \"messages\" nor \"prompt\"";
    return false;
  }
  // Each element: a string to encode, or a token id; arrays nest one level (a batch).
  std::function<bool(simdjson::dom::element, int)> add = [&](simdjson::dom::element e, int depth) {
    std::string_view s;
    uint64_t id;
    simdjson::dom::array list;
    if (!e.get(s)) {
      tok.Encode(s, ids);
    } else if (!e.get(id) && id <= 0xFFFFFFFFu) {
      ids->push_back(static_cast<uint32_t>(id));
    } else if (depth < 2 && !e.get(list)) {
      for (auto item : list) {
        if (!add(item, depth + 1)) return false;
      }
    } else {
      *error = "\"prompt\" is not a string, token ids, or an array of them";
      return false;
    }
    return true;
  };
  return add(prompt, 0);
}

}  // namespace llmtap::tokenizer
