// Text helpers for the simulator: a cheap approximate tokenizer, stable 64-bit hashes, the
// pseudo-word vocabulary that generated text is drawn from, and number formatting.
// Everything here is a pure function of its arguments; any thread may call it.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/json_escape.h"
#include "common/mix64.h"

namespace llmtap::sim {

// A fast 64-bit hash of bytes (word-at-a-time, then a full 64-bit mix). Stable across builds.
uint64_t HashBytes(std::string_view bytes, uint64_t seed = 0);
// Hashes are chained with llmtap::Mix64 (common/mix64.h, splitmix64's finalizer).
inline uint64_t HashCombine(uint64_t a, uint64_t b) {
  return Mix64(a ^ Mix64(b + 0x9e3779b97f4a7c15ULL));
}
// A cheap order-dependent fold of already well-mixed values (token hashes) into a running hash;
// finish with Mix64 when the result must spread well.
inline uint64_t Fold(uint64_t h, uint64_t v) {
  h = (h ^ v) * 0x9e3779b97f4a7c15ULL;
  return h ^ (h >> 29);
}

// Approximate tokens of `text`, appended to the vectors: the hash of each token's bytes and the
// byte offset where it begins (it ends where the next begins, or at text.size()).
// Rules, chosen to land near BPE tokenizers (about 4-5 bytes a token on English prose):
//   - a run of letters (ASCII letters and any non-ASCII byte) is cut into pieces of at most
//     6 bytes, never inside a UTF-8 sequence; one space right before it belongs to the first piece;
//   - a run of digits is cut into groups of 3;
//   - a run of whitespace is one token (less the space that joins the word after it);
//   - `<|name|>` (chat-template markers) is one token;
//   - any other byte is one token.
// Equal token strings always get equal hashes, wherever they occur, so n-grams of prompt and
// generated text can be compared by hash.
void ApproxTokenize(std::string_view text, std::vector<uint64_t>* hashes,
                    std::vector<uint32_t>* offsets);
// The number of approximate tokens in `text`, without materialising them.
size_t CountApproxTokens(std::string_view text);
// Whether the tokens of `a` followed by those of `b` are the tokens of the text a + b: false when
// ApproxTokenize would join them across the seam (letters after letters, whitespace after
// whitespace, digits after digits, ...).
bool TokensStayApart(std::string_view a, std::string_view b);
// A token's 32-bit id (what proposers and `llmtap specdec --tokenizer sim` compare) from its
// ApproxTokenize hash.
inline uint32_t TokenId(uint64_t hash) { return static_cast<uint32_t>(hash ^ (hash >> 32)); }

// The pseudo-word vocabulary: kVocabSize short words (2-6 lowercase letters), each one
// approximate token when written with a leading space. Word i is the same in every build.
inline constexpr size_t kVocabSize = 4096;
std::string_view VocabWord(size_t i);  // without the leading space

// JSON string escaping (AppendJsonEscaped) lives in common/json_escape.h, hex (AppendHex) in
// common/hex.h.
void AppendUint(std::string* out, uint64_t v);

}  // namespace llmtap::sim
