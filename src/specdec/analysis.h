// `llmtap specdec`: what draft-free speculative decoding would have given a captured workload.
// Each captured request whose outcome holds its generated text (capture_responses) is tokenized
// (the prompt as `llmtap anonymize` tokenizes it, through the model family's chat rendering; the
// response with the same tokenizer) and its decoding is replayed token by token with a proposer
// and greedy verification (ngram.h), for every point of a sweep (method x k x n-gram range).
// The counters are vLLM's (SpecStats), summed per group (--by) and over the whole capture.
//
// The response's tokens are: the reasoning text, then the content text, then each tool call's
// arguments, each encoded on its own, and the tokenizer's end-of-turn token when the response
// ended by itself (finish_reason "stop" or "tool_calls"). The template markup a model writes
// around reasoning and tool calls (<think>, <tool_call>, the function name) is not reproduced:
// a few tokens per such response that the replay does not see.
//
// Expected speedup, under a stated cost model (CostModel): a plain decode step costs 1; a step
// that verifies a draft of d tokens costs 1 + draft_overhead + verify_cost * d. Without
// speculation the T response tokens take T - 1 decode steps after prefill, so
//     speedup = (T - 1) / (S + draft_overhead * R + verify_cost * D)
// with S the decode steps of the replay, R the steps that had a draft and D the draft tokens.
// Prefill and the proposer's own time are not counted.
//
// llama.cpp's n-gram methods (llamacpp.h) replay llama-server's loop instead of vLLM's: their
// counters are the server's timings.draft_n (draft_tokens) and draft_n_accepted
// (accepted_tokens). The prompt is taken with a BOS first (llamacpp_bos) when it is text; the
// request's max_tokens cuts drafts as n_predict does; the map modes keep one map per point over
// the whole capture, in capture order: one server slot (--parallel 1) that served exactly these
// requests since it started.
//
// Threads: AnalyzeCapture runs on the calling thread; the tokenizer is shared read-only.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"
#include "specdec/llamacpp.h"
#include "specdec/ngram.h"
#include "specdec/suffix.h"
#include "tokenizer/tokenizer.h"
#include "trace/tool_common.h"

namespace llmtap::specdec {

enum class Method {
  kNgram,
  kSuffix,
  kLlamacppNgramSimple,
  kLlamacppNgramMapK,
  kLlamacppNgramMapK4v
};
// "ngram", "suffix", "llamacpp-ngram-simple", "llamacpp-ngram-map-k", "llamacpp-ngram-map-k4v"
std::string_view MethodName(Method method);
bool IsLlamacpp(Method method);
LlamacppMode LlamacppModeOf(Method method);  // a llama.cpp method's mode

// One setting replayed.
struct SweepPoint {
  Method method = Method::kNgram;
  uint32_t k = 4;         // num_speculative_tokens; llama.cpp: size_m (the longest draft)
  uint32_t min_n = 5;     // ngram: prompt_lookup_min; llama.cpp: size_n
  uint32_t max_n = 5;     // ngram: prompt_lookup_max; llama.cpp: size_n
  uint32_t min_hits = 1;  // llama.cpp ngram-map-k4v: min_hits
};

struct CostModel {
  double verify_cost = 0.05;     // per draft token verified, in decode steps
  double draft_overhead = 0.02;  // per step that had a draft (proposing, rejection sampling)
};
double Speedup(const SpecStats& s, const CostModel& cost);

enum class GroupBy { kNone, kEndpoint, kModel, kSystemPrompt };

// What the server reported of its own speculation on one request (the outcome's `spec`):
// drafted and accepted tokens, llama.cpp's timings.draft_n and draft_n_accepted.
struct ServerSpec {
  uint64_t drafted = 0, accepted = 0;
  // accepted / drafted, 0 without drafts.
  double rate() const {
    return drafted ? static_cast<double>(accepted) / static_cast<double>(drafted) : 0;
  }
};

// A llama.cpp point's prediction checked against the server's own counts, over the replayed
// requests whose outcome reports them (`spec`, or llama.cpp's timings without one: nothing
// drafted): how many the replay predicted exactly (both counts), and the sums on each side.
struct ServerCheck {
  uint64_t requests = 0, exact = 0;
  ServerSpec server, predicted;
};
void AddServerCheck(const std::vector<SweepPoint>& points, const ServerSpec& server,
                    const std::vector<SpecStats>& stats, std::vector<ServerCheck>* checks);

// One replayed request: its capture line, its group (with --by; "" and "all" without) and its
// counters at every sweep point. Summed over the requests they are the report's.
struct RequestResult {
  uint64_t line = 0;
  const std::string* group_key = nullptr;
  const std::string* group_label = nullptr;
  uint64_t prompt_tokens = 0;
  uint64_t response_tokens = 0;
  std::optional<uint64_t> max_tokens;             // the request's, as the llama.cpp methods read it
  const std::vector<SpecStats>* stats = nullptr;  // one per AnalyzeOptions::points
  std::optional<ServerSpec> server_spec;          // the outcome's, when it reports one
};

struct AnalyzeOptions {
  std::string path;           // capture (local, .zst, s3://, or - for standard input)
  std::string outcomes_path;  // sidecar; empty: <path>.outcomes.ndjson
  const tokenizer::Tokenizer* tokenizer = nullptr;
  std::vector<SweepPoint> points;
  // kSuffix points: these settings with the point's k (their k and max_model_len are ignored).
  // Each suffix point keeps its own global tree of earlier responses, filled in capture order
  // as the server would have seen them.
  SuffixOptions suffix;
  uint64_t max_model_len = 0;  // 0: no limit
  // llama.cpp methods: the slot's context (llama-server's -c / --parallel), 0: unknown (no cut),
  // and the token llama-server puts before a text prompt (the model's add_bos_token): prepended
  // to a chat or text completions prompt that does not already begin with it; token-id prompts
  // are taken as they are. nullopt: none.
  uint64_t llamacpp_n_ctx = 0;
  std::optional<uint32_t> llamacpp_bos;
  GroupBy by = GroupBy::kNone;
  bool progress = false;
  size_t max_failures = 20;  // skipped rows listed (all are counted)
  // Threads in all, 0: one per core. The calling thread replays (in capture order); the others
  // parse and tokenize batches of rows ahead of it. 1: everything on the calling thread. The
  // results are the same for any number.
  unsigned threads = 0;
  size_t batch_lines = 256;  // rows per work item (also capped at 1 MB)
  // Called on the calling thread for each replayed request, in capture order (--per-request).
  // Returning false stops the run (a write error), reported as `io`.
  std::function<bool(const RequestResult&)> on_request;
};

struct GroupResult {
  std::string key;    // "chat", the model name, or the system prompt's hash ("" for all)
  std::string label;  // for people: the key, or a system prompt's first characters
  uint64_t requests = 0;
  uint64_t prompt_tokens = 0;
  uint64_t response_tokens = 0;
  std::vector<SpecStats> stats;  // one per AnalyzeOptions::points
  size_t Best(const std::vector<SweepPoint>& points, const CostModel& cost) const;
};

struct AnalyzeReport {
  Status io;  // not ok: the run failed (unreadable input, sidecar refused); nothing else is valid
  std::string path, outcomes_path;
  std::vector<SweepPoint> points;
  SuffixOptions suffix;
  unsigned threads = 1;  // as run (AnalyzeOptions::threads resolved)
  uint64_t lines = 0, rows = 0, replayed = 0;
  // Replayed requests whose response re-tokenized to another count than the server's own
  // completion_tokens (a model that emits partial UTF-8 byte tokens): their drafts were
  // estimated on other tokens than the server generated.
  uint64_t tokens_differ = 0;
  uint64_t bytes = 0;  // capture bytes read
  GroupResult total;
  std::vector<GroupResult> groups;  // --by: by requests, most first
  // Suffix decoding's state at the end (the largest of its proposers): prompt trees that
  // continued an earlier turn's, and the global tree's size.
  uint64_t suffix_prompt_trees_built = 0;
  uint64_t suffix_prompt_trees_reused = 0;
  uint64_t suffix_global_bytes = 0;
  uint64_t suffix_cached_requests = 0;
  // Per point (empty when no replayed request's outcome reported the server's speculation; the
  // points of other methods stay zero): the llama.cpp replay against the server's own counts.
  std::vector<ServerCheck> server_check;
  std::map<std::string, uint64_t> skipped;  // reason kind -> rows
  trace::FailureList skipped_rows;          // line: reason, the first max_failures
  std::vector<std::string> warnings;
  double seconds = 0;
  // 0: every row with a response was replayed; 1: rows were skipped; 2: io not ok.
  int exit_code() const;
};

AnalyzeReport AnalyzeCapture(const AnalyzeOptions& options);

// The text report: per group a table of the sweep (acceptance rate, acceptance length, tokens
// per step, steps without a draft, speedup) and the best setting.
std::string RenderText(const AnalyzeReport& report, const CostModel& cost,
                       const std::string& tokenizer_note);
// The same as one JSON document (every counter, per point and group).
std::string RenderJson(const AnalyzeReport& report, const CostModel& cost,
                       const std::string& tokenizer_note);
// One request's line of --per-request (JSON, no newline): line, group, token counts, and per
// point the same fields as the report's points (`points` as in AnalyzeOptions).
std::string RenderRequestJson(const std::vector<SweepPoint>& points, const RequestResult& r,
                              const CostModel& cost);

}  // namespace llmtap::specdec
