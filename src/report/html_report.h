// The replay report as one self-contained HTML file: it opens offline (no network, no CDN: CSS,
// JavaScript and data inline; plots drawn as SVG by the page's own script). Tables are plain
// HTML, readable without JavaScript; plots: arrivals and completions over time, TTFT, ITL and
// latency distributions, schedule lag over time and its distribution, and server metrics
// (spec-decode acceptance, running and waiting requests) when they were scraped.
//
// The data the plots use sits in a <script type="application/json"> element, with '<', '>' and
// '&' written as \u escapes so that no string (a URL, an error, a label) can close the element.
// The page marks <html data-rendered="ok" data-plots="N"> when its script finished, and
// data-errors when any script error happened (the headless-browser test reads these).
//
// Pure function; any thread may call it.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "report/summary.h"

namespace llmtap::report {

// `summary` as summary.json holds it; `requests` as requests.jsonl (warm-up requests are left
// out of the plots, as out of the statistics).
std::string RenderHtmlReport(const nlohmann::json& summary,
                             const std::vector<RequestResult>& requests);

// HTML-escapes text for element content and quoted attribute values.
std::string HtmlEscape(const std::string& text);

// JSON text safe inside a <script> element: '<', '>' and '&' as \u003c, \u003e, \u0026 (they
// can only occur inside JSON strings, where the escapes mean the same characters).
std::string JsonForScript(const nlohmann::json& value);

}  // namespace llmtap::report
