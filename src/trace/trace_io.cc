#include "trace/trace_io.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "capture/capture_file.h"
#include "capture/env.h"

namespace llmtap::trace {

OutputFile::~OutputFile() {
  if (fd_ >= 0) (void)Close();
}

Status OutputFile::Open(const std::string& path, bool force) {
  path_ = path;
  // Missing output directories are created as capture directories are: 0700, since the
  // rows hold prompts.
  if (size_t slash = path.rfind('/'); slash != std::string::npos && slash > 0) {
    Status dirs = Env::Default()->CreateDirs(path.substr(0, slash), 0700);
    if (!dirs.ok()) return dirs;
  }
  int flags = O_WRONLY | O_CREAT | O_CLOEXEC | O_NOFOLLOW | (force ? O_TRUNC : O_EXCL);
  fd_ = ::open(path.c_str(), flags, 0600);
  if (fd_ < 0) {
    int err = errno;
    if (err == EEXIST) {
      return Status::Refused(path + " already exists; pass --force to overwrite it");
    }
    if (err == ELOOP) return Status::Refused(path + " is a symlink; refusing to write through it");
    return Status::IoError("cannot create " + path, err);
  }
  buf_.reserve(kFlushBytes);
  status_ = Status::Ok();
  return status_;
}

void OutputFile::Flush() {
  size_t off = 0;
  while (off < buf_.size() && status_.ok()) {
    ssize_t n = ::write(fd_, buf_.data() + off, buf_.size() - off);
    if (n < 0) {
      if (errno == EINTR) continue;
      status_ = Status::IoError("write error in " + path_, errno);
      break;
    }
    off += static_cast<size_t>(n);
  }
  buf_.clear();
}

Status OutputFile::Close() {
  if (fd_ < 0) return status_;
  Flush();
  if (::close(fd_) != 0 && status_.ok())
    status_ = Status::IoError("close error in " + path_, errno);
  fd_ = -1;
  return status_;
}

Status CheckOutputPath(const std::string& path, bool force) {
  struct stat st;
  if (::lstat(path.c_str(), &st) != 0) return Status::Ok();
  if (S_ISLNK(st.st_mode))
    return Status::Refused(path + " is a symlink; refusing to write through it");
  if (!force) return Status::Refused(path + " already exists; pass --force to overwrite it");
  return Status::Ok();
}

std::optional<ManifestView> ReadManifestFor(const std::string& capture_path, Status* status) {
  *status = Status::Ok();
  if (capture_path == "-") return std::nullopt;
  const std::string path = ManifestPathFor(capture_path);
  std::ifstream in(path);
  if (!in) {
    struct stat st;
    if (::stat(path.c_str(), &st) == 0) *status = Status::IoError("cannot read " + path, errno);
    return std::nullopt;
  }
  std::stringstream ss;
  ss << in.rdbuf();
  nlohmann::json j = nlohmann::json::parse(ss.str(), nullptr, false);
  if (j.is_discarded() || !j.is_object()) {
    *status = Status::InvalidArgument(path + ": not a JSON object (a damaged manifest?)");
    return std::nullopt;
  }
  ManifestView m;
  m.path = path;
  if (j.contains("format") && j["format"].is_string()) m.format = j["format"];
  if (j.contains("timestamp_zero_unix_ms") && j["timestamp_zero_unix_ms"].is_number_integer()) {
    m.timestamp_zero_unix_ms = j["timestamp_zero_unix_ms"].get<int64_t>();
  }
  if (j.contains("state") && j["state"].is_string()) m.state = j["state"];
  if (j.contains("config") && j["config"].is_object() && j["config"].contains("sample_rate") &&
      j["config"]["sample_rate"].is_number()) {
    m.sample_rate = j["config"]["sample_rate"].get<double>();
    m.has_sample_rate = true;
  }
  if (j.contains("file") && j["file"].is_object() && j["file"].contains("records") &&
      j["file"]["records"].is_number_unsigned()) {
    m.file_records = j["file"]["records"].get<uint64_t>();
  }
  if (j.contains("counters") && j["counters"].is_object()) {
    for (auto& [k, v] : j["counters"].items()) {
      if (v.is_number_unsigned() || v.is_number_integer()) m.counters[k] = v.get<uint64_t>();
    }
  }
  return m;
}

Progress::Progress(std::string tool, bool force)
    : tool_(std::move(tool)), enabled_(force || ::isatty(2) == 1) {
  start_ = last_ = std::chrono::steady_clock::now();
}

namespace {
// "512.0 MB" below a gigabyte, "1.25 GB" from there.
std::string Bytes(uint64_t n) {
  char buf[32];
  if (n < 1000000000) {
    std::snprintf(buf, sizeof buf, "%.1f MB", static_cast<double>(n) / 1e6);
  } else {
    std::snprintf(buf, sizeof buf, "%.2f GB", static_cast<double>(n) / 1e9);
  }
  return buf;
}
}  // namespace

void Progress::Maybe(uint64_t done, uint64_t total) {
  auto now = std::chrono::steady_clock::now();
  if (now - last_ < std::chrono::seconds(2)) return;
  last_ = now;
  double secs = std::chrono::duration<double>(now - start_).count();
  double mb_s = secs > 0 ? static_cast<double>(done) / 1e6 / secs : 0.0;
  if (total > 0) {
    std::fprintf(stderr, "%s: %s of %s (%.0f%%), %.1f MB/s\n", tool_.c_str(), Bytes(done).c_str(),
                 Bytes(total).c_str(), 100.0 * static_cast<double>(done) / static_cast<double>(total),
                 mb_s);
  } else {
    std::fprintf(stderr, "%s: %s, %.1f MB/s\n", tool_.c_str(), Bytes(done).c_str(), mb_s);
  }
  printed_ = true;
}

void Progress::Finish() {
  if (printed_) std::fprintf(stderr, "%s: done\n", tool_.c_str());
}

std::string DerivedPath(const std::string& in, const std::string& out_dir,
                        std::string_view suffix) {
  std::string dir, base = in;
  size_t slash = in.rfind('/');
  if (slash != std::string::npos) {
    dir = in.substr(0, slash + 1);
    base = in.substr(slash + 1);
  }
  if (base.size() > 6 && base.ends_with(".jsonl")) base.resize(base.size() - 6);
  if (base == "-" || base.empty()) base = "stdin";
  if (!out_dir.empty()) dir = out_dir.back() == '/' ? out_dir : out_dir + "/";
  return dir + base + "." + std::string(suffix) + ".jsonl";
}

}  // namespace llmtap::trace
