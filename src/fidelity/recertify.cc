#include "fidelity/recertify.h"

#include <filesystem>

#include "fidelity/pairs.h"
#include "report/html_report.h"
#include "report/run_dir.h"

namespace llmtap::fidelity {

bool Recertify(const std::string& run, const std::vector<std::string>& floor_paths,
               const Options& options, bool write, nlohmann::json* out, std::string* error) {
  // The pairs first: they are what is judged (and what a wrong directory lacks).
  std::filesystem::path base(run);
  if (base.filename() == report::kSummaryFile) base = base.parent_path();
  PairFile pairs;
  if (!ReadPairFile((base / kPairsFile).string(), &pairs, error)) {
    *error += " (not the --out directory of a replay with an outcomes sidecar?)";
    return false;
  }
  if (pairs.pairs.empty()) {
    *error = (base / kPairsFile).string() +
             ": no fidelity pairs (a replay with --out and the trace's outcomes sidecar writes "
             "them)";
    return false;
  }
  FloorRuns floor;
  if (!floor.Load(floor_paths, error)) return false;
  *out = BuildCertificate(pairs, floor.floor(), options);
  if (!write) return true;
  report::RunDir dir;
  if (!report::LoadRun(base.string(), true, &dir, error)) return false;
  dir.summary["fidelity"] = *out;
  return report::WriteFileAtomically((base / kCertificateFile).string(), out->dump(2) + "\n",
                                     error) &&
         report::WriteFileAtomically((base / report::kSummaryFile).string(),
                                     dir.summary.dump(2) + "\n", error) &&
         report::WriteFileAtomically((base / report::kReportFile).string(),
                                     report::RenderHtmlReport(dir.summary, dir.requests), error);
}

}  // namespace llmtap::fidelity
