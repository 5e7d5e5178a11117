// llama.cpp's draft-free n-gram speculative decoding as llama-server 0.7.0 (b11669, Debian's
// llama.cpp-tools 1:0.7.0+dfsg-2) runs it, and the replay of its per-request counters
// `timings.draft_n` / `timings.draft_n_accepted` from a request's tokens (issue #47).
//
// ## The server's rules, as read (our own words and code; no llama.cpp code is copied)
//
// Sources (the Debian source package could not be downloaded; each file was tied to the binary
// by its log strings and mangled signatures; no commit pins this build, so functions, not line
// numbers, are named; the full account is /work/ngram-research/SPEC.md of issue 47):
//   [NM] common/ngram-map.cpp, ngram-map.h: common_ngram_simple_draft, common_ngram_map_begin,
//        common_ngram_map_draft, common_ngram_map_accept.
//   [SP] common/speculative.cpp: common_speculative_draft (the cut to n_max), the ngram-simple
//        and ngram-map-k implementations (one map per slot, made at start-up, never reset;
//        `accept` reaches the map only when its draft was used).
//   [SC] tools/server/server-context.cpp (copies of the same era): server_slot::get_n_draft_max,
//        the generation step (draft, verify [sampled, draft...], count, accept).
// Validated: 148 of 148 requests of the cycle model (--parallel 1, temperature 0) gave the
// server's exact (draft_n, draft_n_accepted) at four settings (testing/llamacpp_server_counts.txt,
// llamacpp_test.cc).
//
// The loop ([SC]), one request on one slot. H = the slot's history: the prompt as the slot holds
// it (BOS first for a text prompt: the caller's job) and the output tokens accepted so far; s =
// the last sampled token, not yet in H.
//   L1. The first output token is sampled from the prompt; it gets no draft. The map modes'
//       begin(prompt) runs before it.
//   L2. Each later step: n_draft_max = n_ctx_slot - |H| - 2 (skipped when n_ctx is 0 here:
//       unknown) and, when n_remaining = n_predict - n_decoded > 0 (n_decoded counts s), also
//       <= n_remaining - 1. n_draft_max <= 0: no draft, and the proposer is not asked. So the
//       last token of a length-limited request never drafts. No n_predict (max_tokens absent):
//       only the context term.
//   L3. The proposer drafts from (H, s); the draft is cut to n_draft_max.
//   L4. A non-empty draft d is verified: [s, d...] decoded, the accepted count a is the longest
//       prefix of d equal to the target's tokens (greedy, or the tokens it really sampled:
//       n-gram drafts carry no probabilities). draft_n += |d|, draft_n_accepted += a, and the
//       proposer's accept(a). An empty draft is a plain decode step and counts nothing.
//   L5. H += [s] + the a accepted tokens; s = the target's next token. No back-off after a
//       rejection, no minimum draft length at server level (--spec-draft-n-min/max apply to
//       draft models only).
//   A request that made no draft has no draft_n keys in `timings` (read 0).
//
// ngram-simple ([NM] common_ngram_simple_draft; stateless), L = |H|, n = size_n, m = size_m:
//   S1. L <= n + m + 1: no draft.
//   S2. The key is H's last n - 1 tokens then s.
//   S3. Search j from L - n - 1 down to 1 (position 0 is never a match): the first (most recent)
//       j with H[j, j+n) == key wins. The match may overlap the key.
//   S4. c = min(m, L - (j + n)) tokens follow it in H; c < n: no draft (dropped). Else the draft
//       is H[j+n, j+n+c).
//   --spec-ngram-simple-min-hits is accepted by the server and ignored.
//
// ngram-map-k and ngram-map-k4v ([NM] common_ngram_map_*): one map per slot, kept across the
// slot's requests for the server's life. It holds POSITIONS into the history, not tokens: a key
// list {key_idx, stat_idx, key_num, values[4] {value_idx, value_num, n_accepted}}, a 2^18-slot
// hash table hash(n-gram) -> position (0: empty), key_map_last_idx (the highest position hashed),
// size_last_begin (the last prompt's length) and idx_last_check (the last history length seen).
//   begin(prompt), P = |prompt|:
//   B1. cleanup = size_last_begin; if it exceeds P it becomes P - n - m (0 if P <= n + m).
//   B2. Only if P < idx_last_check (the prompt is shorter than the last request's history):
//       hash slots holding a position >= cleanup are emptied, key_map_last_idx = cleanup - 1
//       (or 0), keys with key_idx >= cleanup are deleted; k4v also deletes values with
//       value_idx >= cleanup (shifting the later ones left) and keys left without values.
//   B3. idx_last_check = size_last_begin = P. A prompt at least as long as the last history
//       keeps everything: old positions are read against the new history.
//   draft(H, s), L = |H|:
//   D1. L < 2n + m: no draft (nothing else happens). Else idx_last_check = L; key = H's last
//       n - 1 tokens then s.
//   D2. The match: (a) the hash slot of the key (hash h = h * 2654435761 + token over its n
//       tokens, 32-bit, mod 2^18), if its position p != 0, p < L - n - m - 1 and H[p, p+n) ==
//       key; else (b) j from size_last_begin - n - m - 1 down to key_map_last_idx + 1 (when
//       size_last_begin > n + m + 1), the first j with H[j, j+n) == key; else (c) j from
//       L - n - m - 1 down while j > size_last_begin and j > key_map_last_idx.
//   D3. Then the new positions are hashed, each into an empty slot only (the first position
//       stored for a slot is kept for good): (size_last_begin - n - m - 1 .. key_map_last_idx]
//       descending (when size_last_begin > n + m + 1), then (L - n - m - 1 .. max(
//       size_last_begin, key_map_last_idx)] descending; key_map_last_idx = max(itself,
//       L - n - m - 1).
//   D4. No match: no draft. Else the key entry is the first in the list whose H[key_idx, +n)
//       equals the key (a new one {key_idx = match, all values' n_accepted = m} is appended
//       when none does); key_num += 1 (capped at 16380).
//   D5. map-k: the draft is H[match + n, + min(m, values[0].n_accepted)). min_hits is not
//       checked. The match always leaves m tokens after it, so the draft is never cut by H's end.
//   D6. map-k4v: key_num < min_hits: no draft. Else, for every i in [stat_idx, match] where the
//       key occurs, the m tokens after it are counted into the first of the 4 values that is
//       empty (it takes value_idx = i + n, n_accepted = m) or holds the same m tokens; counts
//       are capped at 16380; then stat_idx = match. The value with the highest count (the first
//       on ties) wins unless the others' sum is > 0 and the winner's count < 2 x that sum (no
//       draft). The draft is H[match + n, + min(m, winner's n_accepted)): the tokens after the
//       MATCH, not after the stored value.
//   accept(a) (only after a non-empty draft, L4): the n_accepted of the value that drafted = a.
//       Later drafts of that key are capped at it, in later requests too: a key whose draft was
//       wholly rejected never drafts again.
//
// ## This library's replay
//   - `prompt` must be the ids as the slot held them: llama-server tokenizes a text prompt with
//     BOS (the model's add_bos_token) and applies the chat template to chat requests; token-id
//     prompts are taken as they are. `response` is every generated token, in order.
//   - A draft position past the response's end counts as drafted and not accepted (as in
//     greedy.h); the server would have verified it against the model's next token. A response
//     that ran to n_predict has none: L2 keeps drafts inside it.
//   - The map modes need every request the slot served since the server started, in order:
//     one LlamacppProposer per slot, Simulate per request in the order served (with --parallel 1,
//     capture order). Warm-up traffic that generated tokens is part of that history.
//   - Where a stale position reaches past the current history (a key or value stored by an
//     earlier, longer request) the server reads past its vector; here that comparison is a
//     mismatch (as the reference simulator of issue 47 does). Never seen in the validation.
//   - Not modelled: ngram-mod and ngram-cache, several --spec-type at once, checkpointed
//     (recurrent or hybrid) models, context shift, stop strings that end a request inside an
//     accepted draft.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "specdec/greedy.h"

namespace llmtap::specdec {

enum class LlamacppMode { kNgramSimple, kNgramMapK, kNgramMapK4v };
// "ngram-simple", "ngram-map-k", "ngram-map-k4v" (llama-server's --spec-type names).
std::string_view LlamacppModeName(LlamacppMode mode);

struct LlamacppOptions {
  LlamacppMode mode = LlamacppMode::kNgramSimple;
  uint32_t size_n = 12;   // --spec-ngram-{simple,map-k,map-k4v}-size-n, 1..1024
  uint32_t size_m = 48;   // --spec-ngram-*-size-m, 1..1024
  uint32_t min_hits = 1;  // --spec-ngram-map-k4v-min-hits (the other modes ignore it), >= 1
  uint64_t n_ctx = 0;     // the slot's context (-c / --parallel); 0: unknown, no cut (L2)
  Status Validate() const;
};

// One slot's proposer: its map (the map modes) and the replay of its requests, in order.
class LlamacppProposer {
 public:
  explicit LlamacppProposer(const LlamacppOptions& options);  // options must be valid
  const LlamacppOptions& options() const { return options_; }

  // Replays one request served by this slot (L1-L5): draft_tokens = draft_n, accepted_tokens =
  // draft_n_accepted, drafts = the verify steps with a draft; accepted_per_pos has size_m
  // entries. `n_predict`: the request's max_tokens (nullopt: none). The map modes' state
  // carries over to the next call. With `trace`, every step after the first token is recorded.
  SpecStats Simulate(std::span<const uint32_t> prompt, std::span<const uint32_t> response,
                     std::optional<uint64_t> n_predict, std::vector<SimStep>* trace = nullptr);

  // The server's slot restarted: an empty map.
  void Reset();

  // The proposers alone, for tests: the draft for history `h` and sampled token `s`.
  void Begin(std::span<const uint32_t> prompt);
  void Draft(std::span<const uint32_t> h, uint32_t s, std::vector<uint32_t>* draft);
  void Accept(uint32_t accepted);

 private:
  static constexpr int kValues = 4;
  struct Value {
    size_t idx = 0;  // where its m tokens start; 0: empty
    uint32_t num = 0;
    uint32_t n_accepted = 0;
  };
  struct Key {
    size_t idx = 0;  // where its n tokens start
    size_t stat_idx = 0;
    uint32_t num = 0;
    std::array<Value, kValues> values{};
  };

  void DraftSimple(std::span<const uint32_t> h, uint32_t s, std::vector<uint32_t>* draft) const;
  void DraftMap(std::span<const uint32_t> h, uint32_t s, std::vector<uint32_t>* draft);
  uint32_t HashAt(std::span<const uint32_t> tokens, size_t start) const;

  LlamacppOptions options_;
  std::vector<Key> keys_;
  std::vector<uint32_t> key_map_;  // 2^18 positions, 0: empty
  size_t key_map_last_idx_ = 0;
  size_t size_last_begin_ = 0;
  size_t idx_last_check_ = 0;
  bool last_draft_created_ = false;
  size_t last_draft_key_ = 0;
  int last_draft_value_ = 0;
  std::vector<uint32_t> history_, key_, draft_;  // Simulate's scratch
};

}  // namespace llmtap::specdec
