#include "specdec/analysis.h"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <memory>
#include <optional>
#include <span>
#include <thread>
#include <tuple>
#include <unordered_map>
#include <utility>

#include "api/prompt.h"
#include "common/hex.h"
#include "common/ordered_batches.h"
#include "trace/convert.h"
#include "trace/hash_bytes.h"
#include "trace/outcomes.h"

namespace llmtap::specdec {
namespace {

using simdjson::dom::element;
using simdjson::dom::object;

// What the outcome line of a request says about its response.
struct Response {
  int64_t status = 0;
  bool cancelled = false;
  std::string_view finish_reason;
  bool present = false;     // the line has a "response" object (capture_responses was on)
  bool unreadable = false;  // "response": null: on, but the body was neither JSON nor SSE
  bool truncated = false;
  std::string_view text, reasoning;
  std::vector<std::string_view> tool_arguments;
  // The server's own drafted / accepted tokens (ServerSpec): `spec`'s counts, or 0 and 0 when
  // the line has llama.cpp's timings (`server`) but no `spec` (llama-server omits draft_n when
  // nothing was drafted). Unknown otherwise.
  std::optional<ServerSpec> server_spec;
};

// Reads an outcome line (views into `parser`'s buffers, valid until its next parse). False
// when the line is not a JSON object.
bool ReadResponse(simdjson::dom::parser* parser, std::string_view line, Response* r) {
  *r = Response{};
  object o;
  if (parser->parse(line.data(), line.size(), true).get(o) != simdjson::SUCCESS) return false;
  element e;
  int64_t i;
  if (o.at_key("status").get(e) == simdjson::SUCCESS && e.get(i) == simdjson::SUCCESS) {
    r->status = i;
  }
  bool b;
  if (o.at_key("cancelled").get(e) == simdjson::SUCCESS && e.get(b) == simdjson::SUCCESS) {
    r->cancelled = b;
  }
  std::string_view s;
  if (o.at_key("finish_reason").get(e) == simdjson::SUCCESS && e.get(s) == simdjson::SUCCESS) {
    r->finish_reason = s;
  }
  object spec, server;
  if (o.at_key("spec").get(spec) == simdjson::SUCCESS) {
    int64_t drafted = 0, accepted = 0;
    if (spec.at_key("num_draft_tokens").get(drafted) == simdjson::SUCCESS &&
        spec.at_key("num_accepted_draft_tokens").get(accepted) == simdjson::SUCCESS &&
        drafted >= 0 && accepted >= 0) {
      r->server_spec = ServerSpec{static_cast<uint64_t>(drafted), static_cast<uint64_t>(accepted)};
    }
  } else if (o.at_key("server").get(server) == simdjson::SUCCESS) {
    r->server_spec = ServerSpec{0, 0};
  }
  object resp;
  if (o.at_key("response").get(e) != simdjson::SUCCESS) return true;
  if (e.is_null()) {
    r->unreadable = true;
    return true;
  }
  if (e.get(resp) != simdjson::SUCCESS) return true;
  r->present = true;
  if (resp.at_key("text").get(e) == simdjson::SUCCESS && e.get(s) == simdjson::SUCCESS) {
    r->text = s;
  }
  if (resp.at_key("reasoning").get(e) == simdjson::SUCCESS && e.get(s) == simdjson::SUCCESS) {
    r->reasoning = s;
  }
  if (resp.at_key("truncated").get(e) == simdjson::SUCCESS && e.get(b) == simdjson::SUCCESS) {
    r->truncated = b;
  }
  simdjson::dom::array calls;
  if (resp.at_key("tool_calls").get(e) == simdjson::SUCCESS && e.get(calls) == simdjson::SUCCESS) {
    for (element call : calls) {
      object c;
      if (call.get(c) == simdjson::SUCCESS && c.at_key("arguments").get(e) == simdjson::SUCCESS &&
          e.get(s) == simdjson::SUCCESS) {
        r->tool_arguments.push_back(s);
      }
    }
  }
  return true;
}

// The text of a message's content: a string, or the text parts of an array joined by "\n".
std::string ContentText(element content) {
  std::string_view s;
  if (content.get(s) == simdjson::SUCCESS) return std::string(s);
  std::string out;
  simdjson::dom::array parts;
  if (content.get(parts) != simdjson::SUCCESS) return out;
  for (element part : parts) {
    element t;
    if (part.at_key("text").get(t) == simdjson::SUCCESS && t.get(s) == simdjson::SUCCESS) {
      if (!out.empty()) out += '\n';
      out.append(s);
    }
  }
  return out;
}

// The request's system prompt: the content of its first "system" (or "developer") message.
std::optional<std::string> SystemPrompt(object request) {
  simdjson::dom::array messages;
  if (request.at_key("messages").get(messages) != simdjson::SUCCESS) return std::nullopt;
  for (element m : messages) {
    element role, content;
    std::string_view r;
    if (m.at_key("role").get(role) != simdjson::SUCCESS || role.get(r) != simdjson::SUCCESS) {
      continue;
    }
    if ((r == "system" || r == "developer") &&
        m.at_key("content").get(content) == simdjson::SUCCESS) {
      return ContentText(content);
    }
  }
  return std::nullopt;
}

// A label for people: the first characters of `text` on one line, cut at a UTF-8 boundary.
std::string Shorten(std::string_view text, size_t max_bytes) {
  std::string out;
  for (size_t i = 0; i < text.size() && out.size() < max_bytes; ++i) {
    const char c = text[i];
    out += (c == '\n' || c == '\r' || c == '\t') ? ' ' : c;
  }
  if (out.size() < text.size()) {
    while (!out.empty() && (static_cast<unsigned char>(out.back()) & 0xC0) == 0x80) out.pop_back();
    if (!out.empty() && (static_cast<unsigned char>(out.back()) & 0x80)) out.pop_back();
    out += "...";
  }
  return out;
}

// The group a request belongs to under `by`: {key, label}.
std::pair<std::string, std::string> GroupOf(GroupBy by, object request, trace::Endpoint endpoint) {
  switch (by) {
    case GroupBy::kNone:
      return {"", "all"};
    case GroupBy::kEndpoint: {
      std::string name(trace::EndpointName(endpoint));
      return {name, name};
    }
    case GroupBy::kModel: {
      std::string_view model;
      element e;
      if (request.at_key("model").get(e) == simdjson::SUCCESS &&
          e.get(model) == simdjson::SUCCESS) {
        return {std::string(model), std::string(model)};
      }
      return {"", "(no model named)"};
    }
    case GroupBy::kSystemPrompt: {
      std::optional<std::string> sp = SystemPrompt(request);
      if (!sp) return {"", "(no system prompt)"};
      const std::string key = Hex64(trace::HashBytes(*sp, 0x73797374656d));
      return {key, key.substr(0, 8) + " \"" + Shorten(*sp, 48) + "\""};
    }
  }
  return {"", "all"};
}

// The request's output limit, as llama-server reads it into n_predict: the first of n_predict,
// max_tokens, max_completion_tokens, max_output_tokens that is a number. A negative one (-1:
// llama-server's "no limit") and none: nullopt.
std::optional<uint64_t> MaxTokens(object request) {
  for (const char* key :
       {"n_predict", "max_tokens", "max_completion_tokens", "max_output_tokens"}) {
    element e;
    if (request.at_key(key).get(e) != simdjson::SUCCESS) continue;
    int64_t i;
    uint64_t u;
    if (e.get(i) == simdjson::SUCCESS) return i < 0 ? std::nullopt : std::optional<uint64_t>(i);
    if (e.get(u) == simdjson::SUCCESS) return u;
  }
  return std::nullopt;
}

// Whether llama-server would tokenize the prompt from text (and so put a BOS first): chat
// requests and string prompts; a completions prompt of token ids (or arrays of them) is taken
// as it is.
bool TextPrompt(object request) {
  simdjson::dom::array prompt;
  if (request.at_key("prompt").get(prompt) != simdjson::SUCCESS) return true;
  auto first = prompt.begin();
  return first == prompt.end() || (*first).is_string();
}

void AddTo(GroupResult* g, uint64_t prompt_tokens, uint64_t response_tokens,
           const std::vector<SpecStats>& stats) {
  ++g->requests;
  g->prompt_tokens += prompt_tokens;
  g->response_tokens += response_tokens;
  if (g->stats.size() < stats.size()) g->stats.resize(stats.size());
  for (size_t i = 0; i < stats.size(); ++i) g->stats[i].Add(stats[i]);
}

// Replays one request at every sweep point (suffix points in capture order: their global trees
// hold every earlier response; the llama.cpp map modes in capture order too: one slot's map).
// Without a max_model_len, the points of one method share one proposer, replayed at all their k
// (and n-gram ranges: one index over every n of them) in one pass (ReplayGreedySweep: the same
// counters as one proposer per point); with one, each point has its own.
class Replayer {
 public:
  explicit Replayer(const AnalyzeOptions& options)
      : stats_(options.points.size()), bos_(options.llamacpp_bos) {
    const bool share = options.max_model_len == 0;
    for (size_t i = 0; i < options.points.size(); ++i) {
      const SweepPoint& p = options.points[i];
      Family* f = nullptr;
      for (Family& g : families_) {
        // A llama.cpp point has a proposer of its own (its state depends on its drafts).
        if (share && g.method == p.method && !IsLlamacpp(p.method)) f = &g;
      }
      if (f == nullptr) {
        f = &families_.emplace_back();
        f->method = p.method;
        f->min_n = p.min_n;
        f->max_n = p.max_n;
      }
      f->min_n = std::min(f->min_n, p.min_n);
      f->max_n = std::max(f->max_n, p.max_n);
      f->ks.push_back(p.k);
      f->ranges.emplace_back(p.min_n, p.max_n);
      f->points.push_back(i);
    }
    for (Family& f : families_) {
      if (IsLlamacpp(f.method)) {
        const SweepPoint& p = options.points[f.points[0]];
        LlamacppOptions o;
        o.mode = LlamacppModeOf(p.method);
        o.size_n = p.min_n;
        o.size_m = p.k;
        o.min_hits = p.min_hits;
        o.n_ctx = options.llamacpp_n_ctx;
        f.llamacpp = std::make_unique<LlamacppProposer>(o);
      } else if (f.method == Method::kSuffix) {
        SuffixOptions o = options.suffix;
        o.k = f.ks[0];
        o.max_model_len = options.max_model_len;
        f.suffix = std::make_unique<SuffixProposer>(o);
      } else {
        NgramOptions o;
        o.k = f.ks[0];
        o.min_n = f.min_n;
        o.max_n = f.max_n;
        o.max_model_len = options.max_model_len;
        f.ngram = std::make_unique<NgramProposer>(o);
      }
    }
  }

  // `text_prompt` and `max_tokens`: what the llama.cpp points need of the request (analysis.h).
  const std::vector<SpecStats>& Replay(std::span<const uint32_t> prompt,
                                       std::span<const uint32_t> response, bool text_prompt,
                                       std::optional<uint64_t> max_tokens) {
    std::span<const uint32_t> slot_prompt = prompt;
    if (bos_ && text_prompt && (prompt.empty() || prompt[0] != *bos_)) {
      with_bos_.assign(1, *bos_);
      with_bos_.insert(with_bos_.end(), prompt.begin(), prompt.end());
      slot_prompt = with_bos_;
    }
    for (Family& f : families_) {
      if (f.llamacpp) {
        stats_[f.points[0]] = f.llamacpp->Simulate(slot_prompt, response, max_tokens);
        continue;
      }
      if (f.points.size() == 1) {
        stats_[f.points[0]] =
            f.ngram ? f.ngram->Simulate(prompt, response) : f.suffix->Simulate(prompt, response);
        continue;
      }
      if (f.ngram) {
        f.ngram->SimulateSweep(prompt, response, f.ks, f.ranges, &f.out);
      } else {
        f.suffix->SimulateSweep(prompt, response, f.ks, &f.out);
      }
      for (size_t j = 0; j < f.points.size(); ++j) stats_[f.points[j]] = std::move(f.out[j]);
    }
    return stats_;
  }

  // Suffix decoding's state (see AnalyzeReport).
  void SuffixState(AnalyzeReport* r) const {
    for (const Family& f : families_) {
      if (!f.suffix) continue;
      r->suffix_prompt_trees_built =
          std::max(r->suffix_prompt_trees_built, f.suffix->prompt_trees_built());
      r->suffix_prompt_trees_reused =
          std::max(r->suffix_prompt_trees_reused, f.suffix->prompt_trees_reused());
      r->suffix_global_bytes =
          std::max<uint64_t>(r->suffix_global_bytes, f.suffix->GlobalMemoryBytes());
      r->suffix_cached_requests =
          std::max<uint64_t>(r->suffix_cached_requests, f.suffix->cached_requests());
    }
  }

 private:
  // The points replayed by one proposer.
  struct Family {
    Method method = Method::kNgram;
    uint32_t min_n = 0, max_n = 0;
    std::unique_ptr<NgramProposer> ngram;
    std::unique_ptr<SuffixProposer> suffix;
    std::unique_ptr<LlamacppProposer> llamacpp;
    std::vector<uint32_t> ks;
    std::vector<std::pair<uint32_t, uint32_t>> ranges;  // n-gram min..max per point
    std::vector<size_t> points;                         // indices into AnalyzeOptions::points
    std::vector<SpecStats> out;
  };
  std::vector<Family> families_;
  std::vector<SpecStats> stats_;
  std::optional<uint32_t> bos_;
  std::vector<uint32_t> with_bos_;  // the prompt with a BOS first
};

// The bytes at which a batch stops growing (a capture of huge prompts still spreads over every
// worker).
constexpr size_t kBatchBytes = size_t{1} << 20;

// What a worker found for one line: everything before the replay. The join's checks stay with
// the in-order stage: a worker looks the outcome up by line alone (OutcomeTable::Find), and its
// result counts only when OutcomeJoin::Join, in capture order, returns that same outcome.
struct Prepared {
  bool parsed = false;  // a JSON object (else skip_kind says why)
  bool joined = false;  // it has a request: the in-order stage joins its outcome (else skipped)
  std::optional<double> timestamp;
  std::string skip_kind, skip_detail;  // after the join: why the request is not replayed
  size_t ids_begin = 0, prompt_size = 0, response_size = 0;  // into Batch::ids: prompt, response
  std::string group_key, group_label;                        // with --by
  bool text_prompt = true;                                   // TextPrompt
  std::optional<uint64_t> max_tokens;                        // MaxTokens
  std::optional<ServerSpec> server_spec;                     // Response::server_spec
  bool tokens_differ = false;  // the server reported another completion_tokens
};

struct Batch {
  trace::LineBatch input;
  std::vector<Prepared> rows;  // one per input line
  std::vector<uint32_t> ids;
};

// Parses, joins by line, reads the response and tokenizes both sides; one per worker thread.
class Worker {
 public:
  Worker(const AnalyzeOptions& options, const trace::OutcomeTable& outcomes)
      : options_(options), outcomes_(outcomes), end_of_turn_(options.tokenizer->EndOfTurnId()) {}

  void Process(Batch* batch) {
    batch->ids.clear();
    batch->rows.resize(batch->input.lines.size());
    for (size_t i = 0; i < batch->input.lines.size(); ++i) {
      batch->rows[i] = Prepared{};
      Prepare(batch->input, batch->input.lines[i], &batch->rows[i], &batch->ids);
    }
  }

 private:
  void Prepare(const trace::LineBatch& input, const trace::LineBatch::Ref& ref, Prepared* p,
               std::vector<uint32_t>* ids) {
    const std::string_view bytes = input.Text(ref);
    const trace::ParsedRow& row = parser_.Parse(bytes);
    if (row.status != trace::ParseStatus::kOk) {
      p->skip_kind = ref.torn ? "torn last line" : "not a JSON object";
      p->skip_detail = row.error;
      return;
    }
    p->parsed = true;
    const trace::TraceFormat format = trace::RowFormat(row.object);
    std::string_view body;
    object request = row.object;
    if (format == trace::TraceFormat::kRaw) {
      body = trace::TrimJsonWhitespace(bytes);
    } else if (std::optional<std::string_view> payload = trace::PayloadBytes(bytes, row.object)) {
      body = *payload;
      request = row.object["payload"].get_object().value_unsafe();
    } else {
      p->skip_kind = "no request payload";
      return;
    }
    p->joined = true;
    p->timestamp = trace::RowTimestamp(row.object);
    const trace::Outcome* outcome = outcomes_.Find(ref.number);
    if (outcome == nullptr) return;  // the in-order stage's join finds none either
    Response resp;
    auto skip = [p](std::string kind, std::string detail) {
      p->skip_kind = std::move(kind);
      p->skip_detail = std::move(detail);
    };
    if (!ReadResponse(&outcome_parser_, outcomes_.Text(*outcome), &resp)) {
      return skip("no outcome", "its outcome line is not JSON");
    }
    if (!resp.present && !resp.unreadable) {
      return skip("no response text",
                  "the capture did not record responses (capture_responses off)");
    }
    if (resp.status < 200 || resp.status > 299) {
      return skip("not a 2xx response", "HTTP " + std::to_string(resp.status));
    }
    if (resp.cancelled) {
      return skip("cancelled", "the client went away before the answer ended");
    }
    if (resp.unreadable) {
      return skip("response not readable",
                  "the body was neither JSON nor an event stream (compressed?)");
    }
    if (resp.truncated) return skip("response truncated", "longer than max_response_bytes");
    const size_t begin = ids->size();
    error_.clear();
    // A Responses or Messages request renders as the chat request its server templates.
    if (api::ChatBodyFor(trace::RowEndpoint(row.object, format), body, &chat_body_)) {
      body = chat_body_;
    }
    if (!options_.tokenizer->EncodeRequest(body, ids, &error_)) {
      ids->resize(begin);
      return skip("no prompt", error_);
    }
    const size_t prompt_end = ids->size();
    options_.tokenizer->Encode(resp.reasoning, ids);
    options_.tokenizer->Encode(resp.text, ids);
    for (std::string_view args : resp.tool_arguments) options_.tokenizer->Encode(args, ids);
    if (ids->size() == prompt_end) {
      ids->resize(begin);
      return skip("empty response", "");
    }
    // The server's own count of the tokens it generated, against the re-tokenized text's (with
    // or without the end-of-turn token, which servers count differently): a text that does not
    // re-tokenize to the generated ids (partial UTF-8 byte tokens) is replayed on other tokens.
    const size_t retokenized = ids->size() - prompt_end;
    if (end_of_turn_ && api::StoppedByItself(resp.finish_reason)) {
      ids->push_back(*end_of_turn_);
    }
    if (outcome->completion_tokens) {
      const uint64_t reported = *outcome->completion_tokens;
      p->tokens_differ = reported != retokenized && reported != ids->size() - prompt_end;
    }
    p->ids_begin = begin;
    p->prompt_size = prompt_end - begin;
    p->text_prompt = TextPrompt(request);
    p->max_tokens = MaxTokens(request);
    p->server_spec = resp.server_spec;
    p->response_size = ids->size() - prompt_end;
    if (options_.by != GroupBy::kNone) {
      std::tie(p->group_key, p->group_label) =
          GroupOf(options_.by, request, trace::RowEndpoint(row.object, format));
    }
  }

  const AnalyzeOptions& options_;
  const trace::OutcomeTable& outcomes_;
  const std::optional<uint32_t> end_of_turn_;
  trace::RowParser parser_;
  simdjson::dom::parser outcome_parser_;
  std::string error_;
  std::string chat_body_;  // a Responses or Messages request as chat
};

OrderedBatches<Batch>::Work MakeWorker(const AnalyzeOptions& options,
                                       const trace::OutcomeTable& outcomes) {
  auto worker = std::make_shared<Worker>(options, outcomes);
  return [worker](Batch* batch) { worker->Process(batch); };
}

}  // namespace

std::string_view MethodName(Method method) {
  switch (method) {
    case Method::kNgram:
      return "ngram";
    case Method::kSuffix:
      return "suffix";
    case Method::kLlamacppNgramSimple:
      return "llamacpp-ngram-simple";
    case Method::kLlamacppNgramMapK:
      return "llamacpp-ngram-map-k";
    case Method::kLlamacppNgramMapK4v:
      return "llamacpp-ngram-map-k4v";
  }
  return "?";
}

bool IsLlamacpp(Method method) {
  return method == Method::kLlamacppNgramSimple || method == Method::kLlamacppNgramMapK ||
         method == Method::kLlamacppNgramMapK4v;
}

LlamacppMode LlamacppModeOf(Method method) {
  switch (method) {
    case Method::kLlamacppNgramMapK:
      return LlamacppMode::kNgramMapK;
    case Method::kLlamacppNgramMapK4v:
      return LlamacppMode::kNgramMapK4v;
    default:
      return LlamacppMode::kNgramSimple;
  }
}

double Speedup(const SpecStats& s, const CostModel& cost) {
  if (s.tokens < 2) return 1.0;
  const double cost_steps = static_cast<double>(s.steps) +
                            cost.draft_overhead * static_cast<double>(s.drafts) +
                            cost.verify_cost * static_cast<double>(s.draft_tokens);
  return cost_steps > 0 ? static_cast<double>(s.tokens - 1) / cost_steps : 1.0;
}

size_t GroupResult::Best(const std::vector<SweepPoint>& points, const CostModel& cost) const {
  size_t best = 0;
  for (size_t i = 1; i < std::min(points.size(), stats.size()); ++i) {
    if (Speedup(stats[i], cost) > Speedup(stats[best], cost) + 1e-12) best = i;
  }
  return best;
}

void AddServerCheck(const std::vector<SweepPoint>& points, const ServerSpec& server,
                    const std::vector<SpecStats>& stats, std::vector<ServerCheck>* checks) {
  checks->resize(points.size());
  for (size_t i = 0; i < points.size(); ++i) {
    if (!IsLlamacpp(points[i].method)) continue;
    ServerCheck& c = (*checks)[i];
    ++c.requests;
    c.exact +=
        stats[i].draft_tokens == server.drafted && stats[i].accepted_tokens == server.accepted;
    c.server.drafted += server.drafted;
    c.server.accepted += server.accepted;
    c.predicted.drafted += stats[i].draft_tokens;
    c.predicted.accepted += stats[i].accepted_tokens;
  }
}

int AnalyzeReport::exit_code() const {
  if (!io.ok()) return 2;
  return skipped_rows.total > 0 ? 1 : 0;
}

AnalyzeReport AnalyzeCapture(const AnalyzeOptions& options) {
  const auto start = std::chrono::steady_clock::now();
  AnalyzeReport r;
  r.path = options.path;
  r.points = options.points;
  r.suffix = options.suffix;
  r.skipped_rows.limit = options.max_failures;
  r.total.label = "all";
  r.total.stats.resize(options.points.size());
  r.threads = options.threads ? options.threads : std::max(1u, std::thread::hardware_concurrency());

  trace::OutcomeTable outcomes;
  bool loaded = false;
  trace::OutcomeTable::LoadOptions load;
  load.keep_text = true;
  r.io = outcomes.LoadFor(options.path, options.outcomes_path, false, load, &loaded, &r.warnings);
  if (!r.io.ok()) return r;
  if (!loaded) {
    r.io = Status::InvalidArgument(
        options.path + ": no outcomes sidecar (" + options.path +
        ".outcomes.ndjson): the generated text is in it; capture with capture_responses on "
        "(`llmtap proxy --capture-responses`), or name the sidecar with --outcomes");
    return r;
  }
  r.outcomes_path = outcomes.path();
  trace::OutcomeJoin join(&outcomes, options.path);

  trace::LineReader reader;
  r.io = reader.Open(options.path);
  if (!r.io.ok()) return r;
  trace::Progress progress("specdec", options.progress);

  Replayer replayer(options);
  std::unordered_map<std::string, GroupResult> groups;
  auto skip = [&](uint64_t line, const std::string& kind, const std::string& detail) {
    ++r.skipped[kind];
    r.skipped_rows.Add(line, detail.empty() ? kind : kind + ": " + detail);
  };
  // In capture order: the join's checks, then each request replayed (suffix decoding's global
  // trees learn the responses in this order).
  auto consume = [&](const Batch& batch) {
    for (size_t i = 0; i < batch.rows.size(); ++i) {
      const Prepared& p = batch.rows[i];
      const trace::LineBatch::Ref& ref = batch.input.lines[i];
      r.bytes += ref.size + 1;
      if (!p.parsed) {
        skip(ref.number, p.skip_kind, p.skip_detail);
        continue;
      }
      ++r.rows;
      if (!p.joined) {
        skip(ref.number, p.skip_kind, p.skip_detail);
        continue;
      }
      const trace::Outcome* outcome = join.Join(ref.number, p.timestamp);
      if (join.refused()) return false;
      if (outcome == nullptr) {
        skip(ref.number, "no outcome", "");
        continue;
      }
      if (!p.skip_kind.empty()) {
        skip(ref.number, p.skip_kind, p.skip_detail);
        continue;
      }
      const std::span<const uint32_t> ids(batch.ids);
      const std::span<const uint32_t> prompt = ids.subspan(p.ids_begin, p.prompt_size);
      const std::span<const uint32_t> response =
          ids.subspan(p.ids_begin + p.prompt_size, p.response_size);
      const std::vector<SpecStats>& stats =
          replayer.Replay(prompt, response, p.text_prompt, p.max_tokens);
      ++r.replayed;
      r.tokens_differ += p.tokens_differ;
      AddTo(&r.total, prompt.size(), response.size(), stats);
      if (p.server_spec) AddServerCheck(options.points, *p.server_spec, stats, &r.server_check);
      if (options.on_request) {
        static const std::string kAllKey, kAllLabel = "all";
        const bool grouped = options.by != GroupBy::kNone;
        const RequestResult one{ref.number,
                                grouped ? &p.group_key : &kAllKey,
                                grouped ? &p.group_label : &kAllLabel,
                                prompt.size(),
                                response.size(),
                                p.max_tokens,
                                &stats,
                                p.server_spec};
        if (!options.on_request(one)) {
          r.io = Status::IoError("--per-request: the write failed", EIO);
          return false;
        }
      }
      if (options.by != GroupBy::kNone) {
        GroupResult& g = groups[p.group_key];
        if (g.label.empty()) {
          g.key = p.group_key;
          g.label = p.group_label;
        }
        AddTo(&g, prompt.size(), response.size(), stats);
      }
    }
    return true;
  };
  const unsigned workers = r.threads - 1;
  OrderedBatches<Batch> pool(workers, size_t{workers} * 3,
                             [&] { return MakeWorker(options, outcomes); });
  bool refused = false;
  pool.Run(
      [&](Batch* batch) {
        return !refused && batch->input.Read(&reader, &progress, options.batch_lines, kBatchBytes,
                                             {.lines = &r.lines});
      },
      [&](Batch& batch) {
        if (!refused && !consume(batch)) refused = true;
        return !refused;
      });
  progress.Finish();
  replayer.SuffixState(&r);
  if (!reader.status().ok()) r.io = reader.status();
  if (r.io.ok()) r.io = join.Finish(r.lines);
  if (join.mismatched() > 0) r.warnings.push_back(join.MismatchSummary());
  for (auto& [key, g] : groups) r.groups.push_back(std::move(g));
  std::sort(r.groups.begin(), r.groups.end(), [](const GroupResult& a, const GroupResult& b) {
    return a.requests != b.requests ? a.requests > b.requests : a.label < b.label;
  });
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return r;
}

}  // namespace llmtap::specdec
