// `llmtap specdec`: flags in, AnalyzeCapture (src/specdec/analysis.h) out, the table printed and
// the JSON written. Exit codes as the trace tools: 0 success; 1 some rows were skipped (listed
// as file:line: reason); 2 a usage, tokenizer, open or read error.
#include <algorithm>
#include <charconv>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "cli/file_tools.h"
#include "report/specdec_html.h"
#include "sim/sim_tokenizer.h"
#include "specdec/analysis.h"
#include "tokenizer/tokenizer.h"

namespace llmtap::cli {
namespace {

[[noreturn]] void FailSpecdec(const std::string& message) { FailUsage("llmtap specdec", message); }

// "4", "1..8" or "2,4,6" (and mixes: "1..3,8") -> the values, in order, without repeats.
std::vector<uint32_t> ParseList(const std::string& flag, const std::string& text, uint32_t lo,
                                uint32_t hi) {
  std::vector<uint32_t> out;
  auto number = [&](std::string_view s) {
    uint32_t v = 0;
    auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
    if (ec != std::errc() || end != s.data() + s.size() || v < lo || v > hi) {
      FailSpecdec(flag + " " + text + ": '" + std::string(s) + "' is not a whole number in [" +
                  std::to_string(lo) + ", " + std::to_string(hi) +
                  "] (give N, A..B or a list A,B,C)");
    }
    return v;
  };
  std::string_view rest = text;
  while (!rest.empty()) {
    const size_t comma = rest.find(',');
    std::string_view item = rest.substr(0, comma);
    rest = comma == std::string_view::npos ? std::string_view() : rest.substr(comma + 1);
    const size_t dots = item.find("..");
    const uint32_t a = number(item.substr(0, dots));
    const uint32_t b = dots == std::string_view::npos ? a : number(item.substr(dots + 2));
    if (b < a) FailSpecdec(flag + " " + text + ": a range must go up (" + std::string(item) + ")");
    for (uint32_t v = a; v <= b; ++v) {
      if (std::find(out.begin(), out.end(), v) == out.end()) out.push_back(v);
    }
  }
  if (out.empty()) FailSpecdec(flag + ": give N, A..B or a list A,B,C");
  return out;
}

// --method's names, in the order their points are listed.
constexpr specdec::Method kMethods[] = {
    specdec::Method::kNgram, specdec::Method::kSuffix, specdec::Method::kLlamacppNgramSimple,
    specdec::Method::kLlamacppNgramMapK, specdec::Method::kLlamacppNgramMapK4v};

// "ngram,llamacpp-ngram-simple" -> the methods named, or an error message.
std::string ParseMethods(const std::string& text, std::vector<specdec::Method>* out) {
  std::string_view rest = text;
  while (true) {
    const size_t comma = rest.find(',');
    const std::string_view name = rest.substr(0, comma);
    bool known = false;
    for (specdec::Method m : kMethods) {
      if (specdec::MethodName(m) != name) continue;
      known = true;
      if (out && std::find(out->begin(), out->end(), m) == out->end()) out->push_back(m);
    }
    if (!known) {
      return "'" + std::string(name) +
             "' is not a method: give a comma list of ngram, suffix, llamacpp-ngram-simple, "
             "llamacpp-ngram-map-k, llamacpp-ngram-map-k4v";
    }
    if (comma == std::string_view::npos) return "";
    rest = rest.substr(comma + 1);
  }
}

}  // namespace

void AddSpecdecCommand(CLI::App& app) {
  struct Flags {
    specdec::AnalyzeOptions o;
    specdec::CostModel cost;
    std::string tokenizer, method = "ngram", k = "1..8", ngram_min = "5", ngram_max = "5", by, json,
                           html, per_request, llamacpp_size_n = "12", llamacpp_size_m = "48",
                           llamacpp_min_hits = "1", llamacpp_bos = "auto";
  };
  auto f = std::make_shared<Flags>();
  specdec::AnalyzeOptions& o = f->o;
  CLI::App* cmd = app.add_subcommand(
      "specdec", "What n-gram or suffix speculative decoding would give this capture's traffic");
  cmd->footer(
      "Replays every captured request's decoding, token by token, with a draft-free proposer "
      "and greedy verification, as a server would have run it. `ngram` is vLLM's prompt "
      "lookup: the longest suffix of prompt + output, prompt_lookup_min..max tokens long, "
      "found earlier in them; the k tokens that followed its earliest occurrence are the "
      "draft. `suffix` is vLLM's suffix decoding (Arctic Inference): suffix trees over the "
      "request's own context and over earlier responses (in capture order, as the server saw "
      "them, up to --suffix-max-cached-requests); the draft follows the most frequent "
      "continuation of the longest matching suffix while its estimated probability stays "
      "above --suffix-min-token-prob. A draft token is accepted while it equals the token the "
      "model really produced "
      "next. Needs the generated text: capture with capture_responses on (`llmtap proxy "
      "--capture-responses`), which writes it into the outcomes sidecar "
      "(<capture>.outcomes.ndjson). The prompt is tokenized as `llmtap anonymize` does (chat "
      "requests through the model family's chat rendering); the response is its reasoning, "
      "text and tool-call arguments encoded with the same tokenizer, plus the end-of-turn "
      "token when it ended by itself (finish_reason stop or tool_calls).\n\n"
      "Every combination of --method, --k, --ngram-min and --ngram-max (min <= max) is "
      "replayed in one pass. Per setting: accept = accepted / drafted tokens; acc.len = 1 + "
      "accepted / "
      "drafts (vLLM's mean acceptance length); tok/step = tokens per decode step; no-draft = "
      "share of steps without a draft; speedup under the cost model\n"
      "  speedup = (T - 1) / (S + draft_overhead * R + verify_cost * D)\n"
      "for T response tokens, S decode steps, R steps with a draft and D draft tokens: a step "
      "verifying d draft tokens is taken to cost 1 + draft_overhead + verify_cost * d plain "
      "decode steps. The defaults (0.02, 0.05) fit a memory-bound server at small batch; at "
      "large batch verification costs more (raise --verify-cost towards 1). Prefill is not "
      "counted. A draft running past the captured end of a response counts as not accepted.\n\n"
      "llama.cpp: llamacpp-ngram-simple, llamacpp-ngram-map-k and llamacpp-ngram-map-k4v are "
      "llama-server's --spec-type ngram-simple, ngram-map-k and ngram-map-k4v (0.7.0), replayed "
      "with its own loop: the draft is cut to the request's max_tokens - tokens so far - 1 (and "
      "to --llamacpp-n-ctx - history - 2); num_draft_tokens and num_accepted_tokens are its "
      "timings.draft_n and draft_n_accepted (also as draft_n, draft_n_accepted in --json and "
      "--per-request). --llamacpp-size-n, --llamacpp-size-m and --llamacpp-min-hits are its "
      "--spec-ngram-<type>-size-n, -size-m and -min-hits (min-hits: ngram-map-k4v only); in the "
      "table, k is size_m and n size_n. ngram-simple is stateless; the map modes keep one map "
      "per server slot for the server's life, so they are replayed over the whole capture in "
      "capture order as ONE slot: exact for a server run with --parallel 1 that served exactly "
      "the captured requests since it started. The prompt must be the ids the slot held: a text "
      "prompt gets --llamacpp-bos first (llama-server adds the model's BOS), a chat request is "
      "rendered with the tokenizer's chat rendering (it must match the server's template), "
      "token-id prompts are taken as they are.\n\n"
      "Exit codes: 0 success; 1 some rows were skipped (listed as file:line: reason); 2 "
      "usage, tokenizer, open or read error.");
  cmd->add_option("input", o.path, "capture file (JSONL, .zst or s3://), or - for standard input")
      ->required();
  cmd->add_option("--tokenizer", f->tokenizer,
                  "the model's tokenizer.json or its directory (a tokenizer_config.json beside "
                  "it picks the chat rendering and the end-of-turn token), 'builtin', or 'sim' "
                  "(the simulator's own tokens, for captures of `llmtap sim`)")
      ->required();
  cmd->add_option("--method", f->method,
                  "proposers, a comma list: ngram, suffix (vLLM's), llamacpp-ngram-simple, "
                  "llamacpp-ngram-map-k, llamacpp-ngram-map-k4v (llama-server's)")
      ->check(CLI::Validator([](const std::string& v) { return ParseMethods(v, nullptr); },
                             "METHOD[,METHOD...]"))
      ->capture_default_str();
  cmd->add_option("--k", f->k, "draft tokens per step (num_speculative_tokens): N, A..B or A,B,C")
      ->capture_default_str();
  cmd->add_option("--ngram-min", f->ngram_min, "prompt_lookup_min: N, A..B or A,B,C")
      ->capture_default_str();
  cmd->add_option("--ngram-max", f->ngram_max, "prompt_lookup_max: N, A..B or A,B,C")
      ->capture_default_str();
  cmd->add_option("--llamacpp-size-n", f->llamacpp_size_n,
                  "llama.cpp: --spec-ngram-<type>-size-n, the key n-gram's length: N, A..B or "
                  "A,B,C")
      ->capture_default_str();
  cmd->add_option("--llamacpp-size-m", f->llamacpp_size_m,
                  "llama.cpp: --spec-ngram-<type>-size-m, the longest draft: N, A..B or A,B,C")
      ->capture_default_str();
  cmd->add_option("--llamacpp-min-hits", f->llamacpp_min_hits,
                  "llama.cpp ngram-map-k4v: --spec-ngram-map-k4v-min-hits: N, A..B or A,B,C")
      ->capture_default_str();
  cmd->add_option("--llamacpp-n-ctx", o.llamacpp_n_ctx,
                  "llama.cpp: the slot's context, llama-server's -c divided by --parallel (drafts "
                  "are cut to it - history - 2); 0: no cut")
      ->capture_default_str();
  cmd->add_option("--llamacpp-bos", f->llamacpp_bos,
                  "llama.cpp: the token llama-server puts before a text prompt (the model's "
                  "add_bos_token), prepended where the tokenized prompt lacks it: 'auto' "
                  "(<|begin_of_text|> when the tokenizer has it, as Llama 3), 'none', or the "
                  "token's text")
      ->capture_default_str();
  cmd->add_option("--suffix-max-depth", o.suffix.max_tree_depth,
                  "suffix: suffix_decoding_max_tree_depth (longest pattern and draft)")
      ->check(CLI::Range(1u, 4096u))
      ->capture_default_str();
  cmd->add_option("--suffix-max-cached-requests", o.suffix.max_cached_requests,
                  "suffix: suffix_decoding_max_cached_requests, earlier responses kept in the "
                  "global tree (0: prompt tree only)")
      ->capture_default_str();
  cmd->add_option("--suffix-max-spec-factor", o.suffix.max_spec_factor,
                  "suffix: suffix_decoding_max_spec_factor (draft at most factor x match length)")
      ->check(CLI::Range(0.0f, 1e6f))
      ->capture_default_str();
  cmd->add_option("--suffix-min-token-prob", o.suffix.min_token_prob,
                  "suffix: suffix_decoding_min_token_prob (stop the draft below this estimated "
                  "probability)")
      ->check(CLI::Range(0.0f, 1.0f))
      ->capture_default_str();
  cmd->add_option("--max-model-len", o.max_model_len,
                  "the server's max_model_len (drafts and tokens past it are cut as vLLM "
                  "does; 0: no limit)")
      ->capture_default_str();
  cmd->add_option("--by", f->by, "report per group too: endpoint, model or system-prompt")
      ->check(CLI::IsMember({"endpoint", "model", "system-prompt"}));
  cmd->add_option("--verify-cost", f->cost.verify_cost,
                  "cost of verifying one draft token, in plain decode steps")
      ->check(CLI::Range(0.0, 100.0))
      ->capture_default_str();
  cmd->add_option("--draft-overhead", f->cost.draft_overhead,
                  "cost of a step having a draft at all, in plain decode steps")
      ->check(CLI::Range(0.0, 100.0))
      ->capture_default_str();
  cmd->add_option("--json", f->json, "also write every counter as JSON to this file (- : stdout)");
  cmd->add_option("--per-request", f->per_request,
                  "also write each replayed request's counters to this JSONL file: its capture "
                  "line, group, prompt and response tokens, and per sweep point the report's "
                  "fields (they sum to the report's); written as the replay goes");
  cmd->add_option("--html", f->html,
                  "also write a self-contained HTML page: the tables, and acceptance length and "
                  "speedup against k per group");
  cmd->add_option("--outcomes", o.outcomes_path,
                  "the outcomes sidecar holding the responses (default: "
                  "<input>.outcomes.ndjson)");
  cmd->add_option("--max-errors", o.max_failures, "skipped rows listed (all are counted)")
      ->capture_default_str();
  cmd->add_option("--threads", o.threads,
                  "threads in all (default: one per core): one replays the requests in capture "
                  "order, the others parse and tokenize ahead of it; the results do not depend "
                  "on it");
  AddProgressFlag(cmd, &o.progress);
  cmd->callback([f] {
    specdec::AnalyzeOptions& o = f->o;
    const std::vector<uint32_t> ks = ParseList("--k", f->k, 1, 64);
    const std::vector<uint32_t> mins = ParseList("--ngram-min", f->ngram_min, 1, 1024);
    const std::vector<uint32_t> maxs = ParseList("--ngram-max", f->ngram_max, 1, 1024);
    std::vector<specdec::Method> methods;
    if (std::string e = ParseMethods(f->method, &methods); !e.empty())
      FailSpecdec("--method: " + e);
    auto has = [&](specdec::Method m) {
      return std::find(methods.begin(), methods.end(), m) != methods.end();
    };
    const bool ngram = has(specdec::Method::kNgram);
    const bool suffix = has(specdec::Method::kSuffix);
    if (ngram) {
      for (uint32_t mn : mins) {
        for (uint32_t mx : maxs) {
          if (mn > mx) continue;
          for (uint32_t k : ks) o.points.push_back({specdec::Method::kNgram, k, mn, mx});
        }
      }
      if (o.points.empty()) {
        FailSpecdec("no --ngram-min is <= any --ngram-max (" + f->ngram_min + " vs " +
                    f->ngram_max + ")");
      }
    }
    if (suffix) {
      if (Status s = o.suffix.Validate(); !s.ok()) FailSpecdec(s.ToString());
      for (uint32_t k : ks) o.points.push_back({specdec::Method::kSuffix, k, 0, 0});
    }
    const std::vector<uint32_t> sizes_n =
        ParseList("--llamacpp-size-n", f->llamacpp_size_n, 1, 1024);
    const std::vector<uint32_t> sizes_m =
        ParseList("--llamacpp-size-m", f->llamacpp_size_m, 1, 1024);
    const std::vector<uint32_t> min_hits =
        ParseList("--llamacpp-min-hits", f->llamacpp_min_hits, 1, 16380);
    for (specdec::Method m : methods) {
      if (!specdec::IsLlamacpp(m)) continue;
      const bool k4v = m == specdec::Method::kLlamacppNgramMapK4v;
      for (uint32_t n : sizes_n) {
        for (uint32_t size_m : sizes_m) {
          for (size_t h = 0; h < (k4v ? min_hits.size() : 1); ++h) {
            o.points.push_back({m, size_m, n, n, k4v ? min_hits[h] : 1});
          }
        }
      }
    }
    if (f->by == "endpoint") o.by = specdec::GroupBy::kEndpoint;
    if (f->by == "model") o.by = specdec::GroupBy::kModel;
    if (f->by == "system-prompt") o.by = specdec::GroupBy::kSystemPrompt;
    std::string error;
    std::unique_ptr<tokenizer::Tokenizer> tok = sim::LoadTokenizerOrSim(f->tokenizer, &error);
    if (!tok) FailSpecdec("--tokenizer " + f->tokenizer + ": " + error);
    o.tokenizer = tok.get();
    if (f->llamacpp_bos != "none") {
      const std::string text = f->llamacpp_bos == "auto" ? "<|begin_of_text|>" : f->llamacpp_bos;
      std::vector<uint32_t> ids;
      tok->Encode(text, &ids);
      if (ids.size() == 1) {
        o.llamacpp_bos = ids[0];
      } else if (f->llamacpp_bos != "auto") {
        FailSpecdec("--llamacpp-bos " + f->llamacpp_bos + ": the tokenizer encodes it as " +
                    std::to_string(ids.size()) + " tokens, not one");
      }
    }
    std::ofstream per_request;
    if (!f->per_request.empty()) {
      per_request.open(f->per_request, std::ios::binary | std::ios::trunc);
      if (!per_request) FailSpecdec("--per-request " + f->per_request + ": cannot create the file");
      o.on_request = [&](const specdec::RequestResult& one) {
        per_request << specdec::RenderRequestJson(o.points, one, f->cost) << '\n';
        return static_cast<bool>(per_request);
      };
    }
    specdec::AnalyzeReport r = specdec::AnalyzeCapture(o);
    if (per_request.is_open() && !per_request.flush()) {
      FailSpecdec("--per-request " + f->per_request + ": cannot write the file");
    }
    const std::string note = tok->Describe();
    const std::string text = specdec::RenderText(r, f->cost, note);
    if (!r.io.ok()) PrintReport(text, false, r.exit_code());
    const std::string json = specdec::RenderJson(r, f->cost, note);
    auto write = [](const std::string& flag, const std::string& path, const std::string& bytes) {
      std::ofstream out(path, std::ios::binary | std::ios::trunc);
      if (!(out << bytes) || !out.flush())
        FailSpecdec(flag + " " + path + ": cannot write the file");
    };
    if (!f->html.empty()) {
      write("--html", f->html, report::RenderSpecdecHtml(nlohmann::json::parse(json)));
    }
    if (f->json == "-") {
      PrintReport(json, true, r.exit_code());
      return;
    }
    if (!f->json.empty()) write("--json", f->json, json);
    PrintReport(text, true, r.exit_code());
  });
}

}  // namespace llmtap::cli
