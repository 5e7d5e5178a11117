// Mix64: splitmix64's finalizer, a bijective 64-bit mix whose every output bit depends on every
// input bit. For hashing and seeding, never for cryptography.
#pragma once

#include <cstdint>

namespace llmtap {

constexpr uint64_t Mix64(uint64_t x) {
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ULL;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebULL;
  x ^= x >> 31;
  return x;
}

// The threshold under which a uniform 64-bit draw picks with probability `rate` (sampling): 0
// for rate <= 0 (never), UINT64_MAX for rate >= 1 (callers take that as always).
constexpr uint64_t SampleThreshold(double rate) {
  if (rate <= 0.0) return 0;
  if (rate >= 1.0) return UINT64_MAX;
  return static_cast<uint64_t>(rate * 18446744073709551616.0);  // rate * 2^64
}

}  // namespace llmtap
