// Env: every file and clock access of the capture core (and of any code that wants its faults
// testable) goes through this seam, so tests can inject a stalled, slow or full disk and short
// writes (LevelDB's Env is the model). Part of the project's base, with Status and the logger.
//
// Env::Default() is the POSIX implementation; it is thread-safe and never destroyed.
// An AppendFile is used by one thread at a time.
#pragma once

#include <sys/types.h>
#include <sys/uio.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "common/status.h"

namespace llmtap {

// The result of one write(2)-like call: bytes written (possibly fewer than asked), or
// -1 with `err` holding the errno value (EINTR, ENOSPC, EIO, ...).
struct WriteResult {
  ssize_t written;
  int err;
};

class AppendFile {
 public:
  virtual ~AppendFile() = default;
  // One write(2) at the end of the file. May write less than `size`; may fail with EINTR.
  virtual WriteResult Write(const char* data, size_t size) = 0;
  // One writev(2) at the end of the file, with the same partial-write and EINTR behaviour.
  virtual WriteResult Writev(const struct iovec* iov, int count) = 0;
  // Cuts the file to `size` bytes (used to remove a partly written record).
  virtual Status Truncate(uint64_t size) = 0;
  virtual Status Sync() = 0;
  // Current size from fstat.
  virtual Status Size(uint64_t* size) = 0;
  // fstat of the open file: `exists` is false once it has no name left (deleted).
  virtual Status Stat(struct FileInfo* info) = 0;
};

struct FileInfo {
  bool exists = false;
  bool is_symlink = false;
  bool is_regular = false;
  uint64_t size = 0;
  mode_t mode = 0;
  uint64_t device = 0;  // with `inode`, tells whether two names are one file
  uint64_t inode = 0;
  int64_t modified_wall_nanos = 0;  // mtime, ns since the Unix epoch
};

class Env {
 public:
  virtual ~Env() = default;
  static Env* Default();

  // Monotonic clock, nanoseconds from an arbitrary origin.
  virtual int64_t NowMonotonicNanos() = 0;
  // Wall clock, nanoseconds since the Unix epoch.
  virtual int64_t NowWallNanos() = 0;

  // Creates `dir` and any missing parents with `mode`; existing directories are left alone.
  virtual Status CreateDirs(const std::string& dir, mode_t mode) = 0;
  // lstat(2): does not follow a symlink at `path`.
  virtual Status Stat(const std::string& path, FileInfo* info) = 0;
  // Opens `path` for appending: O_WRONLY|O_CREAT|O_APPEND|O_CLOEXEC|O_NOFOLLOW, mode 0600
  // for a new file. Fails (Refused) on a symlink or a non-regular file.
  virtual Status OpenAppend(const std::string& path, std::unique_ptr<AppendFile>* file) = 0;
  // Reads up to `max_bytes` from the end of the file.
  virtual Status ReadTail(const std::string& path, size_t max_bytes, std::string* tail) = 0;
  virtual Status Truncate(const std::string& path, uint64_t size) = 0;
  // rename(2) that refuses to replace an existing `to`.
  virtual Status RenameNoReplace(const std::string& from, const std::string& to) = 0;
  // unlink(2); NotFound when there is nothing at `path`.
  virtual Status RemoveFile(const std::string& path) = 0;
  // Writes `contents` to a temp file beside `path` (mode 0600), fsyncs it and renames it
  // over `path`: readers see the old or the new file, never a torn one.
  virtual Status WriteFileAtomic(const std::string& path, std::string_view contents) = 0;
  // Is the directory writable by this process (access(2) W_OK|X_OK)?
  virtual Status CheckWritableDir(const std::string& dir) = 0;
  virtual std::string HostName() = 0;
  virtual int ProcessId() = 0;
};

}  // namespace llmtap
