// The pre-tokenizer split regexes of the byte-level BPE families, as hand-written matchers.
// Hugging Face `tokenizers` runs these patterns with Oniguruma (leftmost match, alternatives
// tried in order, backtracking); they need \p{L}/\p{N}, a case-insensitive group and a
// `\s+(?!\S)` lookahead, which RE2 cannot do. Each matcher below reproduces the pattern's
// result exactly (see the alternative-by-alternative comments in pretokenizer.cc) and runs
// in one pass. Stateless; any thread may call them.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

namespace llmtap::tokenizer {

enum class SplitPattern {
  // GPT-2 (ByteLevel use_regex=true):
  //   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
  kGpt2,
  // Llama-3 (Split, Isolated):
  //   (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|
  //   ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
  kLlama3,
  // Qwen2/Qwen3: the Llama-3 pattern with \p{N} (one digit per piece) instead of \p{N}{1,3}.
  kQwen2,
};

// The pattern whose regex source (as written in tokenizer.json) is `regex`, if known.
std::optional<SplitPattern> RecognizeSplitRegex(std::string_view regex);
std::string_view SplitRegexSource(SplitPattern pattern);

// Splits `text` (any bytes; invalid UTF-8 sequences count as one "other" character each, as
// their U+FFFD would) into the pieces the regex matches, which tile the text. Appends each
// piece's end offset to *ends (the first piece starts at 0).
void PreTokenize(SplitPattern pattern, std::string_view text, std::vector<uint32_t>* ends);

}  // namespace llmtap::tokenizer
