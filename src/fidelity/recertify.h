// `llmtap fidelity RUN [FLOOR]`: the certificate of a replay's output directory judged again,
// with an A/A floor (the fidelity pairs of a second replay of the same trace) or other
// thresholds: RUN/fidelity.json, summary.json's "fidelity" and report.html rewritten.
//
// One call per thread.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "fidelity/certificate.h"

namespace llmtap::fidelity {

// `run`: a replay's --out directory holding fidelity-pairs.ndjson (local or s3://). `floor`: none,
// one or two run directories or pairs files (FloorRuns). Writes the files unless `write` is
// false (then only *out). False with `error` naming the file.
bool Recertify(const std::string& run, const std::vector<std::string>& floor,
               const Options& options, bool write, nlohmann::json* out, std::string* error);

}  // namespace llmtap::fidelity
