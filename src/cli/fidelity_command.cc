// `llmtap fidelity RUN [FLOOR]`: the replay-fidelity certificate of a replay's output directory,
// judged again (with an A/A floor, other tolerances or gates). Thin: flags in, src/fidelity out.
// Also the judging flags `llmtap replay` shares (fidelity_flags.h).
#include <cstdio>
#include <sstream>
#include <string>

#include "cli/commands.h"
#include "cli/fidelity_flags.h"
#include "fidelity/certificate.h"
#include "fidelity/recertify.h"

namespace llmtap::cli {

void AddFidelityFlags(CLI::App* cmd, const std::string& prefix, FidelityFlags* f) {
  const fidelity::Options d;
  cmd->add_option("--" + prefix + "tolerance", f->timing,
                  "timing metrics (TTFT, ITL, latency, the server's prompt and decode time): "
                  "reproduced when replayed/captured is within 1 +- this, or the floor's band "
                  "when wider (default 10%)");
  cmd->add_option("--" + prefix + "points", f->points,
                  "cache hit rate and spec-decode acceptance: reproduced within this many points "
                  "of the capture's, or the floor's difference when larger (default 2)");
  cmd->add_option("--" + prefix + "equal-share", f->equal_share,
                  "greedy rows: completion tokens and finish reason equal on at least this share; "
                  "one side failing alone on at most 1 - this share (default 99%)");
  cmd->add_option("--" + prefix + "prompt-equal-share", f->prompt_equal_share,
                  "prompt tokens equal on at least this share (default 100%)");
  cmd->add_option("--" + prefix + "min-pairs", f->min_pairs,
                  "fewer pairs with a value than this: the metric is unknown")
      ->check(CLI::Range(size_t{1}, size_t{1} << 40))
      ->capture_default_str();
  std::string names;
  for (const std::string& n : fidelity::MetricNames()) names += (names.empty() ? "" : ",") + n;
  cmd->add_option(
      "--" + prefix + "gates", f->gates,
      "comma-separated metrics that must be reproduced to certify (default all: " + names + ")");
}

void ApplyFidelityFlags(const FidelityFlags& f, const std::string& prefix, const char* who,
                        fidelity::Options* o) {
  auto share = [&](const std::string& text, const char* flag, double* out) {
    if (text.empty()) return;
    if (!fidelity::ParseShare(text, out)) {
      FailUsage(who, "--" + prefix + flag + " " + text +
                         ": not a share (e.g. 10% or 0.1, above 0 and at most 100%)");
    }
  };
  share(f.timing, "tolerance", &o->timing);
  share(f.equal_share, "equal-share", &o->equal_share);
  share(f.prompt_equal_share, "prompt-equal-share", &o->prompt_equal_share);
  if (!f.points.empty()) {
    char* end = nullptr;
    const double v = std::strtod(f.points.c_str(), &end);
    if (end != f.points.c_str() + f.points.size() || !(v >= 0 && v <= 100)) {
      FailUsage(who, "--" + prefix + "points " + f.points + ": not a number of points (0-100)");
    }
    o->points = v;
  }
  o->min_pairs = f.min_pairs;
  if (!f.gates.empty()) {
    std::stringstream in(f.gates);
    std::string name;
    const auto& known = fidelity::MetricNames();
    while (std::getline(in, name, ',')) {
      if (name.empty()) continue;
      if (std::find(known.begin(), known.end(), name) == known.end()) {
        std::string list;
        for (const std::string& n : known) list += (list.empty() ? "" : ", ") + n;
        FailUsage(who,
                  "--" + prefix + "gates: unknown metric '" + name + "' (known: " + list + ")");
      }
      o->gates.push_back(name);
    }
  }
}

namespace {

constexpr char kFidelityWho[] = "llmtap fidelity";

struct FidelityCommandFlags {
  std::string run;
  std::vector<std::string> floor;
  bool certify = false, json = false, dry = false;
  FidelityFlags judge;
};

}  // namespace

void AddFidelityCommand(CLI::App& app) {
  auto f = std::make_shared<FidelityCommandFlags>();
  CLI::App* cmd = app.add_subcommand(
      "fidelity",
      "Judge again how faithfully a replay reproduced its capture (the replay-fidelity "
      "certificate), e.g. with the A/A floor of a second replay");
  cmd->footer(
      "A replay with --out and the trace's outcomes sidecar pairs each replayed row with its "
      "captured outcome (DIR/fidelity-pairs.ndjson: the shadow pair format, primary = captured, "
      "candidate = replayed) and certifies the run (DIR/fidelity.json, summary.json "
      "\"fidelity\", the console, report.html). This command judges RUN's pairs again and "
      "rewrites those three files.\n\n"
      "FLOOR (or --floor): a second replay of the same trace against the same kind of server "
      "(its --out directory, or its pairs file); or two such replays, to judge a RUN that went "
      "to a different server against the noise of the usual one (one FLOOR would measure the "
      "very difference in question). Joined by trace row, the second replay over the first "
      "gives each timing metric a noise band (the largest distance from 1 "
      "of its 95 % CI), and the cache and spec rates a difference in points; each metric is then "
      "judged against the larger of its tolerance and the floor. Without a floor the tolerances "
      "alone judge, and on a busy machine client timings rarely reproduce within 10 %.\n\n"
      "Per group (all requests; each API and model when there are several; first vs later "
      "turns of sessions), each metric gets a verdict:\n"
      "  reproduced: within the tolerance (or the floor);\n"
      "  not reproduced (higher / lower: the replay's value against the capture's): tokens or "
      "finish reasons differ on more than the allowed share, a rate moved more than the points, "
      "or a timing ratio's CI excludes 1 with the ratio at least half the tolerance from 1 "
      "(unless the CI lies within the floor's band);\n"
      "  unknown: fewer than --min-pairs pairs, only one side reports it, or a CI too wide to "
      "tell;\n"
      "  n/a: neither side reports it (not judged).\n"
      "Timing ratios are means replayed / captured over the pairs where both succeeded, with a "
      "seeded paired-bootstrap CI (the shadow report's). ITL per request is (latency - TTFT) / "
      "(output tokens - 1) on both sides. Completion tokens and finish reasons are judged over "
      "greedy rows only (temperature 0 in the request); sampled rows are counted apart. The "
      "server's own prompt and decode times (llama.cpp timings) are judged next to the client's "
      "TTFT and latency; when the client's moved and the server's did not, the report says so "
      "(contention on the client or network, not a different server).\n\n"
      "What it cannot show: the server's state at capture time (its cache warmth, other "
      "tenants' load), the client's own retries, or outputs of sampled requests.\n\n"
      "Exit codes: 0 the certificate was made (with --certify: and it certified the run); 3 "
      "--certify and the run was not certified (a gated metric not reproduced or unknown); 2 "
      "usage, read or write error.");
  cmd->add_option("run", f->run, "the replay's --out directory (local or s3://)")->required();
  cmd->add_option("floor", f->floor,
                  "a second replay of the same trace (its --out directory or pairs file): the "
                  "A/A noise floor; two: two replays of the usual server, when RUN replayed to "
                  "a different one")
      ->expected(0, 2);
  cmd->add_option("--floor", f->floor, "the same as FLOOR (repeatable, at most twice)");
  cmd->add_flag("--certify", f->certify,
                "exit 3 unless every gated metric was reproduced (for CI gates)");
  cmd->add_flag("--json", f->json, "print the certificate as JSON instead of text");
  cmd->add_flag("--no-write", f->dry, "print only; leave RUN's files as they are");
  AddFidelityFlags(cmd, "", &f->judge);
  cmd->callback([f] {
    fidelity::Options options;
    ApplyFidelityFlags(f->judge, "", kFidelityWho, &options);
    nlohmann::json certificate;
    std::string error;
    if (!fidelity::Recertify(f->run, f->floor, options, !f->dry, &certificate, &error)) {
      FailUsage(kFidelityWho, error);
    }
    if (f->json) {
      std::fputs((certificate.dump(2) + "\n").c_str(), stdout);
    } else {
      std::fputs(fidelity::RenderCertificateText(certificate).c_str(), stdout);
      if (!f->dry)
        std::printf("wrote %s/fidelity.json, summary.json and report.html\n", f->run.c_str());
    }
    ExitWith(f->certify && !certificate.value("certified", false) ? 3 : 0);
  });
}

}  // namespace llmtap::cli
