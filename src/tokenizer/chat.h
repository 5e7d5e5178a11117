// OpenAI request bodies -> prompt text and ids, as an inference server would build them.
//
// Chat requests are rendered with a fixed, documented rendering per model family that follows
// the family's own chat template (tokenizer_config.json) for the messages that occur in
// practice; no Jinja is evaluated:
//   kLlama3  Llama-3(.0): <|begin_of_text|> then per message
//            <|start_header_id|>{role}<|end_header_id|>\n\n{content | trim}<|eot_id|>
//            then the generation prompt <|start_header_id|>assistant<|end_header_id|>\n\n.
//            (Llama-3.1+ templates add a dated system header: not rendered here.)
//   kChatMl  Qwen2/Qwen3 (ChatML): <|im_start|>{role}\n{content}<|im_end|>\n per message and
//            <|im_start|>assistant\n; following the Qwen3 template: `tools` in a system
//            header (tojson with Python's ", "/": " separators), assistant <think> reasoning
//            kept only after the last user query, tool_calls as <tool_call> JSON, consecutive
//            `tool` messages in one user turn of <tool_response>s, and
//            chat_template_kwargs.enable_thinking=false adding an empty <think></think>.
//   kPlain   GPT-2 and unknown families: the message contents joined by "\n".
// A content that is an array of parts contributes its text parts joined by "\n" (what vLLM
// does for string templates); null content is empty.
// Completions: `prompt` a string, an array of strings, an array of token ids, or an array of
// such arrays; ids are taken as they are, strings encoded and concatenated.
//
// Pure functions; any thread may call them (each thread uses its own JSON parser).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace llmtap::tokenizer {

class Tokenizer;

enum class ChatFamily { kPlain, kLlama3, kChatMl };

// Renders `body`'s `messages` into *text (with the generation prompt). False with *error when
// the body is not a JSON object with a `messages` array.
bool RenderChat(ChatFamily family, std::string_view body_json, std::string* text,
                std::string* error);

// The Tokenizer::EncodeRequest contract (tokenizer.h) with `tok` encoding the text.
bool EncodeRequestBody(const Tokenizer& tok, ChatFamily family, std::string_view body_json,
                       std::vector<uint32_t>* ids, std::string* error);

}  // namespace llmtap::tokenizer
