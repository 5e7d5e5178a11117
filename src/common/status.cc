#include "common/status.h"

#include <cstring>

namespace llmtap {

std::string Status::ToString() const {
  if (ok()) return "OK";
  if (err_ == 0) return message_;
  return message_ + ": " + std::strerror(err_);
}

}  // namespace llmtap
