// A small deterministic random number generator (splitmix64). Not thread-safe: one per request.
#pragma once

#include <cmath>
#include <cstdint>

#include "sim/text.h"

namespace llmtap::sim {

class Rng {
 public:
  explicit Rng(uint64_t seed) : state_(seed) {}
  uint64_t Next() {
    state_ += 0x9e3779b97f4a7c15ULL;
    return Mix64(state_);
  }
  // Uniform in [0, 1).
  double Uniform() { return static_cast<double>(Next() >> 11) * 0x1.0p-53; }
  // Uniform integer in [0, n), n > 0.
  uint64_t Below(uint64_t n) { return Next() % n; }
  // Standard normal (Box-Muller; the second value is discarded to keep the state simple).
  double Normal() {
    const double u1 = 1.0 - Uniform();  // (0, 1]
    const double u2 = Uniform();
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
  }
  uint64_t state() const { return state_; }

 private:
  uint64_t state_;
};

}  // namespace llmtap::sim
