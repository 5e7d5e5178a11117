// FindEither: the first of two byte values in a range, 16 bytes at a time (SSE2; 8 at a time
// with plain 64-bit words elsewhere). The inner loop of the SSE framer (net/sse.h) and of the
// proxy's UsageScanner strings. A pure function; any thread may call it.
#pragma once

#include <bit>
#include <cstdint>
#include <cstring>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

namespace llmtap::net {

// The first byte in [p, end) equal to a or b, or end.
inline const char* FindEither(const char* p, const char* end, char a, char b) {
#if defined(__SSE2__)
  const __m128i va = _mm_set1_epi8(a);
  const __m128i vb = _mm_set1_epi8(b);
  while (end - p >= 16) {
    const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
    const int mask = _mm_movemask_epi8(_mm_or_si128(_mm_cmpeq_epi8(v, va), _mm_cmpeq_epi8(v, vb)));
    if (mask != 0) return p + std::countr_zero(static_cast<unsigned>(mask));
    p += 16;
  }
#else
  if constexpr (std::endian::native == std::endian::little) {
    // Bytes equal to a or b become zero after the xor; the first zero byte is found exactly
    // (borrows only ever mark bytes above it).
    constexpr uint64_t kOnes = 0x0101010101010101ull;
    constexpr uint64_t kHighs = 0x8080808080808080ull;
    const uint64_t ma = kOnes * static_cast<uint8_t>(a);
    const uint64_t mb = kOnes * static_cast<uint8_t>(b);
    while (end - p >= 8) {
      uint64_t w;
      std::memcpy(&w, p, 8);
      const uint64_t xa = w ^ ma;
      const uint64_t xb = w ^ mb;
      const uint64_t hits = (((xa - kOnes) & ~xa) | ((xb - kOnes) & ~xb)) & kHighs;
      if (hits != 0) return p + (std::countr_zero(hits) >> 3);
      p += 8;
    }
  }
#endif
  while (p < end && *p != a && *p != b) ++p;
  return p;
}

}  // namespace llmtap::net
