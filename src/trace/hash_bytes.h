// The trace tools' fast 64-bit hash (internal to llmtap_trace): stats' prefix-reuse tables and
// every per-session table (sessions are kept by the hash of their id, never by the id).
#pragma once

#include <cstdint>
#include <cstring>
#include <string_view>

namespace llmtap::trace {

// A fast non-cryptographic hash: four independent 8-byte lanes per step, so the multiplies
// overlap. Collisions only blur statistics.
inline uint64_t Mix(uint64_t h, uint64_t w) {
  h = (h ^ w) * 0xbf58476d1ce4e5b9ull;
  return h ^ (h >> 31);
}

inline uint64_t HashBytes(std::string_view s, uint64_t h) {
  const char* p = s.data();
  size_t n = s.size();
  uint64_t a = h ^ (n * 0x9E3779B97F4A7C15ull), b = a + 1, c = a + 2, d = a + 3;
  while (n >= 32) {
    uint64_t w[4];
    std::memcpy(w, p, 32);
    a = Mix(a, w[0]);
    b = Mix(b, w[1]);
    c = Mix(c, w[2]);
    d = Mix(d, w[3]);
    p += 32;
    n -= 32;
  }
  while (n >= 8) {
    uint64_t w;
    std::memcpy(&w, p, 8);
    a = Mix(a, w);
    p += 8;
    n -= 8;
  }
  uint64_t w = 0;
  std::memcpy(&w, p, n);
  a = Mix(a, w);
  return Mix(Mix(Mix(a, b), c), d);
}

// A session id's key in a per-session table. Two ids that collide are counted as one session
// (about one chance in 2^64 / sessions^2).
inline uint64_t HashSessionId(std::string_view id) { return HashBytes(id, 0x5e55); }

}  // namespace llmtap::trace
