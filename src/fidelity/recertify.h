// `llmtap fidelity RUN [FLOOR]`: the certificate of a replay's output directory judged again,
// with an A/A floor (the fidelity pairs of a second replay of the same trace) or other
// thresholds: RUN/fidelity.json, summary.json's "fidelity" and report.html rewritten.
//
// One call per thread.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "fidelity/certificate.h"

namespace llmtap::fidelity {

// `run`: a replay's --out directory holding fidelity-pairs.ndjson (local or s3://). `floor`: ""
// (none), another run directory or a pairs file. Writes the files unless `write` is false (then
// only *out). False with `error` naming the file.
bool Recertify(const std::string& run, const std::string& floor, const Options& options,
               bool write, nlohmann::json* out, std::string* error);

}  // namespace llmtap::fidelity
