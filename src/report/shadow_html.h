// `llmtap shadow report --html`: the paired comparison of shadow pairs as one self-contained page
// in the replay report's style (inline CSS, script and data; SVG plots; opens offline). Tables:
// the inputs, the A/A noise floor, and per shadow and group the counts, each metric's ratio with
// its CI and verdict, and the output match. Plots, per judged candidate: the paired deltas of
// TTFT, ITL and latency (candidate minus primary) over time and their distribution. The page
// marks <html data-rendered="ok" data-plots="N"> as the replay report does.
//
// Pure function; any thread may call it.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

namespace llmtap::report {

// `report`: the document `llmtap shadow report --json` writes (shadow/report.h BuildReport);
// `series`: shadow/report.h BuildPlotSeries's per-pair deltas.
std::string RenderShadowHtml(const nlohmann::json& report, const nlohmann::json& series);

}  // namespace llmtap::report
