// The console rendering of `llmtap shadow report` (report.h RenderReportText): reads only the
// JSON document BuildReport makes, so that the console, --json and --html agree.
#include <cstdio>
#include <map>
#include <string>

#include "shadow/report.h"

namespace llmtap::shadow {
namespace {

using nlohmann::json;

std::string Fmt(const char* fmt, double v) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), fmt, v);
  return buf;
}

std::string Num(const json& v, const char* fmt) {
  return v.is_number() ? Fmt(fmt, v.get<double>()) : std::string("-");
}

std::string Pct(const json& v) {
  return v.is_number() ? Fmt("%.1f %%", 100 * v.get<double>()) : "-";
}

std::string Count(const json& v) { return v.is_number() ? std::to_string(v.get<uint64_t>()) : "-"; }

void Pad(std::string* out, const std::string& s, size_t width, bool right) {
  if (right && s.size() < width) out->append(width - s.size(), ' ');
  *out += s;
  if (!right && s.size() < width) out->append(width - s.size(), ' ');
}

std::string MetricTable(const json& group, const json& defs) {
  std::string out =
      "  metric              n     primary   candidate    ratio   95 % CI             "
      "median delta  verdict\n";
  for (const json& d : defs) {
    const json& m = group["metrics"][d.value("key", "")];
    const std::string unit = d.value("unit", "");
    std::string row = "  ";
    Pad(&row, d.value("label", ""), 14, false);
    Pad(&row, Count(m["n"]), 7, true);
    Pad(&row, Num(m["mean_primary"], "%.2f"), 12, true);
    Pad(&row, Num(m["mean_candidate"], "%.2f"), 12, true);
    Pad(&row, Num(m["ratio"], "%.4f"), 9, true);
    std::string ci = "-";
    if (m["ci"].is_array()) {
      ci = "[" + Num(m["ci"][0], "%.4f") + ", " + Num(m["ci"][1], "%.4f") + "]";
    }
    row += "   ";
    Pad(&row, ci, 18, false);
    std::string delta = m["median_delta"].is_number()
                            ? Fmt("%+.2f", m["median_delta"].get<double>()) + " " + unit
                            : "-";
    Pad(&row, delta, 14, true);
    row += "  " + m.value("verdict", "");
    if (m.value("verdict", "") == "no detectable difference" &&
        m.value("note", "").rfind("significant", 0) == 0) {
      row += " (significant but below the threshold)";
    }
    if (m.value("verdict", "") == "within noise floor") {
      row += " (band " + Num(m["noise_band"], "%.4f") + ")";
    }
    out += row + "\n";
  }
  return out;
}

std::string GroupText(const json& g, const json& defs) {
  const json& c = g["counts"];
  std::string out =
      g.value("kind", "") == "all" ? "all pairs" : g.value("kind", "") + " " + g.value("name", "");
  out += ": " + Count(c["pairs"]) + " pairs, " + Count(c["both_ok"]) +
         " with both sides ok; primary failed " + Count(c["primary_failed"]) +
         ", candidate failed " + Count(c["candidate_failed"]) + ", both " +
         Count(c["both_failed"]) + " (error rates: primary " + Pct(c["primary_error_rate"]) +
         ", candidate " + Pct(c["candidate_error_rate"]) + ")\n";
  for (const char* side : {"primary", "candidate"}) {
    const json& errors = g["errors"][side];
    if (!errors.is_object() || errors.empty()) continue;
    std::string list;
    for (const auto& [kind, n] : errors.items())
      list += (list.empty() ? "" : ", ") + Count(n) + " " + kind;
    out += std::string("  ") + side + " errors: " + list + "\n";
  }
  out += MetricTable(g, defs);
  const json& o = g["output"];
  out += "  output: exact match at temperature 0: " + Pct(o["greedy_match_rate"]) + " of " +
         Count(o["greedy_compared"]) + "; all compared: " + Pct(o["match_rate"]) + " of " +
         Count(o["compared"]);
  if (o.value("differing", 0) > 0) {
    out += "; differing outputs: median first differing character " +
           Num(o["first_diff_char_median"], "%.0f") + ", token " +
           Num(o["first_diff_token_median"], "%.0f");
  }
  return out + "\n";
}

}  // namespace

std::string RenderReportText(const json& report) {
  const json& in = report["inputs"];
  const json& opt = report["options"];
  const json& defs = report["metrics"];
  std::string out = "llmtap shadow report: " + Count(in["pairs"]) + " pairs from " +
                    std::to_string(in["files"].size()) + " file(s)";
  if (in.value("malformed", 0) > 0)
    out += ", " + Count(in["malformed"]) + " malformed lines skipped";
  out +=
      "\nratio = mean(candidate) / mean(primary) over pairs with both values, both sides ok; "
      "95 % CI by paired bootstrap (" +
      Count(opt["resamples"]) + " resamples, seed " + Count(opt["seed"]) + "); threshold " +
      Pct(opt["threshold"]) + "\n";
  out +=
      "verdicts: worse/better (longer/shorter) = the CI excludes 1 and the ratio is at least half "
      "the threshold from 1; no detectable difference = the CI inside 1 +/- threshold; "
      "inconclusive = more pairs needed. Exact output match is only expected at temperature 0.\n";
  for (const json& w : report["warnings"]) out += "warning: " + w.get<std::string>() + "\n";
  const json& nf = report["noise_floor"];
  if (nf.is_object()) {
    out += "\nA/A noise floor (" + nf.value("mode", "") + "): " + nf.value("what", "") + "\n";
    for (const json& g : nf["groups"]) {
      if (g.value("kind", "") != "all") continue;
      out += "  " + Count(g["requests"]) + " requests;";
      for (const json& d : defs) {
        const json& m = g["metrics"][d.value("key", "")];
        std::string ci = m["ci"].is_array()
                             ? "[" + Num(m["ci"][0], "%.4f") + ", " + Num(m["ci"][1], "%.4f") + "]"
                             : "-";
        out += " " + d.value("label", "") + " " + Num(m["ratio"], "%.4f") + " " + ci + " band " +
               Num(m["band"], "%.4f") + ";";
      }
      out += "\n";
    }
  } else {
    out += "\nA/A noise floor: none (it needs two shadows, --shadow given twice)\n";
  }
  for (const json& sh : report["shadows"]) {
    std::string urls;
    for (const json& u : sh.value("candidate_urls", json::array())) {
      urls += (urls.empty() ? ": " : ", ") + u.get<std::string>();
    }
    out +=
        "\n== shadow " + Count(sh["shadow"]) + " (" + sh.value("role", "") + ")" + urls + " ==\n";
    // A path or model group is shown when there are several of its kind (else it is "all").
    std::map<std::string, int> kinds;
    for (const json& g : sh["groups"]) ++kinds[g.value("kind", "")];
    for (const json& g : sh["groups"]) {
      const std::string kind = g.value("kind", "");
      if (kind != "all" && kinds[kind] < 2) continue;
      out += "\n" + GroupText(g, defs);
    }
  }
  return out;
}

}  // namespace llmtap::shadow
