// The simulator's own tokenizer as a tokenizer::Tokenizer: `llmtap specdec --tokenizer sim`.
// Requests are rendered into prompt text exactly as `llmtap sim` renders them (request.h), and
// text is split by ApproxTokenize (text.h), each token's id being TokenId of its hash. The ids
// are the ones the simulator's speculative-decoding model compares, so `llmtap specdec` over a
// capture of the simulator's responses replays the very tokens the simulator counted (its
// generated text splits back into its own tokens: generator.h). The ids mean nothing to a real
// model, Decode returns "", and there is no end-of-turn token (the simulator emits none).
//
// Threads: stateless; any thread may call it.
#pragma once

#include <memory>

#include "tokenizer/tokenizer.h"

namespace llmtap::sim {

std::unique_ptr<tokenizer::Tokenizer> MakeSimTokenizer();

// A tokenizer flag's value: "sim" (this one), else as tokenizer::Tokenizer::Load takes it.
std::unique_ptr<tokenizer::Tokenizer> LoadTokenizerOrSim(std::string_view spec, std::string* error);

}  // namespace llmtap::sim
