#include "capture/uploader.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <nlohmann/json.hpp>

#include "capture/file_names.h"
#include "capture/manifest.h"
#include "capture/recovery.h"
#include "common/thread_name.h"
#include "store/sha256.h"
#include "store/stream.h"

namespace llmtap {
namespace {

using Json = nlohmann::ordered_json;

std::string BaseName(const std::string& path) {
  size_t slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}


std::string WithoutZst(const std::string& path) {
  return path.ends_with(".zst") ? path.substr(0, path.size() - 4) : path;
}

// The outcomes sidecar beside a finished file, compressed or not, by either name; empty when
// there is none.
std::string FindOutcomes(const std::string& data_path) {
  for (const std::string& plain :
       {OutcomesPathFor(WithoutZst(data_path)), LegacyOutcomesPathFor(WithoutZst(data_path))}) {
    struct stat st;
    if (::stat(plain.c_str(), &st) == 0) return plain;
    if (::stat((plain + ".zst").c_str(), &st) == 0) return plain + ".zst";
  }
  return "";
}

uint64_t FileBytes(const std::string& path) {
  struct stat st;
  if (path.empty() || ::stat(path.c_str(), &st) != 0) return 0;
  return static_cast<uint64_t>(st.st_size);
}

// A host name made into a replica name: characters outside [A-Za-z0-9._-] become '-'.
std::string ReplicaFromHost(const std::string& host) {
  std::string r;
  for (char c : host.substr(0, 128)) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '.' || c == '_' || c == '-';
    r.push_back(ok ? c : '-');
  }
  if (r.empty() || r == "." || r == "..") r = "replica";
  return r;
}

size_t CountNewlines(std::string_view data) {
  return static_cast<size_t>(std::count(data.begin(), data.end(), '\n'));
}

}  // namespace

Uploader::Uploader(const CaptureConfig& config, const UploaderOptions& options, Env* env,
                   Logger* logger, CaptureCounters* counters)
    : config_(config),
      options_(options),
      env_(env),
      logger_(logger),
      counters_(counters),
      // Resolved here, before the writer thread (which names it in manifests) starts.
      replica_(config.replica.empty() ? ReplicaFromHost(env->HostName()) : config.replica),
      upload_warning_(logger, std::chrono::seconds(10)) {}

Uploader::~Uploader() { Stop(); }

void Uploader::Start() {
  Status s = store::ParseS3Url(config_.upload_url, &base_);
  if (!s.ok()) {
    // ParseCaptureConfig never lets this through; an embedder passing a raw config might.
    config_error_ = s.message();
  }
  base_.key = store::JoinKey(base_.key, replica_) + "/";
  store::S3Config s3;
  s = store::S3Config::FromEnvironment(&s3);
  if (!s.ok() && config_error_.empty()) config_error_ = s.message();
  client_ = std::make_unique<store::S3Client>(s3);
  client_->set_cancel_flag(&cancel_);
  for (int i = 1; i < options_.part_streams; ++i) {
    part_clients_.push_back(std::make_unique<store::S3Client>(s3));
    part_clients_.back()->set_cancel_flag(&cancel_);
  }
  rng_state_ = static_cast<uint64_t>(env_->NowWallNanos()) ^
               (uint64_t{0x9E3779B97F4A7C15} * static_cast<uint64_t>(env_->ProcessId()));
  ScanLeftovers();
  thread_ = std::thread(&Uploader::Run, this);
}

void Uploader::ScanLeftovers() {
  const std::string dir = DirName(config_.path);
  const std::string live = BaseName(config_.path);
  std::string stem = live;
  if (stem.ends_with(".jsonl")) stem.resize(stem.size() - 6);
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) return;
  std::vector<std::string> found;
  std::vector<std::string> manifests;
  while (struct dirent* e = ::readdir(d)) {
    const std::string name = e->d_name;
    if (!name.starts_with(stem + ".") || name == live) continue;
    if (name.ends_with(".zst.tmp")) {
      // A compression cut short: its source is still there and is compressed again.
      ::unlink((dir + "/" + name).c_str());
      continue;
    }
    if (const size_t tmp = name.find(".manifest.json.tmp."); tmp != std::string::npos) {
      // A manifest write cut short by a dead process (this one's writer may be writing its own;
      // Env::WriteFileAtomic names its temp file by the real pid).
      if (name.substr(tmp + 19) != std::to_string(::getpid())) {
        ::unlink((dir + "/" + name).c_str());
      }
      continue;
    }
    if (name.ends_with(".jsonl.manifest.json") && name != live + ".manifest.json") {
      manifests.push_back(name.substr(0, name.size() - 14));  // the data file it describes
      continue;
    }
    const bool data = name.ends_with(".jsonl") || name.ends_with(".jsonl.zst");
    if (!data || IsOutcomesName(name)) {
      continue;
    }
    found.push_back(name);
  }
  ::closedir(d);
  // A manifest whose data file is gone: the file was uploaded and removed by a version that
  // removed the data first, or its run died in between. Queued like a leftover, it is removed
  // once the store is seen to hold the file.
  std::sort(found.begin(), found.end());
  for (const std::string& data : manifests) {
    if (!std::binary_search(found.begin(), found.end(), data) &&
        !std::binary_search(found.begin(), found.end(), data + ".zst")) {
      found.push_back(data);
    }
  }
  std::sort(found.begin(), found.end());
  for (const std::string& name : found) {
    const std::string path = dir + "/" + name;
    // Compression finished (the .zst is complete) but the original was not removed yet.
    if (!name.ends_with(".zst") && std::binary_search(found.begin(), found.end(), name + ".zst")) {
      ::unlink(path.c_str());
      continue;
    }
    Pending p;
    p.data_path = path;
    p.outcomes_path = FindOutcomes(path);
    p.leftover = true;
    Enqueue(std::move(p));
  }
  if (!found.empty()) {
    logger_->Log(LogLevel::kInfo, std::to_string(queue_.size()) +
                                      " finished capture files from an earlier run are queued "
                                      "for upload");
  }
}

void Uploader::FileFinished(const std::string& data_path, const std::string& outcomes_path,
                            int64_t records) {
  Pending p;
  p.data_path = data_path;
  p.outcomes_path = outcomes_path;
  p.records = records;
  Enqueue(std::move(p));
}

void Uploader::Enqueue(Pending p) {
  // Everything of the file on disk counts against max_local_bytes, its manifest included.
  p.bytes = FileBytes(p.data_path) + FileBytes(p.outcomes_path) +
            FileBytes(ManifestPathFor(WithoutZst(p.data_path)));
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!known_.insert(WithoutZst(p.data_path)).second) return;
    counters_->upload_files_waiting.fetch_add(1, std::memory_order_relaxed);
    counters_->upload_bytes_waiting.fetch_add(p.bytes, std::memory_order_relaxed);
    queue_.push_back(std::move(p));
  }
  cv_.notify_one();
}

void Uploader::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stop_requested_) {
      if (!thread_.joinable()) return;
    } else {
      stop_requested_ = true;
      stop_deadline_ns_ =
          env_->NowMonotonicNanos() +
          std::chrono::duration_cast<std::chrono::nanoseconds>(options_.stop_timeout).count();
    }
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  const uint64_t waiting = counters_->upload_files_waiting.load(std::memory_order_relaxed);
  if (waiting > 0) {
    logger_->Log(LogLevel::kWarning,
                 std::to_string(waiting) + " finished capture files did not reach " +
                     base_.ToString() + " before stopping (" + last_error() + "); they stay in " +
                     DirName(config_.path) + " and are uploaded at the next start");
  }
}

bool Uploader::Stopping() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stop_requested_ && env_->NowMonotonicNanos() >= stop_deadline_ns_;
}

std::string Uploader::last_error() const {
  std::lock_guard<std::mutex> lock(mu_);
  return last_error_;
}

void Uploader::SetError(const std::string& error) {
  std::lock_guard<std::mutex> lock(mu_);
  last_error_ = error;
}

void Uploader::Sleep(int64_t ms) {
  std::unique_lock<std::mutex> lock(mu_);
  const int64_t until = env_->NowMonotonicNanos() + ms * 1000000;
  while (true) {
    const int64_t now = env_->NowMonotonicNanos();
    int64_t wake = until;
    if (stop_requested_) wake = std::min(wake, stop_deadline_ns_);
    if (now >= wake) return;
    cv_.wait_for(lock, std::chrono::nanoseconds(wake - now));
  }
}

template <typename Op>
bool Uploader::WithRetry(const char* what, store::S3Client* client, Op&& op) {
  int64_t backoff_ms = options_.initial_backoff.count();
  for (int attempt = 0;; ++attempt) {
    if (attempt > 0) counters_->upload_retries.fetch_add(1, std::memory_order_relaxed);
    Status s = config_error_.empty() ? op() : Status::InvalidArgument(config_error_);
    if (s.ok()) {
      if (attempt > 0) SetError("");
      return true;
    }
    if (config_error_.empty())
      counters_->upload_requests_failed.fetch_add(1, std::memory_order_relaxed);
    std::string error = s.message();
    const std::string hint =
        config_error_.empty() ? store::S3Hint(client->last_http_status(), client->last_error_code())
                              : std::string();
    if (!hint.empty()) error += " (" + hint + ")";
    SetError(error);
    if (Stopping()) return false;
    // Jitter: a wait drawn from [backoff/2, backoff], so replicas that lost the store together
    // do not come back in step.
    uint64_t z;
    {
      std::lock_guard<std::mutex> lock(mu_);  // the part threads retry concurrently
      z = rng_state_ += 0x9E3779B97F4A7C15;
    }
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EB;
    z ^= z >> 31;
    const int64_t wait_ms =
        backoff_ms / 2 + static_cast<int64_t>(z % static_cast<uint64_t>(backoff_ms / 2 + 1));
    upload_warning_.Hit(env_->NowMonotonicNanos(), [&] {
      return std::string("capture upload: ") + what + " failed: " + error + "; retrying in " +
             std::to_string(wait_ms) + " ms (files wait in " + DirName(config_.path) + ")";
    });
    Sleep(wait_ms);
    if (Stopping()) return false;
    backoff_ms = std::min<int64_t>(backoff_ms * 2, options_.max_backoff.count());
  }
}

void Uploader::Run() {
  NameThisThread("llmtap-upload");
  if (!config_error_.empty()) {
    SetError(config_error_);
    logger_->Log(LogLevel::kWarning,
                 "capture upload to " + config_.upload_url + " cannot start: " + config_error_ +
                     ". Serving goes on; finished files stay in " + DirName(config_.path) +
                     " (at most max_local_bytes), then capture stops recording.");
  } else {
    Status s = client_->HeadBucket(base_.bucket);
    if (s.ok()) {
      logger_->Log(LogLevel::kInfo, "capture uploads finished files to " + base_.ToString() + " (" +
                                        client_->config().Describe() + ")");
      std::vector<store::S3MultipartUpload> uploads;
      if (client_->ListMultipartUploads(base_.bucket, base_.key, &uploads).ok()) {
        for (auto& u : uploads) stale_uploads_[u.key].push_back(u.upload_id);
      }
    } else {
      std::string hint = store::S3Hint(client_->last_http_status(), client_->last_error_code());
      SetError(s.message() + (hint.empty() ? "" : " (" + hint + ")"));
      logger_->Log(LogLevel::kWarning,
                   "capture upload to " + base_.ToString() +
                       " is not possible yet: " + s.message() + (hint.empty() ? "" : "; " + hint) +
                       " (" + client_->config().Describe() +
                       "). Serving goes on; finished files wait in " + DirName(config_.path) +
                       " (at most max_local_bytes) and upload is retried.");
    }
  }
  while (true) {
    Pending p;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [this] { return stop_requested_ || !queue_.empty(); });
      if (queue_.empty()) break;  // stopping with nothing left
      p = queue_.front();
    }
    if (!Process(p)) break;  // the stop deadline passed (or crash_after: the run "died")
    std::lock_guard<std::mutex> lock(mu_);
    queue_.pop_front();
    known_.erase(WithoutZst(p.data_path));
    counters_->upload_files_waiting.fetch_sub(1, std::memory_order_relaxed);
    counters_->upload_bytes_waiting.fetch_sub(p.bytes, std::memory_order_relaxed);
  }
  cancel_.store(true);
}

bool Uploader::Compress(const std::string& path, std::string* out_path, uint64_t* lines) {
  const std::string tmp = path + ".zst.tmp";
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  std::unique_ptr<store::ByteSink> sink;
  store::SinkOptions o;
  o.force = true;
  o.compress = true;
  o.sync = true;
  o.zstd_level = options_.zstd_level;
  o.zstd_window_log = options_.zstd_window_log;
  struct stat st;
  if (::fstat(fd, &st) == 0) o.pledged_size = static_cast<uint64_t>(st.st_size);
  Status s = store::OpenSink(tmp, &sink, o);
  std::string buf(size_t{1} << 20, '\0');
  uint64_t n_lines = 0;
  while (s.ok()) {
    ssize_t n = ::read(fd, buf.data(), buf.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      s = Status::IoError("read error in " + path, errno);
      break;
    }
    if (n == 0) break;
    std::string_view chunk(buf.data(), static_cast<size_t>(n));
    n_lines += CountNewlines(chunk);
    s = sink->Write(chunk);
  }
  ::close(fd);
  if (s.ok()) s = sink->Close();
  sink.reset();
  if (s.ok() && ::rename(tmp.c_str(), (path + ".zst").c_str()) != 0) {
    s = Status::IoError("cannot rename " + tmp, errno);
  }
  if (!s.ok()) {
    ::unlink(tmp.c_str());
    logger_->Log(LogLevel::kWarning, "capture upload: compressing " + path + " failed (" +
                                         s.ToString() + "); uploading it uncompressed");
    return false;
  }
  ::unlink(path.c_str());
  *out_path = path + ".zst";
  if (lines != nullptr) *lines = n_lines;
  return true;
}

bool Uploader::UploadParts(int fd, uint64_t size, const std::string& key, store::Sha256* sha,
                           uint64_t* lines) {
  // The file is mapped, not copied: parts go to curl straight from the page cache. Several part
  // threads (part_streams, each with its own connection) keep the store busy while one waits
  // for an answer, and another thread hashes and counts the whole file meanwhile, so a part
  // never waits for the SHA-256 of the ones before it.
  void* map = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
  if (map == MAP_FAILED) {
    SetError(std::string("cannot map a file for upload: ") + std::strerror(errno));
    return false;
  }
  const std::string_view data(static_cast<const char*>(map), size);
  ::madvise(map, size, MADV_SEQUENTIAL);
  std::thread hasher([&] {
    NameThisThread("llmtap-sha256");
    for (size_t off = 0; off < data.size(); off += size_t{4} << 20) {
      std::string_view chunk = data.substr(off, size_t{4} << 20);
      sha->Update(chunk);
      if (lines != nullptr) *lines += CountNewlines(chunk);
    }
  });
  std::string upload_id;
  bool ok = WithRetry("CreateMultipartUpload", client_.get(), [&] {
    return client_->CreateMultipartUpload(base_.bucket, key, &upload_id);
  });
  const size_t part_bytes = options_.part_bytes;
  const size_t count = (size + part_bytes - 1) / part_bytes;
  std::vector<store::S3Part> parts(count);
  std::atomic<size_t> next{0};
  std::atomic<bool> failed{!ok};
  auto send = [&](store::S3Client* client) {
    for (size_t i = next++; i < count && !failed.load(); i = next++) {
      parts[i].number = static_cast<int>(i) + 1;
      const std::string_view part = data.substr(i * part_bytes, part_bytes);
      if (!WithRetry("UploadPart", client, [&] {
            return client->UploadPart(base_.bucket, key, upload_id, parts[i].number, part,
                                      &parts[i].etag);
          })) {
        failed = true;
      }
    }
  };
  if (ok) {
    std::vector<std::thread> others;
    for (auto& client : part_clients_) {
      others.emplace_back([&send, c = client.get()] {
        NameThisThread("llmtap-upload");
        send(c);
      });
    }
    send(client_.get());
    for (std::thread& t : others) t.join();
    ok = !failed.load();
  }
  hasher.join();
  ::munmap(map, size);
  if (ok) {
    ok = WithRetry("CompleteMultipartUpload", client_.get(), [&] {
      return client_->CompleteMultipartUpload(base_.bucket, key, upload_id, parts);
    });
  }
  // Cut short by the stop deadline: the unfinished upload is aborted when the next start sends
  // this file again (stale_uploads_).
  return ok;
}

bool Uploader::UploadFile(const std::string& path, const std::string& key, Uploaded* out,
                          uint64_t* lines) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    SetError("cannot open " + path + ": " + std::strerror(errno));
    return true;  // gone (deleted by hand): nothing to send
  }
  struct stat st;
  ::fstat(fd, &st);
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  store::Sha256 sha;
  uint64_t n_lines = 0;
  std::string buf;
  // Reads [offset, offset + len) whole; false on a read error.
  auto read_at = [&](uint64_t offset, size_t len) {
    buf.resize(len);
    size_t done = 0;
    while (done < len) {
      ssize_t n = ::pread(fd, buf.data() + done, len - done, static_cast<off_t>(offset + done));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return false;
      done += static_cast<size_t>(n);
    }
    sha.Update(buf);
    n_lines += CountNewlines(buf);
    return true;
  };
  const auto read_failed = [&] {
    SetError("read error in " + path);
    ::close(fd);
    return false;
  };
  // Unfinished uploads of this key by an earlier run are aborted: this one replaces them.
  if (auto it = stale_uploads_.find(key); it != stale_uploads_.end()) {
    for (const std::string& id : it->second)
      (void)client_->AbortMultipartUpload(base_.bucket, key, id);
    stale_uploads_.erase(it);
  }
  bool ok = true;
  if (size <= options_.part_bytes) {
    if (!read_at(0, size)) return read_failed();
    ok = WithRetry("PutObject", client_.get(),
                   [&] { return client_->PutObject(base_.bucket, key, buf); });
  } else {
    ok = UploadParts(fd, size, key, &sha, lines != nullptr ? &n_lines : nullptr);
  }
  ::close(fd);
  if (!ok) return false;
  out->key = key;
  out->bytes = size;
  out->sha256 = sha.HexDigest();
  if (lines != nullptr) *lines = n_lines;
  return true;
}

std::string Uploader::ManifestFor(const std::string& data_path,
                                  const std::vector<Uploaded>& objects, uint64_t records) {
  Json j = Json::object();
  std::string text;
  if (store::ReadWhole(ManifestPathFor(WithoutZst(data_path)), &text).ok()) {
    Json local = Json::parse(text, nullptr, false);
    if (local.is_object()) j = std::move(local);
  }
  if (!j.contains("schema")) j["schema"] = "llmtap.capture.manifest/v1";
  j["replica"] = replica_;
  j["records"] = records;
  Json list = Json::array();
  for (const Uploaded& o : objects) {
    list.push_back({{"role", o.role}, {"key", o.key}, {"bytes", o.bytes}, {"sha256", o.sha256}});
  }
  j["objects"] = std::move(list);
  j["uploaded_utc"] = FormatUtcMillis(env_->NowWallNanos());
  return j.dump(2, ' ', false, Json::error_handler_t::replace) + "\n";
}

bool Uploader::Process(const Pending& p) {
  struct stat st;
  // Gone (deleted by hand): nothing to send. A leftover's sidecars may be there without it.
  if (!p.leftover && ::stat(p.data_path.c_str(), &st) != 0) return true;
  const std::string manifest_key = base_.key + BaseName(WithoutZst(p.data_path)) + ".manifest.json";
  const std::string local_manifest = ManifestPathFor(WithoutZst(p.data_path));
  // The data file goes last: a run that dies between these leaves the data file, which the
  // next start finds, sees in the store (its manifest) and removes with whatever is left beside
  // it. Removed first, it would leave sidecars nothing leads back to.
  auto remove_local = [&](const std::string& data, const std::string& outcomes) {
    if (config_.keep_local) return true;
    ::unlink(local_manifest.c_str());
    if (Crashed(UploadStep::kLocalManifestRemoved)) return false;
    if (!outcomes.empty()) ::unlink(outcomes.c_str());
    if (Crashed(UploadStep::kLocalOutcomesRemoved)) return false;
    ::unlink(data.c_str());
    return !Crashed(UploadStep::kLocalDataRemoved);
  };
  if (p.leftover) {
    // Sent before (the manifest goes last), then the run ended before removing it.
    Status s;
    bool reachable = WithRetry("HeadObject", client_.get(), [&] {
      s = client_->HeadObject(base_.bucket, manifest_key, nullptr);
      return s.code() == Status::Code::kNotFound ? Status::Ok() : s;
    });
    if (!reachable) return false;
    if (s.ok()) return remove_local(p.data_path, p.outcomes_path);
  }
  if (::stat(p.data_path.c_str(), &st) != 0) {
    // Sidecars without their data file (an earlier version removed the data first), and the
    // store does not hold the file: there is nothing to send.
    logger_->Log(LogLevel::kWarning, local_manifest + " has no data file beside it and " +
                                         manifest_key + " is not in the store; left as it is");
    return true;
  }
  if (p.leftover && !p.data_path.ends_with(".zst") && ::stat(local_manifest.c_str(), &st) != 0) {
    // A file without its manifest (a run killed between moving the open file aside and moving
    // its manifest): one is made from the file, so the store's says where its rows belong.
    Status rs = WriteRecoveredManifest(env_, p.data_path, 0);
    if (!rs.ok()) logger_->Log(LogLevel::kWarning, rs.ToString());
  }
  std::string data = p.data_path;
  std::string outcomes = p.outcomes_path;
  uint64_t records = p.records >= 0 ? static_cast<uint64_t>(p.records) : 0;
  bool counted = p.records >= 0;
  if (config_.compress_zstd && !data.ends_with(".zst")) {
    uint64_t lines = 0;
    if (Compress(data, &data, &lines)) {
      records = lines;
      counted = true;
    }
    if (Crashed(UploadStep::kDataCompressed)) return false;
  }
  if (config_.compress_zstd && !outcomes.empty() && !outcomes.ends_with(".zst")) {
    Compress(outcomes, &outcomes, nullptr);
    if (Crashed(UploadStep::kOutcomesCompressed)) return false;
  }
  if (!counted && data.ends_with(".zst")) {
    // Compressed by an earlier run: count its lines by reading it back.
    std::unique_ptr<store::ByteSource> source;
    if (store::OpenSource(data, &source).ok()) {
      std::string buf(size_t{1} << 20, '\0');
      size_t n = 0;
      while (source->Read(buf.data(), buf.size(), &n).ok() && n > 0) {
        records += CountNewlines(std::string_view(buf.data(), n));
      }
      counted = true;
    }
  }
  std::vector<Uploaded> objects(1);
  objects[0].role = "data";
  if (!UploadFile(data, base_.key + BaseName(data), &objects[0], counted ? nullptr : &records) ||
      Crashed(UploadStep::kDataPut)) {
    return false;
  }
  if (!outcomes.empty() && ::stat(outcomes.c_str(), &st) == 0) {
    Uploaded& o = objects.emplace_back();
    o.role = "outcomes";
    if (!UploadFile(outcomes, base_.key + BaseName(outcomes), &o, nullptr) ||
        Crashed(UploadStep::kOutcomesPut)) {
      return false;
    }
  }
  const std::string manifest = ManifestFor(data, objects, records);
  if (!WithRetry("PutObject", client_.get(),
                 [&] { return client_->PutObject(base_.bucket, manifest_key, manifest); }) ||
      Crashed(UploadStep::kManifestPut)) {
    return false;
  }
  uint64_t bytes = manifest.size();
  for (const Uploaded& o : objects) bytes += o.bytes;
  counters_->files_uploaded.fetch_add(1, std::memory_order_relaxed);
  counters_->bytes_uploaded.fetch_add(bytes, std::memory_order_relaxed);
  return remove_local(data, outcomes);
}

bool Uploader::Crashed(UploadStep step) {
  if (crashed_ || !options_.crash_after || !options_.crash_after(step)) return crashed_;
  crashed_ = true;
  return true;
}

}  // namespace llmtap
