// POSIX implementation of Env.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <ctime>
#include <string>

#include "common/env.h"

namespace llmtap {
namespace {

int64_t ClockNanos(clockid_t clock) {
  timespec ts;
  clock_gettime(clock, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

void FillFileInfo(const struct stat& st, FileInfo* info) {
  info->exists = true;
  info->is_symlink = S_ISLNK(st.st_mode);
  info->is_regular = S_ISREG(st.st_mode);
  info->size = static_cast<uint64_t>(st.st_size);
  info->mode = st.st_mode & 07777;
  info->device = static_cast<uint64_t>(st.st_dev);
  info->inode = static_cast<uint64_t>(st.st_ino);
  info->modified_wall_nanos =
      static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
}

class PosixAppendFile final : public AppendFile {
 public:
  PosixAppendFile(int fd, std::string path) : fd_(fd), path_(std::move(path)) {}
  ~PosixAppendFile() override { ::close(fd_); }

  WriteResult Write(const char* data, size_t size) override {
    ssize_t n = ::write(fd_, data, size);
    return {n, n < 0 ? errno : 0};
  }
  WriteResult Writev(const struct iovec* iov, int count) override {
    ssize_t n = ::writev(fd_, iov, count);
    return {n, n < 0 ? errno : 0};
  }
  Status Truncate(uint64_t size) override {
    if (::ftruncate(fd_, static_cast<off_t>(size)) != 0) {
      return Status::IoError("cannot truncate " + path_, errno);
    }
    return Status::Ok();
  }
  Status Sync() override {
    if (::fdatasync(fd_) != 0) return Status::IoError("cannot sync " + path_, errno);
    return Status::Ok();
  }
  Status Size(uint64_t* size) override {
    struct stat st;
    if (::fstat(fd_, &st) != 0) return Status::IoError("cannot stat " + path_, errno);
    *size = static_cast<uint64_t>(st.st_size);
    return Status::Ok();
  }
  Status Stat(FileInfo* info) override {
    struct stat st;
    if (::fstat(fd_, &st) != 0) return Status::IoError("cannot stat " + path_, errno);
    FillFileInfo(st, info);
    info->exists = st.st_nlink > 0;
    return Status::Ok();
  }

 private:
  int fd_;
  std::string path_;
};

class PosixEnv final : public Env {
 public:
  int64_t NowMonotonicNanos() override { return ClockNanos(CLOCK_MONOTONIC); }
  int64_t NowWallNanos() override { return ClockNanos(CLOCK_REALTIME); }

  Status CreateDirs(const std::string& dir, mode_t mode) override {
    if (dir.empty()) return Status::Ok();
    // Walk each prefix ending at a '/', then the whole path.
    for (size_t pos = 1; pos <= dir.size(); ++pos) {
      if (pos != dir.size() && dir[pos] != '/') continue;
      std::string prefix = dir.substr(0, pos);
      if (::mkdir(prefix.c_str(), mode) != 0 && errno != EEXIST) {
        return Status::IoError("cannot create directory " + prefix, errno);
      }
    }
    struct stat st;
    if (::stat(dir.c_str(), &st) != 0) return Status::IoError("cannot stat " + dir, errno);
    if (!S_ISDIR(st.st_mode)) return Status::IoError(dir + " is not a directory", ENOTDIR);
    return Status::Ok();
  }

  Status Stat(const std::string& path, FileInfo* info) override {
    *info = FileInfo();
    struct stat st;
    if (::lstat(path.c_str(), &st) != 0) {
      if (errno == ENOENT) return Status::Ok();
      return Status::IoError("cannot stat " + path, errno);
    }
    FillFileInfo(st, info);
    return Status::Ok();
  }

  Status OpenAppend(const std::string& path, std::unique_ptr<AppendFile>* file) override {
    int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd < 0) {
      if (errno == ELOOP) {
        return Status::Refused("refusing to write capture through the symlink at " + path);
      }
      return Status::IoError("cannot open " + path, errno);
    }
    struct stat st;
    if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
      ::close(fd);
      return Status::Refused(path + " is not a regular file");
    }
    file->reset(new PosixAppendFile(fd, path));
    return Status::Ok();
  }

  Status ReadTail(const std::string& path, size_t max_bytes, std::string* tail) override {
    tail->clear();
    int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0) return Status::IoError("cannot open " + path, errno);
    struct stat st;
    Status s;
    if (::fstat(fd, &st) != 0) {
      s = Status::IoError("cannot stat " + path, errno);
    } else {
      size_t n = std::min<size_t>(max_bytes, static_cast<size_t>(st.st_size));
      tail->resize(n);
      size_t done = 0;
      off_t off = st.st_size - static_cast<off_t>(n);
      while (done < n) {
        ssize_t r = ::pread(fd, tail->data() + done, n - done, off + static_cast<off_t>(done));
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) {
          s = Status::IoError("cannot read " + path, r < 0 ? errno : EIO);
          break;
        }
        done += static_cast<size_t>(r);
      }
    }
    ::close(fd);
    return s;
  }

  Status Truncate(const std::string& path, uint64_t size) override {
    if (::truncate(path.c_str(), static_cast<off_t>(size)) != 0) {
      return Status::IoError("cannot truncate " + path, errno);
    }
    return Status::Ok();
  }

  Status RenameNoReplace(const std::string& from, const std::string& to) override {
    // link + unlink never replaces `to`; rename(2) alone would.
    if (::link(from.c_str(), to.c_str()) != 0) {
      return Status::IoError("cannot rename " + from + " to " + to, errno);
    }
    if (::unlink(from.c_str()) != 0) {
      int err = errno;
      ::unlink(to.c_str());
      return Status::IoError("cannot rename " + from + " to " + to, err);
    }
    return Status::Ok();
  }

  Status RemoveFile(const std::string& path) override {
    if (::unlink(path.c_str()) != 0) {
      int err = errno;
      return err == ENOENT ? Status::NotFound("cannot remove " + path, err)
                           : Status::IoError("cannot remove " + path, err);
    }
    return Status::Ok();
  }

  Status WriteFileAtomic(const std::string& path, std::string_view contents) override {
    std::string tmp = path + ".tmp." + std::to_string(::getpid());
    int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd < 0) return Status::IoError("cannot create " + tmp, errno);
    size_t done = 0;
    while (done < contents.size()) {
      ssize_t n = ::write(fd, contents.data() + done, contents.size() - done);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) {
        int err = errno;
        ::close(fd);
        ::unlink(tmp.c_str());
        return Status::IoError("cannot write " + tmp, err);
      }
      done += static_cast<size_t>(n);
    }
    int sync_err = ::fdatasync(fd) != 0 ? errno : 0;
    if (::close(fd) != 0 && sync_err == 0) sync_err = errno;
    if (sync_err != 0) {
      ::unlink(tmp.c_str());
      return Status::IoError("cannot sync " + tmp, sync_err);
    }
    if (::rename(tmp.c_str(), path.c_str()) != 0) {
      int err = errno;
      ::unlink(tmp.c_str());
      return Status::IoError("cannot rename " + tmp + " to " + path, err);
    }
    return Status::Ok();
  }

  Status CheckWritableDir(const std::string& dir) override {
    if (::access(dir.c_str(), W_OK | X_OK) != 0) {
      return Status::IoError("directory " + dir + " is not writable", errno);
    }
    return Status::Ok();
  }

  std::string HostName() override {
    char buf[256] = {};
    if (::gethostname(buf, sizeof(buf) - 1) != 0) return "unknown";
    return buf;
  }

  int ProcessId() override { return static_cast<int>(::getpid()); }
};

}  // namespace

Env* Env::Default() {
  static Env* const env = new PosixEnv();
  return env;
}

}  // namespace llmtap
