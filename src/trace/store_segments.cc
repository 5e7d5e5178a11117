#include "trace/store_segments.h"

#include <fnmatch.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <nlohmann/json.hpp>
#include <set>
#include <thread>

#include "capture/file_names.h"
#include "store/s3_url.h"
#include "trace/merge.h"  // ParseTimeArg

namespace llmtap::trace {

namespace {

using Json = nlohmann::json;

std::string_view BaseName(std::string_view key) {
  size_t slash = key.rfind('/');
  return slash == std::string_view::npos ? key : key.substr(slash + 1);
}

std::optional<uint64_t> Unsigned(const Json& j, const char* key) {
  if (!j.is_object() || !j.contains(key)) return std::nullopt;
  const Json& v = j[key];
  if (v.is_number_unsigned()) return v.get<uint64_t>();
  if (v.is_number_integer() && v.get<int64_t>() >= 0)
    return static_cast<uint64_t>(v.get<int64_t>());
  return std::nullopt;
}

std::optional<int64_t> Integer(const Json& j, const char* key) {
  if (!j.is_object() || !j.contains(key) || !j[key].is_number_integer()) return std::nullopt;
  return j[key].get<int64_t>();
}

std::string String(const Json& j, const char* key) {
  if (!j.is_object() || !j.contains(key) || !j[key].is_string()) return "";
  return j[key].get<std::string>();
}

enum class Kind { kData, kOutcomes, kManifest, kOther };

// What an object in a replica folder is, by its name; `*data_name` gets the uncompressed data
// name it belongs to ("requests.X.jsonl").
Kind Classify(std::string_view name, std::string* data_name) {
  static constexpr std::string_view kManifest = ".manifest.json";
  if (name.ends_with(kManifest)) {
    std::string_view stem = name.substr(0, name.size() - kManifest.size());
    if (!stem.ends_with(".jsonl")) return Kind::kOther;
    *data_name = stem;
    return Kind::kManifest;
  }
  std::string_view plain = name.ends_with(".zst") ? name.substr(0, name.size() - 4) : name;
  if (IsOutcomesName(plain)) return Kind::kOutcomes;
  if (plain.ends_with(".jsonl") && plain.size() > 6) {
    *data_name = plain;
    return Kind::kData;
  }
  return Kind::kOther;
}

bool Matches(const std::vector<std::string>& globs, const std::string& name) {
  if (globs.empty()) return true;
  return std::any_of(globs.begin(), globs.end(), [&](const std::string& g) {
    return ::fnmatch(g.c_str(), name.c_str(), 0) == 0;
  });
}

std::string Joined(const std::vector<std::string>& names) {
  std::string out;
  for (size_t i = 0; i < names.size() && i < 20; ++i) out += (i ? ", " : "") + names[i];
  if (names.size() > 20) out += ", ... (" + std::to_string(names.size()) + " in all)";
  return out;
}

// A store failure made into a message that says what to fix.
Status Explain(const Status& s, const store::S3Client& client, const std::string& what) {
  std::string msg = what + ": " + s.message();
  if (client.last_error_code() == "NoSuchBucket") {
    msg += "; check the bucket name in the address (the bucket does not exist)";
  } else if (std::string hint = store::S3Hint(client.last_http_status(), client.last_error_code());
             !hint.empty()) {
    msg += "; " + hint;
  }
  return s.code() == Status::Code::kNotFound ? Status::NotFound(msg) : Status::IoError(msg);
}

}  // namespace

const SegmentManifest::Object* SegmentManifest::DataObjectNamed(std::string_view name) const {
  for (const Object& o : objects) {
    if (o.role == "data" && BaseName(o.key) == name) return &o;
  }
  return nullptr;
}

Status ParseSegmentManifest(std::string_view text, const std::string& path, SegmentManifest* out) {
  Json j = Json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object()) {
    return Status::InvalidArgument(path + ": not a JSON object (a damaged manifest?)");
  }
  SegmentManifest m;
  m.path = path;
  m.format = String(j, "format");
  m.timestamp_zero_unix_ms = Integer(j, "timestamp_zero_unix_ms");
  m.state = String(j, "state");
  m.replica = String(j, "replica");
  // A local capture's manifest names its replica under "upload" (when it uploads).
  if (m.replica.empty() && j.contains("upload") && j["upload"].is_object()) {
    m.replica = String(j["upload"], "replica");
  }
  const Json* file = j.contains("file") && j["file"].is_object() ? &j["file"] : nullptr;
  // A running capture rewrites its manifest every few seconds: its file.* lag the file, and
  // are final only once the file is finished.
  // "recovered": a file an unclean stop left, described at the next start (capture/recovery.h).
  const bool finished = m.state == "rotated" || m.state == "stopped" || m.state == "recovered";
  if (file) {
    if (finished) m.last_timestamp_ms = Integer(*file, "last_timestamp_ms");
    m.file_sequence = Unsigned(*file, "sequence");
  }
  if (!m.timestamp_zero_unix_ms && file && Unsigned(*file, "records") == 0u) {
    int64_t ms = 0;
    if (ParseTimeArg(String(j, "updated_utc"), &ms).ok()) m.empty_at_unix_ms = ms;
  }
  // "records" is what the uploader counted in the object.
  m.records = Unsigned(j, "records");
  if (!m.records && file && finished) m.records = Unsigned(*file, "records");
  std::string host = String(j, "host"), started = String(j, "started_utc");
  std::optional<int64_t> pid = Integer(j, "pid");
  if (!host.empty() && !started.empty() && pid) {
    m.run = host + "|" + std::to_string(*pid) + "|" + started;
  }
  if (j.contains("counters") && j["counters"].is_object()) {
    for (auto& [k, v] : j["counters"].items()) {
      if (auto n = Unsigned(j["counters"], k.c_str())) m.counters[k] = *n;
    }
  }
  if (j.contains("objects") && j["objects"].is_array()) {
    for (const Json& o : j["objects"]) {
      if (!o.is_object()) continue;
      SegmentManifest::Object obj;
      obj.role = String(o, "role");
      obj.key = String(o, "key");
      obj.bytes = Unsigned(o, "bytes");
      obj.sha256 = String(o, "sha256");
      m.objects.push_back(std::move(obj));
    }
  }
  *out = std::move(m);
  return Status::Ok();
}

Status ListStoreSegments(store::S3Client* client, const std::string& url,
                         const ListOptions& options, StoreListing* out) {
  *out = StoreListing();
  store::S3Url base;
  Status s = store::ParseS3Url(url, &base);
  if (!s.ok()) return s;
  if (!base.key.empty() && base.key.back() != '/') base.key += '/';
  out->url = base.ToString();
  std::vector<store::S3Object> objects;
  s = client->ListObjects(base.bucket, base.key, &objects);
  if (!s.ok()) return Explain(s, *client, "cannot list " + out->url);
  out->objects = objects.size();
  if (objects.empty()) {
    return Status::NotFound("no complete segment under " + out->url +
                            ": nothing is stored there (check the address: a capture with "
                            "upload_url U uploads to U/<replica>/)");
  }

  // Group by folder; a folder's name is the replica's.
  struct Folder {
    std::string dir;  // key prefix, with its trailing '/' (empty at the bucket's root)
    std::map<std::string, const store::S3Object*> data;       // by data name (plain or .zst)
    std::map<std::string, const store::S3Object*> manifests;  // by uncompressed data name
  };
  std::map<std::string, Folder> folders;
  std::set<std::string> filtered_out;
  for (const store::S3Object& o : objects) {
    size_t slash = o.key.rfind('/');
    std::string dir = slash == std::string::npos ? "" : o.key.substr(0, slash + 1);
    std::string replica(BaseName(dir.empty() ? base.bucket : dir.substr(0, dir.size() - 1)));
    std::string data_name;
    Kind kind = Classify(BaseName(o.key), &data_name);
    if (kind != Kind::kData && kind != Kind::kManifest) continue;
    if (!Matches(options.replica_globs, replica)) {
      filtered_out.insert(replica);
      continue;
    }
    Folder& f = folders[dir];
    f.dir = dir;
    if (kind == Kind::kData) {
      f.data[std::string(BaseName(o.key))] = &o;
    } else {
      f.manifests[data_name] = &o;
    }
  }

  // Every manifest, read on a few threads: each is one small GET, and a store far away makes
  // hundreds of them slow one after the other.
  struct Job {
    const Folder* folder;
    std::string data_name;
    const store::S3Object* object;
    std::string text;
    Status status;
  };
  std::vector<Job> jobs;
  for (const auto& [dir, f] : folders) {
    for (const auto& [name, o] : f.manifests) jobs.push_back({&f, name, o, "", Status::Ok()});
  }
  std::atomic<size_t> next{0};
  auto work = [&](store::S3Client* c) {
    for (size_t i; (i = next.fetch_add(1)) < jobs.size();) {
      Job& job = jobs[i];
      if (job.object->size > (size_t{16} << 20)) {
        job.status = Status::InvalidArgument("s3://" + base.bucket + "/" + job.object->key +
                                             ": larger than 16 MiB, not a capture manifest");
        continue;
      }
      for (int attempt = 0; attempt < std::max(1, options.attempts); ++attempt) {
        if (attempt > 0) std::this_thread::sleep_for(std::chrono::milliseconds(200 << attempt));
        job.text.clear();
        job.status = c->GetObject(base.bucket, job.object->key, 0, 0, &job.text);
        if (job.status.ok() || job.status.code() == Status::Code::kNotFound ||
            job.status.code() == Status::Code::kRefused) {
          break;
        }
      }
      if (job.status.code() == Status::Code::kIoError ||
          job.status.code() == Status::Code::kRefused) {
        job.status =
            Explain(job.status, *c, "cannot read s3://" + base.bucket + "/" + job.object->key);
      }
    }
  };
  const size_t n_threads =
      std::min<size_t>(std::max(1, options.threads), std::max<size_t>(jobs.size() / 4, 1));
  if (n_threads <= 1) {
    work(client);
  } else {
    std::vector<std::thread> threads;
    std::vector<std::unique_ptr<store::S3Client>> clients;
    for (size_t i = 0; i < n_threads; ++i) {
      clients.push_back(std::make_unique<store::S3Client>(client->config()));
    }
    for (size_t i = 0; i < n_threads; ++i) threads.emplace_back(work, clients[i].get());
    for (std::thread& t : threads) t.join();
  }

  std::set<std::string> claimed;  // data keys some manifest names
  std::set<std::string> replicas;
  std::vector<std::pair<std::string, SegmentIssue>> skipped;  // by key, for key order
  std::vector<StoreSegment> segments;
  for (Job& job : jobs) {
    const Folder& f = *job.folder;
    const std::string manifest_url = "s3://" + base.bucket + "/" + job.object->key;
    // The data object the manifest describes: by the name it lists, else by the naming rule.
    std::string data_name;
    SegmentManifest m;
    Status parsed = job.status.ok() ? ParseSegmentManifest(job.text, manifest_url, &m) : job.status;
    if (parsed.ok()) {
      for (const auto& o : m.objects) {
        if (o.role == "data") data_name = std::string(BaseName(o.key));
      }
    }
    if (data_name.empty()) {
      data_name = f.data.count(job.data_name) || !f.data.count(job.data_name + ".zst")
                      ? job.data_name
                      : job.data_name + ".zst";
    }
    const std::string data_key = f.dir + data_name;
    const std::string data_url = "s3://" + base.bucket + "/" + data_key;
    claimed.insert(data_key);
    auto skip = [&](const std::string& why) { skipped.push_back({data_key, {data_url, why}}); };
    if (job.status.code() == Status::Code::kNotFound) {
      skip("its manifest " + manifest_url + " was deleted while listing; skipped");
      continue;
    }
    // The store failing is everyone's problem; a manifest that is not one is this segment's.
    if (!job.status.ok() && job.status.code() != Status::Code::kInvalidArgument) {
      return job.status;
    }
    if (!parsed.ok()) {
      skip(parsed.message() + "; skipped");
      continue;
    }
    auto it = f.data.find(data_name);
    if (it == f.data.end()) {
      skip("its manifest " + manifest_url +
           " names this object, which is not in the store; "
           "skipped");
      continue;
    }
    const SegmentManifest::Object* o = m.DataObjectNamed(data_name);
    if (o != nullptr && o->bytes && *o->bytes != it->second->size) {
      skip("the object holds " + std::to_string(it->second->size) + " bytes, its manifest says " +
           std::to_string(*o->bytes) + " (replaced or damaged after the upload?); skipped");
      continue;
    }
    StoreSegment seg;
    seg.data = data_url;
    seg.replica =
        std::string(BaseName(f.dir.empty() ? base.bucket : f.dir.substr(0, f.dir.size() - 1)));
    seg.listed_bytes = it->second->size;
    seg.manifest = std::move(m);
    replicas.insert(seg.replica);
    segments.push_back(std::move(seg));
  }
  for (const auto& [dir, f] : folders) {
    for (const auto& [name, o] : f.data) {
      if (claimed.count(o->key)) continue;
      skipped.push_back({o->key,
                         {"s3://" + base.bucket + "/" + o->key,
                          "no manifest: still uploading, or its upload was cut short (the "
                          "manifest goes up last); skipped"}});
    }
  }
  std::sort(segments.begin(), segments.end(),
            [](const StoreSegment& a, const StoreSegment& b) { return a.data < b.data; });
  std::sort(skipped.begin(), skipped.end(),
            [](const auto& a, const auto& b) { return a.first < b.first; });
  for (auto& [key, issue] : skipped) out->skipped.push_back(std::move(issue));
  out->segments = std::move(segments);
  out->replicas.assign(replicas.begin(), replicas.end());
  out->filtered_out.assign(filtered_out.begin(), filtered_out.end());
  if (out->segments.empty()) {
    std::string msg = "no complete segment under " + out->url;
    if (!out->skipped.empty()) {
      msg += ": " + std::to_string(out->skipped.size()) +
             " without a usable manifest (still uploading?), e.g. " + out->skipped[0].data + ": " +
             out->skipped[0].reason;
    } else if (!options.replica_globs.empty()) {
      msg += " for --replica " + Joined(options.replica_globs) +
             " (replicas there: " + Joined(out->filtered_out) + ")";
    } else {
      msg += ": " + std::to_string(out->objects) +
             " objects, none of them a capture segment (<name>.jsonl[.zst] with "
             "<name>.jsonl.manifest.json)";
    }
    return Status::NotFound(msg);
  }
  return Status::Ok();
}

}  // namespace llmtap::trace
