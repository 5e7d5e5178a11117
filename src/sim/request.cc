#include "sim/request.h"

#include <cctype>
#include <charconv>
#include <cmath>

#include <simdjson.h>

#include "api/chat_template.h"

namespace llmtap::sim {

using namespace std::string_view_literals;

namespace {

using simdjson::dom::element;
using simdjson::dom::element_type;

bool Fail(RequestError* error, std::string message, std::string param) {
  error->message = std::move(message);
  error->param = std::move(param);
  return false;
}

// Appends the text of a message's `content`: a string, null, or an array of content parts.
bool AppendContent(element content, std::string* out, RequestError* error) {
  switch (content.type()) {
    case element_type::STRING:
      out->append(std::string_view(content.get_string().value_unsafe()));
      return true;
    case element_type::NULL_VALUE:
      return true;
    case element_type::ARRAY: {
      const simdjson::dom::array parts = content.get_array().value_unsafe();
      for (element part : parts) {
        if (part.type() == element_type::STRING) {
          out->append(std::string_view(part.get_string().value_unsafe()));
          continue;
        }
        if (part.type() != element_type::OBJECT) {
          return Fail(error, "Each content part must be an object.", "messages");
        }
        std::string_view type;
        if (part["type"].get(type) != simdjson::SUCCESS) {
          return Fail(error, "Each content part needs a string 'type'.", "messages");
        }
        std::string_view text;
        if (type == "text" && part["text"].get(text) == simdjson::SUCCESS) {
          out->append(text);
        } else {
          // Images, audio, files: a fixed placeholder, so they count a few prompt tokens.
          api::AppendPartPlaceholder(type, out);
        }
      }
      return true;
    }
    default:
      return Fail(error, "'content' must be a string, an array of content parts, or null.",
                  "messages");
  }
}

bool RenderMessages(element messages, std::string* out, RequestError* error) {
  simdjson::dom::array array;
  if (messages.get(array) != simdjson::SUCCESS) {
    return Fail(error, "'messages' must be an array.", "messages");
  }
  if (array.size() == 0) return Fail(error, "'messages' must not be empty.", "messages");
  for (element m : array) {
    if (m.type() != element_type::OBJECT) {
      return Fail(error, "Each message must be an object.", "messages");
    }
    std::string_view role;
    if (m["role"].get(role) != simdjson::SUCCESS) {
      return Fail(error, "Each message needs a string 'role'.", "messages");
    }
    api::AppendTurnStart(role, out);
    element content;
    if (m["content"].get(content) == simdjson::SUCCESS) {
      if (!AppendContent(content, out, error)) return false;
    }
    element tool_calls;
    if (m["tool_calls"].get(tool_calls) == simdjson::SUCCESS &&
        tool_calls.type() != element_type::NULL_VALUE) {
      out->append(simdjson::minify(tool_calls));
    }
    api::AppendTurnEnd(out);
  }
  api::AppendGenerationPrompt(out);
  return true;
}

bool RenderPrompt(element prompt, std::string* out, RequestError* error) {
  if (prompt.type() == element_type::STRING) {
    out->append(std::string_view(prompt.get_string().value_unsafe()));
    return true;
  }
  simdjson::dom::array array;
  if (prompt.get(array) == simdjson::SUCCESS && array.size() > 0) {
    element first = array.at(0).value_unsafe();
    if (array.size() == 1 && first.type() == element_type::STRING) {
      out->append(std::string_view(first.get_string().value_unsafe()));
      return true;
    }
    // Token ids: a list of integers, or a list holding one list of integers.
    if (array.size() == 1 && first.type() == element_type::ARRAY) {
      array = first.get_array().value_unsafe();
    }
    bool all_ints = array.size() > 0;
    for (element t : array) {
      if (!t.is_int64() && !t.is_uint64()) {
        all_ints = false;
        break;
      }
    }
    if (all_ints) {
      // One approximate token per id: a space and letters, so ids never merge.
      for (element t : array) {
        out->append(" t"sv);
        out->append(std::to_string(static_cast<uint64_t>(t.get_int64().value_unsafe()) % 100000));
      }
      return true;
    }
    return Fail(error,
                "Only one prompt per request is supported: a string, a list of one string, or a "
                "list of token ids.",
                "prompt");
  }
  return Fail(error, "'prompt' must be a string, a list of one string, or a list of token ids.",
              "prompt");
}

// Whether `number` (a JSON number's text) is an integer beyond 64 bits: above the largest
// uint64_t, or below the smallest int64_t. simdjson refuses a document holding one.
bool IsBigInteger(std::string_view number) {
  if (number.find_first_of(".eE") != std::string_view::npos) return false;
  const char* end = number.data() + number.size();
  std::from_chars_result r;
  if (number.starts_with('-')) {
    int64_t v;
    r = std::from_chars(number.data(), end, v);
  } else {
    uint64_t v;
    r = std::from_chars(number.data(), end, v);
  }
  return r.ec == std::errc::result_out_of_range && r.ptr == end;
}

// `body` with ".0" after each integer beyond 64 bits outside strings: a double then, which
// simdjson parses. False when there is none.
bool WidenBigIntegers(std::string_view body, std::string* out) {
  bool widened = false;
  out->clear();
  out->reserve(body.size() + 16);
  bool in_string = false;
  for (size_t i = 0; i < body.size();) {
    const char c = body[i];
    if (in_string || c == '"') {
      out->push_back(c);
      ++i;
      if (in_string && c == '\\' && i < body.size()) {
        out->push_back(body[i++]);
      } else if (c == '"') {
        in_string = !in_string;
      }
      continue;
    }
    if (c != '-' && (c < '0' || c > '9')) {
      out->push_back(c);
      ++i;
      continue;
    }
    size_t j = i + 1;
    while (j < body.size() && (std::isdigit(static_cast<unsigned char>(body[j])) ||
                               std::string_view(".eE+-").find(body[j]) != std::string_view::npos)) {
      ++j;
    }
    const std::string_view number = body.substr(i, j - i);
    out->append(number);
    if (IsBigInteger(number)) {
      out->append(".0");
      widened = true;
    }
    i = j;
  }
  return widened;
}

// Parses a request body into `parser`. simdjson fails a whole document holding an integer beyond
// 64 bits (NUMBER_ERROR; BIGINT_ERROR in later versions), though it is valid JSON and vLLM
// accepts one in a field it ignores: a body that fails and holds one is parsed again with those
// integers written as doubles (WidenBigIntegers). A field the sim ignores then stays ignored, and
// one it reads as an integer finds a number out of its range (OutOfInt64). A body that parses
// is parsed once, as before; one that fails for another reason fails as before.
simdjson::error_code ParseBody(simdjson::dom::parser& parser, std::string_view body,
                               element* root) {
  // A padded copy reused across requests: simdjson reads up to SIMDJSON_PADDING bytes past the
  // end, and copying into warm memory is cheaper than the allocation parse() would make.
  thread_local std::string padded;
  padded.assign(body);
  padded.append(simdjson::SIMDJSON_PADDING, '\0');
  auto err = parser.parse(padded.data(), body.size(), false).get(*root);
  if (err == simdjson::SUCCESS || !WidenBigIntegers(body, &padded)) return err;
  const size_t size = padded.size();
  padded.append(simdjson::SIMDJSON_PADDING, '\0');
  return parser.parse(padded.data(), size, false).get(*root);
}

// +1: `v` is a whole number above INT64_MAX (a uint64_t, or a big integer ParseBody widened);
// -1: below INT64_MIN; 0: neither.
int OutOfInt64(element v) {
  if (v.is_uint64() && !v.is_int64()) return 1;
  double d;
  if (v.type() != element_type::DOUBLE || v.get_double().get(d) != simdjson::SUCCESS) return 0;
  return d >= 0x1p63 ? 1 : d <= -0x1p63 ? -1 : 0;
}

// Reads an optional positive integer field of at most `max` (null means absent).
bool ReadPositive(element v, const char* key, uint32_t max, std::optional<uint32_t>* out,
                  RequestError* error) {
  if (v.type() == element_type::NULL_VALUE) return true;
  int64_t n = 0;
  if (v.get_int64().get(n) != simdjson::SUCCESS || n < 1) {
    if (OutOfInt64(v) > 0) {
      return Fail(error,
                  std::string("'") + key + "' is more than this server's maximum of " +
                      std::to_string(max) + ".",
                  key);
    }
    return Fail(error, std::string("'") + key + "' must be a positive integer.", key);
  }
  if (static_cast<uint64_t>(n) > max) {
    return Fail(error,
                std::string("'") + key + "' is " + std::to_string(n) +
                    ", more than this server's maximum of " + std::to_string(max) + ".",
                key);
  }
  *out = static_cast<uint32_t>(n);
  return true;
}

// tool_choice "required" -> the first tool's name; {"type":"function","function":{"name":N}}
// -> N; "auto", "none", null -> nothing.
bool ReadForcedTool(element choice, const element* tools, std::string* out, RequestError* error) {
  std::string_view name;
  if (choice.type() == element_type::STRING) {
    std::string_view mode = choice.get_string().value_unsafe();
    if (mode != "required"sv) return true;
    simdjson::dom::array list;
    if (tools == nullptr || tools->get(list) != simdjson::SUCCESS || list.size() == 0 ||
        list.at(0)["function"]["name"].get(name) != simdjson::SUCCESS) {
      return Fail(error, "'tool_choice' is 'required' but 'tools' names no function.",
                  "tool_choice");
    }
  } else if (choice.type() == element_type::OBJECT) {
    if (choice["function"]["name"].get(name) != simdjson::SUCCESS) {
      return Fail(error,
                  "'tool_choice' must name a function: "
                  "{\"type\":\"function\",\"function\":{\"name\":...}}.",
                  "tool_choice");
    }
  } else {
    return true;
  }
  out->assign(name);
  return true;
}

}  // namespace

bool RenderChatMessages(std::string_view chat_body, std::string* prompt_text) {
  thread_local simdjson::dom::parser parser;
  element root, messages;
  RequestError error;
  prompt_text->clear();
  return ParseBody(parser, chat_body, &root) == simdjson::SUCCESS &&
         root["messages"].get(messages) == simdjson::SUCCESS &&
         RenderMessages(messages, prompt_text, &error);
}

bool ParseRequest(Endpoint endpoint, std::string_view body, const RequestLimits& limits,
                  SimRequest* out, RequestError* error) {
  thread_local simdjson::dom::parser parser;
  element root;
  if (auto err = ParseBody(parser, body, &root); err != simdjson::SUCCESS) {
    return Fail(error,
                std::string("The request body is not valid JSON: ") + simdjson::error_message(err),
                "");
  }
  if (root.type() != element_type::OBJECT) {
    return Fail(error, "The request body must be a JSON object.", "");
  }
  out->endpoint = endpoint;
  out->prompt_text.clear();
  out->model.clear();

  // One pass over the fields (a keyed lookup would scan the object once per key).
  element model, messages, prompt, stream, stream_options, n, max_tokens, max_completion_tokens,
      tools, tool_choice, seed;
  bool has_model = false, has_messages = false, has_prompt = false, has_stream = false,
       has_stream_options = false, has_n = false, has_max_tokens = false,
       has_max_completion_tokens = false, has_tools = false, has_tool_choice = false,
       has_seed = false;
  const simdjson::dom::object fields = root.get_object().value_unsafe();
  for (simdjson::dom::key_value_pair field : fields) {
    const std::string_view k = field.key;
    if (k == "model"sv) {
      model = field.value, has_model = true;
    } else if (k == "messages"sv) {
      messages = field.value, has_messages = true;
    } else if (k == "prompt"sv) {
      prompt = field.value, has_prompt = true;
    } else if (k == "stream"sv) {
      stream = field.value, has_stream = true;
    } else if (k == "stream_options"sv) {
      stream_options = field.value, has_stream_options = true;
    } else if (k == "n"sv) {
      n = field.value, has_n = true;
    } else if (k == "max_tokens"sv) {
      max_tokens = field.value, has_max_tokens = true;
    } else if (k == "max_completion_tokens"sv) {
      max_completion_tokens = field.value, has_max_completion_tokens = true;
    } else if (k == "tools"sv) {
      tools = field.value, has_tools = true;
    } else if (k == "tool_choice"sv) {
      tool_choice = field.value, has_tool_choice = true;
    } else if (k == "seed"sv) {
      seed = field.value, has_seed = true;
    }
  }

  if (has_model && model.type() != element_type::NULL_VALUE) {
    std::string_view name;
    if (model.get(name) != simdjson::SUCCESS) {
      return Fail(error, "'model' must be a string.", "model");
    }
    out->model.assign(name);
  }
  if (endpoint == Endpoint::kChatCompletions) {
    if (!has_messages) return Fail(error, "Missing required parameter: 'messages'.", "messages");
    if (!RenderMessages(messages, &out->prompt_text, error)) return false;
  } else {
    if (!has_prompt) return Fail(error, "Missing required parameter: 'prompt'.", "prompt");
    if (!RenderPrompt(prompt, &out->prompt_text, error)) return false;
  }

  out->stream = false;
  if (has_stream && stream.type() != element_type::NULL_VALUE &&
      stream.get(out->stream) != simdjson::SUCCESS) {
    return Fail(error, "'stream' must be a boolean.", "stream");
  }
  out->include_usage = false;
  if (has_stream_options && stream_options.type() == element_type::OBJECT) {
    element iu;
    if (stream_options["include_usage"].get(iu) == simdjson::SUCCESS &&
        iu.type() != element_type::NULL_VALUE && iu.get(out->include_usage) != simdjson::SUCCESS) {
      return Fail(error, "'stream_options.include_usage' must be a boolean.", "stream_options");
    }
  }
  std::optional<uint32_t> choices;
  if (has_n && !ReadPositive(n, "n", limits.max_n, &choices, error)) return false;
  out->n = choices.value_or(1);
  out->max_tokens.reset();
  out->length_cap.reset();
  if (has_max_completion_tokens && !ReadPositive(max_completion_tokens, "max_completion_tokens",
                                                 limits.max_model_len, &out->max_tokens, error)) {
    return false;
  }
  if (!out->max_tokens && has_max_tokens &&
      !ReadPositive(max_tokens, "max_tokens", limits.max_model_len, &out->max_tokens, error)) {
    return false;
  }
  out->seed.reset();
  if (has_seed && seed.type() != element_type::NULL_VALUE) {
    int64_t value = 0;
    if (seed.get_int64().get(value) != simdjson::SUCCESS) {
      // vLLM's range (a torch long), in pydantic's words.
      const int out_of_range = OutOfInt64(seed);
      return Fail(error,
                  out_of_range > 0   ? "'seed' must be less than or equal to 9223372036854775807."
                  : out_of_range < 0 ? "'seed' must be greater than or equal to "
                                       "-9223372036854775808."
                                     : "'seed' must be an integer.",
                  "seed");
    }
    out->seed = value;
  }
  out->forced_tool.clear();
  if (endpoint == Endpoint::kChatCompletions && has_tool_choice) {
    return ReadForcedTool(tool_choice, has_tools ? &tools : nullptr, &out->forced_tool, error);
  }
  return true;
}

}  // namespace llmtap::sim
