#include "trace/segment_reader.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zstd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <thread>

#include "store/stream.h"

namespace llmtap::trace {

namespace {
ZSTD_DStream* Ds(void* p) { return static_cast<ZSTD_DStream*>(p); }
}  // namespace

SegmentReader::~SegmentReader() { Close(); }

void SegmentReader::Close() {
  if (owns_fd_ && fd_ >= 0) ::close(fd_);
  fd_ = -1;
  owns_fd_ = false;
  if (zstd_ != nullptr) {
    ZSTD_freeDStream(Ds(zstd_));
    zstd_ = nullptr;
  }
  zin_.reset();
  zin_cap_ = 0;
  buf_.reset();
  cap_ = begin_ = end_ = scan_ = 0;
  eof_ = true;
}

Status SegmentReader::Open(const std::string& path, store::S3Client* client,
                           const SegmentReaderOptions& options) {
  path_ = path;
  options_ = options;
  if (path == "-") {
    fd_ = 0;
  } else if (store::IsS3Url(path)) {
    status_ = store::ParseS3Url(path, &url_);
    if (!status_.ok()) return status_;
    if (url_.key.empty() || url_.key.back() == '/') {
      return status_ = Status::InvalidArgument(path + " names a prefix, not an object");
    }
    if (client == nullptr) return status_ = Status::InvalidArgument(path + ": no S3 client");
    client_ = client;
    if (options.stored_size) {
      stored_size_ = *options.stored_size;
    } else {
      status_ = client->HeadObject(url_.bucket, url_.key, &stored_size_);
      if (status_.code() == Status::Code::kNotFound) {
        return status_ = Status::NotFound("no object " + path + " (HTTP 404)");
      }
      if (!status_.ok()) return status_;
    }
  } else {
    fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd_ < 0) {
      int err = errno;
      return status_ = err == ENOENT ? Status::NotFound("cannot open " + path, err)
                                     : Status::IoError("cannot open " + path, err);
    }
    owns_fd_ = true;
    struct stat st;
    if (::fstat(fd_, &st) == 0) {
      if (S_ISDIR(st.st_mode)) {
        return status_ = Status::InvalidArgument(path + " is a directory, not a JSONL file");
      }
      if (S_ISREG(st.st_mode)) stored_size_ = static_cast<uint64_t>(st.st_size);
    }
    ::posix_fadvise(fd_, 0, 0, POSIX_FADV_SEQUENTIAL);
  }
  if (options.sha256) sha_ = std::make_unique<store::Sha256>();
  cap_ = std::max<size_t>(options.chunk_bytes, 4096);
  buf_.reset(new char[cap_ + LineReader::kPadding]);
  std::memset(buf_.get() + cap_, 0, LineReader::kPadding);
  eof_ = false;
  return status_;
}

Status SegmentReader::ReadStored(char* dst, size_t cap, size_t* n) {
  *n = 0;
  if (client_ == nullptr) {
    for (;;) {
      ssize_t r = ::read(fd_, dst, cap);
      if (r < 0 && errno == EINTR) continue;
      if (r < 0) return Status::IoError("read error in " + path_, errno);
      *n = static_cast<size_t>(r);
      break;
    }
  } else if (stored_position_ < stored_size_) {
    // One ranged GET straight into the caller's buffer: no second buffer per segment.
    const size_t want =
        static_cast<size_t>(std::min<uint64_t>(cap, stored_size_ - stored_position_));
    size_t got = 0;
    const std::function<bool(std::string_view)> sink = [&](std::string_view data) {
      if (data.size() > want - got) return false;  // more than asked: the range was ignored
      std::memcpy(dst + got, data.data(), data.size());
      got += data.size();
      return true;
    };
    Status s;
    for (int attempt = 0; attempt < std::max(1, options_.s3_attempts); ++attempt) {
      if (attempt > 0) std::this_thread::sleep_for(std::chrono::milliseconds(200 << attempt));
      got = 0;
      s = client_->GetObject(url_.bucket, url_.key, stored_position_, want, sink);
      if (s.ok() && got != want) {
        s = Status::IoError("S3 GetObject " + path_ + ": got " + std::to_string(got) +
                            " bytes of a " + std::to_string(want) +
                            "-byte range (did the object change while being read?)");
      }
      if (s.ok() || s.code() == Status::Code::kNotFound || s.code() == Status::Code::kRefused) {
        break;
      }
    }
    if (!s.ok()) return s;
    *n = got;
  }
  if (sha_) sha_->Update(std::string_view(dst, *n));
  stored_position_ += *n;
  return Status::Ok();
}

// The first bytes decide: zstd's magic number means a compressed segment.
Status SegmentReader::Sniff(char* dst, size_t cap, size_t* n) {
  sniffed_ = true;
  size_t have = 0;
  while (have < 4) {  // a pipe may hand out fewer bytes than asked
    size_t k = 0;
    Status s = ReadStored(dst + have, cap - have, &k);
    if (!s.ok()) return s;
    if (k == 0) {
      stored_eof_ = true;
      break;
    }
    have += k;
  }
  if (!store::IsZstd(std::string_view(dst, have))) {
    *n = have;
    return Status::Ok();
  }
  was_zstd_ = true;
  zstd_ = ZSTD_createDStream();
  if (zstd_ == nullptr) return Status::IoError(path_ + ": cannot create a zstd decoder");
  // S3 reads go straight into this buffer: as large as a range, so that a compressed segment
  // costs as few GETs as a plain one.
  zin_cap_ = std::max({options_.chunk_bytes, ZSTD_DStreamInSize(), have});
  zin_.reset(new char[zin_cap_]);
  std::memcpy(zin_.get(), dst, have);
  zin_pos_ = 0;
  zin_len_ = have;
  return Inflate(dst, cap, n);
}

Status SegmentReader::Inflate(char* dst, size_t cap, size_t* n) {
  *n = 0;
  ZSTD_outBuffer out{dst, cap, 0};
  while (out.pos == 0) {
    if (zin_pos_ == zin_len_ && !stored_eof_) {
      size_t got = 0;
      Status s = ReadStored(zin_.get(), zin_cap_, &got);
      if (!s.ok()) return s;
      zin_pos_ = 0;
      zin_len_ = got;
      if (got == 0) stored_eof_ = true;
    }
    // Called with no input at the end too: the decoder may still hold output of the last
    // block that did not fit in `dst` last time.
    ZSTD_inBuffer in{zin_.get(), zin_len_, zin_pos_};
    const size_t r = ZSTD_decompressStream(Ds(zstd_), &out, &in);
    const bool consumed = in.pos != zin_pos_;
    zin_pos_ = in.pos;
    if (ZSTD_isError(r)) {
      return Status::InvalidArgument(path_ + ": zstd data is corrupt (" +
                                     std::string(ZSTD_getErrorName(r)) + ")");
    }
    // Only a call that did something says whether a frame is open: one fed nothing after a
    // finished frame answers with the size of the next frame's header.
    const bool progress = consumed || out.pos > 0;
    if (progress) frame_open_ = r != 0;
    if (!progress && stored_eof_ && zin_pos_ == zin_len_) {
      if (frame_open_) {
        return Status::InvalidArgument(path_ +
                                       ": the zstd data ends in the middle of a frame "
                                       "(the object is truncated)");
      }
      break;
    }
  }
  *n = out.pos;
  return Status::Ok();
}

Status SegmentReader::ReadDecoded(char* dst, size_t cap, size_t* n) {
  if (!sniffed_) return Sniff(dst, cap, n);
  if (zstd_ != nullptr) return Inflate(dst, cap, n);
  *n = 0;
  if (stored_eof_) return Status::Ok();
  Status s = ReadStored(dst, cap, n);
  if (s.ok() && *n == 0) stored_eof_ = true;
  return s;
}

// As LineReader::Fill: moves the unconsumed tail to the front, grows the buffer when one line
// fills it, and reads more.
bool SegmentReader::Fill() {
  if (eof_ || !buf_ || !status_.ok()) return false;
  if (begin_ > 0) {
    size_t tail = end_ - begin_;
    std::memmove(buf_.get(), buf_.get() + begin_, tail);
    scan_ -= begin_;
    end_ = tail;
    begin_ = 0;
  }
  if (end_ + std::max<size_t>(options_.chunk_bytes, 4096) / 2 > cap_) {
    // A line longer than what is left: grow (bounded by the longest line, not the data).
    size_t new_cap = cap_ * 2;
    std::unique_ptr<char[]> bigger(new char[new_cap + LineReader::kPadding]);
    std::memcpy(bigger.get(), buf_.get(), end_);
    buf_ = std::move(bigger);
    cap_ = new_cap;
  }
  size_t n = 0;
  status_ = ReadDecoded(buf_.get() + end_, cap_ - end_, &n);
  if (!status_.ok()) return false;
  if (n == 0) {
    eof_ = true;
    finished_ = true;
    return false;
  }
  end_ += n;
  std::memset(buf_.get() + end_, 0, LineReader::kPadding);
  return true;
}

bool SegmentReader::Next(Line* line) {
  for (;;) {
    if (scan_ < end_) {
      const void* nl = std::memchr(buf_.get() + scan_, '\n', end_ - scan_);
      if (nl != nullptr) {
        size_t pos = static_cast<const char*>(nl) - buf_.get();
        size_t len = pos - begin_;
        bool crlf = len > 0 && buf_[pos - 1] == '\r';
        line->bytes = std::string_view(buf_.get() + begin_, crlf ? len - 1 : len);
        line->number = ++line_number_;
        line->torn = false;
        line->crlf = crlf;
        ++complete_lines_;
        begin_ = scan_ = pos + 1;
        return true;
      }
      scan_ = end_;
    }
    if (!Fill()) {
      if (!status_.ok() || begin_ == end_) return false;
      // A last line without '\n'.
      line->bytes = std::string_view(buf_.get() + begin_, end_ - begin_);
      line->number = ++line_number_;
      line->torn = true;
      line->crlf = false;
      begin_ = scan_ = end_;
      return true;
    }
  }
}

std::string SegmentReader::Sha256Hex() { return sha_ ? sha_->HexDigest() : std::string(); }

}  // namespace llmtap::trace
