// CoarseNow(): the cached monotonic clock (CLOCK_MONOTONIC_COARSE) as a steady_clock time point,
// for deadlines that need only millisecond precision: idle and I/O timeouts, the age of a pooled
// connection. It is cheaper to read than steady_clock::now() (no hardware counter read) and
// shares its epoch (both are CLOCK_MONOTONIC on Linux), so the two can be compared and mixed.
// It lags the precise clock by at most one kernel tick (1-10 ms): a deadline measured from it
// passes at most a tick early, and a timer that fired at a coarse deadline may not see it passed
// on this clock yet (check expiry with steady_clock::now(), as net/watchdog.h does).
//
// Threads: any thread; no state.
#pragma once

#include <time.h>

#include <chrono>

namespace llmtap {

inline std::chrono::steady_clock::time_point CoarseNow() noexcept {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
  return std::chrono::steady_clock::time_point(std::chrono::seconds(ts.tv_sec) +
                                               std::chrono::nanoseconds(ts.tv_nsec));
}

}  // namespace llmtap
