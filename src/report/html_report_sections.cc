// The tables of the HTML report (html_report.h), one function a section of the page, and the
// formatting of summary values they share. Called by RenderHtmlReport (html_report.cc) only.
// Every value from the summary is escaped here: a URL, a trace name or a counter may hold markup.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <ctime>

#include "report/html_report_internal.h"
#include "report/json_util.h"

namespace llmtap::report::html_internal {
namespace {

using nlohmann::json;

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

}  // namespace

std::string Heading(const json& summary) {
  std::string h = "<h1>llmtap replay report</h1>\n<div class=\"sub\">" +
                  HtmlEscape(Str(summary, "url")) + " &middot; " +
                  HtmlEscape(Str(summary, "trace")) + " &middot; " +
                  HtmlEscape(UtcTime(JsonAt(summary, "/started_at_unix_ms"))) + "</div>\n";
  if (const json* w = JsonAt(summary, "/warnings"); w && w->is_array()) {
    for (const json& line : *w) {
      h += "<div class=\"warn\">" +
           HtmlEscape(line.is_string() ? line.get<std::string>() : line.dump()) + "</div>\n";
    }
  }
  return h;
}

std::string Cards(const json& summary) {
  std::string h = "<div class=\"cards\">";
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
  if (const json* c = JsonAt(summary, "/server/cache/hit_rate"); c) {
    std::string captured;
    if (const json* k = JsonAt(summary, "/captured_server/cache/hit_rate"); k) {
      captured = " / " + Fmt(k);
    }
    h += Card(Fmt(c) + captured, captured.empty() ? "server cache hit rate"
                                                  : "server cache hit rate (replay / capture)");
  }
  if (const json* a = JsonAt(summary, "/server/spec/acceptance_rate"); a) {
    h += Card(Fmt(a), "acceptance (server, per request)");
  }
  if (const json* a = JsonAt(summary, "/server_metrics/spec_decode/acceptance_rate"); a) {
    h += Card(Fmt(a), "spec acceptance rate");
  }
  return h + "</div>\n";
}

std::string RunSection(const json& summary) {
  std::string shard = FmtAt(summary, "/shard/index") + " / " + FmtAt(summary, "/shard/count");
  std::vector<std::pair<std::string, std::string>> run_rows = {
      {"tool", HtmlEscape(Str(summary, "tool") + " " + Str(summary, "version"))},
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
  return "<h2>Run</h2>\n" + KeyValueTable(run_rows);
}

std::string RequestsSection(const json& summary) {
  std::string h = "<h2>Requests and throughput</h2>\n";
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
  return h;
}

std::string LatencySection(const json& summary) {
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
      "<h2>Latency and tokens</h2>\n<table "
      "id=\"percentiles\"><tr><th>metric</th><th>count</th><th>mean</th><th>p50</th>"
      "<th>p90</th><th>p95</th><th>p99</th><th>max</th></tr>";
  for (const auto& [key, name] : kRows) {
    std::string base = std::string("/metrics/") + key + "/";
    out += "<tr><td>" + HtmlEscape(name) + "</td>";
    for (const char* stat : {"count", "mean", "p50", "p90", "p95", "p99", "max"}) {
      out += "<td>" + HtmlEscape(FmtAt(summary, (base + stat).c_str())) + "</td>";
    }
    out += "</tr>";
  }
  out += "</table>\n";
  // A run mixing APIs: each API's counts and latencies (summary.json "apis").
  if (const json* apis = JsonAt(summary, "/apis"); apis && apis->is_object()) {
    out +=
        "<h3>By API</h3>\n<table id=\"by-api\"><tr><th>API</th><th>sent</th><th>completed</th>"
        "<th>errors</th><th>TTFT p50</th><th>TTFT p99</th><th>ITL p50</th><th>ITL p99</th>"
        "<th>latency p50</th><th>latency p99</th></tr>";
    for (const auto& [name, a] : apis->items()) {
      out += "<tr><td>" + HtmlEscape(name) + "</td>";
      for (const char* at :
           {"/requests/sent", "/requests/completed", "/requests/errors", "/ttft_ms/p50",
            "/ttft_ms/p99", "/itl_ms/p50", "/itl_ms/p99", "/latency_ms/p50", "/latency_ms/p99"}) {
        out += "<td>" + HtmlEscape(FmtAt(a, at)) + "</td>";
      }
      out += "</tr>";
    }
    out += "</table>\n";
  }
  return out;
}

std::string ServerReportSection(const json& summary) {
  const json* server = JsonAt(summary, "/server");
  const json* captured = JsonAt(summary, "/captured_server");
  const bool have_server = server && server->is_object();
  const bool have_captured = captured && captured->is_object();
  std::string out = "<h2>What the server reported</h2>\n";
  if (!have_server && !have_captured) {
    return out +
           "<p class=\"muted\">The target reported neither its prompt cache nor its speculative "
           "decoding per request, and no outcomes sidecar gave the capture's.</p>\n";
  }
  // The prompt cache: the replay's target and, for the same rows, the capture's server.
  out +=
      "<h3>Prompt cache</h3>\n<table id=\"server-cache\"><tr><th></th><th>requests reporting</th>"
      "<th>prompt tokens</th><th>cached tokens</th><th>hit rate</th></tr>";
  auto cache_row = [&out](const char* whose, const json* c) {
    out += std::string("<tr><td>") + whose + "</td>";
    for (const char* k : {"/requests", "/prompt_tokens", "/cached_tokens", "/hit_rate"}) {
      out += "<td>" + HtmlEscape(c && c->is_object() ? FmtAt(*c, k) : "-") + "</td>";
    }
    out += "</tr>";
  };
  cache_row("replay", have_server ? JsonAt(*server, "/cache") : nullptr);
  cache_row("capture", have_captured ? JsonAt(*captured, "/cache") : nullptr);
  out += "</table>\n";
  if (const json* spec = have_server ? JsonAt(*server, "/spec") : nullptr;
      spec && spec->is_object()) {
    out += "<h3>Speculative decoding, per request</h3>\n" +
           KeyValueTable(
               {{"requests reporting", HtmlEscape(FmtAt(*spec, "/requests"))},
                {"draft tokens", HtmlEscape(FmtAt(*spec, "/num_draft_tokens"))},
                {"accepted draft tokens", HtmlEscape(FmtAt(*spec, "/num_accepted_draft_tokens"))},
                {"acceptance rate", HtmlEscape(FmtAt(*spec, "/acceptance_rate"))},
                {"mean acceptance length", HtmlEscape(FmtAt(*spec, "/mean_acceptance_length"))}});
  }
  return out;
}

namespace {

// The replay-fidelity certificate's figures (summary.json "fidelity", fidelity/certificate.h).
// A share (0..1) as a percentage, "-" when absent.
std::string Percent(const json* v) {
  if (!v || !v->is_number()) return "-";
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.1f %%", 100 * v->get<double>());
  return buf;
}

std::string Fixed(const json* v, const char* fmt) {
  return v ? Number(*v, fmt) : "-";  // Number: "-" unless a number
}

// A JSON array of strings (or anything) as "a, b, c"; "-" when not an array, "none" when empty.
std::string JoinList(const json* v) {
  if (!v || !v->is_array()) return "-";
  if (v->empty()) return "none";
  std::string out;
  for (const json& e : *v) out += (out.empty() ? "" : ", ") + Fmt(&e);
  return out;
}

// The "moved" and "unknown" lists: one item each, escaped.
std::string ItemList(const json* v) {
  if (!v || !v->is_array()) return "<p class=\"muted\">-</p>\n";
  if (v->empty()) return "<p class=\"muted\">none</p>\n";
  std::string out = "<ul>";
  for (const json& e : *v) out += "<li>" + HtmlEscape(Fmt(&e)) + "</li>";
  return out + "</ul>\n";
}

const char* VerdictClass(const json* verdict) {
  const std::string v = verdict && verdict->is_string() ? verdict->get<std::string>() : "";
  if (v == "reproduced") return "v-ok";
  if (v == "not reproduced") return "v-bad";
  if (v == "unknown") return "v-unknown";
  if (v == "n/a") return "v-na";
  return "";
}

std::string FloorText(const json* floor) {
  if (!floor || !floor->is_object()) return "-";
  const std::string source = Str(*floor, "source");
  if (source == "none") return "none (the thresholds alone judge)";
  if (source == "replay") {
    return "a second replay, " + Str(*floor, "label") + ": " + FmtAt(*floor, "/joined") + " of " +
           FmtAt(*floor, "/pairs") + " pairs joined";
  }
  return source.empty() ? "-" : source;
}

std::string FidelityGroup(const json& g, size_t index) {
  const std::string id = "fidelity-" + std::to_string(index);
  std::string h = "<h3>" + HtmlEscape(Str(g, "label").empty() ? Str(g, "group") : Str(g, "label")) +
                  " <span class=\"muted\">(" + HtmlEscape(Str(g, "group")) + ", " +
                  HtmlEscape(FmtAt(g, "/pairs")) + " pairs)</span></h3>\n";
  // The verdicts.
  h += "<table id=\"" + id +
       "-metrics\" class=\"fidelity\"><tr><th>metric</th><th>side</th>"
       "<th>verdict</th><th>direction</th><th>detail</th></tr>";
  if (const json* metrics = JsonAt(g, "/metrics"); metrics && metrics->is_array()) {
    for (const json& m : *metrics) {
      if (!m.is_object()) continue;
      const json* verdict = JsonAt(m, "/verdict");
      h += "<tr><td>" + HtmlEscape(FmtAt(m, "/metric")) + "</td><td class=\"text\">" +
           HtmlEscape(FmtAt(m, "/side")) + "</td><td class=\"verdict " + VerdictClass(verdict) +
           "\">" + HtmlEscape(Fmt(verdict)) + "</td><td class=\"text\">" +
           HtmlEscape(FmtAt(m, "/direction")) + "</td><td class=\"text\">" +
           HtmlEscape(FmtAt(m, "/detail")) + "</td></tr>";
    }
  }
  h += "</table>\n";
  // Timing: the paired ratio of means, its CI, the floor's band and the tolerance used.
  if (const json* timing = JsonAt(g, "/timing"); timing && timing->is_object()) {
    h += "<table id=\"" + id +
         "-timing\"><tr><th>timing</th><th>pairs</th>"
         "<th>mean captured</th><th>mean replayed</th><th>replayed / captured</th><th>CI</th>"
         "<th>floor band</th><th>tolerance</th></tr>";
    // The document's order (an object's members come back sorted), then any other.
    std::vector<std::string> names = {"ttft_ms", "itl_ms", "latency_ms", "server_prompt_ms",
                                      "server_decode_ms"};
    for (const auto& [name, _] : timing->items()) {
      if (std::find(names.begin(), names.end(), name) == names.end()) names.push_back(name);
    }
    for (const std::string& name : names) {
      if (!timing->contains(name)) continue;
      const json& t = (*timing)[name];
      std::string ci = "-";
      if (JsonAt(t, "/ci_low") && JsonAt(t, "/ci_low")->is_number()) {
        ci = "[" + Fixed(JsonAt(t, "/ci_low"), "%.3f") + ", " +
             Fixed(JsonAt(t, "/ci_high"), "%.3f") + "]";
      }
      h += "<tr><td>" + HtmlEscape(name) + "</td><td>" + HtmlEscape(FmtAt(t, "/n")) + "</td><td>" +
           HtmlEscape(FmtAt(t, "/mean_captured")) + "</td><td>" +
           HtmlEscape(FmtAt(t, "/mean_replayed")) + "</td><td>" +
           HtmlEscape(Fixed(JsonAt(t, "/ratio"), "%.3f")) + "</td><td>" + HtmlEscape(ci) +
           "</td><td>" + HtmlEscape(Fixed(JsonAt(t, "/floor_band"), "±%.3f")) + "</td><td>" +
           HtmlEscape(Fixed(JsonAt(t, "/tolerance"), "±%.3f")) + "</td></tr>";
    }
    h += "</table>\n";
  }
  // The server's prompt cache and speculation, captured vs replayed (shares; points of 100).
  h += "<table id=\"" + id +
       "-server\"><tr><th>server</th><th>pairs</th><th>captured</th>"
       "<th>replayed</th><th>points</th><th>floor points</th></tr>";
  for (const char* part : {"cache", "spec"}) {
    const json* s = JsonAt(g, (std::string("/server/") + part).c_str());
    const bool have = s && s->is_object();
    h += std::string("<tr><td>") + (part[0] == 'c' ? "prompt cache hit rate" : "spec acceptance");
    if (!have) {
      h += "</td><td colspan=\"5\" class=\"text muted\">not reported</td></tr>";
      continue;
    }
    h += "</td><td>" + HtmlEscape(FmtAt(*s, "/pairs")) + "</td><td>" +
         HtmlEscape(Percent(JsonAt(*s, "/captured"))) + "</td><td>" +
         HtmlEscape(Percent(JsonAt(*s, "/replayed"))) + "</td><td>" +
         HtmlEscape(Fixed(JsonAt(*s, "/points"), "%+.1f")) + "</td><td>" +
         HtmlEscape(Fixed(JsonAt(*s, "/floor_points"), "%+.1f")) + "</td></tr>";
  }
  h += "</table>\n";
  // Errors by kind, each side.
  const json* captured = JsonAt(g, "/errors/captured");
  const json* replayed = JsonAt(g, "/errors/replayed");
  std::vector<std::string> kinds;
  for (const json* side : {captured, replayed}) {
    if (!side || !side->is_object()) continue;
    for (const auto& [k, _] : side->items()) {
      if (std::find(kinds.begin(), kinds.end(), k) == kinds.end()) kinds.push_back(k);
    }
  }
  std::sort(kinds.begin(), kinds.end());
  if (!kinds.empty()) {
    h += "<table id=\"" + id +
         "-errors\"><tr><th>error kind</th><th>captured</th>"
         "<th>replayed</th></tr>";
    for (const std::string& k : kinds) {
      const json* c =
          captured && captured->is_object() && captured->contains(k) ? &(*captured)[k] : nullptr;
      const json* r =
          replayed && replayed->is_object() && replayed->contains(k) ? &(*replayed)[k] : nullptr;
      h += "<tr><td>" + HtmlEscape(k) + "</td><td>" + HtmlEscape(c ? Fmt(c) : "0") + "</td><td>" +
           HtmlEscape(r ? Fmt(r) : "0") + "</td></tr>";
    }
    h += "</table>\n";
  }
  // Tokens, errors and arrival in a line each.
  h += "<p class=\"muted\">tokens: " + HtmlEscape(FmtAt(g, "/tokens/compared")) + " compared (" +
       HtmlEscape(FmtAt(g, "/tokens/greedy")) + " greedy, " +
       HtmlEscape(FmtAt(g, "/tokens/sampled")) + " sampled); equal: prompt " +
       HtmlEscape(Percent(JsonAt(g, "/tokens/prompt_equal"))) + ", completion " +
       HtmlEscape(Percent(JsonAt(g, "/tokens/completion_equal"))) + ", finish reason " +
       HtmlEscape(Percent(JsonAt(g, "/tokens/finish_equal"))) +
       " &middot; pairs where one side failed: " + HtmlEscape(FmtAt(g, "/errors/one_side_failed")) +
       " &middot; schedule lag p50 / p99: " +
       HtmlEscape(FmtAt(g, "/arrival/lag_ms/p50") + " / " + FmtAt(g, "/arrival/lag_ms/p99")) +
       " ms; causality moved " + HtmlEscape(FmtAt(g, "/arrival/causal_moved")) +
       " turns (shift p50 / max " +
       HtmlEscape(FmtAt(g, "/arrival/causal_shift_ms/p50") + " / " +
                  FmtAt(g, "/arrival/causal_shift_ms/max")) +
       " ms)</p>\n";
  if (const json* cvs = JsonAt(g, "/client_vs_server"); cvs && cvs->is_string()) {
    h += "<p class=\"muted\">" + HtmlEscape(cvs->get<std::string>()) + "</p>\n";
  }
  return h;
}

// At most this many groups get tables (fidelity.json has them all).
constexpr size_t kMaxFidelityGroups = 20;

}  // namespace

std::string FidelitySection(const json& summary) {
  const json* f = JsonAt(summary, "/fidelity");
  if (!f || !f->is_object()) return "";
  const json& doc = *f;
  const json* certified = JsonAt(doc, "/certified");
  const bool ok = certified && certified->is_boolean() && certified->get<bool>();
  std::string verdict = Str(doc, "verdict");
  if (verdict.empty())
    verdict = certified && certified->is_boolean() ? (ok ? "certified" : "not certified") : "-";
  std::string h = "<section id=\"fidelity\">\n<h2>Replay fidelity</h2>\n";
  h += std::string("<div class=\"verdict ") + (ok ? "v-ok" : "v-bad") + "\"><b>" +
       HtmlEscape(verdict) + "</b>: " + HtmlEscape(FmtAt(doc, "/reproduced")) + " of " +
       HtmlEscape(FmtAt(doc, "/gated")) +
       " gated metrics reproduced over all requests &middot; noise floor: " +
       HtmlEscape(FloorText(JsonAt(doc, "/floor"))) + "</div>\n";
  const json* o = JsonAt(doc, "/options");
  const json& opt = o && o->is_object() ? *o : json::object();
  h += KeyValueTable({
      {"pairs (malformed lines)",
       HtmlEscape(FmtAt(doc, "/pairs") + " (" + FmtAt(doc, "/malformed") + ")")},
      {"pairs file", HtmlEscape(FmtAt(doc, "/pairs_file"))},
      {"timing tolerance (at least)", HtmlEscape(Percent(JsonAt(opt, "/timing")))},
      {"cache and spec tolerance (points, at least)", HtmlEscape(FmtAt(opt, "/points"))},
      {"prompt tokens equal on", HtmlEscape(Percent(JsonAt(opt, "/prompt_equal_share")))},
      {"completion, finish reason equal on (greedy)",
       HtmlEscape(Percent(JsonAt(opt, "/equal_share")))},
      {"fewer pairs than this: unknown", HtmlEscape(FmtAt(opt, "/min_pairs"))},
      {"gates", HtmlEscape(JoinList(JsonAt(opt, "/gates")))},
  });
  h += "<h3>Moved</h3>\n" + ItemList(JsonAt(doc, "/moved"));
  h += "<h3>Unknown</h3>\n" + ItemList(JsonAt(doc, "/unknown"));
  if (const json* groups = JsonAt(doc, "/groups"); groups && groups->is_array()) {
    for (size_t i = 0; i < groups->size() && i < kMaxFidelityGroups; ++i) {
      if ((*groups)[i].is_object()) h += FidelityGroup((*groups)[i], i);
    }
    if (groups->size() > kMaxFidelityGroups) {
      h += "<p class=\"muted\">" + std::to_string(groups->size() - kMaxFidelityGroups) +
           " more groups in fidelity.json.</p>\n";
    }
  }
  return h + "</section>\n";
}

std::string OpenLoopSection(const json& summary) {
  return "<h2>Open loop</h2>\n" +
         KeyValueTable(
             {{"--max-concurrency", HtmlEscape(FmtAt(summary, "/open_loop/max_concurrency"))},
              {"requests held back past their time (violations)",
               HtmlEscape(FmtAt(summary, "/open_loop/violations"))},
              {"total time held (ms)", HtmlEscape(FmtAt(summary, "/open_loop/held_ms_total"))}});
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

std::string DefinitionsSection(const json& summary) {
  std::string h = "<h2>Definitions</h2>\n<table id=\"definitions\">";
  const json* defs = JsonAt(summary, "/definitions");
  const json& definitions = defs && defs->is_object() ? *defs : MetricDefinitions();
  for (const auto& [k, v] : definitions.items()) {
    h += "<tr><td>" + HtmlEscape(k) + "</td><td class=\"text\">" +
         HtmlEscape(v.is_string() ? v.get<std::string>() : v.dump()) + "</td></tr>";
  }
  h += "</table>\n";
  return h;
}

}  // namespace llmtap::report::html_internal
