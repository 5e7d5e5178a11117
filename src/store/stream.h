// Byte streams behind every trace tool: a source reads a local file, standard input or an
// s3:// object; a sink writes a local file or an s3:// object. zstd is handled on both sides
// (a source is decompressed when it starts with zstd's magic number, a sink whose name ends
// in ".zst" is compressed), so every tool reads and writes .jsonl.zst like .jsonl.
//
// Memory is bounded by a few buffers (the S3 read-ahead buffer or part size), never by the data
// size. One stream per thread; not thread-safe (an s3:// source reads ahead on a thread of its
// own, behind this interface).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "store/s3_client.h"

namespace llmtap::store {

class ByteSource {
 public:
  virtual ~ByteSource() = default;
  // Reads up to `cap` bytes into `buf`; `*n` is 0 at the end of the data.
  virtual Status Read(char* buf, size_t cap, size_t* n) = 0;
  // Size of the file or object as stored (compressed size for zstd), 0 when unknown (a pipe).
  virtual uint64_t stored_size() const = 0;
  // Stored bytes consumed so far (for progress against stored_size()).
  virtual uint64_t stored_position() const = 0;
};

// S3 clients shared by many sources (and their read-ahead threads): a source borrows one while
// it downloads and gives it back, with its open connection, when it stops or reaches the end.
// So hundreds of objects read one after another cost a few connections, not one each, and
// the configuration is read once. Clients are made on demand (never waited for); at most
// `max_idle` are kept between uses. Thread-safe; must outlive every source using it.
class S3ClientPool {
 public:
  explicit S3ClientPool(const S3Config& config, size_t max_idle = 8);
  ~S3ClientPool();
  S3ClientPool(const S3ClientPool&) = delete;
  S3ClientPool& operator=(const S3ClientPool&) = delete;

  // Reads the AWS_* environment (S3Config::FromEnvironment).
  static Status FromEnvironment(std::unique_ptr<S3ClientPool>* pool, size_t max_idle = 8);

  struct Return {
    S3ClientPool* pool = nullptr;
    void operator()(S3Client* client) const;
  };
  // A borrowed client; it goes back to the pool when the lease is destroyed. One thread at a
  // time uses it.
  using Lease = std::unique_ptr<S3Client, Return>;
  Lease Acquire();

  const S3Config& config() const { return config_; }
  // Clients made so far: each holds at most one connection to the store at a time.
  size_t clients_made() const;
  // Leases handed out so far (a download borrows again after each park, see s3_park_ms).
  size_t leases() const;
  // Clients in the pool now, between leases (a parked download's is back here).
  size_t idle() const;

 private:
  S3Config config_;
  size_t max_idle_;
  mutable std::mutex mu_;
  std::vector<std::unique_ptr<S3Client>> idle_;
  size_t made_ = 0;
  size_t leases_ = 0;
};

struct SourceOptions {
  // s3://: a thread of the source's own downloads the object ahead of the reader into a
  // buffer of this many bytes (at least 16 KiB): the source's memory, whatever the object's
  // size. Downloading thus overlaps with what the reader does with the bytes.
  size_t s3_buffer_bytes = size_t{8} << 20;
  // Each GET asks for at most this many bytes (0: the rest of the object). A GET that fails
  // midway resumes where it stopped; one whose reader has not made room in the buffer for
  // s3_park_ms is dropped (its connection is not held idle) and resumes once there is room.
  uint64_t s3_request_bytes = 0;
  int s3_park_ms = 5000;
  // Failures in a row (no byte received between them) before a read fails; back-off 400 ms,
  // 800 ms, ... between them. 404 and 403 are not retried.
  int s3_attempts = 4;
  // Clients to borrow (nullptr: the source makes its own from the AWS_* environment).
  S3ClientPool* s3_clients = nullptr;
  // The object's size when a listing or manifest gave it: no HEAD is sent.
  std::optional<uint64_t> s3_size;
  // Sees every stored byte once, in order, before decompression (e.g. a store::Sha256 to
  // check the data against a manifest). It is called on the thread that reads the stored
  // bytes: the read-ahead thread for s3:// (before the reader can see those bytes, so once
  // the reader is at the end every call has returned), the reader's thread otherwise. Never
  // two calls at once.
  std::function<void(std::string_view)> on_stored;
};

// Opens `path`: "-" is standard input, "s3://bucket/key" an object (credentials and endpoint
// from the AWS_* environment, see S3Config, unless options.s3_clients), anything else a local
// file. zstd data is decompressed whatever the name. The first bytes are read at once (to
// recognize zstd), so a missing s3:// object is NotFound here.
Status OpenSource(const std::string& path, std::unique_ptr<ByteSource>* source,
                  const SourceOptions& options = {});

// Reads a whole small file or object (a manifest) into `*out`; NotFound when it is absent.
Status ReadWhole(const std::string& path, std::string* out, size_t max_bytes = size_t{64} << 20);

// Writes all of `data` to the file descriptor `fd`, retrying interrupted writes. On an error,
// IoError(what + path, errno) (e.g. what "write error in ").
Status WriteToFd(int fd, std::string_view data, const char* what, const std::string& path);

class ByteSink {
 public:
  virtual ~ByteSink() = default;
  virtual Status Write(std::string_view data) = 0;
  // Finishes the file or object (an s3:// object exists only once Close succeeds). Returns
  // the first error of any Write or of closing.
  virtual Status Close() = 0;
};

struct SinkOptions {
  bool force = false;  // replace an existing file or object
  // An s3:// object goes up in parts of this many bytes (one PUT when it is smaller).
  size_t s3_part_bytes = size_t{16} << 20;
  int zstd_level = 3;
  // zstd long-distance matching over a window of 2^zstd_window_log bytes (0: the level's own
  // window, 2-8 MiB). Multi-turn traffic repeats each conversation's history many requests
  // later; a 16 MiB window (24) finds those repeats. Readers need that much memory per stream.
  int zstd_window_log = 0;
  // The uncompressed size when known in advance (0: unknown): a smaller input then gets a
  // smaller window, so readers need less memory.
  uint64_t pledged_size = 0;
  // Compress whatever the name (the ".zst" suffix decides when unset).
  bool compress = false;
  // A local file is fsync'ed before Close returns.
  bool sync = false;
};

// Creates `path` for writing: a local file is created 0600 (missing directories 0700), never
// through a symlink and never over an existing file unless `force`; an s3:// object likewise
// refuses to replace an existing object unless `force`. A name ending in ".zst" is written
// zstd-compressed. A sink destroyed without Close() leaves no object (the multipart upload is
// aborted) and a local file as far as it got.
Status OpenSink(const std::string& path, std::unique_ptr<ByteSink>* sink,
                const SinkOptions& options = {});

// What OpenSink would refuse, checked before any work is done: an existing file or object
// (unless `force`), a symlink, a missing bucket, the store's credentials.
Status CheckSinkTarget(const std::string& path, bool force);

// Whether `data` starts with zstd's frame magic number.
bool IsZstd(std::string_view data);

}  // namespace llmtap::store
