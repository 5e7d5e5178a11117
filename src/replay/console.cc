// The replay's summary on the console (RenderConsole, summary.h): counts, throughput, goodput,
// open loop, sessions, chains and what the server reported (cache, speculation), then one row
// per metric. Called by Replay (replay.cc).
#include <cstdio>

#include "replay/summary.h"

namespace llmtap::replay {
namespace {

using nlohmann::json;

double NumberOr(const json& j, double fallback) {
  return j.is_number() ? j.get<double>() : fallback;
}

}  // namespace

std::string RenderConsole(const json& s) {
  std::string out;
  char buf[256];
  const json& q = s["requests"];
  auto count = [](const json& j) { return j.is_number() ? j.get<unsigned long long>() : 0ull; };
  std::snprintf(buf, sizeof(buf),
                "requests: %llu scheduled, %llu sent, %llu completed, %llu errors (%llu warmup "
                "requests not counted)\n",
                count(q["scheduled"]), count(q["sent"]), count(q["completed"]), count(q["errors"]),
                count(q["warmup"]));
  out += buf;
  if (count(q["errors"]) > 0) {
    out += "errors by kind:";
    for (auto& [k, v] : q["errors_by_kind"].items()) {
      if (count(v) > 0) out += " " + k + "=" + std::to_string(count(v));
    }
    out += "\n";
  }
  std::snprintf(buf, sizeof(buf), "measured %.3f s: %.2f req/s, %.1f output tok/s\n",
                NumberOr(s["duration_s"], 0), NumberOr(s["throughput"]["requests_per_s"], 0),
                NumberOr(s["throughput"]["output_tokens_per_s"], 0));
  out += buf;
  if (!s["goodput"].is_null()) {
    std::snprintf(buf, sizeof(buf), "goodput: %.2f req/s (%.1f%% of completed requests)\n",
                  NumberOr(s["goodput"]["requests_per_s"], 0),
                  100 * NumberOr(s["goodput"]["fraction"], 0));
    out += buf;
  }
  const json& ol = s["open_loop"];
  if (!ol["max_concurrency"].is_null()) {
    std::snprintf(buf, sizeof(buf),
                  "open loop: %llu requests held back by --max-concurrency %llu, %.1f ms in all\n",
                  count(ol["violations"]), count(ol["max_concurrency"]),
                  NumberOr(ol["held_ms_total"], 0));
    out += buf;
  }
  if (s.contains("sessions") && s["sessions"].is_object()) {
    const json& se = s["sessions"];
    const json& sh = se["causal_shift_ms"];
    std::snprintf(buf, sizeof(buf), "sessions (%s schedule): %llu turns, %llu moved by causality",
                  se["schedule"].get<std::string>().c_str(), count(se["turns"]),
                  count(se["moved"]));
    out += buf;
    if (count(sh["count"]) > 0) {
      std::snprintf(buf, sizeof(buf), " (shift ms: p50 %.3f, p90 %.3f, p99 %.3f, max %.3f)",
                    NumberOr(sh["p50"], 0), NumberOr(sh["p90"], 0), NumberOr(sh["p99"], 0),
                    NumberOr(sh["max"], 0));
      out += buf;
    }
    if (se["without_captured_latency"].is_number()) {
      std::snprintf(buf, sizeof(buf),
                    "; %llu without captured latency (next turn: no think time)\n",
                    count(se["without_captured_latency"]));
      out += buf;
    } else {
      out += " (sessions not followed: every turn on the plan's schedule)\n";
    }
  }
  if (s.contains("response_chains") && s["response_chains"].is_object()) {
    // Rows continuing a Responses response (chains.h): how many went with the target's id, or
    // with the conversation inlined (inline.h).
    const json& ch = s["response_chains"];
    // Members a summary of an older llmtap may lack (a const json's [] must find its key).
    const json none;
    auto member = [&](const json& j, const char* key) -> const json& {
      return j.is_object() && j.contains(key) ? j[key] : none;
    };
    const bool inlined = member(ch, "mode") == "inline";
    if (inlined) {
      std::snprintf(buf, sizeof(buf),
                    "responses chains: %llu rows with previous_response_id, %llu sent with the "
                    "conversation so far inlined (predecessor's output: %llu captured, %llu from "
                    "this run's target)",
                    count(ch["rows"]), count(ch["inlined"]),
                    count(member(ch["inlined_output"], "captured")),
                    count(member(ch["inlined_output"], "replayed")));
    } else {
      std::snprintf(buf, sizeof(buf),
                    "responses chains: %llu rows with previous_response_id, %llu sent with the id "
                    "this run's target gave their predecessor",
                    count(ch["rows"]), count(ch["remapped"]));
    }
    out += buf;
    std::string why;
    for (const auto& [reason, n] : ch["sent_with_captured_id"].items()) {
      if (count(n) == 0) continue;
      why += (why.empty() ? "" : ", ") + std::to_string(count(n)) + " " + reason;
    }
    out += why.empty() ? "\n" : "; sent with the captured id: " + why + "\n";
    const uint64_t refused = count(member(ch, "previous_response_id_refused"));
    if (refused > 0 && !inlined) {
      std::snprintf(buf, sizeof(buf),
                    "responses chains: %llu rows refused by the target for previous_response_id "
                    "(HTTP 400): the target keeps no responses: replay with --responses-chain "
                    "inline\n",
                    static_cast<unsigned long long>(refused));
      out += buf;
    }
  }
  // What the target itself reported of its cache, and the capture's server for the same rows.
  auto cache_line = [&](const char* whose, const json& c) {
    if (!c.is_object()) return;
    std::snprintf(buf, sizeof(buf),
                  "%s: %.1f%% of prompt tokens reused (%.0f of %.0f, %llu requests reporting)\n",
                  whose, 100 * NumberOr(c["hit_rate"], 0), NumberOr(c["cached_tokens"], 0),
                  NumberOr(c["prompt_tokens"], 0), count(c["requests"]));
    out += buf;
  };
  const json none;
  const json& server = s.contains("server") && s["server"].is_object() ? s["server"] : none;
  const json& captured = s.contains("captured_server") && s["captured_server"].is_object()
                             ? s["captured_server"]
                             : none;
  if (server.is_object()) cache_line("server cache", server["cache"]);
  if (captured.is_object()) cache_line("server cache in the capture", captured["cache"]);
  if (server.is_object()) {
    // What the target itself reported of its speculative decoding.
    const json& sp = s["server"]["spec"];
    if (sp.is_object()) {
      std::snprintf(buf, sizeof(buf),
                    "server speculative decoding: %.1f%% of draft tokens accepted (%.0f of %.0f, "
                    "%llu requests)",
                    100 * NumberOr(sp["acceptance_rate"], 0),
                    NumberOr(sp["num_accepted_draft_tokens"], 0),
                    NumberOr(sp["num_draft_tokens"], 0), count(sp["requests"]));
      out += buf;
      if (sp["mean_acceptance_length"].is_number()) {
        std::snprintf(buf, sizeof(buf), ", mean acceptance length %.2f",
                      NumberOr(sp["mean_acceptance_length"], 0));
        out += buf;
      }
      out += "\n";
    }
  }
  std::snprintf(buf, sizeof(buf), "%-15s %8s %10s %10s %10s %10s %10s %10s\n", "metric", "count",
                "mean", "p50", "p90", "p95", "p99", "max");
  out += buf;
  for (const char* name : report::kSeriesNames) {  // summary.json's order
    const json& d = s["metrics"][name];
    if (count(d["count"]) == 0) {
      std::snprintf(buf, sizeof(buf), "%-15s %8d %10s\n", name, 0, "-");
    } else {
      std::snprintf(buf, sizeof(buf), "%-15s %8llu %10.3f %10.3f %10.3f %10.3f %10.3f %10.3f\n",
                    name, count(d["count"]), NumberOr(d["mean"], 0), NumberOr(d["p50"], 0),
                    NumberOr(d["p90"], 0), NumberOr(d["p95"], 0), NumberOr(d["p99"], 0),
                    NumberOr(d["max"], 0));
    }
    out += buf;
  }
  return out;
}

}  // namespace llmtap::replay
