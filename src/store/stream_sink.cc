// The byte sinks of stream.h: private local files, s3:// objects (multipart, written as they
// fill) and zstd encoding over either.
#include "store/stream.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zstd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <thread>
#include <vector>

#include "store/s3_client.h"
#include "store/s3_url.h"

namespace llmtap::store {

Status WriteToFd(int fd, std::string_view data, const char* what, const std::string& path) {
  size_t off = 0;
  while (off < data.size()) {
    ssize_t n = ::write(fd, data.data() + off, data.size() - off);
    if (n < 0) {
      if (errno == EINTR) continue;
      return Status::IoError(what + path, errno);
    }
    off += static_cast<size_t>(n);
  }
  return Status::Ok();
}

namespace {

class FdSink : public ByteSink {
 public:
  FdSink(std::string path, int fd, bool sync) : path_(std::move(path)), fd_(fd), sync_(sync) {}
  ~FdSink() override {
    if (fd_ >= 0) ::close(fd_);
  }
  Status Write(std::string_view data) override {
    if (status_.ok()) status_ = WriteToFd(fd_, data, "write error in ", path_);
    return status_;
  }
  Status Close() override {
    if (fd_ < 0) return status_;
    if (sync_ && status_.ok() && ::fsync(fd_) != 0) status_ = Status::IoError("fsync of " + path_, errno);
    if (::close(fd_) != 0 && status_.ok()) status_ = Status::IoError("close error in " + path_, errno);
    fd_ = -1;
    return status_;
  }

 private:
  std::string path_;
  int fd_;
  bool sync_;
  Status status_;
};

// An s3:// object written as it comes: one PUT when it fits in one part, else a multipart
// upload whose parts are retried; aborted when the sink is dropped before Close.
class S3Sink : public ByteSink {
 public:
  S3Sink(std::unique_ptr<S3Client> client, S3Url url, size_t part_bytes)
      : client_(std::move(client)), url_(std::move(url)),
        part_bytes_(std::max<size_t>(part_bytes, size_t{5} << 20)) {
    buf_.reserve(part_bytes_);
  }
  ~S3Sink() override {
    if (!closed_ && !upload_id_.empty()) {
      (void)client_->AbortMultipartUpload(url_.bucket, url_.key, upload_id_);
    }
  }
  Status Write(std::string_view data) override {
    while (!data.empty() && status_.ok()) {
      const size_t k = std::min(data.size(), part_bytes_ - buf_.size());
      buf_.append(data.data(), k);
      data.remove_prefix(k);
      if (buf_.size() == part_bytes_) status_ = SendPart();
    }
    return status_;
  }
  Status Close() override {
    if (closed_) return status_;
    if (status_.ok()) {
      if (upload_id_.empty()) {
        status_ = Retry([&] { return client_->PutObject(url_.bucket, url_.key, buf_); });
      } else {
        if (!buf_.empty()) status_ = SendPart();
        if (status_.ok()) {
          status_ = Retry([&] {
            return client_->CompleteMultipartUpload(url_.bucket, url_.key, upload_id_, parts_);
          });
        }
      }
    }
    if (!status_.ok() && !upload_id_.empty()) {
      (void)client_->AbortMultipartUpload(url_.bucket, url_.key, upload_id_);
    }
    closed_ = true;
    return status_;
  }

 private:
  template <typename F>
  Status Retry(F&& f) {
    Status s;
    for (int attempt = 0; attempt < 4; ++attempt) {
      if (attempt > 0) std::this_thread::sleep_for(std::chrono::milliseconds(200 << attempt));
      s = f();
      if (s.ok() || s.code() == Status::Code::kNotFound || s.code() == Status::Code::kRefused) break;
    }
    return s;
  }
  Status SendPart() {
    Status s;
    if (upload_id_.empty()) {
      s = Retry([&] { return client_->CreateMultipartUpload(url_.bucket, url_.key, &upload_id_); });
      if (!s.ok()) return s;
    }
    S3Part part;
    part.number = static_cast<int>(parts_.size()) + 1;
    s = Retry([&] {
      return client_->UploadPart(url_.bucket, url_.key, upload_id_, part.number, buf_, &part.etag);
    });
    if (!s.ok()) return s;
    parts_.push_back(std::move(part));
    buf_.clear();
    return Status::Ok();
  }

  std::unique_ptr<S3Client> client_;
  S3Url url_;
  size_t part_bytes_;
  std::string buf_;
  std::string upload_id_;
  std::vector<S3Part> parts_;
  Status status_;
  bool closed_ = false;
};

class ZstdSink : public ByteSink {
 public:
  ZstdSink(std::unique_ptr<ByteSink> inner, std::string path, const SinkOptions& o)
      : inner_(std::move(inner)), path_(std::move(path)), out_(ZSTD_CStreamOutSize()) {
    cs_ = ZSTD_createCCtx();
    ZSTD_CCtx_setParameter(cs_, ZSTD_c_compressionLevel, o.zstd_level);
    ZSTD_CCtx_setParameter(cs_, ZSTD_c_checksumFlag, 1);
    if (o.zstd_window_log > 0) {
      ZSTD_CCtx_setParameter(cs_, ZSTD_c_enableLongDistanceMatching, 1);
      ZSTD_CCtx_setParameter(cs_, ZSTD_c_windowLog, o.zstd_window_log);
    }
    if (o.pledged_size > 0) ZSTD_CCtx_setPledgedSrcSize(cs_, o.pledged_size);
  }
  ~ZstdSink() override { ZSTD_freeCCtx(cs_); }
  Status Write(std::string_view data) override { return Compress(data, ZSTD_e_continue); }
  Status Close() override {
    if (closed_) return status_;
    closed_ = true;
    Status s = Compress({}, ZSTD_e_end);
    Status c = inner_->Close();
    if (s.ok()) status_ = c;
    return status_;
  }

 private:
  Status Compress(std::string_view data, ZSTD_EndDirective mode) {
    if (!status_.ok()) return status_;
    ZSTD_inBuffer in{data.data(), data.size(), 0};
    for (;;) {
      ZSTD_outBuffer out{out_.data(), out_.size(), 0};
      size_t left = ZSTD_compressStream2(cs_, &out, &in, mode);
      if (ZSTD_isError(left)) {
        status_ = Status::IoError(path_ + ": zstd compression failed (" +
                                  std::string(ZSTD_getErrorName(left)) + ")");
        return status_;
      }
      if (out.pos > 0) {
        status_ = inner_->Write(std::string_view(out_.data(), out.pos));
        if (!status_.ok()) return status_;
      }
      const bool done = mode == ZSTD_e_end ? left == 0 : in.pos == in.size;
      if (done) return status_;
    }
  }

  std::unique_ptr<ByteSink> inner_;
  std::string path_;
  ZSTD_CCtx* cs_;
  std::vector<char> out_;
  Status status_;
  bool closed_ = false;
};

Status CheckNewObject(S3Client* client, const S3Url& url, bool force) {
  Status s = client->HeadObject(url.bucket, url.key, nullptr);
  if (s.ok()) {
    if (force) return Status::Ok();
    return Status::Refused(url.ToString() + " already exists; pass --force to overwrite it");
  }
  if (s.code() != Status::Code::kNotFound) return s;
  // HEAD says 404 for a missing object and for a missing bucket alike: tell them apart now,
  // not after the data has been produced.
  return client->HeadBucket(url.bucket);
}

}  // namespace

Status CheckSinkTarget(const std::string& path, bool force) {
  if (IsS3Url(path)) {
    S3Url url;
    Status s = ParseS3Url(path, &url);
    if (!s.ok()) return s;
    S3Config config;
    s = S3Config::FromEnvironment(&config);
    if (!s.ok()) return s;
    S3Client client(config);
    return CheckNewObject(&client, url, force);
  }
  struct stat st;
  if (::lstat(path.c_str(), &st) != 0) return Status::Ok();
  if (S_ISLNK(st.st_mode)) {
    return Status::Refused(path + " is a symlink; refusing to write through it");
  }
  if (!force) return Status::Refused(path + " already exists; pass --force to overwrite it");
  return Status::Ok();
}

Status OpenSink(const std::string& path, std::unique_ptr<ByteSink>* sink,
                const SinkOptions& options) {
  std::unique_ptr<ByteSink> raw;
  if (IsS3Url(path)) {
    S3Url url;
    Status s = ParseS3Url(path, &url);
    if (!s.ok()) return s;
    if (url.key.empty() || url.key.back() == '/') {
      return Status::InvalidArgument(path + " names a prefix; give the object's full key");
    }
    S3Config config;
    s = S3Config::FromEnvironment(&config);
    if (!s.ok()) return s;
    auto client = std::make_unique<S3Client>(config);
    s = CheckNewObject(client.get(), url, options.force);
    if (!s.ok()) return s;
    raw = std::make_unique<S3Sink>(std::move(client), std::move(url), options.s3_part_bytes);
  } else {
    // Missing output directories are created as capture directories are: 0700, since the rows
    // hold prompts.
    if (size_t slash = path.rfind('/'); slash != std::string::npos && slash > 0) {
      std::string dir = path.substr(0, slash);
      for (size_t i = 1; i <= dir.size(); ++i) {
        if (i == dir.size() || dir[i] == '/') {
          std::string part = dir.substr(0, i);
          if (::mkdir(part.c_str(), 0700) != 0 && errno != EEXIST) {
            return Status::IoError("cannot create directory " + part, errno);
          }
        }
      }
    }
    int flags = O_WRONLY | O_CREAT | O_CLOEXEC | O_NOFOLLOW | (options.force ? O_TRUNC : O_EXCL);
    int fd = ::open(path.c_str(), flags, 0600);
    if (fd < 0) {
      int err = errno;
      if (err == EEXIST) {
        return Status::Refused(path + " already exists; pass --force to overwrite it");
      }
      if (err == ELOOP) return Status::Refused(path + " is a symlink; refusing to write through it");
      return Status::IoError("cannot create " + path, err);
    }
    raw = std::make_unique<FdSink>(path, fd, options.sync);
  }
  if (options.compress || path.ends_with(".zst")) {
    *sink = std::make_unique<ZstdSink>(std::move(raw), path, options);
  } else {
    *sink = std::move(raw);
  }
  return Status::Ok();
}

}  // namespace llmtap::store
