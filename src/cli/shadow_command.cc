// `llmtap shadow report`: the paired comparison of shadow pair lines. Thin: flags in, the
// src/shadow report and src/report HTML out. Exit codes: 0 a report; 1 no usable pair; 2 a usage,
// read or write error.
#include <cstdio>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "report/shadow_html.h"
#include "shadow/report.h"

namespace llmtap::cli {
namespace {

constexpr char kWho[] = "llmtap shadow report";

constexpr char kReportFooter[] =
    "Each line of PAIRS is one request answered by the primary and by a candidate, as written by "
    "`llmtap proxy --shadow` (--shadow-pairs FILE, or <capture>.shadow.ndjson) and `llmtap replay "
    "--paired-url`. Files may be .zst or s3:// objects. A line that is not a pair is skipped and "
    "counted, with its file and line on stderr.\n\n"
    "Per group (all pairs, each path, each model; each shadow when --shadow was given twice), "
    "only pairs where both sides succeeded (2xx, no error) are timed; the others are counted "
    "(primary failed, candidate failed, both) with each side's error rate. For TTFT, ITL p50, "
    "latency and output length (completion tokens): ratio = mean(candidate) / mean(primary) over "
    "the pairs with both values, its 95 % confidence interval (CI) by paired bootstrap "
    "(--resamples resamples of the pairs, seeded by --seed: the same input and seed give the same "
    "report), the means and the median per-pair delta (candidate - primary).\n\n"
    "How to read a verdict, for threshold t (--threshold, the smallest difference that matters):\n"
    "  worse / better (output length: longer / shorter): the CI excludes 1 and the ratio is at "
    "least t/2 away from 1. A real difference of t or more is found this way (a 5 % slower TTFT "
    "in 2,000 pairs of ~10 % noise: in 20 of 20 seeded tests).\n"
    "  no detectable difference: otherwise, and the CI lies inside (1 - t, 1 + t). Marked "
    "\"significant but below the threshold\" when the CI still excludes 1.\n"
    "  inconclusive: neither; the CI is too wide for the threshold: collect more pairs.\n"
    "  within noise floor: worse or better, but the CI lies within 1 +/- the A/A band.\n"
    "  insufficient data: fewer than 10 pairs with both values.\n\n"
    "A/A noise floor (--aa): with two shadows of the same requests, how much a server differs "
    "from itself. `shadows` (the default when shadows 0 and 1 both occur): both are the same "
    "candidate; the floor is shadow 1 over shadow 0. `primary`: shadow 0 is a copy of the "
    "primary (the floor is its pairs) and shadow 1 is the candidate. `none`: no floor. The band "
    "is the A/A CI's largest distance from 1, per group and metric.\n\n"
    "Exact output match: the share of pairs whose outputs are equal, among requests with "
    "temperature 0 (greedy: the only case where an exact match is expected) and among all; for "
    "differing outputs the median first differing character and token.\n\n"
    "--json FILE writes every number (--json - writes it to stdout instead of the table); --html "
    "FILE a self-contained page with the tables and "
    "the paired deltas of TTFT, ITL and latency over time and as histograms.\n\n"
    "Exit codes: 0 a report; 1 no usable pair in the input; 2 usage, read or write error.";

bool WriteText(const std::string& path, const std::string& text) {
  if (path == "-") {
    std::fwrite(text.data(), 1, text.size(), stdout);
    return true;
  }
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
  out.close();
  return static_cast<bool>(out);
}

void AddShadowReport(CLI::App& shadow) {
  struct Flags {
    std::vector<std::string> pairs;
    std::string threshold = "5%";
    uint64_t seed = 1;
    int resamples = 2000;
    std::string json;
    std::string html;
    std::string aa = "auto";
  };
  auto f = std::make_shared<Flags>();
  CLI::App* cmd = shadow.add_subcommand(
      "report", "Compare the candidate with the primary over shadow pairs: verdicts per metric");
  cmd->footer(kReportFooter);
  cmd->add_option("pairs", f->pairs, "pairs files (.ndjson, .zst, s3://, - for stdin)")->required();
  cmd->add_option("--threshold", f->threshold,
                  "smallest relative difference that matters: 5% or 0.05 (default 5%)");
  cmd->add_option("--seed", f->seed, "bootstrap seed (default 1)");
  cmd->add_option("--resamples", f->resamples, "bootstrap resamples (default 2000)")
      ->check(CLI::Range(100, 1000000));
  cmd->add_option("--json", f->json, "write the report as JSON to FILE (- for stdout)");
  cmd->add_option("--html", f->html, "write a self-contained HTML page to FILE");
  cmd->add_option("--aa", f->aa, "A/A noise floor: auto, shadows, primary or none (default auto)");
  cmd->callback([f] {
    shadow::ReportOptions options;
    if (!shadow::ParseThreshold(f->threshold, &options.threshold)) {
      FailUsage(kWho,
                "--threshold " + f->threshold + ": want a fraction below 1 such as 5% or 0.05");
    }
    if (!shadow::ParseAaMode(f->aa, &options.aa)) {
      FailUsage(kWho, "--aa " + f->aa + ": want auto, shadows, primary or none");
    }
    options.seed = f->seed;
    options.resamples = f->resamples;
    shadow::PairSet set;
    for (const std::string& path : f->pairs) {
      std::string error;
      if (!shadow::ReadPairsFile(path, &set, &error)) FailUsage(kWho, error);
    }
    for (const std::string& m : set.messages)
      std::fprintf(stderr, "warning: skipped %s\n", m.c_str());
    if (set.malformed > set.messages.size()) {
      std::fprintf(stderr, "warning: %llu more malformed lines skipped\n",
                   static_cast<unsigned long long>(set.malformed - set.messages.size()));
    }
    const nlohmann::json report = shadow::BuildReport(set, options);
    for (const auto& w : report["warnings"]) {
      std::fprintf(stderr, "warning: %s\n", w.get<std::string>().c_str());
    }
    if (f->json != "-") std::fputs(shadow::RenderReportText(report).c_str(), stdout);
    if (!f->json.empty() && !WriteText(f->json, report.dump(2) + "\n")) {
      FailUsage(kWho, "cannot write --json " + f->json);
    }
    if (!f->html.empty() &&
        !WriteText(f->html,
                   report::RenderShadowHtml(report, shadow::BuildPlotSeries(set, report)))) {
      FailUsage(kWho, "cannot write --html " + f->html);
    }
    if (set.pairs.empty()) {
      std::fprintf(stderr, "%s: no usable pair in the input (%llu lines, %llu malformed)\n", kWho,
                   static_cast<unsigned long long>(set.lines),
                   static_cast<unsigned long long>(set.malformed));
      ExitWith(1);
    }
    ExitWith(0);
  });
}

}  // namespace

void AddShadowCommand(CLI::App& app) {
  CLI::App* shadow = app.add_subcommand("shadow",
                                        "Shadow traffic: compare a candidate's answers "
                                        "with the primary's (pairs from proxy --shadow)");
  shadow->require_subcommand(1);
  AddShadowReport(*shadow);
}

}  // namespace llmtap::cli
