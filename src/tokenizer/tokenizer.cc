#include "tokenizer/tokenizer.h"

#include <simdjson.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "tokenizer/bpe.h"
#include "tokenizer/builtin.h"

namespace llmtap::tokenizer {
namespace {

// The file's bytes, then `padding` zero bytes (counted in contents->size()). A regular file is
// read straight into place (a tokenizer.json is some 10 MB); anything else through a stream.
bool ReadFile(const std::filesystem::path& path, std::string* contents, size_t padding = 0) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return false;
  std::error_code ec;
  const bool regular = std::filesystem::is_regular_file(path, ec);
  const uintmax_t size = regular ? std::filesystem::file_size(path, ec) : 0;
  if (regular && !ec) {
    contents->assign(static_cast<size_t>(size) + padding, '\0');
    in.read(contents->data(), static_cast<std::streamsize>(size));
    if (static_cast<uintmax_t>(in.gcount()) == size && in.peek() == std::char_traits<char>::eof()) {
      return !in.bad();
    }
    // The file changed size while read: start over through the stream.
    in.clear();
    in.seekg(0);
  }
  std::ostringstream out;
  out << in.rdbuf();
  *contents = out.str();
  contents->append(padding, '\0');
  return !in.bad();
}

// `read`(the value of tokenizer_config.json's top-level `key`), or "" when the file is not a JSON
// object or lacks the key. On-demand parsing touches only that field: these files often hold
// integers past 64 bits (model_max_length 1e30 written out), which a full parse would reject.
// The value's strings point into the parser's buffer and stay valid while `read` runs.
template <class Read>
std::string ConfigField(const std::string& config_json, std::string_view key, Read&& read) {
  simdjson::ondemand::parser parser;
  simdjson::padded_string padded(config_json);
  simdjson::ondemand::document doc;
  simdjson::ondemand::object root;
  simdjson::ondemand::value value;
  if (parser.iterate(padded).get(doc) || doc.get_object().get(root) ||
      root.find_field_unordered(key).get(value)) {
    return {};
  }
  return read(value);
}

// The chat template: `chat_template` as a string, or a list of {name, template} of which
// "default" (else the first) is the one servers use. Empty when the file has none.
std::string ChatTemplateOf(const std::string& config_json) {
  return ConfigField(config_json, "chat_template", [](simdjson::ondemand::value chat) {
    std::string_view text;
    if (!chat.get_string().get(text)) return std::string(text);
    simdjson::ondemand::array list;
    if (chat.get_array().get(list)) return std::string();
    std::string first;
    for (auto entry : list) {
      simdjson::ondemand::object e;
      if (entry.get_object().get(e)) continue;
      std::string_view name, t;
      const bool have_name = !e.find_field_unordered("name").get_string().get(name);
      if (e.find_field_unordered("template").get_string().get(t)) continue;
      if (have_name && name == "default") return std::string(t);
      if (first.empty()) first = std::string(t);
    }
    return first;
  });
}

// eos_token: a string, or an added-token object with `content`. Empty when absent.
std::string EosTokenOf(const std::string& config_json) {
  return ConfigField(config_json, "eos_token", [](simdjson::ondemand::value eos) {
    std::string_view text;
    if (!eos.get_string().get(text)) return std::string(text);
    simdjson::ondemand::object obj;
    if (!eos.get_object().get(obj) && !obj.find_field_unordered("content").get_string().get(text)) {
      return std::string(text);
    }
    return std::string();
  });
}

}  // namespace

std::unique_ptr<Tokenizer> Tokenizer::Load(std::string_view spec, std::string* error) {
  if (spec == "builtin") return MakeBuiltinTokenizer();
  std::filesystem::path path(spec);
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) path /= "tokenizer.json";
  std::string contents;
  if (!ReadFile(path, &contents, BpeTokenizer::kJsonPadding)) {
    *error = path.string() +
             ": cannot open or read (expected \"builtin\", a tokenizer.json, or a "
             "directory holding one)";
    return nullptr;
  }
  auto tok = BpeTokenizer::FromJson(
      std::string_view(contents).substr(0, contents.size() - BpeTokenizer::kJsonPadding),
      path.string(), error, /*padded=*/true);
  if (!tok) return nullptr;
  // The model's own chat template, when its tokenizer_config.json sits beside tokenizer.json,
  // says more than the added tokens do (a Qwen2.5 default system prompt, a Llama-3.1 header).
  std::string config;
  if (ReadFile(path.parent_path() / "tokenizer_config.json", &config)) {
    ChatStyle style = ChatStyleFromTemplate(ChatTemplateOf(config));
    if (style.family != ChatFamily::kPlain) {
      style.source = "tokenizer_config.json";
      tok->set_chat_style(std::move(style));
    }
    tok->set_end_of_turn(EosTokenOf(config));
  }
  return tok;
}

}  // namespace llmtap::tokenizer
