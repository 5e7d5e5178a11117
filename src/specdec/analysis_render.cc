// RenderText and RenderJson of analysis.h.
#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <type_traits>

#include <nlohmann/json.hpp>

#include "specdec/analysis.h"

namespace llmtap::specdec {
namespace {

constexpr size_t kMaxGroupsShown = 20;

std::string Format(const char* fmt, double v) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), fmt, v);
  return buf;
}

std::string WithCommas(uint64_t v) {
  std::string digits = std::to_string(v), out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return out;
}

double Ratio(uint64_t a, uint64_t b) {
  return b ? static_cast<double>(a) / static_cast<double>(b) : 0;
}

// "5-5" for an n-gram range, "-" for suffix decoding; llama.cpp: size_n ("3"), and for
// ngram-map-k4v its min_hits when not 1 ("3/h2").
std::string NgramRange(const SweepPoint& p) {
  if (IsLlamacpp(p.method)) {
    std::string n = std::to_string(p.min_n);
    if (p.method == Method::kLlamacppNgramMapK4v && p.min_hits != 1) {
      n += "/h" + std::to_string(p.min_hits);
    }
    return n;
  }
  if (p.method != Method::kNgram) return "-";
  return std::to_string(p.min_n) + "-" + std::to_string(p.max_n);
}

std::string PointName(const SweepPoint& p) {
  if (IsLlamacpp(p.method)) {
    std::string name = std::string(MethodName(p.method)) + " n=" + std::to_string(p.min_n) +
                       " m=" + std::to_string(p.k);
    if (p.method == Method::kLlamacppNgramMapK4v) name += " min_hits=" + std::to_string(p.min_hits);
    return name;
  }
  std::string name = std::string(MethodName(p.method)) + " k=" + std::to_string(p.k);
  if (p.method == Method::kNgram) name += " n=" + NgramRange(p);
  return name;
}

void RenderGroup(const AnalyzeReport& r, const GroupResult& g, const CostModel& cost,
                 std::string* out) {
  out->append("\n").append(g.label).append(": ").append(WithCommas(g.requests));
  out->append(" requests, ").append(WithCommas(g.response_tokens)).append(" response tokens, ");
  out->append(WithCommas(g.prompt_tokens)).append(" prompt tokens\n");
  if (g.requests == 0) return;
  // The method column as wide as its longest name (llama.cpp's are long); k is size_m and n
  // size_n for them.
  int width = 6;
  for (const SweepPoint& p : r.points) {
    width = std::max(width, static_cast<int>(MethodName(p.method).size()));
  }
  char row[200];
  std::snprintf(row, sizeof(row), "  %-*s %3s %6s %8s %8s %9s %9s %8s\n", width, "method", "k", "n",
                "accept", "acc.len", "tok/step", "no-draft", "speedup");
  *out += row;
  for (size_t i = 0; i < r.points.size() && i < g.stats.size(); ++i) {
    const SweepPoint& p = r.points[i];
    const SpecStats& s = g.stats[i];
    const std::string n = NgramRange(p);
    std::snprintf(row, sizeof(row), "  %-*s %3u %6s %7.1f%% %8.2f %9.2f %8.1f%% %8.2f\n", width,
                  std::string(MethodName(p.method)).c_str(), p.k, n.c_str(),
                  100 * Ratio(s.accepted_tokens, s.draft_tokens), s.AcceptanceLength(),
                  s.TokensPerStep(), 100 * Ratio(s.steps_without_draft, s.steps), Speedup(s, cost));
    *out += row;
  }
  const size_t best = g.Best(r.points, cost);
  const SpecStats& s = g.stats[best];
  *out += "  best: " + PointName(r.points[best]) + ", speedup " + Format("%.2f", Speedup(s, cost)) +
          "; acceptance by draft position:";
  for (uint64_t a : s.accepted_per_pos) {
    out->append(" ").append(Format("%.0f%%", 100 * Ratio(a, s.drafts)));
  }
  *out += "\n";
}

// Every point's counters as a JSON array, in the order of `points`, written by hand: the
// --per-request line of every replayed request goes through here, where building nlohmann
// objects cost a fifth of the replay (k 1..8). The report parses the same text (PointsJson).
void AppendPoints(const std::vector<SweepPoint>& points, const std::vector<SpecStats>& stats,
                  const CostModel& cost, std::string* out) {
  auto num = [out](auto v) {
    if constexpr (std::is_floating_point_v<decltype(v)>) {
      if (!std::isfinite(v)) return out->append("null"), void();  // as nlohmann writes them
    }
    char buf[32];
    out->append(buf, std::to_chars(buf, buf + sizeof buf, v).ptr);
  };
  auto field = [out](const char* name) {
    out->push_back(',');
    out->push_back('"');
    out->append(name);
    out->append("\":");
  };
  out->push_back('[');
  for (size_t i = 0; i < points.size() && i < stats.size(); ++i) {
    const SweepPoint& p = points[i];
    const SpecStats& s = stats[i];
    if (i > 0) out->push_back(',');
    out->append("{\"method\":\"");
    out->append(MethodName(p.method));
    out->append("\",\"k\":");
    num(p.k);
    if (p.method == Method::kNgram) {
      field("ngram_min"), num(p.min_n);
      field("ngram_max"), num(p.max_n);
    }
    if (IsLlamacpp(p.method)) {
      // llama-server's names: --spec-ngram-*-size-n/-size-m/-min-hits, timings.draft_n and
      // draft_n_accepted (the same counts as num_draft_tokens and num_accepted_tokens).
      field("size_n"), num(p.min_n);
      field("size_m"), num(p.k);
      if (p.method == Method::kLlamacppNgramMapK4v) field("min_hits"), num(p.min_hits);
      field("draft_n"), num(s.draft_tokens);
      field("draft_n_accepted"), num(s.accepted_tokens);
    }
    field("tokens"), num(s.tokens);
    field("ignored_tokens"), num(s.ignored_tokens);
    field("steps"), num(s.steps);
    field("steps_without_draft"), num(s.steps_without_draft);
    field("num_drafts"), num(s.drafts);
    field("num_draft_tokens"), num(s.draft_tokens);
    field("num_accepted_tokens"), num(s.accepted_tokens);
    field("num_accepted_tokens_per_pos");
    out->push_back('[');
    for (size_t k = 0; k < s.accepted_per_pos.size(); ++k) {
      if (k > 0) out->push_back(',');
      num(s.accepted_per_pos[k]);
    }
    out->push_back(']');
    field("acceptance_rate"), num(Ratio(s.accepted_tokens, s.draft_tokens));
    field("acceptance_length"), num(s.AcceptanceLength());
    field("tokens_per_step"), num(s.TokensPerStep());
    field("speedup"), num(Speedup(s, cost));
    out->push_back('}');
  }
  out->push_back(']');
}

nlohmann::json PointsJson(const std::vector<SweepPoint>& points,
                          const std::vector<SpecStats>& stats, const CostModel& cost) {
  std::string text;
  AppendPoints(points, stats, cost, &text);
  return nlohmann::json::parse(text);
}

nlohmann::json GroupJson(const AnalyzeReport& r, const GroupResult& g, const CostModel& cost) {
  nlohmann::json j;
  j["key"] = g.key;
  j["label"] = g.label;
  j["requests"] = g.requests;
  j["prompt_tokens"] = g.prompt_tokens;
  j["response_tokens"] = g.response_tokens;
  j["points"] = PointsJson(r.points, g.stats, cost);
  if (g.requests > 0 && !r.points.empty()) j["best"] = g.Best(r.points, cost);
  return j;
}

}  // namespace

std::string RenderRequestJson(const std::vector<SweepPoint>& points, const RequestResult& r,
                              const CostModel& cost) {
  // The group's strings through nlohmann: a label cut from a system prompt may end inside a
  // UTF-8 sequence, which it replaces.
  auto str = [](const std::string& s) {
    return nlohmann::json(s).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  };
  std::string out = "{\"line\":" + std::to_string(r.line) + ",\"group\":" + str(*r.group_key) +
                    ",\"group_label\":" + str(*r.group_label) +
                    ",\"prompt_tokens\":" + std::to_string(r.prompt_tokens) +
                    ",\"response_tokens\":" + std::to_string(r.response_tokens);
  // The llama.cpp methods cut drafts at the request's limit: say which one they read.
  const bool llamacpp = std::any_of(points.begin(), points.end(),
                                    [](const SweepPoint& p) { return IsLlamacpp(p.method); });
  if (llamacpp) {
    out += ",\"max_tokens\":" + (r.max_tokens ? std::to_string(*r.max_tokens) : "null");
  }
  out += ",\"points\":";
  AppendPoints(points, *r.stats, cost, &out);
  if (llamacpp) {
    out += ",\"server\":";
    out += r.server_spec
               ? "{\"draft_n\":" + std::to_string(r.server_spec->drafted) +
                     ",\"draft_n_accepted\":" + std::to_string(r.server_spec->accepted) + "}"
               : std::string("null");
  }
  out.push_back('}');
  return out;
}

std::string RenderText(const AnalyzeReport& r, const CostModel& cost,
                       const std::string& tokenizer_note) {
  std::string out =
      trace::RenderIssues(r.path, r.skipped_rows, "more skipped rows not shown", r.warnings);
  if (!r.io.ok()) return out + "error: " + r.io.ToString() + "\n";
  out += "llmtap specdec: " + r.path + " (outcomes: " + r.outcomes_path + ")\n";
  out += "tokenizer: " + tokenizer_note + "\n";
  out += "replayed " + WithCommas(r.replayed) + " of " + WithCommas(r.rows) + " rows";
  if (!r.skipped.empty()) {
    out += " (skipped:";
    bool first = true;
    for (const auto& [kind, n] : r.skipped) {
      out += std::string(first ? " " : ", ") + WithCommas(n) + " " + kind;
      first = false;
    }
    out += ")";
  }
  const double mb = static_cast<double>(r.bytes) / 1e6;
  out += "; " + Format("%.1f", mb) + " MB in " + Format("%.2f", r.seconds) + " s on " +
         std::to_string(r.threads) + (r.threads == 1 ? " thread" : " threads") + " (" +
         Format("%.1f", r.seconds > 0 ? mb / r.seconds : 0) + " MB/s)\n";
  out += "cost model: a decode step verifying d draft tokens costs 1 + " +
         Format("%g", cost.draft_overhead) + " + " + Format("%g", cost.verify_cost) +
         " * d plain steps (--draft-overhead, --verify-cost)\n";
  if (r.suffix_cached_requests > 0 || r.suffix_prompt_trees_built > 0) {
    out += "suffix: prompt trees built for " + WithCommas(r.suffix_prompt_trees_built) + " of " +
           WithCommas(r.replayed) + " requests (the others read off their context), " +
           WithCommas(r.suffix_prompt_trees_reused) +
           " of them continuing an earlier turn's; the global tree holds " +
           WithCommas(r.suffix_cached_requests) + " responses in " +
           Format("%.1f", static_cast<double>(r.suffix_global_bytes) / 1e6) + " MB\n";
  }
  if (r.tokens_differ > 0) {
    out += "tokens: " + WithCommas(r.tokens_differ) + " of " + WithCommas(r.replayed) +
           " replayed responses re-tokenize to another count than the server's completion_tokens "
           "(their text is not the ids it generated, e.g. partial UTF-8 byte tokens): their "
           "estimates are on other tokens\n";
  }
  RenderGroup(r, r.total, cost, &out);
  // The llama.cpp replay against what the server itself reported, per point.
  for (size_t i = 0; i < r.server_check.size(); ++i) {
    const ServerCheck& c = r.server_check[i];
    if (c.requests == 0) continue;
    out += "server check, " + PointName(r.points[i]) + ": " + WithCommas(c.exact) + " of " +
           WithCommas(c.requests) + " requests predicted exactly (drafted and accepted); " +
           "accepted/drafted predicted " + Format("%.2f", 100 * c.predicted.rate()) + " % (" +
           WithCommas(c.predicted.accepted) + "/" + WithCommas(c.predicted.drafted) +
           "), the server's " + Format("%.2f", 100 * c.server.rate()) + " % (" +
           WithCommas(c.server.accepted) + "/" + WithCommas(c.server.drafted) + ")\n";
  }
  for (size_t i = 0; i < r.groups.size() && i < kMaxGroupsShown; ++i) {
    RenderGroup(r, r.groups[i], cost, &out);
  }
  if (r.groups.size() > kMaxGroupsShown) {
    out += "\n... " + std::to_string(r.groups.size() - kMaxGroupsShown) +
           " more groups (all are in --json)\n";
  }
  if (r.replayed == 0 && r.skipped.count("no response text")) {
    out +=
        "\nno row had its response recorded: capture with capture_responses on "
        "(`llmtap proxy --capture-responses`, or capture_responses=true in "
        "NIM_CAPTURE_ARGS)\n";
  }
  return out;
}

std::string RenderJson(const AnalyzeReport& r, const CostModel& cost,
                       const std::string& tokenizer_note) {
  nlohmann::json j;
  j["capture"] = r.path;
  j["outcomes"] = r.outcomes_path;
  j["tokenizer"] = tokenizer_note;
  j["cost_model"] = {{"verify_cost", cost.verify_cost}, {"draft_overhead", cost.draft_overhead}};
  j["suffix"] = {{"max_tree_depth", r.suffix.max_tree_depth},
                 {"max_cached_requests", r.suffix.max_cached_requests},
                 {"max_spec_factor", r.suffix.max_spec_factor},
                 {"min_token_prob", r.suffix.min_token_prob},
                 {"prompt_trees_built", r.suffix_prompt_trees_built},
                 {"prompt_trees_reused", r.suffix_prompt_trees_reused},
                 {"global_tree_bytes", r.suffix_global_bytes},
                 {"cached_requests", r.suffix_cached_requests}};
  j["rows"] = r.rows;
  j["replayed"] = r.replayed;
  j["tokens_differ"] = r.tokens_differ;
  j["skipped"] = r.skipped;
  j["bytes"] = r.bytes;
  j["seconds"] = r.seconds;
  j["threads"] = r.threads;
  j["total"] = GroupJson(r, r.total, cost);
  nlohmann::json groups = nlohmann::json::array();
  for (const GroupResult& g : r.groups) groups.push_back(GroupJson(r, g, cost));
  j["groups"] = std::move(groups);
  nlohmann::json checks = nlohmann::json::array();
  for (size_t i = 0; i < r.server_check.size(); ++i) {
    const ServerCheck& c = r.server_check[i];
    if (c.requests == 0) continue;
    checks.push_back({{"point", PointName(r.points[i])},
                      {"requests", c.requests},
                      {"exact", c.exact},
                      {"server",
                       {{"draft_n", c.server.drafted},
                        {"draft_n_accepted", c.server.accepted},
                        {"acceptance_rate", c.server.rate()}}},
                      {"predicted",
                       {{"draft_n", c.predicted.drafted},
                        {"draft_n_accepted", c.predicted.accepted},
                        {"acceptance_rate", c.predicted.rate()}}},
                      {"acceptance_error", c.predicted.rate() - c.server.rate()}});
  }
  j["server_check"] = std::move(checks);
  return j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
}

}  // namespace llmtap::specdec
