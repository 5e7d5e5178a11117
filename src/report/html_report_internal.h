// The parts of the HTML report (html_report.h), shared by its files and private to
// llmtap_report:
//   html_report.cc           the page: head, stylesheet, the sections in order, the data and
//                            the script (RenderHtmlReport); HtmlEscape and JsonForScript
//   html_report_sections.cc  the tables, one function a section, values escaped
//   html_report_plots.cc     the plots: their data, their boxes and the script that draws them
//
// `summary` is summary.json as read (any shape: a missing field shows as "-"). Pure functions;
// any thread.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "report/html_report.h"
#include "report/summary.h"

namespace llmtap::report::html_internal {

// html_report_sections.cc, in the page's order.
std::string Heading(const nlohmann::json& summary);  // title, target and trace, warnings
std::string Cards(const nlohmann::json& summary);    // the headline figures
std::string RunSection(const nlohmann::json& summary);
std::string RequestsSection(const nlohmann::json& summary);
std::string LatencySection(const nlohmann::json& summary);  // percentiles of each metric
// The server's own report: its prompt cache (replay and capture side by side) and speculation.
std::string ServerReportSection(const nlohmann::json& summary);
// The replay-fidelity certificate (summary.json "fidelity", fidelity/certificate.h) as
// <section id="fidelity">: the verdict, the floor and thresholds, what moved, and per group its
// verdicts, timing ratios, server figures and errors. Empty when "fidelity" is not an object.
std::string FidelitySection(const nlohmann::json& summary);
std::string OpenLoopSection(const nlohmann::json& summary);
std::string ServerMetricsSection(const nlohmann::json& summary);
std::string DefinitionsSection(const nlohmann::json& summary);

// html_report_plots.cc. The JSON the script reads from #report-data: the summary's metrics,
// per-request columns (warm-up requests left out) and the server metrics.
nlohmann::json PlotData(const nlohmann::json& summary, const std::vector<RequestResult>& requests);
// The section of empty boxes, one per plot, that the script fills.
std::string PlotBoxes();
// A page's script (plain JavaScript, no library): kChartScript's helpers, then `render`, which
// defines render() to draw every plot and end with finish(), marking <html> with
// data-rendered="ok" and data-plots="N" (or data-errors). kPlotScript is the replay report's.
extern const char kChartScript[];
extern const char kPlotScript[];
std::string PageScript(const char* render);

// html_report.cc: a number formatted by `fmt` (printf, one double), "-" when `v` is not a number;
// a string, or a whole number, as text ("-" otherwise). Not escaped.
std::string Number(const nlohmann::json& v, const char* fmt);
std::string Text(const nlohmann::json& v);

// html_report.cc: the stylesheet every report page uses, and the <head> of a page titled `title`
// (escaped here) up to and including <body> and the hidden #errors box.
extern const char kStyle[];
std::string PageHead(const std::string& title);
// The end of a page: `data` in the #report-data element its script reads, the script (PageScript
// of `render`), and the closing tags.
std::string PageTail(const nlohmann::json& data, const char* render);

}  // namespace llmtap::report::html_internal
