#include "report/specdec_html.h"

#include "report/html_report_internal.h"

namespace llmtap::report {
namespace {

using nlohmann::json;

// At most this many groups get a section (the JSON has them all).
constexpr size_t kMaxGroups = 20;

using html_internal::Number;
using html_internal::Text;

std::string GroupSection(const json& g, size_t index) {
  std::string h = "<h2>" + HtmlEscape(Text(g.value("label", json()))) + "</h2>\n";
  h += "<p class=\"sub\">" + Text(g.value("requests", json())) + " requests, " +
       Text(g.value("response_tokens", json())) + " response tokens, " +
       Text(g.value("prompt_tokens", json())) + " prompt tokens</p>\n";
  const json points = g.value("points", json::array());
  const json best = g.value("best", json());
  h += "<table><tr><th>method</th><th>k</th><th>n-gram</th><th>accepted / drafted</th>"
       "<th>acceptance length</th><th>tokens / step</th><th>steps without draft</th>"
       "<th>speedup</th></tr>\n";
  for (size_t i = 0; i < points.size(); ++i) {
    const json& p = points[i];
    const bool is_best = best.is_number_unsigned() && best.get<size_t>() == i;
    std::string range = "-";
    if (p.contains("ngram_min")) range = Text(p["ngram_min"]) + "-" + Text(p["ngram_max"]);
    // llama.cpp's methods: size_n (k is their size_m), and ngram-map-k4v's min_hits.
    if (p.contains("size_n")) range = Text(p["size_n"]);
    if (p.contains("min_hits")) range += " (min_hits " + Text(p["min_hits"]) + ")";
    h += is_best ? "<tr class=\"best\">" : "<tr>";
    h += "<td>" + HtmlEscape(Text(p.value("method", json()))) + (is_best ? " (best)" : "") +
         "</td><td>" + Text(p.value("k", json())) + "</td><td>" + range + "</td>";
    const json rate = p.value("acceptance_rate", json());
    h += "<td>" + (rate.is_number() ? Number(json(100 * rate.get<double>()), "%.1f%%") : "-") +
         "</td>";
    h += "<td>" + Number(p.value("acceptance_length", json()), "%.2f") + "</td>";
    h += "<td>" + Number(p.value("tokens_per_step", json()), "%.2f") + "</td>";
    const json steps = p.value("steps", json()), nodraft = p.value("steps_without_draft", json());
    std::string share = "-";
    if (steps.is_number() && nodraft.is_number() && steps.get<double>() > 0) {
      share = Number(json(100 * nodraft.get<double>() / steps.get<double>()), "%.1f%%");
    }
    h += "<td>" + share + "</td><td>" + Number(p.value("speedup", json()), "%.2f") + "</td></tr>\n";
  }
  h += "</table>\n<div class=\"plots\">\n";
  for (const char* kind : {"len", "speedup"}) {
    h += "<div class=\"plotbox\" id=\"plot-" + std::to_string(index) + "-" + kind + "\"></div>\n";
  }
  return h + "</div>\n";
}

// Draws, for every group i, plot-i-len and plot-i-speedup: one line per method and n-gram range.
const char kSpecdecPlots[] = R"JS(
  function render() {
    var data = JSON.parse(document.getElementById('report-data').textContent);
    var groups = [data.total].concat((data.groups || []).slice(0, data.max_groups));
    groups.forEach(function (g, gi) {
      var lines = {}, order = [];
      (g.points || []).forEach(function (p) {
        var name = p.method + (p.ngram_min !== undefined ? ' n=' + p.ngram_min + '-' + p.ngram_max : '') +
            (p.size_n !== undefined ? ' n=' + p.size_n : '') + (p.min_hits !== undefined ? ' min_hits=' + p.min_hits : '');
        if (!lines[name]) { lines[name] = {k: [], len: [], speedup: []}; order.push(name); }
        lines[name].k.push(p.k);
        lines[name].len.push(p.acceptance_length);
        lines[name].speedup.push(p.speedup);
      });
      function series(key) {
        return order.map(function (name) {
          return {name: order.length > 1 ? name : '', type: 'line', x: lines[name].k, y: lines[name][key]};
        });
      }
      chart('plot-' + gi + '-len', {title: 'Acceptance length against k', xlabel: 'k (draft tokens per step)',
                                    ylabel: '1 + accepted / drafts', series: series('len'), ymin: 1, xint: true});
      chart('plot-' + gi + '-speedup', {title: 'Expected speedup against k', xlabel: 'k (draft tokens per step)',
                                        ylabel: 'speedup (cost model)', series: series('speedup'), xint: true});
    });
    finish();
  }
)JS";

}  // namespace

std::string RenderSpecdecHtml(const json& report_in) {
  const json& report = report_in.is_object() ? report_in : json::object();
  const std::string capture = Text(report.value("capture", json()));
  std::string h = html_internal::PageHead("llmtap specdec: " + capture);
  h += "<h1>Speculative decoding on this traffic</h1>\n<div class=\"sub\">" + HtmlEscape(capture) +
       "<br>tokenizer: " + HtmlEscape(Text(report.value("tokenizer", json()))) + "<br>" +
       Text(report.value("replayed", json())) + " of " + Text(report.value("rows", json())) +
       " rows replayed</div>\n";
  const json cost = report.value("cost_model", json::object());
  h += "<p>Speedup = (T - 1) / (S + " + Number(cost.value("draft_overhead", json()), "%g") +
       " &middot; R + " + Number(cost.value("verify_cost", json()), "%g") +
       " &middot; D): T response tokens, S decode steps, R steps with a draft, D draft tokens "
       "(a step verifying d draft tokens costs 1 + draft_overhead + verify_cost &middot; d plain "
       "steps). Greedy acceptance; a draft running past the captured end of a response counts "
       "as not accepted.</p>\n";
  const json skipped = report.value("skipped", json::object());
  if (skipped.is_object() && !skipped.empty()) {
    std::string list;
    for (const auto& [kind, n] : skipped.items()) {
      list += (list.empty() ? "" : ", ") + Text(n) + " " + HtmlEscape(kind);
    }
    h += "<div class=\"warn\">Skipped rows: " + list + "</div>\n";
  }
  h += GroupSection(report.value("total", json::object()), 0);
  const json groups = report.value("groups", json::array());
  for (size_t i = 0; i < groups.size() && i < kMaxGroups; ++i) h += GroupSection(groups[i], i + 1);
  if (groups.size() > kMaxGroups) {
    h += "<p class=\"muted\">" + std::to_string(groups.size() - kMaxGroups) +
         " more groups are in the JSON.</p>\n";
  }
  json data = report;
  data["max_groups"] = kMaxGroups;
  h += "<noscript><p>The plots need JavaScript; the tables do not.</p></noscript>\n";
  h += html_internal::PageTail(data, kSpecdecPlots);
  return h;
}

}  // namespace llmtap::report
