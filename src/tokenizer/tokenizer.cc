#include "tokenizer/tokenizer.h"

#include <filesystem>
#include <fstream>
#include <sstream>

#include "tokenizer/bpe.h"
#include "tokenizer/builtin.h"

namespace llmtap::tokenizer {

std::unique_ptr<Tokenizer> Tokenizer::Load(std::string_view spec, std::string* error) {
  if (spec == "builtin") return MakeBuiltinTokenizer();
  std::filesystem::path path(spec);
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) path /= "tokenizer.json";
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    *error = path.string() +
             ": cannot open (expected \"builtin\", a tokenizer.json, or a "
             "directory holding one)";
    return nullptr;
  }
  std::ostringstream contents;
  contents << in.rdbuf();
  if (in.bad()) {
    *error = path.string() + ": read error";
    return nullptr;
  }
  return BpeTokenizer::FromJson(contents.str(), path.string(), error);
}

}  // namespace llmtap::tokenizer
