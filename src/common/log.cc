#include "common/log.h"

#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

namespace llmtap {

std::string_view LogLevelName(LogLevel level) {
  switch (level) {
    case LogLevel::kInfo:
      return "info";
    case LogLevel::kWarning:
      return "warning";
    case LogLevel::kError:
      return "error";
  }
  return "?";
}

namespace {

class SpdlogStderr final : public Logger {
 public:
  SpdlogStderr() : logger_(spdlog::stderr_color_mt("llmtap")) {
    logger_->set_pattern("%Y-%m-%dT%H:%M:%S.%eZ llmtap %l: %v", spdlog::pattern_time_type::utc);
  }
  void Log(LogLevel level, std::string_view message) override {
    switch (level) {
      case LogLevel::kInfo:
        logger_->info("{}", message);
        break;
      case LogLevel::kWarning:
        logger_->warn("{}", message);
        break;
      case LogLevel::kError:
        logger_->error("{}", message);
        break;
    }
  }

 private:
  std::shared_ptr<spdlog::logger> logger_;
};

}  // namespace

Logger* Logger::Stderr() {
  static Logger* const logger = new SpdlogStderr();
  return logger;
}

bool RateLimitedWarning::Acquire(int64_t now_ns, uint64_t* suppressed) noexcept {
  int64_t next = next_allowed_ns_.load(std::memory_order_relaxed);
  if (now_ns < next || !next_allowed_ns_.compare_exchange_strong(next, now_ns + interval_ns_,
                                                                 std::memory_order_relaxed)) {
    suppressed_.fetch_add(1, std::memory_order_relaxed);
    return false;
  }
  *suppressed = suppressed_.exchange(0, std::memory_order_relaxed);
  return true;
}

void RateLimitedWarning::Emit(const std::string& message, uint64_t suppressed) {
  if (suppressed == 0) {
    logger_->Log(LogLevel::kWarning, message);
  } else {
    logger_->Log(LogLevel::kWarning,
                 message + " (" + std::to_string(suppressed) + " more since last report)");
  }
}

}  // namespace llmtap
