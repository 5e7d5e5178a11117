// The page of the HTML report (html_report.h): the stylesheet and the order of the sections;
// the sections are html_report_sections.cc's, the plots html_report_plots.cc's.
#include "report/html_report.h"

#include <cstdio>

#include "common/markup_escape.h"
#include "report/html_report_internal.h"

namespace llmtap::report {

using nlohmann::json;

const char html_internal::kStyle[] = R"CSS(
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
tr.best td{font-weight:650}
.v-ok{background:#e7f6ec}.v-bad{background:#fde8e8}.v-unknown{background:#fff4e5}.v-na{color:var(--muted)}
div.verdict{border:1px solid var(--line);border-radius:6px;padding:8px 12px;margin:8px 0}
div.v-ok{border-color:#8fd19e}div.v-bad{border-color:#e99}
table.fidelity th,table.fidelity td{text-align:left}td.verdict{white-space:nowrap}
)CSS";

std::string html_internal::PageHead(const std::string& title) {
  std::string h = "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n";
  h += "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n";
  h += "<title>" + HtmlEscape(title) + "</title>\n<style>";
  h += kStyle;
  h += "</style>\n</head>\n<body>\n<div id=\"errors\" hidden></div>\n";
  return h;
}

std::string html_internal::Number(const json& v, const char* fmt) {
  if (!v.is_number()) return "-";
  char buf[64];
  std::snprintf(buf, sizeof(buf), fmt, v.get<double>());
  return buf;
}

std::string html_internal::Text(const json& v) {
  if (v.is_string()) return v.get<std::string>();
  // A whole number of either kind: nlohmann stores an int (the options' resamples, a shadow's
  // number) as signed, a size_t as unsigned.
  if (v.is_number_unsigned()) return std::to_string(v.get<uint64_t>());
  if (v.is_number_integer()) return std::to_string(v.get<int64_t>());
  return "-";
}

std::string html_internal::PageTail(const json& data, const char* render) {
  return "<script type=\"application/json\" id=\"report-data\">" + JsonForScript(data) +
         "</script>\n<script>" + PageScript(render) + "</script>\n</body>\n</html>\n";
}

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
  std::string h;
  h.reserve(64 * 1024 + requests.size() * 64);
  h += html_internal::PageHead("llmtap replay report");
  h += html_internal::Heading(summary);
  h += html_internal::Cards(summary);
  h += html_internal::RunSection(summary);
  h += html_internal::RequestsSection(summary);
  h += html_internal::LatencySection(summary);
  h += html_internal::ServerReportSection(summary);
  h += html_internal::FidelitySection(summary);
  h += html_internal::PlotBoxes();
  h += html_internal::OpenLoopSection(summary);
  h += html_internal::ServerMetricsSection(summary);
  h += html_internal::DefinitionsSection(summary);
  h += html_internal::PageTail(html_internal::PlotData(summary, requests),
                               html_internal::kPlotScript);
  return h;
}

}  // namespace llmtap::report
