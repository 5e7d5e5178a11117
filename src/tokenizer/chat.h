// OpenAI request bodies -> prompt text and ids, as an inference server would build them.
//
// Chat requests are rendered with a fixed, documented rendering per model family that follows
// the family's own chat template (tokenizer_config.json) for the messages that occur in
// practice; no Jinja is evaluated. A ChatStyle says which family and which of the template's
// variations apply; ChatStyleFromTemplate reads them off the model's template text.
//   kLlama3  Llama-3: <|begin_of_text|> then per message
//            <|start_header_id|>{role}<|end_header_id|>\n\n{content | trim}<|eot_id|>
//            then the generation prompt <|start_header_id|>assistant<|end_header_id|>\n\n.
//            `dated_system` (Llama-3.1 and later): a system turn always comes first,
//            "Cutting Knowledge Date: December 2023\nToday Date: 26 Jul 2024\n\n" followed by
//            the request's system message (trimmed) if it has one; `tool` messages become
//            `ipython` turns and a tool call {"name": .., "parameters": ..}. Tool definitions
//            (`tools`) are not rendered for Llama.
//   kChatMl  Qwen2/2.5/3 (ChatML): <|im_start|>{role}\n{content}<|im_end|>\n per message and
//            <|im_start|>assistant\n; `tools` in a system header (tojson with Python's
//            ", "/": " separators), tool_calls as <tool_call> JSON, consecutive `tool`
//            messages in one user turn of <tool_response>s. `default_system` (Qwen2, Qwen2.5):
//            the system prompt used when the request has none. `thinking` (Qwen3): assistant
//            <think> reasoning kept only after the last user query, and
//            chat_template_kwargs.enable_thinking=false adding an empty <think></think>.
//   kPlain   GPT-2 and unknown families: the message contents joined by "\n".
// A content that is an array of parts contributes its text parts joined by "\n" (what vLLM
// does for string templates); null content is empty.
// Completions: `prompt` a string, an array of strings, an array of token ids, or an array of
// such arrays; ids are taken as they are, strings encoded with the tokenizer's special tokens
// (PromptSpecials, below) and concatenated.
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

struct ChatStyle {
  ChatFamily family = ChatFamily::kPlain;
  bool dated_system = false;   // kLlama3: Llama-3.1+ system header (above)
  bool thinking = false;       // kChatMl: Qwen3 reasoning rules (above)
  std::string default_system;  // kChatMl: system prompt when the request has none
  std::string source;          // where the style came from, for Describe()

  // e.g. "qwen/chatml, default system prompt, from tokenizer_config.json"
  std::string Describe() const;
};

// The style a chat template renders: its family from the role markers it emits, and its
// variations from the text it holds ("Cutting Knowledge Date", "<think>", a literal system
// turn it falls back on). kPlain when the template has neither marker set.
ChatStyle ChatStyleFromTemplate(std::string_view chat_template);

// Renders `body`'s `messages` into *text (with the generation prompt). False with *error when
// the body is not a JSON object with a `messages` array.
bool RenderChat(const ChatStyle& style, std::string_view body_json, std::string* text,
                std::string* error);

// The special tokens a server's tokenizer puts around a completions prompt string: vLLM
// tokenizes `prompt` with add_special_tokens=True, which applies tokenizer.json's post-processor
// (Llama-3's TemplateProcessing: <|begin_of_text|> first; Qwen and GPT-2: nothing). A chat
// template writes its own, and token-id prompts are taken as they are.
struct PromptSpecials {
  std::vector<uint32_t> prefix;
  std::vector<uint32_t> suffix;
};

// The Tokenizer::EncodeRequest contract (tokenizer.h) with `tok` encoding the text; each string
// of a completions prompt gets `specials` around it.
bool EncodeRequestBody(const Tokenizer& tok, const ChatStyle& style,
                       const PromptSpecials& specials, std::string_view body_json,
                       std::vector<uint32_t>* ids, std::string* error);

}  // namespace llmtap::tokenizer
