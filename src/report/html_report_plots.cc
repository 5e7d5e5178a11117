// The plots of the HTML report (html_report.h): the per-request columns they are drawn from,
// the boxes they are drawn into, and the page's script that draws them as SVG. Called by
// RenderHtmlReport (html_report.cc) only; the box ids here and in the script must agree.
#include <cmath>
#include <optional>

#include "report/html_report_internal.h"

namespace llmtap::report::html_internal {
namespace {

using nlohmann::json;

json Rounded(double v) { return std::isfinite(v) ? json(std::round(v * 1000) / 1000) : json(); }
json Rounded(const std::optional<double>& v) { return v ? Rounded(*v) : json(nullptr); }

}  // namespace

// The chart library every report page's script opens with (inside its function scope): error
// capture, SVG helpers, chart(), histogram(), cdf(). Plain ES5-style JavaScript, no libraries.
const char kChartScript[] = R"JS(
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

  // Ends every page's render(): how many plots were drawn, and whether all went well.
  function finish() {
    document.documentElement.setAttribute('data-plots', String(plots));
    if (!errors.length) document.documentElement.setAttribute('data-rendered', 'ok');
  }
)JS";

// Draws every plot of the replay report from the JSON in #report-data.
const char kPlotScript[] = R"JS(
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

    // What the server reported of each request, against what the client measured.
    function paired(xs, ys) {
      var x = [], y = [];
      for (var k = 0; k < xs.length; k++) {
        if (finite(xs[k]) && finite(ys[k])) { x.push(xs[k]); y.push(ys[k]); }
      }
      return {x: x, y: y};
    }
    function scatter(id, title, xs, ys, xlabel, ylabel) {
      var p = paired(xs || [], ys);
      if (!p.x.length) return;
      chart(id, {title: title + ' (n=' + p.x.length + ')', xlabel: xlabel, ylabel: ylabel,
                 xmin: 0, xmax: 1, ymin: 0, series: [{name: '', type: 'points', x: p.x, y: p.y}]});
    }
    scatter('plot-cache-ttft', 'Server-reported cache reuse and TTFT', r.cached_share, r.ttft,
            'cached / prompt tokens (server)', 'TTFT (ms)');
    scatter('plot-spec-itl', 'Server-reported acceptance and ITL', r.acceptance, r.itl,
            'accepted / draft tokens (server)', 'ITL (ms)');

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
    finish();
  }
)JS";

std::string PageScript(const char* render) {
  return std::string("(function () {\n") + kChartScript + render +
         "\n  try { render(); } catch (e) { fail(e && e.stack ? e.stack : e); }\n})();\n";
}

json PlotData(const json& summary, const std::vector<RequestResult>& requests) {
  // Per-request columns for the plots (warm-up left out, as in the statistics).
  json sent = json::array(), done = json::array(), scheduled = json::array(), ok = json::array(),
       ttft = json::array(), itl = json::array(), latency = json::array(), lag = json::array(),
       cached_share = json::array(), acceptance = json::array();
  bool any_cache = false, any_spec = false;
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
    // The server's own report of the request (its cache reuse, its speculation's acceptance).
    json share, rate;
    if (completed && r.cached_tokens && r.input_tokens && *r.input_tokens > 0) {
      share = Rounded(static_cast<double>(*r.cached_tokens) / static_cast<double>(*r.input_tokens));
      any_cache = true;
    }
    if (completed && r.spec.is_object()) {
      const json drafted = r.spec.value("num_draft_tokens", json());
      const json accepted = r.spec.value("num_accepted_draft_tokens", json());
      if (drafted.is_number() && accepted.is_number() && drafted.get<double>() > 0) {
        rate = Rounded(accepted.get<double>() / drafted.get<double>());
        any_spec = true;
      }
    }
    cached_share.push_back(share);
    acceptance.push_back(rate);
  }
  json metrics = summary.contains("metrics") ? summary["metrics"] : json(nullptr);
  return {{"summary", {{"metrics", metrics}}},
          {"requests",
           {{"scheduled", scheduled},
            {"sent", sent},
            {"done", done},
            {"ok", ok},
            {"ttft", ttft},
            {"itl", itl},
            {"latency", latency},
            {"lag", lag},
            {"cached_share", any_cache ? cached_share : json::array()},
            {"acceptance", any_spec ? acceptance : json::array()}}},
          {"server_metrics", summary.value("server_metrics", json())}};
}

std::string PlotBoxes() {
  std::string out = "<h2>Plots</h2>\n<div class=\"plots\">\n";
  for (const char* id : {"plot-rate", "plot-ttft", "plot-itl", "plot-latency", "plot-lag-time",
                         "plot-lag-cdf", "plot-cache-ttft", "plot-spec-itl", "plot-server-load",
                         "plot-spec-rate", "plot-spec-pos", "plot-sglang-spec"}) {
    out += std::string("<div class=\"plotbox\" id=\"") + id + "\"></div>\n";
  }
  return out +
         "</div>\n<noscript><p>The plots need JavaScript; the tables do not.</p></noscript>\n";
}

}  // namespace llmtap::report::html_internal
