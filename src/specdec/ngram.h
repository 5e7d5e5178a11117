// The n-gram (prompt-lookup) speculative-decoding proposer with vLLM's semantics, and a replay
// of one request's decoding under greedy verification (issue #21).
//
// ## vLLM's rules, as read (our own words; no vLLM code is copied)
//
// Sources, read through a stored copy of github.com/vllm-project/vllm:
//   [P] vllm/v1/spec_decode/ngram_proposer.py @ adce4e9a528d7f79328075e195c855d28732ef13
//       (the newest version the index lists): NgramProposer.__init__ (l. 13-61), propose()
//       (l. 131-162), batch_propose_numba() (l. 169-195),
//       _find_longest_matched_ngram_and_propose_tokens() (l. 198-285). The older v1 text at
//       016e8ede870e3c087fdcdfb36ed3622112712f10 has the same matching function.
//   [S] vllm/v1/core/sched/scheduler.py @ b4622cf924bc72504aed99e486062d6633fde39e:
//       Scheduler.schedule() (the RUNNING-requests loop: the max_model_len cap on
//       num_new_tokens and the trim of spec_token_ids), update_from_output(),
//       update_draft_token_ids(), make_spec_decoding_stats(); utils.check_stop via
//       _update_request_with_output(). (Line numbers not pinned: read through a text index.)
//   [M] vllm/v1/spec_decode/metrics.py @ ee4ceaae5953d367d8edd2132fd86d6c42506e1e:
//       SpecDecodingStats.observe_draft() (l. 38-44), SpecDecodingLogging.log(),
//       SpecDecodingProm (the vllm:spec_decode_* counters).
//   [C] vllm/config/speculative.py (SpeculativeConfig.__post_init__): prompt_lookup_min and
//       _max both default to 5 when neither is given, one given copies the other; each >= 1 and
//       min <= max; num_speculative_tokens > 0.
//   [V0] vllm/spec_decode/ngram_worker.py @ 02f479a7ea086466bd03deb6f9e34be110def1de (the
//       removed V0 engine), for contrast only.
//
// Proposer ([P]). Let the context be the request's whole token history, prompt + every token
// generated so far (no window; batch_propose_numba slices token_ids_cpu[:num_tokens_no_spec],
// which the model runner has just extended with the step's sampled tokens). N = its length.
//   1. N < min_n: no draft.
//   2. k' = min(k, max_model_len - N); k' <= 0: no draft. (propose() also skips a request with
//      N >= max_model_len, and one that sampled no token this step, i.e. a prefill chunk.)
//   3. The n-gram is the LONGEST suffix of the context, of a length n in [min_n, max_n], that
//      also occurs earlier in the context: at a start s <= N - 1 - n, i.e. anywhere but the
//      suffix itself. Occurrences may OVERLAP the suffix (context 4 4 4, n = 2: s = 0 counts).
//      A longer n always wins over a shorter one, wherever the shorter one occurs.
//   4. Among the occurrences of that n-gram, the EARLIEST (smallest s) is used. (vLLM runs KMP
//      over the reversed context and on ties of the match length keeps the later reversed
//      position, which is the earlier forward one.)
//   5. The draft is the tokens after that occurrence, context[s + n, s + n + k'), TRUNCATED at
//      the end of the context: fewer than k' tokens when fewer follow (never padded; V0 padded
//      by repeating the last token, V1 does not). It is never empty when a match exists, since
//      s + n <= N - 1.
//   The defaults are min_n = max_n = 5 ([C]); vLLM has no default for k.
//
// Scheduler and verification ([S]), for one request, synchronous scheduling:
//   - The prefill step produces the first output token; the first draft is proposed after it
//     (context = prompt + that token). update_draft_token_ids() drops drafts of prefill chunks.
//   - Each later step feeds the last token plus the draft; num_new_tokens is capped at
//     max_model_len - 1 - num_computed_tokens (num_computed_tokens = N - 1), so the scheduled
//     draft is trimmed to max_model_len - 1 - N tokens (context + draft + the step's own token
//     <= max_model_len). A draft trimmed to nothing is not a draft: the step is a plain decode.
//     (This trim is one token tighter than the proposer's own cut in rule 2.)
//   - Greedy verification accepts the draft's leading tokens that equal the target's tokens;
//     the step emits accepted + 1 tokens (the +1 is the target's own token at the first
//     mismatch, or after the last draft token).
//   - Metrics ([S] update_from_output, [M]): a step whose scheduled draft is non-empty adds
//     num_drafts += 1, num_draft_tokens += draft length, num_accepted_tokens += accepted, and
//     num_accepted_tokens_per_pos[i] += 1 for i < accepted (position i counts only when 0..i
//     were all accepted). Counted BEFORE the stop check trims tokens past EOS, max_tokens or
//     max_model_len. Mean acceptance length = 1 + accepted / drafts ([M] log()).
//   - The request stops when its length reaches max_model_len (check_stop), so at most
//     max_model_len - prompt tokens are generated.
//
// ## This library's replay (Simulate), given the prompt's and the response's tokens
// (the loop is ReplayGreedy in greedy.h, shared with the suffix proposer)
//   - response[0] comes from the prefill step (no draft). Every later step: propose from
//     prompt + response[0, pos) by rules 1-5, trim to max_model_len - 1 - N as the scheduler
//     does, accept while draft[i] == response[pos + i], emit accepted + 1 tokens.
//   - End of the response: draft positions at or past the response's end are counted as
//     drafted and NOT accepted: the capture does not say what the model would have produced
//     there. vLLM (sync) verifies those positions against the model's real continuation and
//     may count some as accepted before the stop check trims them, so for a request cut by
//     max_tokens these figures are a lower bound on vLLM's accepted count. For a request that
//     ended on a stop token (EOS), append that token's id to `response` to reproduce vLLM's
//     step count exactly (the EOS token is generated by a step like any other); without it
//     the stop token is treated as the bonus token of the step that emitted the last text
//     token, or as beyond the response.
//   - With max_model_len > 0, response tokens past max_model_len - prompt.size() are ignored
//     (vLLM would have stopped there); `tokens` says how many were replayed.
//   - Not modelled: async scheduling's placeholders, structured-output draft filtering,
//     sampling parameters under which a server disables speculation for a request, and
//     rejection sampling at temperature > 0 (greedy acceptance only). Nor a cap by max_tokens:
//     [S] caps a synchronous step only by max_model_len, but other vLLM versions seen in the
//     index cap num_new_tokens at min(prompt + max_tokens, max_model_len) - 1 -
//     num_computed_tokens, under which a request cut by max_tokens never drafts past its end
//     (here its last step may draft past the end, counted as drafted, not accepted).
//
// ## Speed
// Propose(context) is one O(N + max_n) KMP pass, like vLLM's. Simulate keeps an incremental
// index instead (a hash table from each n-gram, min_n <= n <= max_n, to its first start,
// updated as tokens are appended), so a step costs O(max_n^2) at worst whatever N, and a
// request O(N * (max_n - min_n + 1)) for the index. Table hits are verified token by token and a
// hash collision falls back to a scan, so the index proposes exactly what Propose(context) does;
// ngram_test checks this against a brute-force reference on random streams.
//
// Not thread-safe: an NgramProposer holds its context and scratch buffers; use one per thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <utility>
#include <vector>

#include "common/status.h"
#include "specdec/greedy.h"  // SpecStats, SimStep, the replay loop

namespace llmtap::specdec {

struct NgramOptions {
  uint32_t min_n = 5;          // vLLM prompt_lookup_min
  uint32_t max_n = 5;          // vLLM prompt_lookup_max
  uint32_t k = 4;              // vLLM num_speculative_tokens (vLLM has no default)
  uint64_t max_model_len = 0;  // 0: no limit

  // InvalidArgument unless 1 <= min_n <= max_n and k >= 1 (what vLLM accepts).
  Status Validate() const;
};

class NgramProposer {
 public:
  // `options` must be valid (options.Validate().ok()).
  explicit NgramProposer(const NgramOptions& options);

  const NgramOptions& options() const { return options_; }

  // vLLM's draft for `context` (rules 1-5 above); `*draft` is overwritten, empty for none.
  // Independent of the incremental state below.
  void Propose(std::span<const uint32_t> context, std::vector<uint32_t>* draft) const;

  // Incremental use: the proposer keeps a context and an index over it.
  void Reset();                 // empty context
  void Reserve(size_t tokens);  // optional: room for this many tokens without regrowth
  void Append(uint32_t token);
  void Append(std::span<const uint32_t> tokens);
  std::span<const uint32_t> context() const { return context_; }
  // Same as Propose(context(), draft), without a pass over the context. Contexts are limited to
  // 2^32 - 1 tokens.
  void ProposeNext(std::vector<uint32_t>* draft) { ProposeNext(draft, options_.k); }
  // The same with num_speculative_tokens `k` instead of options().k.
  void ProposeNext(std::vector<uint32_t>* draft, uint32_t k);
  // The same with prompt_lookup_min..max = min_n..max_n, a range within options()' (the index
  // holds every n of options()' range): what a proposer with those options proposes.
  void ProposeNext(std::vector<uint32_t>* draft, uint32_t k, uint32_t min_n, uint32_t max_n);

  // Replays one request (see "This library's replay" above). Resets the incremental state.
  // With `trace`, also records every decode step there (overwritten).
  SpecStats Simulate(std::span<const uint32_t> prompt, std::span<const uint32_t> response,
                     std::vector<SimStep>* trace = nullptr);
  // Simulate at every k of `ks` (options().k is not used), one index for all (greedy.h
  // ReplayGreedySweep): *out[i] equals Simulate's with k = ks[i]. Needs max_model_len 0.
  void SimulateSweep(std::span<const uint32_t> prompt, std::span<const uint32_t> response,
                     std::span<const uint32_t> ks, std::vector<SpecStats>* out);
  // The same at points (ks[i], ranges[i]): n-gram ranges within options()' range share the index
  // (*out[i] equals Simulate's of a proposer with k ks[i] and that range).
  void SimulateSweep(std::span<const uint32_t> prompt, std::span<const uint32_t> response,
                     std::span<const uint32_t> ks,
                     std::span<const std::pair<uint32_t, uint32_t>> ranges,
                     std::vector<SpecStats>* out);

  // Tests only: keeps just the low `bits` bits of every hash (>= 1), so that collisions are
  // frequent and the verified fallback path is exercised. 64 restores full hashes. Resets.
  void SetHashBitsForTesting(int bits);

 private:
  static constexpr uint32_t kNone = UINT32_MAX;

  uint64_t Key(uint32_t n) const;  // the table key of the context's n-token suffix
  void Insert(uint64_t key, uint32_t n, uint32_t start);
  uint32_t Find(uint64_t key, uint32_t n) const;  // first n-token start under `key`, or kNone
  uint32_t EarliestEarlier(uint32_t n) const;  // earliest start < N - n of the n-suffix, or kNone
  uint32_t ScanEarliestEarlier(uint32_t n) const;
  void Prepare(size_t tokens);  // empty context, table sized for `tokens` tokens
  void Rehash(size_t capacity);
  size_t CapacityFor(size_t tokens) const;

  struct Slot {
    uint64_t key = 0;  // 0: empty
    uint32_t start = 0;
    uint32_t n = 0;
  };

  NgramOptions options_;
  std::vector<uint32_t> context_;
  // suffix_hash_[n - 1]: polynomial hash of the context's last n tokens, n = 1..max_n.
  std::vector<uint64_t> suffix_hash_;
  // n-gram key -> start of its first occurrence. Open addressing, linear probing.
  std::vector<Slot> slots_;
  size_t used_ = 0;
  uint64_t key_mask_ = ~uint64_t{0};
  std::vector<uint32_t> draft_;  // Simulate's scratch
  // earliest_[n]: EarliestEarlier(n) for the context at `version` (changed by every append).
  struct Earliest {
    uint64_t version = 0;
    uint32_t start = kNone;
  };
  std::vector<Earliest> earliest_;
  uint64_t version_ = 0;
};

// One-shot replay with a fresh proposer.
SpecStats Simulate(const NgramOptions& options, std::span<const uint32_t> prompt,
                   std::span<const uint32_t> response, std::vector<SimStep>* trace = nullptr);

}  // namespace llmtap::specdec
