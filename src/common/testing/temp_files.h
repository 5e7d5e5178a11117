// Temporary files and directories for tests, removed with everything in them when they go out
// of scope (also when an assertion ends the test early): TempDir, a fresh directory from
// mkdtemp that a test writes its files into, and TempFile, one file holding given text. Either
// throws std::system_error when it cannot be made, which fails and ends the test.
// Used by the unit tests of capture (also against S3), store, proxy, sessions, replay,
// tokenizer, trace and anonymize (through trace/trace_test_util.h) and by tests/report, instead
// of each writing its own.
#pragma once

#include <stdlib.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>

namespace llmtap::testing {

// A new, empty directory under the system's temporary directory ($TMPDIR, else /tmp).
class TempDir {
 public:
  TempDir() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "llmtap_test_XXXXXX").string();
    if (::mkdtemp(tmpl.data()) == nullptr) {
      throw std::system_error(errno, std::generic_category(), "mkdtemp " + tmpl);
    }
    path_ = tmpl;
  }
  TempDir(TempDir&& other) noexcept : path_(std::exchange(other.path_, {})) {}
  TempDir& operator=(TempDir&&) = delete;
  ~TempDir() {
    std::error_code ignored;
    if (!path_.empty()) std::filesystem::remove_all(path_, ignored);
  }

  const std::string& path() const { return path_; }
  // The path of `name` in the directory (which need not exist).
  std::string File(const std::string& name) const { return path_ + "/" + name; }
  // Writes `content` to `name` in the directory, byte for byte; returns its path.
  std::string Write(const std::string& name, std::string_view content) const {
    std::string p = File(name);
    std::ofstream(p, std::ios::binary) << content;
    return p;
  }

 private:
  std::string path_;
};

// The whole of the file at `path`, byte for byte ("" when it cannot be read).
inline std::string ReadFile(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// A new file under the system's temporary directory holding `text`.
class TempFile {
 public:
  explicit TempFile(std::string_view text) {
    std::string tmpl = (std::filesystem::temp_directory_path() / "llmtap_test_XXXXXX").string();
    int fd = ::mkstemp(tmpl.data());
    if (fd < 0) throw std::system_error(errno, std::generic_category(), "mkstemp " + tmpl);
    ::close(fd);
    path_ = tmpl;
    std::ofstream(path_, std::ios::binary) << text;
  }
  TempFile(TempFile&& other) noexcept : path_(std::exchange(other.path_, {})) {}
  TempFile& operator=(TempFile&&) = delete;
  ~TempFile() {
    if (!path_.empty()) ::unlink(path_.c_str());
  }

  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

}  // namespace llmtap::testing
