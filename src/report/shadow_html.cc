#include "report/shadow_html.h"

#include "report/html_report.h"
#include "report/html_report_internal.h"

namespace llmtap::report {
namespace {

using html_internal::Number;
using html_internal::Text;
using nlohmann::json;

// The per-pair deltas plotted (BuildPlotSeries's columns), with their titles.
constexpr std::pair<const char*, const char*> kPlotted[] = {
    {"ttft_ms", "TTFT"}, {"latency_ms", "Latency"}, {"itl_p50_ms", "ITL p50"}};

std::string Percent(const json& v) {
  return v.is_number() ? Number(json(100 * v.get<double>()), "%.1f %%") : "-";
}

std::string Interval(const json& ci) {
  if (!ci.is_array() || ci.size() != 2) return "-";
  return "[" + Number(ci[0], "%.4f") + ", " + Number(ci[1], "%.4f") + "]";
}

// ": URL[, URL]" of a shadow's candidate_urls; "" when the pair lines did not say.
std::string CandidateUrls(const json& urls) {
  std::string out;
  for (const json& u : urls) out += (out.empty() ? ": " : ", ") + Text(u);
  return out;
}

std::string MetricRows(const json& group, const json& defs) {
  std::string h =
      "<table><tr><th>metric</th><th>n</th><th>mean primary</th><th>mean candidate</th>"
      "<th>ratio</th><th>95 % CI</th><th>median delta</th><th>verdict</th><th>why</th></tr>\n";
  for (const json& d : defs) {
    const json m = group["metrics"].value(d.value("key", ""), json::object());
    const std::string unit = " " + HtmlEscape(Text(d.value("unit", json())));
    h += "<tr><td>" + HtmlEscape(Text(d.value("label", json()))) + "</td><td>" +
         Text(m.value("n", json())) + "</td><td>" +
         Number(m.value("mean_primary", json()), "%.2f") + unit + "</td><td>" +
         Number(m.value("mean_candidate", json()), "%.2f") + unit + "</td><td>" +
         Number(m.value("ratio", json()), "%.4f") + "</td><td>" + Interval(m.value("ci", json())) +
         "</td><td>" + Number(m.value("median_delta", json()), "%+.2f") + unit + "</td><td><b>" +
         HtmlEscape(Text(m.value("verdict", json()))) + "</b></td><td class=\"text\">" +
         HtmlEscape(Text(m.value("note", json()))) + "</td></tr>\n";
  }
  return h + "</table>\n";
}

std::string GroupSection(const json& g, const json& defs) {
  const std::string kind = Text(g.value("kind", json()));
  std::string h =
      "<h3>" +
      HtmlEscape(kind == "all" ? "All pairs" : kind + " " + Text(g.value("name", json()))) +
      "</h3>\n";
  const json c = g.value("counts", json::object());
  h += "<p>" + Text(c.value("pairs", json())) + " pairs, " + Text(c.value("both_ok", json())) +
       " with both sides ok (only these are timed). Primary failed " +
       Text(c.value("primary_failed", json())) + ", candidate failed " +
       Text(c.value("candidate_failed", json())) + ", both failed " +
       Text(c.value("both_failed", json())) + ". Error rate: primary " +
       Percent(c.value("primary_error_rate", json())) + ", candidate " +
       Percent(c.value("candidate_error_rate", json())) + ".</p>\n";
  const json errors = g.value("errors", json::object());
  for (const char* side : {"primary", "candidate"}) {
    const json e = errors.value(side, json::object());
    if (!e.is_object() || e.empty()) continue;
    std::string list;
    for (const auto& [what, n] : e.items()) {
      list += (list.empty() ? "" : ", ") + Text(n) + " " + HtmlEscape(what);
    }
    h += "<p class=\"muted\">" + std::string(side) + " errors: " + list + "</p>\n";
  }
  h += MetricRows(g, defs);
  const json o = g.value("output", json::object());
  h += "<p>Exact output match at temperature 0: <b>" +
       Percent(o.value("greedy_match_rate", json())) + "</b> of " +
       Text(o.value("greedy_compared", json())) +
       " pairs; over all pairs compared: " + Percent(o.value("match_rate", json())) + " of " +
       Text(o.value("compared", json())) + ".";
  if (o.value("differing", 0) > 0) {
    h += " Differing outputs (" + Text(o.value("differing", json())) +
         "): median first differing character " +
         Number(o.value("first_diff_char_median", json()), "%.0f") + ", token " +
         Number(o.value("first_diff_token_median", json()), "%.0f") + ".";
  }
  return h + "</p>\n";
}

std::string NoiseSection(const json& nf, const json& defs) {
  if (!nf.is_object()) {
    return "<h2>A/A noise floor</h2>\n<p class=\"muted\">None: it needs two shadows of the same "
           "requests (--shadow given twice).</p>\n";
  }
  std::string h = "<h2>A/A noise floor</h2>\n<p>" + HtmlEscape(Text(nf.value("what", json()))) +
                  ". The band is the A/A interval's largest distance from 1: a candidate whose "
                  "interval lies within 1 &plusmn; band is reported \"within noise floor\".</p>\n";
  h += "<table><tr><th>group</th><th>requests</th>";
  for (const json& d : defs) h += "<th>" + HtmlEscape(Text(d.value("label", json()))) + "</th>";
  h += "</tr>\n";
  for (const json& g : nf.value("groups", json::array())) {
    h += "<tr><td>" +
         HtmlEscape(Text(g.value("kind", json())) + " " + Text(g.value("name", json()))) +
         "</td><td>" + Text(g.value("requests", json())) + "</td>";
    for (const json& d : defs) {
      const json m = g["metrics"].value(d.value("key", ""), json::object());
      h += "<td>" + Number(m.value("ratio", json()), "%.4f") + " " +
           Interval(m.value("ci", json())) + "<br>band " + Number(m.value("band", json()), "%.4f") +
           "</td>";
    }
    h += "</tr>\n";
  }
  return h + "</table>\n";
}

// For every candidate i of data.series: plot-i-<metric>-time (the deltas against time) and
// plot-i-<metric>-hist (their distribution, the median marked).
const char kShadowPlots[] = R"JS(
  function render() {
    var data = JSON.parse(document.getElementById('report-data').textContent);
    (data.series || []).forEach(function (s, i) {
      data.plotted.forEach(function (p) {
        var key = p[0], name = p[1], v = s[key] || [];
        var sorted = numsort(clean(v));
        chart('plot-' + i + '-' + key + '-time', {
          title: name + ' delta over time, shadow ' + s.shadow + (s.stride > 1 ? ' (every ' + s.stride + 'th pair)' : ''),
          xlabel: 'time since the first pair (s)', ylabel: 'candidate - primary (ms)',
          series: [{name: '', type: 'points', x: s.t_s, y: v}]});
        histogram('plot-' + i + '-' + key + '-hist', name + ' delta, shadow ' + s.shadow, v,
                  {p50: quantile(sorted, 0.5), p99: quantile(sorted, 0.99)}, 'candidate - primary (ms)');
      });
    });
    finish();
  }
)JS";

}  // namespace

std::string RenderShadowHtml(const json& report_in, const json& series) {
  const json& report = report_in.is_object() ? report_in : json::object();
  const json defs = report.value("metrics", json::array());
  const json in = report.value("inputs", json::object());
  const json opt = report.value("options", json::object());
  std::string h = html_internal::PageHead("llmtap shadow report");
  h += "<h1>Shadow traffic: candidate against primary</h1>\n<div class=\"sub\">";
  for (const json& f : in.value("files", json::array())) h += HtmlEscape(Text(f)) + "<br>";
  h += Text(in.value("pairs", json())) + " pairs";
  if (in.value("malformed", 0) > 0) {
    h += ", " + Text(in.value("malformed", json())) + " malformed lines skipped";
  }
  h += "</div>\n";
  for (const json& m : in.value("malformed_examples", json::array())) {
    h += "<div class=\"warn\">" + HtmlEscape(Text(m)) + "</div>\n";
  }
  for (const json& w : report.value("warnings", json::array())) {
    h += "<div class=\"warn\">" + HtmlEscape(Text(w)) + "</div>\n";
  }
  h += "<p>Ratio = mean(candidate) / mean(primary) over the pairs where both sides succeeded and "
       "both values are known; 95 % confidence interval by paired bootstrap (" +
       Text(opt.value("resamples", json())) + " resamples of the pairs, seed " +
       Text(opt.value("seed", json())) + "). Threshold " + Percent(opt.value("threshold", json())) +
       ". <b>worse</b> / <b>better</b> (output length: longer / shorter): the interval excludes 1 "
       "and the ratio is at least half the threshold from 1. <b>no detectable difference</b>: the "
       "interval lies inside 1 &plusmn; threshold. <b>inconclusive</b>: neither; more pairs are "
       "needed. <b>within noise floor</b>: worse or better, but no more than the A/A comparison "
       "differs from itself. An exact output match is only expected at temperature 0.</p>\n";
  h += NoiseSection(report.value("noise_floor", json()), defs);
  for (const json& sh : report.value("shadows", json::array())) {
    h += "<h2>Shadow " + Text(sh.value("shadow", json())) + " (" +
         HtmlEscape(Text(sh.value("role", json()))) + ")" +
         HtmlEscape(CandidateUrls(sh.value("candidate_urls", json::array()))) + "</h2>\n";
    for (const json& g : sh.value("groups", json::array())) h += GroupSection(g, defs);
  }
  h += "<h2>Paired deltas</h2>\n<div class=\"plots\">\n";
  for (size_t i = 0; i < series.size(); ++i) {
    for (const auto& [key, name] : kPlotted) {
      for (const char* kind : {"time", "hist"}) {
        h += "<div class=\"plotbox\" id=\"plot-" + std::to_string(i) + "-" + key + "-" + kind +
             "\"></div>\n";
      }
    }
  }
  h += "</div>\n<noscript><p>The plots need JavaScript; the tables do not.</p></noscript>\n";
  json plotted = json::array();
  for (const auto& [key, name] : kPlotted) plotted.push_back({key, name});
  json data = {{"series", series.is_array() ? series : json::array()}, {"plotted", plotted}};
  h += html_internal::PageTail(data, kShadowPlots);
  return h;
}

}  // namespace llmtap::report
