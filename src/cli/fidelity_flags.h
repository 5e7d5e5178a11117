// The replay-fidelity certificate's judging flags, shared by `llmtap replay` (prefixed
// --fidelity-) and `llmtap fidelity` (unprefixed): the tolerances, the equal shares and the gates.
#pragma once

#include <string>

#include <CLI/CLI.hpp>

#include "fidelity/certificate.h"

namespace llmtap::cli {

struct FidelityFlags {
  std::string timing, points, equal_share, prompt_equal_share, gates;
  size_t min_pairs = fidelity::Options().min_pairs;
};

// Adds --<prefix>tolerance, --<prefix>points, --<prefix>equal-share,
// --<prefix>prompt-equal-share, --<prefix>min-pairs and --<prefix>gates to `cmd`.
void AddFidelityFlags(CLI::App* cmd, const std::string& prefix, FidelityFlags* flags);

// Fills `options` from the flags given; exits through FailUsage(who, ...) on a bad value.
void ApplyFidelityFlags(const FidelityFlags& flags, const std::string& prefix, const char* who,
                        fidelity::Options* options);

}  // namespace llmtap::cli
