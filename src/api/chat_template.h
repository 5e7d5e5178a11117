// The ChatML-like template the simulator renders a conversation with, one place for every API
// that carries one (chat/completions messages, the Responses API's input items, Anthropic's
// Messages API's system and messages), so the same conversation sent through any of them
// renders to the same prompt text (the same approximate tokens, prefix-cache blocks and
// generated answer):
//   <|im_start|>ROLE\nCONTENT<|im_end|>\n ... <|im_start|>assistant\n
// Each API walks its own message shape and writes it with these pieces. An assistant turn's
// tool calls follow its content as their JSON text; a content part that is not text (an image,
// audio, a file) is a placeholder <|TYPE|>, so it counts a few tokens.
#pragma once

#include <string>
#include <string_view>

namespace llmtap::api {

// "<|im_start|>ROLE\n": a turn's opening.
inline void AppendTurnStart(std::string_view role, std::string* out) {
  out->append("<|im_start|>");
  out->append(role);
  out->push_back('\n');
}

// "<|im_end|>\n": a turn's end.
inline void AppendTurnEnd(std::string* out) { out->append("<|im_end|>\n"); }

// The opening of the turn the model writes (the end of every prompt).
inline void AppendGenerationPrompt(std::string* out) { AppendTurnStart("assistant", out); }

// A content part of type `type` that is not text (images, audio, files): "<|TYPE|>", a fixed
// placeholder (its type cut to 24 bytes).
inline void AppendPartPlaceholder(std::string_view type, std::string* out) {
  out->append("<|");
  out->append(type.substr(0, 24));
  out->append("|>");
}

}  // namespace llmtap::api
