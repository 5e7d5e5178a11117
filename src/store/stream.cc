// The byte sources of stream.h: local files, standard input, s3:// objects (read ahead on a
// thread of their own) and zstd decoding over any of them; and the S3 client pool they share.
#include "store/stream.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zstd.h>

#include <algorithm>
#include <array>
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
namespace {

constexpr unsigned char kZstdMagic[4] = {0x28, 0xB5, 0x2F, 0xFD};

class FdSource : public ByteSource {
 public:
  FdSource(std::string path, int fd, bool owns, uint64_t size,
           std::function<void(std::string_view)> on_stored)
      : path_(std::move(path)), fd_(fd), owns_(owns), size_(size),
        on_stored_(std::move(on_stored)) {}
  ~FdSource() override {
    if (owns_ && fd_ >= 0) ::close(fd_);
  }
  Status Read(char* buf, size_t cap, size_t* n) override {
    for (;;) {
      ssize_t r = ::read(fd_, buf, cap);
      if (r < 0 && errno == EINTR) continue;
      if (r < 0) return Status::IoError("read error in " + path_, errno);
      *n = static_cast<size_t>(r);
      if (on_stored_ && *n > 0) on_stored_(std::string_view(buf, *n));
      position_ += *n;
      return Status::Ok();
    }
  }
  uint64_t stored_size() const override { return size_; }
  uint64_t stored_position() const override { return position_; }

 private:
  std::string path_;
  int fd_;
  bool owns_;
  uint64_t size_;
  std::function<void(std::string_view)> on_stored_;
  uint64_t position_ = 0;
};

// An s3:// object, downloaded ahead of the reader by a thread of its own into a ring buffer of
// options.s3_buffer_bytes: one GET streams the object (or s3_request_bytes of it) while the
// reader works on what came before, and waits (TCP flow control) while the buffer is full. A
// GET that fails, or that the reader leaves waiting longer than s3_park_ms, resumes later
// from the first byte not yet received, so a long read survives a store blip, no connection
// is held idle, and memory stays at the buffer whatever the object's size.
//
// Reader and downloader share `mu_`: the downloader copies into free space and the reader out
// of filled space without it, and only the counters move under it.
class S3Source : public ByteSource {
 public:
  S3Source(std::unique_ptr<S3ClientPool> own_pool, S3ClientPool* pool, S3Url url, uint64_t size,
           const SourceOptions& o)
      : own_pool_(std::move(own_pool)), pool_(pool), url_(std::move(url)), size_(size),
        request_bytes_(o.s3_request_bytes), park_(std::chrono::milliseconds(std::max(1, o.s3_park_ms))),
        attempts_(std::max(1, o.s3_attempts)), on_stored_(o.on_stored),
        cap_(std::max<size_t>(o.s3_buffer_bytes, size_t{16} << 10)),
        batch_(std::min<size_t>(cap_ / 4, size_t{1} << 20)) {
    if (size_ == 0) {
      done_ = true;
      return;
    }
    ring_.reset(new char[cap_]);
    thread_ = std::thread([this] { Download(); });
  }
  ~S3Source() override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cancel_ = true;  // a GET waiting for the store gives up at once
    space_.notify_all();
    if (thread_.joinable()) thread_.join();
  }
  Status Read(char* buf, size_t cap, size_t* n) override {
    *n = 0;
    std::unique_lock<std::mutex> lock(mu_);
    if (written_ == read_ && !done_) {
      // Woken for a batch, not for each piece the network hands over (a wake-up costs more
      // than the copy of a few KiB).
      reader_wants_ = batch_;
      data_.wait(lock, [&] { return written_ - read_ >= batch_ || done_; });
      reader_wants_ = 0;
    }
    if (written_ == read_) return error_;  // the end, or why not
    const size_t at = static_cast<size_t>(read_ % cap_);
    const size_t k = std::min<uint64_t>({cap, written_ - read_, cap_ - at});
    lock.unlock();
    std::memcpy(buf, ring_.get() + at, k);
    lock.lock();
    read_ += k;
    const bool wake = writer_wants_ > 0 && Free() >= writer_wants_;
    lock.unlock();
    if (wake) space_.notify_one();
    *n = k;
    return Status::Ok();
  }
  uint64_t stored_size() const override { return size_; }
  // read_ moves only on the reader's thread, which is the one asking.
  uint64_t stored_position() const override { return read_; }

 private:
  // Free bytes in the ring; call with mu_ held.
  uint64_t Free() const { return cap_ - (written_ - read_); }

  void Download() {
    S3ClientPool::Lease client;
    uint64_t offset = 0;  // first byte not yet received
    int failures = 0;
    Status error;
    while (offset < size_) {
      {
        std::unique_lock<std::mutex> lock(mu_);
        // After a park, start again only once the reader has made room for a good run.
        writer_wants_ = client ? 1 : cap_ / 2;
        space_.wait(lock, [&] { return stop_ || Free() >= writer_wants_; });
        writer_wants_ = 0;
        if (stop_) break;
      }
      if (!client) {
        client = pool_->Acquire();
        client->set_cancel_flag(&cancel_);
      }
      auto release = [&] {
        client->set_cancel_flag(nullptr);
        client.reset();
      };
      const uint64_t want =
          request_bytes_ > 0 ? std::min(request_bytes_, size_ - offset) : size_ - offset;
      uint64_t got = 0;
      bool parked = false, overflow = false;
      const std::function<bool(std::string_view)> sink = [&](std::string_view data) {
        if (data.size() > want - got) {
          overflow = true;  // the store ignored the range
          return false;
        }
        while (!data.empty()) {
          size_t k;
          {
            std::unique_lock<std::mutex> lock(mu_);
            if (Free() == 0) {
              // Full: woken once a quarter is free, not for every read.
              writer_wants_ = cap_ / 4;
              const bool room =
                  space_.wait_for(lock, park_, [&] { return stop_ || Free() >= writer_wants_; });
              writer_wants_ = 0;
              if (!room) {
                parked = true;
                return false;
              }
            }
            if (stop_) return false;
            const size_t at = static_cast<size_t>(written_ % cap_);
            k = static_cast<size_t>(std::min<uint64_t>({data.size(), Free(), cap_ - at}));
          }
          // written_ moves only on this thread: reading it here needs no lock.
          const std::string_view part = data.substr(0, k);
          if (on_stored_) on_stored_(part);
          std::memcpy(ring_.get() + (written_ % cap_), part.data(), k);
          bool wake;
          {
            std::lock_guard<std::mutex> lock(mu_);
            written_ += k;
            wake = reader_wants_ > 0 && written_ - read_ >= reader_wants_;
          }
          if (wake) data_.notify_one();
          data.remove_prefix(k);
          got += k;
        }
        return true;
      };
      Status s = client->GetObject(url_.bucket, url_.key, offset, want, sink);
      offset += got;
      if (got > 0) failures = 0;
      if (Stopping()) break;
      if (overflow) {
        error = Status::IoError("S3 GetObject " + url_.ToString() + ": the store sent more than the " +
                                std::to_string(want) + "-byte range asked for");
        break;
      }
      if (parked) {
        // The reader is busy elsewhere: drop the transfer rather than hold the connection.
        release();
        continue;
      }
      if (s.ok() && got != want) {
        s = Status::IoError("S3 GetObject " + url_.ToString() + ": got " + std::to_string(got) +
                            " bytes of a " + std::to_string(want) +
                            "-byte range (did the object change while being read?)");
      }
      if (s.ok()) continue;
      if (s.code() == Status::Code::kNotFound && offset == 0) {
        error = Status::NotFound("no object " + url_.ToString() + " (" + s.message() + ")");
        break;
      }
      if (s.code() == Status::Code::kNotFound || s.code() == Status::Code::kRefused ||
          ++failures >= attempts_) {
        error = s;
        break;
      }
      std::unique_lock<std::mutex> lock(mu_);
      if (space_.wait_for(lock, std::chrono::milliseconds(200 << failures), [&] { return stop_; })) {
        break;
      }
    }
    if (client) client->set_cancel_flag(nullptr);
    client.reset();
    {
      std::lock_guard<std::mutex> lock(mu_);
      error_ = error;
      done_ = true;
    }
    data_.notify_all();
  }
  bool Stopping() {
    std::lock_guard<std::mutex> lock(mu_);
    return stop_;
  }

  std::unique_ptr<S3ClientPool> own_pool_;
  S3ClientPool* pool_;
  S3Url url_;
  uint64_t size_;
  uint64_t request_bytes_;
  std::chrono::milliseconds park_;
  int attempts_;
  std::function<void(std::string_view)> on_stored_;
  size_t cap_;
  size_t batch_;  // a waiting reader is woken when this much has arrived (or at the end)
  std::unique_ptr<char[]> ring_;
  std::atomic<bool> cancel_{false};
  std::mutex mu_;
  std::condition_variable data_;   // the reader waits for bytes
  std::condition_variable space_;  // the downloader waits for room
  uint64_t written_ = 0;           // bytes put in the ring (mu_)
  uint64_t read_ = 0;              // bytes taken out (mu_)
  uint64_t reader_wants_ = 0;      // a waiting reader's batch (mu_; 0: not waiting)
  uint64_t writer_wants_ = 0;      // free bytes the waiting downloader needs (mu_; 0: not)
  bool done_ = false;              // the downloader has finished (mu_)
  bool stop_ = false;              // the source is being destroyed (mu_)
  Status error_;                   // why it finished early (mu_)
  std::thread thread_;
};

// Hands out `prefix` (bytes already read to sniff the format), then the inner source.
class PrefixedSource : public ByteSource {
 public:
  PrefixedSource(std::unique_ptr<ByteSource> inner, std::string prefix)
      : inner_(std::move(inner)), prefix_(std::move(prefix)) {}
  Status Read(char* buf, size_t cap, size_t* n) override {
    if (pos_ < prefix_.size()) {
      *n = std::min(cap, prefix_.size() - pos_);
      std::memcpy(buf, prefix_.data() + pos_, *n);
      pos_ += *n;
      return Status::Ok();
    }
    return inner_->Read(buf, cap, n);
  }
  uint64_t stored_size() const override { return inner_->stored_size(); }
  uint64_t stored_position() const override { return inner_->stored_position(); }

 private:
  std::unique_ptr<ByteSource> inner_;
  std::string prefix_;
  size_t pos_ = 0;
};

class ZstdSource : public ByteSource {
 public:
  ZstdSource(std::unique_ptr<ByteSource> inner, std::string path)
      : inner_(std::move(inner)), path_(std::move(path)), in_(ZSTD_DStreamInSize()) {
    ds_ = ZSTD_createDStream();
  }
  ~ZstdSource() override { ZSTD_freeDStream(ds_); }
  Status Read(char* buf, size_t cap, size_t* n) override {
    *n = 0;
    ZSTD_outBuffer out{buf, cap, 0};
    while (out.pos == 0) {
      if (in_pos_ == in_len_ && !in_eof_) {
        size_t got = 0;
        Status s = inner_->Read(in_.data(), in_.size(), &got);
        if (!s.ok()) return s;
        in_pos_ = 0;
        in_len_ = got;
        in_eof_ = got == 0;
      }
      // Called with no input at the end too: the decoder may still hold output of a block
      // that did not fit in `buf` last time.
      ZSTD_inBuffer in{in_.data(), in_len_, in_pos_};
      const size_t out_before = out.pos;
      const size_t r = ZSTD_decompressStream(ds_, &out, &in);
      const bool consumed = in.pos != in_pos_;
      KeepHeader(in_pos_, in.pos);
      in_pos_ = in.pos;
      if (ZSTD_isError(r)) {
        return Status::InvalidArgument(path_ + ": zstd data is corrupt (" +
                                       std::string(ZSTD_getErrorName(r)) + ")");
      }
      frame_decoded_ += out.pos - out_before;
      // Only a call that did something says whether a frame is open: one fed nothing after a
      // finished frame answers with the size of the next frame's header.
      const bool progress = consumed || out.pos > 0;
      if (progress) frame_open_ = r != 0;
      if (progress && r == 0) {
        if (Status s = CheckFrameSize(); !s.ok()) return s;
      }
      if (!progress && in_eof_ && in_pos_ == in_len_) {
        if (frame_open_) {
          return Status::InvalidArgument(path_ + ": the zstd data ends in the middle of a frame "
                                         "(the file is truncated)");
        }
        break;
      }
    }
    *n = out.pos;
    return Status::Ok();
  }
  uint64_t stored_size() const override { return inner_->stored_size(); }
  uint64_t stored_position() const override { return inner_->stored_position(); }

 private:
  // The first bytes of the current frame, as the decoder consumes them (in_[from, to)): its
  // header, for CheckFrameSize.
  void KeepHeader(size_t from, size_t to) {
    const size_t n = std::min(to - from, header_.size() - header_len_);
    std::memcpy(header_.data() + header_len_, in_.data() + from, n);
    header_len_ += n;
  }
  // At a frame's end: the bytes it decoded to must be the content size its header states.
  // libzstd checks that only when the whole frame fits in the output buffer (1.5.4); decoded
  // through a smaller one, a frame whose blocks make less than it declares ended quietly.
  Status CheckFrameSize() {
    // Unknown, or an error (a header longer than the frame): nothing to check.
    const unsigned long long size = ZSTD_getFrameContentSize(header_.data(), header_len_);
    const uint64_t decoded = frame_decoded_;
    header_len_ = 0;
    frame_decoded_ = 0;
    if (size == ZSTD_CONTENTSIZE_UNKNOWN || size == ZSTD_CONTENTSIZE_ERROR || decoded == size) {
      return Status::Ok();
    }
    return Status::InvalidArgument(path_ + ": zstd data is corrupt (a frame declares " +
                                   std::to_string(size) + " bytes and holds " +
                                   std::to_string(decoded) + ")");
  }

  std::unique_ptr<ByteSource> inner_;
  std::string path_;
  ZSTD_DStream* ds_;
  std::vector<char> in_;
  size_t in_pos_ = 0;
  size_t in_len_ = 0;
  bool in_eof_ = false;
  bool frame_open_ = false;
  std::array<char, 18> header_{};  // ZSTD_FRAMEHEADERSIZE_MAX (zstd.h's static-only part)
  size_t header_len_ = 0;
  uint64_t frame_decoded_ = 0;
};

Status OpenRaw(const std::string& path, std::unique_ptr<ByteSource>* source,
               const SourceOptions& options) {
  if (path == "-") {
    *source = std::make_unique<FdSource>("standard input", 0, false, 0, options.on_stored);
    return Status::Ok();
  }
  if (IsS3Url(path)) {
    S3Url url;
    Status s = ParseS3Url(path, &url);
    if (!s.ok()) return s;
    if (url.key.empty() || url.key.back() == '/') {
      return Status::InvalidArgument(path + " names a prefix, not an object (llmtap merge "
                                     "reads a whole prefix)");
    }
    std::unique_ptr<S3ClientPool> own;
    S3ClientPool* pool = options.s3_clients;
    if (pool == nullptr) {
      s = S3ClientPool::FromEnvironment(&own, 1);
      if (!s.ok()) return s;
      pool = own.get();
    }
    uint64_t size = 0;
    if (options.s3_size) {
      size = *options.s3_size;
    } else {
      S3ClientPool::Lease client = pool->Acquire();
      s = client->HeadObject(url.bucket, url.key, &size);
      if (s.code() == Status::Code::kNotFound) {
        return Status::NotFound("no object " + path + " (HTTP 404)");
      }
      if (!s.ok()) return s;
    }
    *source = std::make_unique<S3Source>(std::move(own), pool, std::move(url), size, options);
    return Status::Ok();
  }
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    int err = errno;
    return err == ENOENT ? Status::NotFound("cannot open " + path, err)
                         : Status::IoError("cannot open " + path, err);
  }
  uint64_t size = 0;
  struct stat st;
  if (::fstat(fd, &st) == 0) {
    if (S_ISDIR(st.st_mode)) {
      ::close(fd);
      return Status::InvalidArgument(path + " is a directory, not a JSONL file");
    }
    if (S_ISREG(st.st_mode)) size = static_cast<uint64_t>(st.st_size);
  }
  ::posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);
  *source = std::make_unique<FdSource>(path, fd, true, size, options.on_stored);
  return Status::Ok();
}

}  // namespace

S3ClientPool::S3ClientPool(const S3Config& config, size_t max_idle)
    : config_(config), max_idle_(max_idle) {}

S3ClientPool::~S3ClientPool() = default;

Status S3ClientPool::FromEnvironment(std::unique_ptr<S3ClientPool>* pool, size_t max_idle) {
  S3Config config;
  Status s = S3Config::FromEnvironment(&config);
  if (!s.ok()) return s;
  *pool = std::make_unique<S3ClientPool>(config, max_idle);
  return Status::Ok();
}

S3ClientPool::Lease S3ClientPool::Acquire() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    ++leases_;
    if (!idle_.empty()) {
      S3Client* c = idle_.back().release();
      idle_.pop_back();
      return Lease(c, Return{this});
    }
    ++made_;
  }
  return Lease(new S3Client(config_), Return{this});
}

void S3ClientPool::Return::operator()(S3Client* client) const {
  std::unique_ptr<S3Client> owned(client);
  std::lock_guard<std::mutex> lock(pool->mu_);
  if (pool->idle_.size() < pool->max_idle_) pool->idle_.push_back(std::move(owned));
}

size_t S3ClientPool::clients_made() const {
  std::lock_guard<std::mutex> lock(mu_);
  return made_;
}

size_t S3ClientPool::leases() const {
  std::lock_guard<std::mutex> lock(mu_);
  return leases_;
}

size_t S3ClientPool::idle() const {
  std::lock_guard<std::mutex> lock(mu_);
  return idle_.size();
}

bool IsZstd(std::string_view data) {
  return data.size() >= 4 && std::memcmp(data.data(), kZstdMagic, 4) == 0;
}

Status OpenSource(const std::string& path, std::unique_ptr<ByteSource>* source,
                  const SourceOptions& options) {
  std::unique_ptr<ByteSource> raw;
  Status s = OpenRaw(path, &raw, options);
  if (!s.ok()) return s;
  // Sniff the first four bytes (a pipe may hand them out in pieces).
  std::string head(4, '\0');
  size_t have = 0;
  while (have < head.size()) {
    size_t n = 0;
    s = raw->Read(head.data() + have, head.size() - have, &n);
    if (!s.ok()) return s;
    if (n == 0) break;
    have += n;
  }
  head.resize(have);
  const bool zstd = IsZstd(head);
  auto prefixed = std::make_unique<PrefixedSource>(std::move(raw), std::move(head));
  if (zstd) {
    *source = std::make_unique<ZstdSource>(std::move(prefixed), path);
  } else {
    *source = std::move(prefixed);
  }
  return Status::Ok();
}

Status ReadWhole(const std::string& path, std::string* out, size_t max_bytes) {
  out->clear();
  std::unique_ptr<ByteSource> source;
  Status s = OpenSource(path, &source);
  if (!s.ok()) return s;
  char buf[1 << 16];
  for (;;) {
    size_t n = 0;
    s = source->Read(buf, sizeof buf, &n);
    if (!s.ok()) return s;
    if (n == 0) return Status::Ok();
    if (out->size() + n > max_bytes) {
      return Status::InvalidArgument(path + " is larger than " + std::to_string(max_bytes) +
                                     " bytes");
    }
    out->append(buf, n);
  }
}

}  // namespace llmtap::store
