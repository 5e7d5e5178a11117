#include "report/compare.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "report/json_util.h"

namespace llmtap::report {
namespace {

using nlohmann::json;

struct RowSpec {
  std::string key, label, unit;
  int better;
};

std::vector<RowSpec> RowSpecs() {
  std::vector<RowSpec> specs = {
      {"/throughput/requests_per_s", "request throughput", "req/s", +1},
      {"/throughput/output_tokens_per_s", "output token throughput", "tok/s", +1},
      {"/goodput/requests_per_s", "goodput", "req/s", +1},
      {"/goodput/fraction", "goodput fraction", "", +1},
      {"/requests/completed", "requests completed", "", 0},
      {"/requests/errors", "errors", "", -1},
      {"/duration_s", "duration", "s", 0},
  };
  const std::pair<const char*, const char*> kLatency[] = {{"ttft_ms", "TTFT"},
                                                          {"ttst_ms", "TTST"},
                                                          {"itl_ms", "ITL"},
                                                          {"inter_chunk_ms", "inter-chunk gap"},
                                                          {"latency_ms", "latency"}};
  for (const auto& [metric, name] : kLatency) {
    for (const char* stat : {"mean", "p50", "p90", "p99"}) {
      specs.push_back({std::string("/metrics/") + metric + "/" + stat,
                       std::string(name) + " " + stat, "ms", -1});
    }
  }
  specs.push_back({"/metrics/output_tokens/mean", "output tokens mean", "tok", 0});
  specs.push_back({"/metrics/input_tokens/mean", "input tokens mean", "tok", 0});
  specs.push_back({"/metrics/lag_ms/p99", "schedule lag p99", "ms", -1});
  specs.push_back({"/metrics/lag_ms/max", "schedule lag max", "ms", -1});
  specs.push_back({"/open_loop/violations", "open-loop violations", "", -1});
  specs.push_back({"/server_metrics/spec_decode/acceptance_rate", "spec acceptance rate", "", +1});
  specs.push_back({"/server_metrics/spec_decode/mean_acceptance_length",
                   "spec mean acceptance length", "tok", +1});
  // What the servers reported per request (rows left out when no run has them).
  specs.push_back({"/server/cache/hit_rate", "server cache hit rate", "", +1});
  specs.push_back(
      {"/captured_server/cache/hit_rate", "server cache hit rate in the capture", "", 0});
  specs.push_back({"/server/spec/acceptance_rate", "server acceptance rate (per request)", "", +1});
  specs.push_back({"/server/spec/mean_acceptance_length",
                   "server mean acceptance length (per request)", "tok", +1});
  // The replay-fidelity certificate (fidelity/certificate.h), when the run had captured
  // outcomes: its verdict (true 1, false 0), counts, and figures of group 0 ("all requests").
  specs.push_back({"/fidelity/certified", "fidelity: certified (1 yes, 0 no)", "", +1});
  specs.push_back({"/fidelity/reproduced", "fidelity: metrics reproduced", "", +1});
  specs.push_back({"/fidelity/gated", "fidelity: metrics gated", "", 0});
  const std::string all = "/fidelity/groups/0";
  specs.push_back({all + "/tokens/prompt_equal", "fidelity: prompt tokens equal", "", +1});
  specs.push_back(
      {all + "/tokens/completion_equal", "fidelity: completion tokens equal (greedy)", "", +1});
  specs.push_back({all + "/tokens/finish_equal", "fidelity: finish reason equal (greedy)", "", +1});
  specs.push_back(
      {all + "/server/cache/points", "fidelity: cache hit rate, replay - capture", "points", 0});
  for (const auto& [metric, name] : {std::pair{"ttft_ms", "TTFT"},
                                     {"latency_ms", "latency"},
                                     {"server_prompt_ms", "server prompt time"},
                                     {"server_decode_ms", "server decode time"}}) {
    specs.push_back({all + "/timing/" + metric + "/ratio",
                     std::string("fidelity: ") + name + " replayed / captured", "x", 0});
  }
  return specs;
}

std::string Format(const std::optional<double>& v) {
  if (!v) return "-";
  char buf[64];
  double a = std::fabs(*v);
  if (*v == std::floor(*v) && a < 1e15) {
    std::snprintf(buf, sizeof buf, "%.0f", *v);  // counts
  } else if (a != 0 && (a >= 1e7 || a < 1e-3)) {
    std::snprintf(buf, sizeof buf, "%.3g", *v);
  } else if (a >= 1000) {
    std::snprintf(buf, sizeof buf, "%.1f", *v);
  } else {
    std::snprintf(buf, sizeof buf, "%.3f", *v);
  }
  return buf;
}

json OptJson(const std::optional<double>& v) { return v ? json(*v) : json(nullptr); }

}  // namespace

// The per-API rows of runs that mix APIs ("apis" in summary.json), for every API any run has.
std::vector<RowSpec> ApiRowSpecs(const std::vector<json>& summaries) {
  std::vector<std::string> names;
  for (const json& s : summaries) {
    const json* apis = JsonAt(s, "/apis");
    if (apis == nullptr || !apis->is_object()) continue;
    for (const auto& [name, _] : apis->items()) {
      if (std::find(names.begin(), names.end(), name) == names.end()) names.push_back(name);
    }
  }
  std::sort(names.begin(), names.end());
  std::vector<RowSpec> specs;
  for (const std::string& api : names) {
    // JSON pointer escapes ("~" and "/") are not needed: API names are plain words.
    const std::string at = "/apis/" + api;
    specs.push_back({at + "/requests/completed", api + ": requests completed", "", 0});
    specs.push_back({at + "/requests/errors", api + ": errors", "", -1});
    for (const auto& [metric, name] :
         {std::pair{"ttft_ms", "TTFT"}, {"itl_ms", "ITL"}, {"latency_ms", "latency"}}) {
      for (const char* stat : {"p50", "p99"}) {
        specs.push_back({at + "/" + metric + "/" + stat, api + ": " + name + " " + stat, "ms", -1});
      }
    }
  }
  return specs;
}

std::vector<CompareRow> CompareSummaries(const std::vector<json>& summaries) {
  std::vector<CompareRow> rows;
  std::vector<RowSpec> specs = RowSpecs();
  for (RowSpec& spec : ApiRowSpecs(summaries)) specs.push_back(std::move(spec));
  for (const RowSpec& spec : specs) {
    CompareRow row{spec.key, spec.label, spec.unit, spec.better, {}, {}};
    bool any = false;
    for (const json& s : summaries) {
      const json* v = JsonAt(s, spec.key.c_str());
      if (v && (v->is_number() || v->is_boolean())) {
        row.values.push_back(v->is_boolean() ? (v->get<bool>() ? 1.0 : 0.0) : v->get<double>());
        any = true;
      } else {
        row.values.push_back(std::nullopt);
      }
    }
    if (!any) continue;
    for (size_t i = 1; i < row.values.size(); ++i) {
      const auto& base = row.values[0];
      const auto& v = row.values[i];
      row.ratios.push_back(base && v && *base != 0 ? std::optional<double>(*v / *base)
                                                   : std::nullopt);
    }
    rows.push_back(std::move(row));
  }
  return rows;
}

json CompareToJson(const std::vector<std::string>& labels, const std::vector<std::string>& paths,
                   const std::vector<CompareRow>& rows) {
  json runs = json::array();
  for (size_t i = 0; i < labels.size(); ++i) {
    runs.push_back({{"label", labels[i]}, {"path", i < paths.size() ? paths[i] : ""}});
  }
  json out_rows = json::array();
  for (const CompareRow& row : rows) {
    json values = json::array(), ratios = json::array({nullptr});
    for (const auto& v : row.values) values.push_back(OptJson(v));
    for (const auto& r : row.ratios) ratios.push_back(OptJson(r));
    out_rows.push_back({{"key", row.key},
                        {"label", row.label},
                        {"unit", row.unit},
                        {"better", row.better > 0   ? "higher"
                                   : row.better < 0 ? "lower"
                                                    : "neither"},
                        {"values", values},
                        {"ratios", ratios}});
  }
  return {{"runs", runs}, {"baseline", 0}, {"rows", out_rows}};
}

std::string CompareToText(const std::vector<std::string>& labels,
                          const std::vector<CompareRow>& rows) {
  // Cells first, then widths.
  std::vector<std::vector<std::string>> table;
  std::vector<std::string> header = {"metric", "unit"};
  for (const std::string& l : labels) header.push_back(l);
  for (size_t i = 1; i < labels.size(); ++i) header.push_back(labels[i] + "/" + labels[0]);
  table.push_back(header);
  for (const CompareRow& row : rows) {
    std::vector<std::string> cells = {row.label, row.unit};
    for (const auto& v : row.values) cells.push_back(Format(v));
    for (const auto& r : row.ratios) {
      std::string cell = "-";
      if (r) {
        char buf[32];
        std::snprintf(buf, sizeof buf, "%.3fx", *r);
        cell = buf;
        // Mark a change of more than 1 % as better (+) or worse (-) for the user.
        if (row.better != 0 && std::fabs(*r - 1.0) > 0.01) {
          bool improved = row.better > 0 ? *r > 1.0 : *r < 1.0;
          cell += improved ? " +" : " -";
        } else {
          cell += "  ";
        }
      }
      cells.push_back(cell);
    }
    table.push_back(cells);
  }
  std::vector<size_t> width(header.size(), 0);
  for (const auto& r : table) {
    for (size_t c = 0; c < r.size(); ++c) width[c] = std::max(width[c], r[c].size());
  }
  std::string out;
  for (size_t r = 0; r < table.size(); ++r) {
    std::string line;
    for (size_t c = 0; c < table[r].size(); ++c) {
      const std::string& cell = table[r][c];
      std::string pad(width[c] - cell.size(), ' ');
      line += c < 2 ? cell + pad : pad + cell;  // names left, numbers right
      if (c + 1 < table[r].size()) line += "  ";
    }
    while (!line.empty() && line.back() == ' ') line.pop_back();
    out += line + "\n";
    if (r == 0) {
      size_t total = 0;
      for (size_t c = 0; c < width.size(); ++c) total += width[c] + (c + 1 < width.size() ? 2 : 0);
      out += std::string(total, '-') + "\n";
    }
  }
  out += "ratios are run / " + (labels.empty() ? std::string("first") : labels[0]) +
         "; + better, - worse (by more than 1 %)\n";
  return out;
}

}  // namespace llmtap::report
