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
        AppendJsonString(out, field.key);
        out->append(": ");
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
      AppendJsonString(out, std::string_view(e));
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

// A message's content as text: a string (a view of the parsed request); text parts joined by
// "\n" (into *joined, which the view then shows); null or absent: "".
std::string_view ContentText(simdjson::dom::object message, std::string* joined) {
  simdjson::dom::element content;
  if (message["content"].get(content)) return {};
  std::string_view s;
  if (!content.get(s)) return s;
  std::string& text = *joined;
  text.clear();
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

// A tool call's `arguments` as the template sees them: vLLM parses the OpenAI JSON string into
// an object before rendering, so a string that holds JSON is rendered as that value's tojson;
// any other string as a JSON string; an object as it is.
void AppendArguments(simdjson::dom::element args, std::string* out) {
  std::string_view text;
  if (!args.get(text)) {
    thread_local simdjson::dom::parser inner;  // ThreadParser holds the request
    simdjson::dom::element parsed;
    if (!inner.parse(text.data(), text.size()).get(parsed)) {
      AppendToJson(parsed, out);
      return;
    }
  }
  AppendToJson(args, out);
}

// The function of an OpenAI tool call ({"type":"function","function":{...}}, or the function
// itself).
simdjson::dom::element ToolFunction(simdjson::dom::element call) {
  simdjson::dom::element inner;
  if (!call["function"].get(inner)) return inner;
  return call;
}

std::string_view LStripNewlines(std::string_view s) {
  while (!s.empty() && s.front() == '\n') s.remove_prefix(1);
  return s;
}
std::string_view RStripNewlines(std::string_view s) {
  while (!s.empty() && s.back() == '\n') s.remove_suffix(1);
  return s;
}

void AppendLlamaTurn(std::string_view role, std::string_view content, std::string* out) {
  out->append("<|start_header_id|>");
  out->append(role);
  out->append("<|end_header_id|>\n\n");
  out->append(content);
  out->append("<|eot_id|>");
}

void RenderLlama3(const ChatStyle& style, simdjson::dom::array messages, std::string* out) {
  out->append("<|begin_of_text|>");
  bool skip_first = false;
  if (style.dated_system) {
    // Llama-3.1+: the system turn always comes first and opens with the knowledge cutoff.
    std::string system = "Cutting Knowledge Date: December 2023\nToday Date: 26 Jul 2024\n\n";
    simdjson::dom::object first;
    std::string joined;
    if (messages.size() > 0 && !messages.at(0).get(first) && Role(first) == "system") {
      system.append(Trim(ContentText(first, &joined)));
      skip_first = true;
    }
    AppendLlamaTurn("system", system, out);
  }
  std::string joined;
  for (auto m : messages) {
    simdjson::dom::object message;
    if (m.get(message)) continue;
    if (skip_first) {
      skip_first = false;
      continue;
    }
    std::string_view role = Role(message);
    simdjson::dom::array calls;
    if (style.dated_system && (role == "tool" || role == "ipython")) {
      // The template renders the content through `tojson` (a string is iterable in Jinja).
      std::string content;
      simdjson::dom::element c;
      if (!message["content"].get(c) && !c.is_null()) AppendToJson(c, &content);
      AppendLlamaTurn("ipython", content, out);
    } else if (style.dated_system && !message["tool_calls"].get(calls) && calls.size() > 0) {
      // One call per turn: {"name": .., "parameters": ..}.
      simdjson::dom::element fn = ToolFunction(calls.at(0));
      std::string_view name;
      std::ignore = fn["name"].get(name);
      std::string call = "{\"name\": \"" + std::string(name) + "\", \"parameters\": ";
      simdjson::dom::element args;
      if (!fn["arguments"].get(args)) AppendArguments(args, &call);
      call.push_back('}');
      AppendLlamaTurn("assistant", call, out);
    } else {
      AppendLlamaTurn(role, Trim(ContentText(message, &joined)), out);
    }
  }
  out->append("<|start_header_id|>assistant<|end_header_id|>\n\n");
}

void RenderChatMl(const ChatStyle& style, simdjson::dom::object request,
                  simdjson::dom::array messages, std::string* out) {
  std::vector<simdjson::dom::object> msgs;
  for (auto m : messages) {
    simdjson::dom::object message;
    if (!m.get(message)) msgs.push_back(message);
  }
  size_t n = msgs.size();
  std::vector<std::string> joined(n);  // not resized: contents may view these
  std::vector<std::string_view> contents(n);
  for (size_t k = 0; k < n; ++k) contents[k] = ContentText(msgs[k], &joined[k]);
  bool first_is_system = n > 0 && Role(msgs[0]) == "system";

  simdjson::dom::array tools;
  if (!request["tools"].get(tools) && tools.size() > 0) {
    out->append("<|im_start|>system\n");
    out->append(first_is_system ? contents[0] : std::string_view(style.default_system));
    if (first_is_system || !style.default_system.empty()) out->append("\n\n");
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
  } else if (first_is_system || !style.default_system.empty()) {
    out->append("<|im_start|>system\n");
    out->append(first_is_system ? contents[0] : std::string_view(style.default_system));
    out->append("<|im_end|>\n");
  }

  // The last user message that is not a tool response: reasoning is kept after it only.
  size_t last_query = n == 0 ? 0 : n - 1;
  for (size_t k = n; k-- > 0;) {
    std::string_view c = contents[k];
    bool tool_response = c.starts_with("<tool_response>") && c.ends_with("</tool_response>");
    if (Role(msgs[k]) == "user" && !tool_response) {
      last_query = k;
      break;
    }
  }

  for (size_t i = 0; i < n; ++i) {
    std::string_view role = Role(msgs[i]);
    std::string_view content = contents[i];
    if (role == "user" || (role == "system" && i != 0)) {
      out->append("<|im_start|>");
      out->append(role);
      out->push_back('\n');
      out->append(content);
      out->append("<|im_end|>\n");
    } else if (role == "assistant") {
      std::string_view body = content, reasoning;
      std::string_view rc;
      bool has_reasoning_field = !msgs[i]["reasoning_content"].get(rc);
      if (!style.thinking) {
        // Qwen2/2.5: the content as it is.
      } else if (has_reasoning_field) {
        reasoning = rc;
      } else if (size_t close = content.rfind("</think>"); close != std::string_view::npos) {
        body = LStripNewlines(std::string_view(content).substr(close + 8));
        std::string_view before =
            RStripNewlines(std::string_view(content).substr(0, content.find("</think>")));
        size_t open = before.rfind("<think>");
        reasoning =
            LStripNewlines(open == std::string_view::npos ? before : before.substr(open + 7));
      }
      out->append("<|im_start|>assistant\n");
      if (style.thinking && i > last_query && (i + 1 == n || !reasoning.empty())) {
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
          simdjson::dom::element fn = ToolFunction(call);
          std::string_view name;
          std::ignore = fn["name"].get(name);
          out->append("<tool_call>\n{\"name\": \"");
          out->append(name);
          out->append("\", \"arguments\": ");
          simdjson::dom::element args;
          if (!fn["arguments"].get(args)) AppendArguments(args, out);
          out->append("}\n</tool_call>");
        }
      }
      out->append("<|im_end|>\n");
    } else if (role == "tool") {
      if (i == 0 || Role(msgs[i - 1]) != "tool") out->append("<|im_start|>user");
      out->append("\n<tool_response>\n");
      out->append(content);
      out->append("\n</tool_response>");
      if (i + 1 == n || Role(msgs[i + 1]) != "tool") out->append("<|im_end|>\n");
    }
  }
  out->append("<|im_start|>assistant\n");
  bool enable_thinking = true;
  std::ignore = request["chat_template_kwargs"]["enable_thinking"].get(enable_thinking);
  if (style.thinking && !enable_thinking) out->append("<think>\n\n</think>\n\n");
}

void RenderPlain(simdjson::dom::array messages, std::string* out) {
  bool first = true;
  std::string joined;
  for (auto m : messages) {
    simdjson::dom::object message;
    if (m.get(message)) continue;
    if (!first) out->push_back('\n');
    first = false;
    out->append(ContentText(message, &joined));
  }
}

bool ParseObject(std::string_view body, simdjson::dom::object* request, std::string* error) {
  if (ThreadParser().parse(body.data(), body.size()).get(*request)) {
    *error = "request body is not a JSON object";
    return false;
  }
  return true;
}

void Render(const ChatStyle& style, simdjson::dom::object request, simdjson::dom::array messages,
            std::string* text) {
  switch (style.family) {
    case ChatFamily::kLlama3:
      RenderLlama3(style, messages, text);
      break;
    case ChatFamily::kChatMl:
      RenderChatMl(style, request, messages, text);
      break;
    case ChatFamily::kPlain:
      RenderPlain(messages, text);
      break;
  }
}

}  // namespace

std::string ChatStyle::Describe() const {
  std::string d;
  switch (family) {
    case ChatFamily::kLlama3:
      d = dated_system ? "llama3.1+, dated system header" : "llama3";
      break;
    case ChatFamily::kChatMl:
      d = "qwen/chatml";
      if (!default_system.empty()) d += ", default system prompt";
      if (thinking) d += ", <think> rules";
      break;
    case ChatFamily::kPlain:
      d = "plain";
      break;
  }
  if (!source.empty()) d += ", from " + source;
  return d;
}

ChatStyle ChatStyleFromTemplate(std::string_view t) {
  ChatStyle style;
  if (t.find("<|start_header_id|>") != std::string_view::npos) {
    style.family = ChatFamily::kLlama3;
    style.dated_system = t.find("Cutting Knowledge Date") != std::string_view::npos;
  } else if (t.find("<|im_start|>") != std::string_view::npos) {
    style.family = ChatFamily::kChatMl;
    style.thinking = t.find("<think>") != std::string_view::npos;
    // A system turn written out whole in a string literal is the fallback for requests with
    // no system message: '<|im_start|>system\nYou are ...<|im_end|>\n'.
    constexpr std::string_view kOpen = "<|im_start|>system";
    for (size_t at = t.find(kOpen); at != std::string_view::npos; at = t.find(kOpen, at + 1)) {
      std::string_view rest = t.substr(at + kOpen.size());
      if (rest.starts_with("\\n")) {
        rest.remove_prefix(2);
      } else if (rest.starts_with("\n")) {
        rest.remove_prefix(1);
      } else {
        continue;
      }
      size_t end = rest.find("<|im_end|>");
      if (end == std::string_view::npos || end == 0) continue;
      std::string_view literal = rest.substr(0, end);
      if (literal.find_first_of("'\"+{}") != std::string_view::npos) continue;
      std::string text;  // Jinja string escapes
      for (size_t i = 0; i < literal.size(); ++i) {
        if (literal[i] == '\\' && i + 1 < literal.size()) {
          char e = literal[++i];
          text.push_back(e == 'n' ? '\n' : e == 't' ? '\t' : e);
        } else {
          text.push_back(literal[i]);
        }
      }
      style.default_system = std::move(text);
      break;
    }
  }
  return style;
}

bool RenderChat(const ChatStyle& style, std::string_view body_json, std::string* text,
                std::string* error) {
  simdjson::dom::object request;
  if (!ParseObject(body_json, &request, error)) return false;
  simdjson::dom::array messages;
  if (request["messages"].get(messages)) {
    *error = "request has no \"messages\" array";
    return false;
  }
  Render(style, request, messages, text);
  return true;
}

bool EncodeRequestBody(const Tokenizer& tok, const ChatStyle& style,
                       const PromptSpecials& specials, std::string_view body_json,
                       std::vector<uint32_t>* ids, std::string* error) {
  simdjson::dom::object request;
  if (!ParseObject(body_json, &request, error)) return false;
  simdjson::dom::array messages;
  if (!request["messages"].get(messages)) {
    std::string text;
    Render(style, request, messages, &text);
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
      ids->insert(ids->end(), specials.prefix.begin(), specials.prefix.end());
      tok.Encode(s, ids);
      ids->insert(ids->end(), specials.suffix.begin(), specials.suffix.end());
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
