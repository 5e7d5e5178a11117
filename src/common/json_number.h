// Numbers as the JSON lines llmtap writes them (outcomes, pairs, replay records): integers, counts
// that may be unknown (negative: null), and durations in microseconds written as milliseconds
// with three decimals ("35.214"). Append to `out`; no locale, no allocation beyond `out`.
#pragma once

#include <charconv>
#include <cstdint>
#include <string>

namespace llmtap {

inline void AppendJsonInt(int64_t v, std::string* out) {
  char buf[24];
  out->append(buf, static_cast<size_t>(std::to_chars(buf, buf + sizeof buf, v).ptr - buf));
}

// v, or null when negative (unknown).
inline void AppendJsonCountOrNull(int64_t v, std::string* out) {
  if (v < 0) {
    out->append("null");
  } else {
    AppendJsonInt(v, out);
  }
}

// Microseconds as milliseconds with three decimals, or null when negative (unknown).
inline void AppendJsonMillisOrNull(int64_t us, std::string* out) {
  if (us < 0) {
    out->append("null");
    return;
  }
  AppendJsonInt(us / 1000, out);
  const char frac[4] = {'.', static_cast<char>('0' + us % 1000 / 100),
                        static_cast<char>('0' + us % 100 / 10), static_cast<char>('0' + us % 10)};
  out->append(frac, 4);
}

}  // namespace llmtap
