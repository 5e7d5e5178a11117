#include "fidelity/recertify.h"

#include <filesystem>

#include "fidelity/pairs.h"
#include "report/html_report.h"
#include "report/run_dir.h"

namespace llmtap::fidelity {

bool Recertify(const std::string& run, const std::vector<std::string>& floor_paths,
               const Options& options, bool write, nlohmann::json* out, std::string* error) {
  report::RunDir dir;
  if (!report::LoadRun(run, write, &dir, error)) return false;
  const std::filesystem::path base(dir.dir);
  PairFile pairs;
  if (!ReadPairFile((base / kPairsFile).string(), &pairs, error)) return false;
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
  dir.summary["fidelity"] = *out;
  return report::WriteFileAtomically((base / kCertificateFile).string(), out->dump(2) + "\n",
                                     error) &&
         report::WriteFileAtomically((base / report::kSummaryFile).string(),
                                     dir.summary.dump(2) + "\n", error) &&
         report::WriteFileAtomically((base / report::kReportFile).string(),
                                     report::RenderHtmlReport(dir.summary, dir.requests), error);
}

}  // namespace llmtap::fidelity
