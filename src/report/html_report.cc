#include "report/html_report.h"

#include <cmath>
#include <cstdio>
#include <ctime>
#include <map>

#include "common/markup_escape.h"
#include "report/json_util.h"

namespace llmtap::report {
namespace {

using nlohmann::json;

constexpr const char* kStyle = R"CSS(
:root{--fg:#1d2330;--muted:#5b6475;--line:#d9dde5;--bg:#fff;--band:#f4f6f9;--accent:#2563eb}
*{box-sizing:border-box}
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,"DejaVu Sans",sans-serif;color:var(--fg);
background:var(--bg);margin:0 auto;max-width:1240px;padding:20px 28px 60px}
h1{font-size:24px;margin:4px 0 2px}h2{font-size:18px;margin:30px 0 10px;border-bottom:1px solid var(--line);
padding-bottom:4px}h3{font-size:15px;margin:18px 0 6px}
.sub{color:var(--muted);margin-bottom:14px;word-break:break-all}
table{border-collapse:collapse;margin:6px 0 10px;font-variant-numeric:tabular-nums}
th,td{padding:4px 10px;border-bottom:1px solid var(--line);text-align:right;vertical-align:top}
th{background:var(--band);font-weight:600}td:first-child,th:first-child{text-align:left}
td.text{text-align:left;word-break:break-all}
.cards{display:flex;flex-wrap:wrap;gap:12px;margin:12px 0}
.card{border:1px solid var(--line);border-radius:8px;padding:10px 14px;min-width:150px;background:var(--band)}
.card .v{font-size:22px;font-weight:650}.card .k{color:var(--muted);font-size:12px}
.plots{display:grid;grid-template-columns:repeat(auto-fill,minmax(540px,1fr));gap:16px}
.plotbox{border:1px solid var(--line);border-radius:8px;padding:6px}
.plotbox svg{width:100%;height:auto;display:block}
svg text{font:11px system-ui,"DejaVu Sans",sans-serif;fill:#333}svg .title{font-size:13px;font-weight:600}
svg .grid{stroke:#e8ebf0}svg .legend{font-weight:600}.plotbox:empty{display:none}svg .axis{stroke:#8a93a3}
.warn{background:#fff4e5;border:1px solid #f3c27a;border-radius:6px;padding:8px 12px;margin:8px 0}
#errors{background:#fde8e8;border:1px solid #e99;border-radius:6px;padding:8px 12px}
.muted{color:var(--muted)}
)CSS";

// Draws every plot from the JSON in #report-data. Plain ES5-style JavaScript, no libraries.
constexpr const char* kScript = R"JS(
(function () {
  'use strict';
  var errors = [];
  function fail(msg) {
    errors.push(String(msg));
    document.documentElement.setAttribute('data-errors', errors.join(' | '));
    var b = document.getElementById('errors');
    if (b) { b.hidden = false; b.textContent = 'Report script error: ' + errors.join('; '); }
  }
  window.addEventListener('error', function (e) { fail(e.message || 'script error'); });

  var NS = 'http://www.w3.org/2000/svg';
  var COLORS = ['#2563eb', '#16a34a', '#dc2626', '#9333ea', '#ea580c', '#0891b2', '#4b5563'];
  var plots = 0;

  function el(tag, attrs, parent) {
    var e = document.createElementNS(NS, tag);
    for (var k in attrs) if (Object.prototype.hasOwnProperty.call(attrs, k)) e.setAttribute(k, attrs[k]);
    if (parent) parent.appendChild(e);
    return e;
  }
  function label(parent, x, y, s, attrs) {
    var t = el('text', attrs || {}, parent);
    t.setAttribute('x', x); t.setAttribute('y', y);
    t.textContent = s;
    return t;
  }
  function finite(v) { return typeof v === 'number' && isFinite(v); }
  function clean(a) { return (a || []).filter(finite); }
  function fmt(v) {
    var a = Math.abs(v);
    if (a >= 1e6) return +(v / 1e6).toPrecision(3) + 'M';
    if (a >= 1e4) return +(v / 1e3).toPrecision(3) + 'k';
    if (a >= 100 || v === 0) return String(Math.round(v));
    if (a >= 1) return String(+v.toFixed(1));
    return String(+v.toPrecision(2));
  }
  function ticks(lo, hi, n) {
    if (!(hi > lo)) hi = lo + 1;
    var span = hi - lo, step = Math.pow(10, Math.floor(Math.log(span / n) / Math.LN10));
    var err = n / span * step;
    if (err <= 0.15) step *= 10; else if (err <= 0.35) step *= 5; else if (err <= 0.75) step *= 2;
    var out = [];
    for (var v = Math.ceil(lo / step) * step; v <= hi + step * 1e-9; v += step) {
      out.push(Math.abs(v) < step * 1e-9 ? 0 : v);
    }
    return out;
  }
  function quantile(sorted, q) {
    if (!sorted.length) return NaN;
    var h = q * (sorted.length - 1), lo = Math.floor(h), hi = Math.min(lo + 1, sorted.length - 1);
    return sorted[lo] + (h - lo) * (sorted[hi] - sorted[lo]);
  }
  function numsort(a) { return a.slice().sort(function (x, y) { return x - y; }); }

  // o: {title, xlabel, ylabel, series: [{name, type: line|bars|points, x, y, width, color}],
  //     markers: [{x, label}], xmin, xmax, ymin, ymax, xint (integer x ticks only), note}
  function chart(id, o) {
    var host = document.getElementById(id);
    if (!host) return;
    var W = 560, H = 320, L = 58, R = 14, T = 44, B = 50;
    var svg = el('svg', {viewBox: '0 0 ' + W + ' ' + H, 'class': 'plot', role: 'img',
                         'aria-label': o.title, 'data-plot': id});
    label(svg, L, 18, o.title, {'class': 'title'});
    var xs = [], ys = [];
    o.series.forEach(function (s) {
      for (var i = 0; i < s.x.length; i++) {
        if (finite(s.x[i]) && finite(s.y[i])) {
          xs.push(s.x[i]); ys.push(s.y[i]);
          if (s.width) xs.push(s.x[i] + s.width);
        }
      }
    });
    (o.markers || []).forEach(function (m) { if (finite(m.x)) xs.push(m.x); });
    var empty = ys.length === 0;
    // Loops, not Math.min.apply: that overflows the stack on 100k+ values.
    function lo(a) { var m = Infinity; for (var i = 0; i < a.length; i++) if (a[i] < m) m = a[i]; return m; }
    function hi(a) { var m = -Infinity; for (var i = 0; i < a.length; i++) if (a[i] > m) m = a[i]; return m; }
    var xmin = finite(o.xmin) ? o.xmin : (empty ? 0 : lo(xs));
    var xmax = finite(o.xmax) ? o.xmax : (empty ? 1 : hi(xs));
    var ymin = finite(o.ymin) ? o.ymin : (empty ? 0 : Math.min(0, lo(ys)));
    var ymax = finite(o.ymax) ? o.ymax : (empty ? 1 : hi(ys) * 1.05);
    if (!(xmax > xmin)) { xmax = xmin + 1; }
    if (!(ymax > ymin)) { ymax = ymin + 1; }
    var pw = W - L - R, ph = H - T - B;
    function X(v) { return L + (v - xmin) / (xmax - xmin) * pw; }
    function Y(v) { return T + ph - (v - ymin) / (ymax - ymin) * ph; }
    var g = el('g', {}, svg);
    ticks(ymin, ymax, 5).forEach(function (t) {
      if (t < ymin || t > ymax) return;
      el('line', {x1: L, x2: L + pw, y1: Y(t), y2: Y(t), 'class': 'grid'}, g);
      label(g, L - 6, Y(t) + 4, fmt(t), {'text-anchor': 'end'});
    });
    ticks(xmin, xmax, 6).forEach(function (t) {
      if (t < xmin || t > xmax || (o.xint && t !== Math.round(t))) return;
      el('line', {x1: X(t), x2: X(t), y1: T + ph, y2: T + ph + 4, 'class': 'axis'}, g);
      label(g, X(t), T + ph + 16, fmt(t), {'text-anchor': 'middle'});
    });
    el('line', {x1: L, x2: L + pw, y1: T + ph, y2: T + ph, 'class': 'axis'}, g);
    el('line', {x1: L, x2: L, y1: T, y2: T + ph, 'class': 'axis'}, g);
    label(g, L + pw / 2, H - 10, o.xlabel || '', {'text-anchor': 'middle'});
    var yl = label(g, 14, T + ph / 2, o.ylabel || '', {'text-anchor': 'middle'});
    yl.setAttribute('transform', 'rotate(-90 14 ' + (T + ph / 2) + ')');
    if (empty) {
      label(g, L + pw / 2, T + ph / 2, 'no data', {'text-anchor': 'middle', 'class': 'muted'});
    }
    var legendX = L + pw;
    o.series.forEach(function (s, si) {
      var color = s.color || COLORS[si % COLORS.length];
      var sg = el('g', {'class': 'series series-' + (s.type || 'line')}, svg);
      if (s.type === 'bars') {
        for (var i = 0; i < s.x.length; i++) {
          if (!finite(s.x[i]) || !finite(s.y[i])) continue;
          var x0 = X(s.x[i]), x1 = X(s.x[i] + s.width), y0 = Y(Math.max(s.y[i], ymin));
          el('rect', {x: x0 + 0.5, y: y0, width: Math.max(0.5, x1 - x0 - 1),
                      height: Math.max(0, T + ph - y0), fill: color, 'fill-opacity': 0.75}, sg);
        }
      } else if (s.type === 'points') {
        // At most ~20k marks: a browser stays responsive, the shape stays visible.
        var stride = Math.max(1, Math.ceil(s.x.length / 20000));
        for (var j = 0; j < s.x.length; j += stride) {
          if (!finite(s.x[j]) || !finite(s.y[j])) continue;
          el('circle', {cx: X(s.x[j]), cy: Y(s.y[j]), r: 1.6, fill: color, 'fill-opacity': 0.6}, sg);
        }
      } else {
        var d = '', pen = false;
        for (var k = 0; k < s.x.length; k++) {
          if (!finite(s.x[k]) || !finite(s.y[k])) { pen = false; continue; }
          d += (pen ? 'L' : 'M') + X(s.x[k]).toFixed(1) + ' ' + Y(s.y[k]).toFixed(1);
          pen = true;
        }
        if (d) el('path', {d: d, fill: 'none', stroke: color, 'stroke-width': 1.8}, sg);
      }
      if (s.name) {
        label(svg, legendX, 36, s.name, {'text-anchor': 'end', fill: color, 'class': 'legend'});
        legendX -= 7 * s.name.length + 16;
      }
    });
    (o.markers || []).forEach(function (m) {
      if (!finite(m.x) || m.x < xmin || m.x > xmax) return;
      el('line', {x1: X(m.x), x2: X(m.x), y1: T, y2: T + ph, stroke: '#111',
                  'stroke-dasharray': '4 3', 'stroke-width': 1}, svg);
      var right = X(m.x) > L + pw - 30;  // near the right edge: the label goes left
      label(svg, X(m.x) + (right ? -3 : 3), T + 11, m.label, {'text-anchor': right ? 'end' : 'start'});
    });
    if (o.note) label(svg, L + pw, T + ph + 30, o.note, {'text-anchor': 'end', 'class': 'muted'});
    host.appendChild(svg);
    plots++;
  }

  // A histogram of `values`; the top 0.5 % (a long tail) is folded into the last bin.
  function histogram(id, title, values, stats, unit) {
    var v = numsort(clean(values));
    var series = [], note = '';
    if (v.length) {
      var lo = v[0], hi = quantile(v, 0.995);
      if (v[v.length - 1] <= hi * 1.5) hi = v[v.length - 1];
      if (!(hi > lo)) hi = lo + 1;
      var n = Math.max(5, Math.min(40, Math.ceil(Math.sqrt(v.length)) * 2));
      var w = (hi - lo) / n, counts = [], xs = [], over = 0;
      for (var i = 0; i < n; i++) { counts.push(0); xs.push(lo + i * w); }
      v.forEach(function (x) {
        var b = Math.floor((x - lo) / w);
        if (x > hi) { over++; b = n - 1; }
        counts[Math.min(n - 1, Math.max(0, b))]++;
      });
      series.push({name: '', type: 'bars', x: xs, y: counts, width: w});
      if (over) note = over + ' values above ' + fmt(hi) + ' ' + unit + ' in the last bin';
    }
    var markers = [];
    if (stats) {
      if (finite(stats.p50)) markers.push({x: stats.p50, label: 'p50'});
      if (finite(stats.p99)) markers.push({x: stats.p99, label: 'p99'});
    }
    chart(id, {title: title + ' (n=' + v.length + ')', xlabel: unit, ylabel: 'requests',
               series: series, markers: markers, ymin: 0, note: note});
  }

  function cdf(id, title, values, unit) {
    var v = numsort(clean(values)), x = [], y = [];
    var step = Math.max(1, Math.floor(v.length / 2000));
    for (var i = 0; i < v.length; i += step) { x.push(v[i]); y.push((i + 1) / v.length); }
    if (v.length) { x.push(v[v.length - 1]); y.push(1); }
    chart(id, {title: title, xlabel: unit, ylabel: 'fraction of requests', ymin: 0, ymax: 1,
               series: [{name: '', type: 'line', x: x, y: y}]});
  }

  function render() {
    var data = JSON.parse(document.getElementById('report-data').textContent);
    var r = data.requests, m = (data.summary && data.summary.metrics) || {};
    var n = r.sent.length;

    // Arrivals and completions per time bin.
    var end = 0;
    for (var i = 0; i < n; i++) {
      if (finite(r.sent[i])) end = Math.max(end, r.sent[i]);
      if (finite(r.done[i])) end = Math.max(end, r.done[i]);
    }
    // Bins of a round width giving about 60 of them over the run (0.1 s for a short run).
    var endS = end / 1000, bin = 0.1;
    [0.1, 0.2, 0.5, 1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 1800, 3600].some(function (w) {
      bin = w;
      return endS / w <= 60;
    });
    var nb = Math.max(1, Math.ceil(endS / bin + 1e-9));
    var sent = [], ok = [], bad = [], t = [];
    for (var b = 0; b < nb; b++) { sent.push(0); ok.push(0); bad.push(0); t.push(b * bin + bin / 2); }
    function slot(ms) { return Math.min(nb - 1, Math.max(0, Math.floor(ms / 1000 / bin))); }
    var anyBad = false;
    for (var j = 0; j < n; j++) {
      if (finite(r.sent[j])) sent[slot(r.sent[j])] += 1 / bin;
      if (!finite(r.done[j])) continue;
      if (r.ok[j]) ok[slot(r.done[j])] += 1 / bin; else { bad[slot(r.done[j])] += 1 / bin; anyBad = true; }
    }
    var rateSeries = [{name: 'sent/s', type: 'line', x: t, y: sent},
                      {name: 'completed/s', type: 'line', x: t, y: ok}];
    if (anyBad) rateSeries.push({name: 'errors/s', type: 'line', x: t, y: bad, color: '#dc2626'});
    chart('plot-rate', {title: 'Arrivals and completions (' + bin + ' s bins)',
                        xlabel: 'time since start (s)', ylabel: 'requests per second',
                        series: rateSeries, xmin: 0, ymin: 0});

    histogram('plot-ttft', 'TTFT', r.ttft, m.ttft_ms, 'ms');
    histogram('plot-itl', 'ITL', r.itl, m.itl_ms, 'ms');
    histogram('plot-latency', 'End-to-end latency', r.latency, m.latency_ms, 'ms');

    var sx = r.scheduled.map(function (v) { return finite(v) ? v / 1000 : v; });
    chart('plot-lag-time', {title: 'Schedule lag over time', xlabel: 'scheduled time (s)',
                            ylabel: 'lag (ms)', series: [{name: '', type: 'points', x: sx, y: r.lag}],
                            xmin: 0});
    cdf('plot-lag-cdf', 'Schedule lag distribution (CDF)', r.lag, 'lag (ms)');

    var sm = data.server_metrics;
    if (sm && sm.series && sm.series.t_s && sm.series.t_s.length) {
      var ts = sm.series.t_s, load = [];
      ['vllm:num_requests_running', 'vllm:num_requests_waiting', 'sglang:num_running_reqs',
       'sglang:num_queue_reqs'].forEach(function (k) {
        if (sm.series[k]) load.push({name: k.replace(/^[a-z]+:/, ''), type: 'line', x: ts, y: sm.series[k]});
      });
      if (load.length) {
        chart('plot-server-load', {title: 'Server: requests running and waiting', xlabel: 'time (s)',
                                   ylabel: 'requests', series: load, ymin: 0});
      }
      var acc = sm.series['vllm:spec_decode_num_accepted_tokens_total'];
      var dt = sm.series['vllm:spec_decode_num_draft_tokens_total'];
      if (acc && dt) {
        var ax = [], ay = [];
        for (var q = 1; q < ts.length; q++) {
          var dd = dt[q] - dt[q - 1], da = acc[q] - acc[q - 1];
          if (finite(dd) && finite(da) && dd > 0) { ax.push(ts[q]); ay.push(da / dd); }
        }
        chart('plot-spec-rate', {title: 'Spec-decode acceptance rate per scrape interval',
                                 xlabel: 'time (s)', ylabel: 'accepted / draft tokens',
                                 series: [{name: '', type: 'line', x: ax, y: ay}], ymin: 0, ymax: 1});
      }
      var sg = [];
      ['sglang:spec_accept_rate', 'sglang:spec_accept_length'].forEach(function (k) {
        if (sm.series[k]) sg.push({name: k.replace(/^sglang:/, ''), type: 'line', x: ts, y: sm.series[k]});
      });
      if (sg.length) {
        chart('plot-sglang-spec', {title: 'SGLang spec-decode gauges', xlabel: 'time (s)',
                                   ylabel: 'value', series: sg, ymin: 0});
      }
    }
    var sd = sm && sm.spec_decode;
    if (sd && sd.per_position_acceptance && sd.per_position_acceptance.length) {
      var px = sd.per_position_acceptance.map(function (_, i) { return i - 0.4; });
      chart('plot-spec-pos', {title: 'Acceptance by draft position', xlabel: 'position in the draft',
                              ylabel: 'accepted / drafts', ymin: 0, ymax: 1, xint: true,
                              xmin: -0.5, xmax: sd.per_position_acceptance.length - 0.5,
                              series: [{name: '', type: 'bars', x: px, y: sd.per_position_acceptance,
                                        width: 0.8}]});
    }
    document.documentElement.setAttribute('data-plots', String(plots));
    if (!errors.length) document.documentElement.setAttribute('data-rendered', 'ok');
  }

  try { render(); } catch (e) { fail(e && e.stack ? e.stack : e); }
})();
)JS";

std::string Fmt(const json* v) {
  if (!v || v->is_null()) return "-";
  if (v->is_number_integer() || v->is_number_unsigned()) return v->dump();
  if (!v->is_number()) return v->is_string() ? v->get<std::string>() : v->dump();
  double d = v->get<double>();
  char buf[64];
  double a = std::fabs(d);
  if (d == std::floor(d) && a < 1e15) {
    std::snprintf(buf, sizeof buf, "%.0f", d);
  } else if (a >= 100) {
    std::snprintf(buf, sizeof buf, "%.1f", d);
  } else if (a >= 1) {
    std::snprintf(buf, sizeof buf, "%.2f", d);
  } else {
    std::snprintf(buf, sizeof buf, "%.4f", d);
  }
  return buf;
}

std::string FmtAt(const json& j, const char* pointer) { return Fmt(JsonAt(j, pointer)); }

std::string Str(const json& j, const char* key) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return "";
  return it->is_string() ? it->get<std::string>() : it->dump();
}

// A two-column table of (name, value) rows; values already escaped.
std::string KeyValueTable(const std::vector<std::pair<std::string, std::string>>& rows) {
  std::string out = "<table>";
  for (const auto& [k, v] : rows) {
    out += "<tr><th>" + HtmlEscape(k) + "</th><td class=\"text\">" + v + "</td></tr>";
  }
  return out + "</table>\n";
}

std::string Card(const std::string& value, const std::string& key) {
  return "<div class=\"card\"><div class=\"v\">" + HtmlEscape(value) + "</div><div class=\"k\">" +
         HtmlEscape(key) + "</div></div>";
}

std::string UtcTime(const json* unix_ms) {
  if (!unix_ms || !unix_ms->is_number()) return "-";
  std::time_t t = static_cast<std::time_t>(unix_ms->get<double>() / 1000.0);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[64];
  std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M:%S UTC", &tm);
  return buf;
}

json Rounded(double v) { return std::isfinite(v) ? json(std::round(v * 1000) / 1000) : json(); }
json Rounded(const std::optional<double>& v) { return v ? Rounded(*v) : json(nullptr); }

std::string MetricsTable(const json& summary) {
  static const std::pair<const char*, const char*> kRows[] = {
      {"ttft_ms", "TTFT (ms)"},
      {"ttst_ms", "time to second token (ms)"},
      {"itl_ms", "ITL (ms)"},
      {"inter_chunk_ms", "inter-chunk gap (ms)"},
      {"latency_ms", "end-to-end latency (ms)"},
      {"input_tokens", "input tokens"},
      {"output_tokens", "output tokens"},
      {"lag_ms", "schedule lag (ms)"},
  };
  std::string out =
      "<table id=\"percentiles\"><tr><th>metric</th><th>count</th><th>mean</th><th>p50</th>"
      "<th>p90</th><th>p95</th><th>p99</th><th>max</th></tr>";
  for (const auto& [key, name] : kRows) {
    std::string base = std::string("/metrics/") + key + "/";
    out += "<tr><td>" + HtmlEscape(name) + "</td>";
    for (const char* stat : {"count", "mean", "p50", "p90", "p95", "p99", "max"}) {
      out += "<td>" + HtmlEscape(FmtAt(summary, (base + stat).c_str())) + "</td>";
    }
    out += "</tr>";
  }
  return out + "</table>\n";
}

std::string ServerMetricsSection(const json& summary) {
  const json* sm = JsonAt(summary, "/server_metrics");
  std::string out = "<h2>Server metrics</h2>\n";
  if (!sm || !sm->is_object()) {
    return out + "<p class=\"muted\">Not scraped.</p>\n";
  }
  std::vector<std::pair<std::string, std::string>> rows = {
      {"endpoint", HtmlEscape(FmtAt(*sm, "/url"))},
      {"scrapes ok / failed",
       HtmlEscape(FmtAt(*sm, "/scrapes/ok") + " / " + FmtAt(*sm, "/scrapes/failed"))},
      {"window (s)", HtmlEscape(FmtAt(*sm, "/window_s"))}};
  if (const json* e = JsonAt(*sm, "/error"); e && !e->is_null()) {
    rows.push_back({"error", HtmlEscape(Fmt(e))});
  }
  if (const json* e = JsonAt(*sm, "/scrapes/first_error"); e && !e->is_null()) {
    rows.push_back({"first scrape error", HtmlEscape(Fmt(e))});
  }
  out += KeyValueTable(rows);

  const json* spec = JsonAt(*sm, "/spec_decode");
  if (spec && spec->is_object()) {
    out += "<h3>Speculative decoding</h3>\n";
    std::vector<std::pair<std::string, std::string>> s = {
        {"source", HtmlEscape(FmtAt(*spec, "/source"))},
        {"acceptance rate", HtmlEscape(FmtAt(*spec, "/acceptance_rate"))},
        {"mean acceptance length", HtmlEscape(FmtAt(*spec, "/mean_acceptance_length"))}};
    if (JsonAt(*spec, "/drafts")) {
      s.push_back({"Δ drafts", HtmlEscape(FmtAt(*spec, "/drafts"))});
      s.push_back({"Δ draft tokens", HtmlEscape(FmtAt(*spec, "/draft_tokens"))});
      s.push_back({"Δ accepted tokens", HtmlEscape(FmtAt(*spec, "/accepted_tokens"))});
      std::string pos;
      if (const json* p = JsonAt(*spec, "/per_position_acceptance"); p && p->is_array()) {
        for (size_t i = 0; i < p->size(); ++i) {
          pos += (i ? ", " : "") + std::to_string(i) + ": " + Fmt(&(*p)[i]);
        }
      }
      s.push_back({"acceptance by position (accepted / drafts)", HtmlEscape(pos)});
    }
    for (const char* g : {"accept_rate", "accept_length"}) {
      const json* gj = JsonAt(*spec, (std::string("/") + g).c_str());
      if (!gj || !gj->is_object()) continue;
      s.push_back({std::string("sglang ") + g + " (mean / min / max / last, n)",
                   HtmlEscape(FmtAt(*gj, "/mean") + " / " + FmtAt(*gj, "/min") + " / " +
                              FmtAt(*gj, "/max") + " / " + FmtAt(*gj, "/last") + ", " +
                              FmtAt(*gj, "/count"))});
    }
    out += KeyValueTable(s);
  }

  if (const json* gauges = JsonAt(*sm, "/gauges");
      gauges && gauges->is_object() && !gauges->empty()) {
    out +=
        "<h3>Gauges during the run</h3>\n<table><tr><th>gauge</th><th>samples</th>"
        "<th>mean</th><th>min</th><th>max</th><th>last</th></tr>";
    for (const auto& [name, g] : gauges->items()) {
      out += "<tr><td>" + HtmlEscape(name) + "</td>";
      for (const char* k : {"/count", "/mean", "/min", "/max", "/last"}) {
        out += "<td>" + HtmlEscape(FmtAt(g, k)) + "</td>";
      }
      out += "</tr>";
    }
    out += "</table>\n";
  }

  if (const json* counters = JsonAt(*sm, "/counters"); counters && counters->is_object()) {
    std::string rows_html;
    size_t shown = 0, zero = 0;
    for (const auto& [name, c] : counters->items()) {
      const json* d = JsonAt(c, "/delta");
      if (!d || !d->is_number() || d->get<double>() == 0) {
        ++zero;
        continue;
      }
      if (++shown > 300) continue;
      rows_html += "<tr><td>" + HtmlEscape(name) + "</td><td>" + HtmlEscape(Fmt(d)) + "</td><td>" +
                   HtmlEscape(FmtAt(c, "/resets")) + "</td></tr>";
    }
    out += "<h3>Counter increases over the run</h3>\n";
    out += "<table id=\"counters\"><tr><th>counter</th><th>Δ</th><th>resets</th></tr>" + rows_html +
           "</table>\n";
    out += "<p class=\"muted\">" + std::to_string(zero) + " counters did not change" +
           (shown > 300 ? "; " + std::to_string(shown - 300) + " more not shown" : "") + ".</p>\n";
  }
  return out;
}

}  // namespace

std::string HtmlEscape(const std::string& text) { return MarkupEscape(text); }

std::string JsonForScript(const json& value) {
  std::string text = value.dump(-1, ' ', false, json::error_handler_t::replace);
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    if (c == '<') {
      out += "\\u003c";
    } else if (c == '>') {
      out += "\\u003e";
    } else if (c == '&') {
      out += "\\u0026";
    } else {
      out.push_back(c);
    }
  }
  return out;
}

std::string RenderHtmlReport(const json& summary_in, const std::vector<RequestResult>& requests) {
  const json& summary = summary_in.is_object() ? summary_in : json::object();
  // Per-request columns for the plots (warm-up left out, as in the statistics).
  json sent = json::array(), done = json::array(), scheduled = json::array(), ok = json::array(),
       ttft = json::array(), itl = json::array(), latency = json::array(), lag = json::array();
  for (const RequestResult& r : requests) {
    if (r.warmup) continue;
    bool completed = r.error.empty() && r.status >= 200 && r.status < 300;
    scheduled.push_back(Rounded(r.scheduled_ms));
    sent.push_back(Rounded(r.sent_ms));
    done.push_back(r.sent_ms ? Rounded(r.done_ms) : json(nullptr));
    ok.push_back(completed ? 1 : 0);
    ttft.push_back(completed ? Rounded(r.ttft_ms) : json(nullptr));
    itl.push_back(completed ? Rounded(r.itl_ms) : json(nullptr));
    latency.push_back(completed ? Rounded(r.latency_ms) : json(nullptr));
    lag.push_back(r.sent_ms ? Rounded(r.lag_ms) : json(nullptr));
  }
  json metrics = summary.contains("metrics") ? summary["metrics"] : json(nullptr);
  json data = {{"summary", {{"metrics", metrics}}},
               {"requests",
                {{"scheduled", scheduled},
                 {"sent", sent},
                 {"done", done},
                 {"ok", ok},
                 {"ttft", ttft},
                 {"itl", itl},
                 {"latency", latency},
                 {"lag", lag}}},
               {"server_metrics", summary.value("server_metrics", json())}};

  std::string tool = Str(summary, "tool");
  std::string h;
  h.reserve(64 * 1024 + requests.size() * 64);
  h += "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n";
  h += "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n";
  h += "<title>llmtap replay report</title>\n<style>";
  h += kStyle;
  h += "</style>\n</head>\n<body>\n";
  h += "<div id=\"errors\" hidden></div>\n";
  h += "<h1>llmtap replay report</h1>\n<div class=\"sub\">" + HtmlEscape(Str(summary, "url")) +
       " &middot; " + HtmlEscape(Str(summary, "trace")) + " &middot; " +
       HtmlEscape(UtcTime(JsonAt(summary, "/started_at_unix_ms"))) + "</div>\n";

  if (const json* w = JsonAt(summary, "/warnings"); w && w->is_array()) {
    for (const json& line : *w) {
      h += "<div class=\"warn\">" +
           HtmlEscape(line.is_string() ? line.get<std::string>() : line.dump()) + "</div>\n";
    }
  }

  h += "<div class=\"cards\">";
  h += Card(FmtAt(summary, "/requests/completed") + " / " + FmtAt(summary, "/requests/scheduled"),
            "completed / scheduled");
  h += Card(FmtAt(summary, "/requests/errors"), "errors");
  h += Card(FmtAt(summary, "/throughput/requests_per_s"), "requests/s");
  h += Card(FmtAt(summary, "/throughput/output_tokens_per_s"), "output tokens/s");
  h += Card(FmtAt(summary, "/metrics/ttft_ms/p50") + " / " + FmtAt(summary, "/metrics/ttft_ms/p99"),
            "TTFT p50 / p99 (ms)");
  h += Card(FmtAt(summary, "/metrics/lag_ms/p99"), "schedule lag p99 (ms)");
  if (const json* g = JsonAt(summary, "/goodput/requests_per_s"); g) {
    h += Card(Fmt(g), "goodput (req/s)");
  }
  if (const json* a = JsonAt(summary, "/server_metrics/spec_decode/acceptance_rate"); a) {
    h += Card(Fmt(a), "spec acceptance rate");
  }
  h += "</div>\n";

  std::string shard = FmtAt(summary, "/shard/index") + " / " + FmtAt(summary, "/shard/count");
  std::vector<std::pair<std::string, std::string>> run_rows = {
      {"tool", HtmlEscape(tool + " " + Str(summary, "version"))},
      {"target URL", HtmlEscape(Str(summary, "url"))},
      {"trace", HtmlEscape(Str(summary, "trace"))},
      {"shard (index / count)", HtmlEscape(shard)},
      {"started", HtmlEscape(UtcTime(JsonAt(summary, "/started_at_unix_ms")))},
      {"duration (s)", HtmlEscape(FmtAt(summary, "/duration_s"))},
      {"command", "<code>" + HtmlEscape(Str(summary, "command")) + "</code>"}};
  if (const json* from = JsonAt(summary, "/merged_from"); from && from->is_array()) {
    std::string list;
    for (const json& p : *from) list += (list.empty() ? "" : ", ") + Fmt(&p);
    run_rows.push_back({"merged from", HtmlEscape(list)});
  }
  h += "<h2>Run</h2>\n" + KeyValueTable(run_rows);

  h += "<h2>Requests and throughput</h2>\n";
  std::vector<std::pair<std::string, std::string>> req_rows = {
      {"scheduled (excluding warm-up)", HtmlEscape(FmtAt(summary, "/requests/scheduled"))},
      {"sent", HtmlEscape(FmtAt(summary, "/requests/sent"))},
      {"completed", HtmlEscape(FmtAt(summary, "/requests/completed"))},
      {"errors", HtmlEscape(FmtAt(summary, "/requests/errors"))},
      {"warm-up requests", HtmlEscape(FmtAt(summary, "/requests/warmup"))},
      {"request throughput (req/s)", HtmlEscape(FmtAt(summary, "/throughput/requests_per_s"))},
      {"output token throughput (tok/s)",
       HtmlEscape(FmtAt(summary, "/throughput/output_tokens_per_s"))}};
  if (const json* g = JsonAt(summary, "/goodput"); g && g->is_object()) {
    std::string constraints;
    if (const json* c = JsonAt(*g, "/constraints"); c && c->is_object()) {
      for (const auto& [k, v] : c->items()) {
        constraints += (constraints.empty() ? "" : ", ") + k + " <= " + Fmt(&v);
      }
    }
    req_rows.push_back({"goodput constraints", HtmlEscape(constraints)});
    req_rows.push_back({"goodput (req/s)", HtmlEscape(FmtAt(*g, "/requests_per_s"))});
    req_rows.push_back({"good fraction of completed", HtmlEscape(FmtAt(*g, "/fraction"))});
  } else {
    req_rows.push_back({"goodput", "not requested (--goodput)"});
  }
  h += KeyValueTable(req_rows);
  if (const json* kinds = JsonAt(summary, "/requests/errors_by_kind");
      kinds && kinds->is_object() && !kinds->empty()) {
    h += "<h3>Errors by kind</h3>\n<table id=\"errors-by-kind\"><tr><th>kind</th><th>requests</th>"
         "</tr>";
    for (const auto& [k, v] : kinds->items()) {
      h += "<tr><td>" + HtmlEscape(k) + "</td><td>" + HtmlEscape(Fmt(&v)) + "</td></tr>";
    }
    h += "</table>\n";
  }

  h += "<h2>Latency and tokens</h2>\n" + MetricsTable(summary);

  h += "<h2>Plots</h2>\n<div class=\"plots\">\n";
  for (const char* id :
       {"plot-rate", "plot-ttft", "plot-itl", "plot-latency", "plot-lag-time", "plot-lag-cdf",
        "plot-server-load", "plot-spec-rate", "plot-spec-pos", "plot-sglang-spec"}) {
    h += std::string("<div class=\"plotbox\" id=\"") + id + "\"></div>\n";
  }
  h += "</div>\n<noscript><p>The plots need JavaScript; the tables do not.</p></noscript>\n";

  h += "<h2>Open loop</h2>\n";
  h += KeyValueTable(
      {{"--max-concurrency", HtmlEscape(FmtAt(summary, "/open_loop/max_concurrency"))},
       {"requests held back past their time (violations)",
        HtmlEscape(FmtAt(summary, "/open_loop/violations"))},
       {"total time held (ms)", HtmlEscape(FmtAt(summary, "/open_loop/held_ms_total"))}});

  h += ServerMetricsSection(summary);

  h += "<h2>Definitions</h2>\n<table id=\"definitions\">";
  const json* defs = JsonAt(summary, "/definitions");
  const json& definitions = defs && defs->is_object() ? *defs : MetricDefinitions();
  for (const auto& [k, v] : definitions.items()) {
    h += "<tr><td>" + HtmlEscape(k) + "</td><td class=\"text\">" +
         HtmlEscape(v.is_string() ? v.get<std::string>() : v.dump()) + "</td></tr>";
  }
  h += "</table>\n";

  h += "<script type=\"application/json\" id=\"report-data\">";
  h += JsonForScript(data);
  h += "</script>\n<script>";
  h += kScript;
  h += "</script>\n</body>\n</html>\n";
  return h;
}

}  // namespace llmtap::report
