// `llmtap compare`, `llmtap report merge` and `llmtap report html`. Thin: flags in, src/report
// call, output out. Exit codes: 0 success; 2 a usage, read or write error.
#include <cstdio>
#include <filesystem>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "report/compare.h"
#include "report/html_report.h"
#include "report/run_dir.h"

namespace llmtap::cli {
namespace {

namespace fs = std::filesystem;

[[noreturn]] void FailReport(const std::string& message) { FailUsage("llmtap", message); }

// A run's column name: its directory's name (or the summary file's stem when not summary.json).
std::string DefaultLabel(const std::string& path) {
  fs::path p = fs::path(path).lexically_normal();
  if (p.has_filename() && p.filename() == report::kSummaryFile) p = p.parent_path();
  std::string name = fs::is_directory(p) ? fs::absolute(p).lexically_normal().filename().string()
                                         : p.stem().string();
  return name.empty() ? path : name;
}

void AddCompare(CLI::App& app) {
  struct Flags {
    std::vector<std::string> runs;
    std::vector<std::string> labels;
    bool json = false;
  };
  auto f = std::make_shared<Flags>();
  CLI::App* cmd = app.add_subcommand(
      "compare", "Show the metrics of several replays side by side, with ratios to the first");
  cmd->footer(
      "Each input is a replay output directory (llmtap replay --out DIR) or its summary.json. The "
      "first is the baseline: every other run gets a ratio column run/baseline, so with spec "
      "decoding off as A and on as B, `request throughput` B/A is the speedup and a latency "
      "ratio below 1 is a cut. A ratio is marked + when it is better by more than 1 % (higher "
      "throughput, goodput and acceptance; lower latency, lag and errors) and - when worse.\n\n"
      "Rows: throughput, goodput, requests and errors, TTFT/TTST/ITL/inter-chunk/latency mean, "
      "p50, p90, p99, tokens, schedule lag, open-loop violations, and the spec-decode acceptance "
      "rate and mean acceptance length when server metrics were scraped. Rows absent from every "
      "run are left out; '-' marks a value one run lacks.\n\n"
      "--json prints {\"runs\":[{label,path}],\"baseline\":0,\"rows\":[{key,label,unit,better,"
      "values,ratios}]}, key being the JSON pointer into summary.json.\n\n"
      "Exit codes: 0 success; 2 usage, read or parse error.");
  cmd->add_option("runs", f->runs, "replay output directories or summary.json files (2 or more)")
      ->required()
      ->expected(2, -1);
  cmd->add_option("--labels", f->labels, "column names, comma-separated (default: directory names)")
      ->delimiter(',');
  cmd->add_flag("--json", f->json, "machine-readable output");
  cmd->callback([f] {
    std::vector<nlohmann::json> summaries;
    std::vector<std::string> labels;
    for (const std::string& path : f->runs) {
      report::RunDir run;
      std::string error;
      if (!report::LoadRun(path, /*with_requests=*/false, &run, &error)) FailReport(error);
      summaries.push_back(std::move(run.summary));
      labels.push_back(DefaultLabel(path));
    }
    if (!f->labels.empty()) {
      if (f->labels.size() != f->runs.size()) {
        FailReport("--labels names " + std::to_string(f->labels.size()) + " runs, but " +
                   std::to_string(f->runs.size()) + " were given");
      }
      labels = f->labels;
    } else if (std::set<std::string>(labels.begin(), labels.end()).size() != labels.size()) {
      for (size_t i = 0; i < labels.size(); ++i) labels[i] = std::string(1, char('A' + i % 26));
    }
    std::vector<report::CompareRow> rows = report::CompareSummaries(summaries);
    if (f->json) {
      std::printf("%s\n", report::CompareToJson(labels, f->runs, rows).dump(2).c_str());
    } else {
      for (size_t i = 0; i < labels.size(); ++i) {
        std::printf("%s = %s\n", labels[i].c_str(), f->runs[i].c_str());
      }
      std::printf("\n%s", report::CompareToText(labels, rows).c_str());
    }
    std::fflush(stdout);
  });
}

void AddReport(CLI::App& app) {
  CLI::App* report = app.add_subcommand(
      "report", "Replay outputs: merge shards' outputs, re-render the HTML report");
  report->require_subcommand(1);

  struct MergeFlags {
    std::vector<std::string> dirs;
    std::string out;
  };
  auto m = std::make_shared<MergeFlags>();
  CLI::App* merge = report->add_subcommand(
      "merge", "Combine the outputs of the shards of one replay (--shard i/N) into one");
  merge->footer(
      "Reads each DIR's summary.json and requests.jsonl, puts every request on the earliest "
      "shard's clock (by started_at_unix_ms, so shards started together with --start-at line "
      "up), concatenates them and recomputes every statistic from the merged requests, exactly "
      "as one replay computes its own: percentiles, throughput, goodput (with the shards' "
      "constraints), lag, errors, and causal replay's \"sessions\" (from each turn's line; left "
      "out, with a warning, when a shard's lines do not mark the turns its summary counts). "
      "server_metrics is taken from the shard with the longest scrape window, since all shards "
      "scrape the same server. Writes OUT/summary.json, "
      "OUT/requests.jsonl and OUT/report.html. Inconsistent shards (another trace or URL, a "
      "shard index twice, a missing shard) are reported as warnings, also in the summary.\n\n"
      "Exit codes: 0 success; 2 usage, read, parse or write error.");
  merge->add_option("dirs", m->dirs, "the shards' --out directories")->required();
  merge->add_option("-o,--out", m->out, "output directory (created)")->required();
  merge->callback([m] {
    std::vector<report::RunDir> runs;
    for (const std::string& dir : m->dirs) {
      report::RunDir run;
      std::string error;
      if (!report::LoadRun(dir, /*with_requests=*/true, &run, &error)) FailReport(error);
      runs.push_back(std::move(run));
    }
    report::MergeOutput merged;
    std::string error;
    if (!report::MergeRuns(runs, &merged, &error)) FailReport(error);
    for (const std::string& w : merged.warnings) std::fprintf(stderr, "warning: %s\n", w.c_str());
    if (!report::WriteRunDir(m->out, merged.summary, merged.requests, &error)) FailReport(error);
    std::printf(
        "merged %zu outputs, %zu requests -> %s (summary.json, requests.jsonl, report.html)\n",
        runs.size(), merged.requests.size(), m->out.c_str());
    std::fflush(stdout);
  });

  struct HtmlFlags {
    std::string dir;
    std::string out;
  };
  auto h = std::make_shared<HtmlFlags>();
  CLI::App* html = report->add_subcommand(
      "html", "Render DIR/report.html again from DIR/summary.json and DIR/requests.jsonl");
  html->footer(
      "The report is one self-contained HTML file that opens offline: tables of the summary "
      "(percentiles, errors, throughput, goodput, open-loop violations, server metrics and "
      "spec-decode acceptance, metric definitions) and SVG plots drawn by its inline script "
      "(arrivals and completions over time, TTFT/ITL/latency distributions, schedule lag, "
      "server gauges).\n\nExit codes: 0 success; 2 usage, read, parse or write error.");
  html->add_option("dir", h->dir, "a replay output directory")->required();
  html->add_option("-o,--out", h->out, "output file (default: DIR/report.html)");
  html->callback([h] {
    report::RunDir run;
    std::string error;
    if (!report::LoadRun(h->dir, /*with_requests=*/true, &run, &error)) FailReport(error);
    std::string out = h->out.empty() ? (fs::path(run.dir) / report::kReportFile).string() : h->out;
    if (!report::WriteFileAtomically(out, report::RenderHtmlReport(run.summary, run.requests),
                                     &error)) {
      FailReport(error);
    }
    std::printf("%s\n", out.c_str());
    std::fflush(stdout);
  });
}

}  // namespace

void AddReportCommands(CLI::App& app) {
  AddCompare(app);
  AddReport(app);
}

}  // namespace llmtap::cli
