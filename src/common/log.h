// The project's logging seam: the capture core, the proxy, the sim and the tools log through a
// Logger so that embedders and tests can take the lines. Nothing logs payload content: every
// message is built from configuration, counters, paths and error codes only.
//
// Logger implementations must be safe to call from any thread.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <mutex>
#include <string>
#include <string_view>

namespace llmtap {

enum class LogLevel { kInfo, kWarning, kError };

std::string_view LogLevelName(LogLevel level);

class Logger {
 public:
  virtual ~Logger() = default;
  virtual void Log(LogLevel level, std::string_view message) = 0;

  // Process-wide logger writing to stderr through spdlog. Never destroyed.
  static Logger* Stderr();
};

// Limits one kind of warning to one line per interval. The first occurrence is logged at
// once; later ones within the interval are counted and reported with the next line, for
// example "request larger than max_request_bytes, not recorded (37 more since last report)".
// Thread-safe; Hit() is lock-free when it does not log.
class RateLimitedWarning {
 public:
  RateLimitedWarning(Logger* logger, std::chrono::nanoseconds interval)
      : logger_(logger), interval_ns_(interval.count()) {}

  // `now_ns` is a monotonic clock reading. `make_message()` returns the line (a string
  // without payload content); it is called only when a line is actually logged, so a
  // suppressed warning costs two atomic operations. Never throws.
  template <typename MakeMessage>
  void Hit(int64_t now_ns, MakeMessage&& make_message) noexcept {
    uint64_t more = 0;
    if (!Acquire(now_ns, &more)) return;
    try {
      Emit(make_message(), more);
    } catch (...) {
      // Logging must never fail the request path.
    }
  }

 private:
  bool Acquire(int64_t now_ns, uint64_t* suppressed) noexcept;
  void Emit(const std::string& message, uint64_t suppressed);

  Logger* logger_;
  int64_t interval_ns_;
  std::atomic<int64_t> next_allowed_ns_{INT64_MIN};
  std::atomic<uint64_t> suppressed_{0};
};

}  // namespace llmtap
