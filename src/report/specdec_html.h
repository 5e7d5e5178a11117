// `llmtap specdec --html`: the speculative-decoding estimate of a capture as one self-contained
// page, in the replay report's style (inline CSS, script and data; SVG plots; opens offline).
// Per group (the whole capture first, then each --by group): the sweep's table, the best setting
// marked, and two plots against k, acceptance length and expected speedup, one line per method
// and n-gram range. The page marks <html data-rendered="ok" data-plots="N"> as the replay
// report does.
//
// Pure function; any thread may call it.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

namespace llmtap::report {

// `report`: the document `llmtap specdec --json` writes (specdec/analysis.h RenderJson).
std::string RenderSpecdecHtml(const nlohmann::json& report);

}  // namespace llmtap::report
