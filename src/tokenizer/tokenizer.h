// Tokenizer: turns text (and OpenAI request bodies) into the token ids a model's server would
// see. Two kinds: the model's own Hugging Face `tokenizer.json` (byte-level BPE: Llama-3,
// Qwen2/3, GPT-2 families), and "builtin", an approximation that needs no files.
//
// Threads: a loaded Tokenizer is immutable; every const method may be called from any number
// of threads at once.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace llmtap::tokenizer {

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;

  // `spec` is "builtin", a path to a tokenizer.json, or a directory holding one. A
  // tokenizer_config.json beside it supplies the model's chat template, from which the chat
  // rendering is chosen (chat.h); without it, the added tokens decide. Returns nullptr with a
  // reason in *error that names the file and, for an unsupported tokenizer, its
  // model/pre-tokenizer type.
  static std::unique_ptr<Tokenizer> Load(std::string_view spec, std::string* error);

  // Text -> ids as Hugging Face `encode(text, add_special_tokens=False)` gives them (added
  // and special tokens that appear literally in the text are matched). Appends to *ids.
  // Any bytes are accepted (invalid UTF-8 included).
  virtual void Encode(std::string_view text, std::vector<uint32_t>* ids) const = 0;

  // Ids -> text (byte-level decoding; an id out of range decodes to nothing).
  virtual std::string Decode(std::span<const uint32_t> ids) const = 0;

  // An OpenAI request body -> the prompt's ids as the server would tokenize them:
  //   chat ("messages"): rendered through the model family's chat template with the
  //     generation prompt (see the implementation for the rendering per family);
  //   completions ("prompt"): a string, or an array of token ids taken as is, or an array
  //     of strings (their ids concatenated).
  // Appends to *ids. Returns false with *error when the body has neither, or is not JSON.
  virtual bool EncodeRequest(std::string_view body_json, std::vector<uint32_t>* ids,
                             std::string* error) const = 0;

  // The token a chat response ends on when the model stops by itself (finish_reason "stop"),
  // for replays that must count it as generated (`llmtap specdec`): the chat family's
  // end-of-turn marker (<|eot_id|>, <|im_end|>), else tokenizer_config.json's eos_token when it
  // is one token. nullopt when unknown (builtin, GPT-2 without a config).
  virtual std::optional<uint32_t> EndOfTurnId() const { return std::nullopt; }

  // One line for summaries, e.g. "tokenizer.json: byte-level BPE, 128256 ids (llama3 family)".
  virtual std::string Describe() const = 0;
};

}  // namespace llmtap::tokenizer
