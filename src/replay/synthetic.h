// SyntheticPrompts: text for hashed Mooncake rows (hash_ids + input_length, no prompt). Each hash
// id stands for one KV-cache block of `block_size` tokens; its text is a deterministic function
// of the id alone, so two rows that share leading ids share leading text (and a server's prefix
// cache sees the same reuse as with the original prompts).
//
// The text is built from words that are exactly one token each (with their leading space) under
// the given tokenizer, so a block of k words re-tokenizes to k tokens: the prompt's length is
// input_length tokens with that tokenizer (and close to it with the model's own one when the
// tokenizer is only approximate, as "builtin" is).
//
// Threads: immutable after Make(); any thread may call the const methods.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace llmtap::replay {

class SyntheticPrompts {
 public:
  // Null with *error when too few candidate words are single tokens under `tok`.
  static std::unique_ptr<SyntheticPrompts> Make(const tokenizer::Tokenizer& tok,
                                                uint32_t block_size, std::string* error);

  // Appends the first `tokens` words of block `hash_id` (a block's words continue past
  // block_size when asked for more).
  void AppendBlock(uint64_t hash_id, uint64_t tokens, std::string* out) const;

  // The prompt of a hashed row: block i gets block_size tokens, the last one
  // input_length - (n-1)*block_size (at least 1; input_length below that is raised).
  std::string Prompt(std::span<const uint64_t> hash_ids, uint64_t input_length) const;

  uint32_t block_size() const { return block_size_; }
  size_t vocabulary() const { return words_.size(); }

 private:
  SyntheticPrompts(uint32_t block_size, std::vector<std::string_view> words)
      : block_size_(block_size), words_(std::move(words)) {}
  uint32_t block_size_;
  std::vector<std::string_view> words_;  // each with its leading space
};

}  // namespace llmtap::replay
