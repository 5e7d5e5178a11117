#include "anonymize/id_map.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>

#include "common/hex.h"
#include "store/stream.h"
#include "trace/line_reader.h"

namespace llmtap::anonymize {

namespace {

std::string Hex(const KeyedId& id) {
  std::string s;
  AppendHex(&s, id.hi);
  AppendHex(&s, id.lo);
  return s;
}

bool ParseHex(std::string_view s, KeyedId* id) {
  if (s.size() != 32) return false;
  uint64_t parts[2] = {0, 0};
  for (size_t i = 0; i < 32; ++i) {
    char c = s[i];
    int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
    if (d < 0) return false;
    parts[i / 16] = (parts[i / 16] << 4) | static_cast<uint64_t>(d);
  }
  *id = {parts[0], parts[1]};
  return true;
}

std::string Header(uint32_t block_size, const KeyedId& fingerprint) {
  return "llmtap-anonymize-id-map v1 block_size=" + std::to_string(block_size) +
         " key=" + Hex(fingerprint);
}

}  // namespace

Status DenseIds::Load(const std::string& path, uint32_t block_size, const KeyedId& fingerprint,
                      bool* loaded) {
  *loaded = false;
  struct stat st;
  if (::stat(path.c_str(), &st) != 0 && errno == ENOENT) return Status::Ok();
  trace::LineReader reader;
  Status status = reader.Open(path);
  if (!status.ok()) return status;
  trace::Line line;
  if (!reader.Next(&line)) {
    return reader.status().ok() ? Status::InvalidArgument("id map " + path + " is empty")
                                : reader.status();
  }
  std::string want = Header(block_size, fingerprint);
  if (line.bytes != want) {
    std::string why = line.bytes.starts_with("llmtap-anonymize-id-map v1 ")
                          ? "was made with another key or block size (its header: " +
                                std::string(line.bytes.substr(0, 120)) + ")"
                          : "is not an llmtap id map";
    return Status::InvalidArgument("id map " + path + " " + why);
  }
  while (reader.Next(&line)) {
    KeyedId id;
    if (!ParseHex(line.bytes, &id)) {
      return Status::InvalidArgument("id map " + path + ":" + std::to_string(line.number) +
                                     ": not a 32-digit hex id (a damaged map?)");
    }
    if (!map_.try_emplace(id, Entry{order_.size(), false}).second) {
      return Status::InvalidArgument("id map " + path + ":" + std::to_string(line.number) +
                                     ": id listed twice (a damaged map?)");
    }
    order_.push_back(id);
  }
  if (!reader.status().ok()) return reader.status();
  *loaded = true;
  return Status::Ok();
}

Status DenseIds::Save(const std::string& path, uint32_t block_size,
                      const KeyedId& fingerprint) const {
  std::string tmp = path + ".tmp." + std::to_string(::getpid());
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) return Status::IoError("cannot create " + tmp, errno);
  std::string buf = Header(block_size, fingerprint) + "\n";
  buf.reserve(buf.size() + order_.size() * 33);
  for (const KeyedId& id : order_) {
    AppendHex(&buf, id.hi);
    AppendHex(&buf, id.lo);
    buf.push_back('\n');
  }
  Status status = store::WriteToFd(fd, buf, "write error in ", tmp);
  if (status.ok() && ::fsync(fd) != 0) status = Status::IoError("fsync of " + tmp, errno);
  if (::close(fd) != 0 && status.ok()) status = Status::IoError("close of " + tmp, errno);
  if (status.ok() && ::rename(tmp.c_str(), path.c_str()) != 0) {
    status = Status::IoError("cannot rename " + tmp + " to " + path, errno);
  }
  if (!status.ok()) ::unlink(tmp.c_str());
  return status;
}

}  // namespace llmtap::anonymize
