// Status: the outcome of an operation that can fail, LevelDB style. Errors are returned,
// never thrown across threads. A Status is a value; any thread may create or read its own.
#pragma once

#include <string>
#include <string_view>
#include <utility>

namespace llmtap {

class Status {
 public:
  enum class Code { kOk, kNotFound, kInvalidArgument, kIoError, kRefused };

  Status() = default;
  static Status Ok() { return Status(); }
  static Status NotFound(std::string msg, int err = 0) {
    return Status(Code::kNotFound, std::move(msg), err);
  }
  static Status InvalidArgument(std::string msg) {
    return Status(Code::kInvalidArgument, std::move(msg), 0);
  }
  // An operating-system error; `err` is the errno value (0 if none).
  static Status IoError(std::string msg, int err = 0) {
    return Status(Code::kIoError, std::move(msg), err);
  }
  // The operation was refused on purpose (for example a symlink at a capture path).
  static Status Refused(std::string msg) { return Status(Code::kRefused, std::move(msg), 0); }

  bool ok() const { return code_ == Code::kOk; }
  Code code() const { return code_; }
  int err() const { return err_; }
  const std::string& message() const { return message_; }
  // "message: strerror(err)" or just the message.
  std::string ToString() const;

 private:
  Status(Code code, std::string msg, int err) : code_(code), err_(err), message_(std::move(msg)) {}
  Code code_ = Code::kOk;
  int err_ = 0;
  std::string message_;
};

}  // namespace llmtap
