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

}  // namespace llmtap
