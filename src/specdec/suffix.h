// The suffix-decoding speculative proposer (vLLM `method: suffix`, from Arctic Inference) with
// the reference's semantics, and the replay of a request under greedy verification (issue #21).
//
// ## The reference's rules, as read (our own words; no reference code is copied)
//
// Sources:
//   [T] github.com/snowflakedb/ArcticInference @ 9d4643881608178f0f58a33d1b61919ca246997f,
//       csrc/suffix_decoding/suffix_tree.cc (the same text at tags v0.1.0 and v0.1.2; vLLM asks
//       for arctic-inference 0.1.1): SuffixTree::append() (l. 294-504), remove() (l. 514-591),
//       speculate() (l. 593-622), _match_context() (l. 800-823), _speculate_path() (l. 825-853),
//       the sibling-order helpers _increment_count() (l. 188-228), _decrement_count()
//       (l. 230-291), _insert_into_siblings_before/after() (l. 72-159); suffix_tree.h (Node,
//       l. 29-87).
//   [A] the same commit, arctic_inference/suffix_decoding/cache.py: SuffixDecodingCache
//       start_request() (l. 120-161), add_active_response() (l. 180-215), stop_request()
//       (l. 163-178), speculate() (l. 235-310), _generate_seq_id() and _maybe_evict_requests()
//       (l. 312-347).
//   [V] github.com/vllm-project/vllm @ 044ac3a07ab371cdbfac2203b0cd12d877f9038f,
//       vllm/v1/spec_decode/suffix_decoding.py: SuffixDecodingProposer.__init__ and propose()
//       (the whole file); the GPU model runner hands it the step's valid sampled
//       tokens per request (gpu_model_runner.py, propose_draft_token_ids; read through a text
//       index, line numbers not pinned).
//   [C] vllm/config/speculative.py, SpeculativeConfig (fields suffix_decoding_*) and
//       _validate_suffix_decoding() (read through a text index, commit not pinned): defaults
//       max_tree_depth 24, max_cached_requests 10000, max_spec_factor 1.0, min_token_prob 0.1;
//       num_speculative_tokens defaults to max_tree_depth for this method; accepted values:
//       depth >= 1, cached requests >= 0 (0 disables the global tree), factor >= 0,
//       0 <= min_token_prob <= 1, num_speculative_tokens > 0.
//
// The tree ([T]). A tree holds sequences of tokens and, for every start position of every
// sequence, the path of that suffix cut at max_tree_depth (D) tokens. So every string u of at
// most D tokens that occurs in a held sequence is a position of the tree, and count(u) is its
// number of occurrences (across all sequences, overlaps included). The children of a position
// are the tokens that follow u somewhere, each with count(u c) <= count(u); the difference is
// the occurrences of u that end a sequence or reach depth D. The children are kept in a list in
// decreasing count, and the order among EQUAL counts is the reference's, which depends on the
// history of the counts:
//   - a new child (count 1) goes to the end of the list;
//   - a child whose count rises from c to c + 1 goes to the FRONT of the children that already
//     have c + 1 when it was the first of those with c, and to their END otherwise;
//   - a child whose count falls from c to c - 1 (a sequence removed) goes to the front of those
//     with c - 1; at 0 it is removed.
// (These are the moves of _increment_count / _decrement_count on the sibling list and its groups
// of equal counts.) The reference compresses unary paths into nodes; that changes nothing above.
//
// The draft ([T] speculate, _speculate_path; linear drafts, use_tree_spec false as vLLM calls
// it). Given a pattern p (the last tokens of the context) and a cap S on draft tokens:
//   for m = 1, 2, ..., |p| - 1 (never the whole pattern):
//     u = the last m tokens of p; if u is not in the tree, stop (longer ones are not either);
//     cap_m = min(S, int(float(m) * factor + offset + 1e-6)) (float arithmetic, the 1e-6 added
//       in double, truncated), at least 0; factor is max_spec_factor, offset max_spec_offset
//       (0: vLLM does not pass it);
//     walk from u: prob = 1 (a float); while the draft has fewer than cap_m tokens and
//       prob >= min_token_prob: take the FIRST child c of the current position (none: stop);
//       prob *= float(count(u c)) / float(count(u)) (exactly 1 inside a compressed node); if
//       prob < min_token_prob stop; append c with prob, score += prob; u = u c.
//       (The depth cap ends the walk: a position of depth D has no children.)
//     if score >= the best score so far (0 at first), this draft becomes the best, so among
//     equal scores the longer match wins, and an empty draft can replace an empty one.
//   Float details (prob, score, the ratio) follow the reference's float operations in the same
//   order, so the threshold and the comparisons fall the same way.
//
// The cache ([A]) and vLLM's use of it ([V]):
//   - Two kinds of trees: a per-request "prompt tree" and one global tree of responses.
//   - The first time vLLM proposes for a request (after its prefill step, which sampled the first
//     output token) it calls start_request(prompt): the prompt tree is built from the prompt;
//     unless max_cached_requests is 0, the request gets a slot in the global tree, and while more
//     than max_cached_requests requests hold a slot, the OLDEST (in order of start) other than
//     this one loses its slot and its response leaves the global tree (FIFO eviction).
//   - Every proposal first appends the step's sampled tokens (accepted draft tokens + the bonus
//     token) with add_active_response: to the prompt tree, which thus holds prompt + output so
//     far, i.e. the whole context, and to the request's own sequence in the global tree. So the
//     global tree holds the request's OWN output as it is generated, and other requests' outputs
//     (finished or, on a server, concurrent) with it.
//   - The pattern is the last min(N, D) tokens of the context (N = prompt + output so far); the
//     cap is S = min(num_speculative_tokens, max_model_len - N - 1). A request with
//     N >= max_model_len is skipped: no tokens appended, no draft.
//   - The draft is the prompt tree's if its score >= the global tree's, else the global tree's.
//   - A request that left the batch is stopped (its prompt tree dropped); its response stays in
//     the global tree until evicted.
//   - vLLM's scheduler trims the draft and counts the metrics as for the n-gram method (ngram.h).
//
// ## This library's replay
//   - Requests are replayed one after another, in the order Simulate is called (capture order):
//     each request's whole response enters the global tree before the next request starts, as on
//     a server that ran them one at a time. A server that runs requests concurrently interleaves
//     their outputs in the global tree; that is not modelled (nor are requests that fail after
//     prefill, or vLLM's drafts for tokens past a stop that it later trims).
//   - Simulate(prompt, response): start the request (eviction as above), append response[0] (the
//     prefill step's token), then the steps of ReplayGreedy (greedy.h; the same step, trim and
//     metric rules as ngram.h, including the end-of-response and max_model_len conventions):
//     before each proposal the previous step's emitted tokens are appended to both trees. After
//     the last step, its tokens are appended too (vLLM proposes once more after a request's final
//     step, not knowing it is final), unless the context has reached max_model_len. Then the
//     request is stopped; its response stays cached. A request with no response tokens to replay
//     (or whose prompt alone fills max_model_len - 1) never starts: no slot, no eviction.
//
// ## Data structures and speed
// Each tree is a compressed suffix tree with the depth cap: nodes in one array (32-bit indices),
// the children of nodes with two or more in one open-addressing table keyed by (node, token) (an
// only child is reached directly; a slot is 8 bytes, the child and its first token, the node
// being the child's parent; at most 3/4 full), each child list a doubly linked list with runs of
// equal counts (for the order rules in O(1)). An append's new child goes into the slot where its
// search ended. Appending a token updates the positions of the sequence's last D
// suffixes, except those that occur once: they are the longest ones, each the only user of a
// leaf that simply grows with the sequence ("open" leaves, closed when the suffix reaches depth
// D or the sequence stops), so an append visits only the suffixes that occur elsewhere too.
// A node refers to its tokens by an offset in the tree's token store, and always to the NEWEST
// sequence that contains its string; with one request at a time and FIFO eviction, the evicted
// (oldest) response is then never referred to by a node that survives it, so eviction needs no
// search for new references and the store is a FIFO. The global tree also records, per token, the
// node where that token's suffix path ends (a node that stays put until the sequence goes): its
// eviction walks each path up from there, not down from the root.
// A proposal looks at up to D - 1 match lengths; their positions in the prompt tree, and in the
// global tree once the output is longer than the match, are the sequence's own suffix positions
// (no matching from the root), and the loop ends at the first one that occurs once. Each walk is
// scored without building its tokens (the same float additions, a node's tokens at once); only
// the winner's tokens are built. The walks are kept while the context is unchanged, scored for
// the largest k asked: SimulateSweep's proposals for several k at one position (on the captures
// measured, 7 of 8 proposals) walk the trees once (Walks below), and a draft is picked among the
// walks with tokens only (any of them outscores an empty one).
// Most requests never build their prompt tree: a tree over one sequence is a function of it, so
// its walks can be read off the context itself (suffix_context.h): the occurrences of the last
// two tokens come from a chain through the earlier positions of each pair of tokens, are narrowed
// one token to the left per longer match, and a walk's next token is the first child in the
// reference's sibling order, found by replaying the increments of the position's children in
// order of occurrence; the one-token match's one-token walk (vLLM's defaults) is scored from two
// counts kept per token. Indexing costs two table lookups per context token, a proposal about
// 10 occurrences looked at on trace_gen's mixed capture, where a tree costs ~2.5 node visits per
// token: the mixed capture's replay at k 1..8 runs in 1/1.6 of the time (46% fewer
// instructions), and specdec_bench's suffix streams run as fast to 2.3x faster.
// When a request's proposals have looked at more than SuffixOptions::prompt_scan_work
// occurrences per context token (repetitive text, long responses), its tree is built and used
// from then on: either way the same drafts, and a request costs at most about the tree's
// building twice.
// A built prompt tree is a function of its one sequence (prompt + response as appended), so a
// finished request's prompt tree is kept (SuffixOptions::reuse_bytes, least recently kept out
// first), and a later request whose prompt starts with that whole sequence (the next turn of a
// conversation) appends only the rest of its prompt to it: the same tree as built from scratch,
// in time for the new tokens only (specdec_bench BM_SuffixConversations: 1.6x on code-like
// conversations, against 2.2x for reading the context).
// Keeping pauses after 1,024 requests in a row (and as many as trees kept) that continued none,
// and resumes with the first request that continues one whose key was noted meanwhile.
// For the same reason a prompt's tree can start from a copy of the tree over a prefix it shares
// with recent prompts (a system prompt; SuffixOptions::shared_prefix_min): with every tree built,
// 8,130 of trace_gen's mixed capture's 13,693 prompt trees did, skipping 14% of the prompt tokens
// (but only about 4% of the build's work: the first tokens of a tree are its cheapest).
// A tree's arrays of 2 MB and more are asked for in transparent huge pages (madvise): the global
// tree is read at random, and 4 KB pages added TLB misses to its cache misses (about 10% of the
// suffix replay's time on a 64 MB capture).
// Memory, measured on trace_gen's mixed capture (10,000 responses, 905,000 tokens held): about
// 1.17 nodes (48 bytes each) per token, plus 8 bytes for the token and where its suffix ends,
// the child-table slots (8 bytes each, 1/3 to 3/4 full) and the groups: about 88 bytes per
// token, so ~0.9 GB for vLLM's default 10,000 cached responses of 1,000 distinct tokens (text
// repeated across responses shares nodes).
//
// Not thread-safe: a SuffixProposer holds the global cache; use one per replay of a capture.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "common/status.h"
#include "specdec/greedy.h"

namespace llmtap::specdec {

// The implementation's parts (suffix_internal.h lists its files).
namespace suffix_internal {
class Tree;
class SavedTrees;
class PrefixTrees;
class Context;
}  // namespace suffix_internal

struct SuffixOptions {
  uint32_t max_tree_depth = 24;  // vLLM suffix_decoding_max_tree_depth
  uint64_t max_cached_requests =
      10000;                     // vLLM suffix_decoding_max_cached_requests; 0: no global tree
  float max_spec_factor = 1.0f;  // vLLM suffix_decoding_max_spec_factor
  float min_token_prob = 0.1f;   // vLLM suffix_decoding_min_token_prob
  float max_spec_offset = 0.0f;  // Arctic's max_spec_offset (vLLM leaves it at 0)
  uint32_t k = 0;                // vLLM num_speculative_tokens; 0: max_tree_depth (its default)
  uint64_t max_model_len = 0;    // 0: no limit
  // llmtap only, no effect on the drafts: bytes of finished requests' prompt trees kept (least
  // recently used out first), so that a request whose prompt starts with such a request's whole
  // context (its prompt and response: the next turn of a conversation) continues that tree
  // instead of building one from its whole prompt. 0: none kept.
  uint64_t reuse_bytes = uint64_t{256} << 20;
  // llmtap only, no effect on the drafts: when a prompt's first n >= shared_prefix_min tokens
  // (up to 4,096) are also the first n of one of the 8 prompts before it (a shared system prompt,
  // a template's preamble), its prompt tree over those n tokens is copied aside (up to 16 such
  // trees, least recently used out); a later prompt that starts with them starts from a copy of
  // that tree instead of from nothing (the same tree: it is a function of its tokens). 0: none.
  uint32_t shared_prefix_min = 64;
  // llmtap only, no effect on the drafts: a request's prompt-tree walks are first read off its
  // context (the occurrences of the pattern's suffixes; "Data structures and speed"), which needs
  // no tree; once that has looked at more than prompt_scan_work occurrences per context token in
  // all, the request's prompt tree is built and used from then on. 0: always the tree.
  uint32_t prompt_scan_work = 32;

  // InvalidArgument unless depth >= 1, factor >= 0 and 0 <= min_token_prob <= 1 (what vLLM
  // accepts), the offset is finite, and depth <= 65536 (llmtap's limit).
  Status Validate() const;
  // num_speculative_tokens in effect.
  uint32_t SpecTokens() const { return k ? k : max_tree_depth; }
};

// A proposal with the reference's details (for tests and debugging).
struct SuffixDraft {
  std::vector<uint32_t> tokens;
  std::vector<float> probs;      // the estimated probability of each token
  float score = 0;               // the sum of probs
  uint32_t match_len = 0;        // the length of the matched pattern suffix (0: no draft)
  bool from_prompt_tree = true;  // the prompt tree's draft won (ties go to it)
};

class SuffixProposer {
 public:
  // `options` must be valid (options.Validate().ok()).
  explicit SuffixProposer(const SuffixOptions& options);
  ~SuffixProposer();
  SuffixProposer(const SuffixProposer&) = delete;
  SuffixProposer& operator=(const SuffixProposer&) = delete;

  const SuffixOptions& options() const { return options_; }

  // The reference cache's calls for the current request (one at a time).
  // start_request: the prompt tree from `prompt`; a global slot, with FIFO eviction.
  void StartRequest(std::span<const uint32_t> prompt);
  // add_active_response: `tokens` appended to the context (both trees).
  void AddResponse(std::span<const uint32_t> tokens);
  // vLLM's proposal for the current context (cap and skip by max_model_len included).
  void Propose(std::vector<uint32_t>* draft);
  void Propose(SuffixDraft* draft) { Propose(draft, options_.SpecTokens()); }
  // The same with num_speculative_tokens `k` instead of options().SpecTokens().
  void Propose(SuffixDraft* draft, uint32_t k);
  // stop_request: drops the prompt tree; the response stays in the global tree.
  void StopRequest();
  std::span<const uint32_t> context() const;

  // Requests whose responses are in the global tree (the current one included).
  size_t cached_requests() const;
  // The global tree's size: bytes held (nodes, child table, tokens), nodes, tokens held.
  size_t GlobalMemoryBytes() const;
  size_t GlobalNodes() const;
  size_t GlobalTokens() const;
  // Empties the global cache and the kept prompt trees too.
  void Reset();
  // Requests whose prompt tree was built (the others' walks were read off their context: see
  // SuffixOptions::prompt_scan_work).
  uint64_t prompt_trees_built() const { return built_; }
  // Of those, requests whose prompt tree continued a kept one (see SuffixOptions::reuse_bytes).
  uint64_t prompt_trees_reused() const { return reused_; }
  // Requests whose prompt tree started from a copy of a shared prefix's (shared_prefix_min).
  uint64_t prefix_trees_copied() const { return prefix_copies_; }

  // Tests only: "" when both trees are consistent, else what is wrong.
  std::string CheckForTesting() const;
  // Tests only: the prompt tree as text, every node in child-list order with its tokens and
  // count (equal for trees that hold the same strings, counts and sibling orders).
  std::string DumpPromptTreeForTesting() const;

  // Replays one request (see "This library's replay"), which then stays in the global cache.
  // With `trace`, also records every decode step there (overwritten).
  SpecStats Simulate(std::span<const uint32_t> prompt, std::span<const uint32_t> response,
                     std::vector<SimStep>* trace = nullptr);
  // Simulate at every k of `ks` (options().k is not used), one pair of trees for all (greedy.h
  // ReplayGreedySweep): *out[i] equals what Simulate with k = ks[i] gives on a proposer that saw
  // the same earlier requests. The request then stays in the global cache once. Needs
  // max_model_len 0.
  void SimulateSweep(std::span<const uint32_t> prompt, std::span<const uint32_t> response,
                     std::span<const uint32_t> ks, std::vector<SpecStats>* out);

 private:
  // They fill Walks (suffix_tree.h, suffix_context.h).
  friend class suffix_internal::Tree;
  friend class suffix_internal::Context;

  // One tree's walks for the current context, one per match length the reference tries, with
  // their scores at every cap up to the num_speculative_tokens they were computed for: a walk is
  // the same path at every cap (the cap only cuts it), so its score at cap c is its score after
  // min(c, its length) tokens, the same float additions. The draft at any smaller k is then
  // picked from them without walking the trees again (SimulateSweep asks for every k at each
  // position).
  struct Walks {
    struct Entry {
      uint32_t m, node, idx;  // match length; the walk starts after `idx` tokens of `node`
      int cap;                // the reference's cap for m (INT32_MIN: an empty draft)
      uint32_t len;           // the walk's tokens up to the cap computed for
      uint32_t off;           // scores[off + j]: the score after j tokens, j <= len
      uint32_t tok;           // tokens[tok...]: its len tokens, once a draft needed them
    };
    std::vector<Entry> walks;
    std::vector<float> scores;
    std::vector<uint32_t> tokens;
    // Read off the context (Context::Walks): every walk's tokens are in `tokens` (Entry::tok),
    // their probabilities at the same places in `probs`.
    bool eager = false;
    std::vector<float> probs;
    // The walks with tokens (cap > 0, len > 0), in order: only they can make a draft (the first
    // token's probability is above 0, so such a walk outscores every empty one at any k).
    std::vector<uint32_t> drafting;
    void Clear() {
      walks.clear();
      scores.clear();
      tokens.clear();
      probs.clear();
      drafting.clear();
      eager = false;
    }
  };
  // Propose(draft, k) from walks computed for kmax >= k (kept while the context is unchanged).
  void ProposeFrom(SuffixDraft* draft, uint32_t k, uint32_t kmax);
  // The same draft's tokens only (SimulateSweep; max_model_len 0).
  void ProposeTokens(std::vector<uint32_t>* draft, uint32_t k, uint32_t kmax);
  // Its pick among the current walks.
  void DraftTokens(std::vector<uint32_t>* draft, uint32_t k);

  // The current request's prompt tree from its context (until the scan's work exceeds
  // options_.prompt_scan_work per token): a tree built from scratch or continued.
  void BuildPromptTree();
  // prompt_walks_ for the current context (the tree's or read off the context).
  void PromptWalks(int kmax);
  // Both trees' walks for the current context, scored up to kmax, unless they already are.
  void UpdateWalks(int kmax);

  SuffixOptions options_;
  std::unique_ptr<suffix_internal::Context> context_;
  bool tree_built_ = false;  // the current request's prompt tree is built (else: read Context)
  uint64_t scan_work_ = 0;   // the current request's scans of its context, in occurrences
  std::unique_ptr<suffix_internal::Tree> prompt_tree_, global_tree_, spare_tree_;
  std::unique_ptr<suffix_internal::SavedTrees> saved_;  // null without reuse
  uint64_t built_ = 0, reused_ = 0;
  std::unique_ptr<suffix_internal::PrefixTrees> prefixes_;  // null without shared_prefix_min
  uint64_t prefix_copies_ = 0;
  bool active_ = false;
  bool in_global_ = false;  // the current request holds a global slot
  std::vector<uint32_t> draft_;
  SuffixDraft result_;
  uint64_t version_ = 0;  // changes with the context (the trees)
  uint64_t walks_version_ = UINT64_MAX;
  int walks_kmax_ = 0;
  Walks prompt_walks_, global_walks_;
  // The walks' draft at every k >= saturated_k_ (once one such k asked for it).
  uint32_t saturated_k_ = 0;
  bool have_saturated_ = false;
  std::vector<uint32_t> saturated_draft_;
};

}  // namespace llmtap::specdec
