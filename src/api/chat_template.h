// The chat template the simulator renders conversations with, whatever API they came by (OpenAI
// chat completions, Anthropic messages): a ChatML-like text, so that one conversation sent
// through either API is the same prompt (the same approximate tokens, prefix-cache blocks and
// generated answer). Each API walks its own message shape and writes it with these pieces.
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

// The open assistant turn the answer continues: ends every rendered conversation.
inline void AppendGenerationPrompt(std::string* out) { AppendTurnStart("assistant", out); }

// Content the sim does not read (images, audio, files): "<|TYPE|>", a fixed placeholder (its
// type cut to 24 bytes), so it counts a few prompt tokens.
inline void AppendPlaceholder(std::string_view type, std::string* out) {
  out->append("<|");
  out->append(type.substr(0, 24));
  out->append("|>");
}

}  // namespace llmtap::api
