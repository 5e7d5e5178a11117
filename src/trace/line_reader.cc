#include "trace/line_reader.h"

#include <cstring>

namespace llmtap::trace {

LineReader::LineReader(size_t chunk_bytes)
    : chunk_bytes_(chunk_bytes < 4096 ? 4096 : chunk_bytes) {}

LineReader::~LineReader() = default;

Status LineReader::Open(const std::string& path) { return Open(path, store::SourceOptions()); }

Status LineReader::Open(const std::string& path, const store::SourceOptions& source) {
  Close();
  path_ = path;
  eof_ = false;
  begin_ = end_ = scan_ = 0;
  line_number_ = complete_lines_ = consumed_ = file_size_ = closed_position_ = 0;
  status_ = store::OpenSource(path, &source_, source);
  if (!status_.ok()) return status_;
  file_size_ = source_->stored_size();
  cap_ = chunk_bytes_;
  buf_.reset(new char[cap_ + kPadding]);
  std::memset(buf_.get() + cap_, 0, kPadding);
  return status_;
}

void LineReader::Close() {
  if (source_) closed_position_ = source_->stored_position();
  source_.reset();
  buf_.reset();
  cap_ = begin_ = end_ = scan_ = 0;
}

uint64_t LineReader::stored_position() const {
  return source_ ? source_->stored_position() : closed_position_;
}

// Moves the unconsumed tail to the front, grows the buffer when one line fills it, and
// reads more. Returns false when nothing more can be read.
bool LineReader::Fill() {
  if (eof_ || !source_ || !status_.ok()) return false;
  if (begin_ > 0) {
    size_t tail = end_ - begin_;
    std::memmove(buf_.get(), buf_.get() + begin_, tail);
    scan_ -= begin_;
    end_ = tail;
    begin_ = 0;
  }
  if (end_ + chunk_bytes_ / 2 > cap_) {
    // A line longer than what is left: grow (bounded by the longest line, not the file).
    size_t new_cap = cap_ * 2;
    std::unique_ptr<char[]> bigger(new char[new_cap + kPadding]);
    std::memcpy(bigger.get(), buf_.get(), end_);
    buf_ = std::move(bigger);
    cap_ = new_cap;
  }
  size_t n = 0;
  status_ = source_->Read(buf_.get() + end_, cap_ - end_, &n);
  if (!status_.ok()) return false;
  if (n == 0) {
    eof_ = true;
    return false;
  }
  end_ += n;
  // Padding must follow the data for in-place parsing; zero it so parsers see no garbage.
  std::memset(buf_.get() + end_, 0, kPadding);
  return true;
}

bool LineReader::Next(Line* line) {
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
        consumed_ += len + 1;
        begin_ = scan_ = pos + 1;
        return true;
      }
      scan_ = end_;
    }
    if (!Fill()) {
      if (!status_.ok() || begin_ == end_) return false;
      // A last line without '\n'.
      size_t len = end_ - begin_;
      line->bytes = std::string_view(buf_.get() + begin_, len);
      line->number = ++line_number_;
      line->torn = true;
      line->crlf = false;
      consumed_ += len;
      begin_ = scan_ = end_;
      return true;
    }
  }
}

}  // namespace llmtap::trace
