#include "capture/recovery.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <nlohmann/json.hpp>
#include <optional>
#include <string_view>
#include <vector>

#include "capture/file_names.h"
#include "capture/manifest.h"
#include "common/version.h"

namespace llmtap {
namespace {

using Json = nlohmann::ordered_json;

// Lines (every line ends with '\n' once the torn tail is cut) of the file at `path`.
Status CountLines(const std::string& path, uint64_t* lines) {
  *lines = 0;
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) return Status::IoError("cannot open " + path, errno);
  std::vector<char> buf(size_t{1} << 20);
  while (true) {
    ssize_t n = ::read(fd, buf.data(), buf.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int err = errno;
      ::close(fd);
      return Status::IoError("cannot read " + path, err);
    }
    if (n == 0) break;
    *lines += static_cast<uint64_t>(std::count(buf.data(), buf.data() + n, '\n'));
  }
  ::close(fd);
  return Status::Ok();
}

// The last line of a file that ends with '\n' (without it); empty for an empty file.
Status LastLine(Env* env, const std::string& path, uint64_t size, std::string* line) {
  line->clear();
  std::string tail;
  for (size_t window = 64 * 1024;; window *= 2) {
    Status s = env->ReadTail(path, window, &tail);
    if (!s.ok()) return s;
    if (tail.empty()) return Status::Ok();
    const size_t end = tail.back() == '\n' ? tail.size() - 1 : tail.size();
    const size_t nl = tail.rfind('\n', end == 0 ? 0 : end - 1);
    if (nl != std::string::npos && nl < end) {
      *line = tail.substr(nl + 1, end - nl - 1);
      return Status::Ok();
    }
    if (tail.size() >= size) {
      *line = tail.substr(0, end);
      return Status::Ok();
    }
  }
}

// A mooncake_payload row's timestamp, read from the prefix the writer gives every row.
std::optional<int64_t> RowTimestamp(std::string_view line) {
  constexpr std::string_view kPrefix = "{\"timestamp\":";
  if (!line.starts_with(kPrefix)) return std::nullopt;
  int64_t ts = 0;
  const char* begin = line.data() + kPrefix.size();
  auto [ptr, ec] = std::from_chars(begin, line.data() + line.size(), ts);
  if (ec != std::errc() || ptr == begin) return std::nullopt;
  return ts;
}

}  // namespace

Status WriteRecoveredManifest(Env* env, const std::string& data_path, uint64_t torn_bytes_cut) {
  FileInfo info;
  Status s = env->Stat(data_path, &info);
  if (!s.ok()) return s;
  if (!info.exists) return Status::IoError("recovered capture " + data_path + " is gone", ENOENT);
  uint64_t records = 0;
  s = CountLines(data_path, &records);
  if (!s.ok()) return s;
  std::string last;
  s = LastLine(env, data_path, info.size, &last);
  if (!s.ok()) return s;
  const std::optional<int64_t> last_ts = RowTimestamp(last);

  const std::string manifest_path = ManifestPathFor(data_path);
  Json j = Json::object();
  std::string text;
  if (env->ReadTail(manifest_path, 1 << 20, &text).ok() && !text.empty()) {
    Json old = Json::parse(text, nullptr, false);
    if (old.is_object()) j = std::move(old);
  }
  const bool had_manifest = !j.empty();
  // A clean stop's file (local capture, no upload_url) is described by its own manifest.
  if (j.contains("state") && j["state"] == "stopped") return Status::Ok();
  const Json old_state = j.contains("state") ? j["state"] : Json(nullptr);
  const Json as_of = j.contains("updated_utc") ? j["updated_utc"] : Json(nullptr);
  if (!j.contains("schema")) j["schema"] = "llmtap.capture.manifest/v1";
  if (!j.contains("llmtap_version")) j["llmtap_version"] = kVersion;
  j["capture_path"] = data_path;
  const std::string outcomes = OutcomesPathFor(data_path);
  FileInfo outcomes_info;
  const bool has_outcomes = env->Stat(outcomes, &outcomes_info).ok() && outcomes_info.exists;
  j["outcomes_path"] = has_outcomes ? Json(outcomes) : Json(nullptr);
  if (!j.contains("format") || !j["format"].is_string()) {
    // No manifest said: the rows tell (a mooncake_payload row starts with its timestamp).
    j["format"] = last_ts || records == 0 ? "mooncake_payload" : "raw_payload";
  }
  const bool mooncake = j["format"] == "mooncake_payload";

  // The epoch: the killed run's, when it wrote one (before the file's first row, since the
  // manifest goes first); else the last write's time less the last row's offset (an estimate,
  // late by the time the last row waited for its write: the writer's group-commit delay).
  const char* epoch_from = nullptr;
  std::optional<int64_t> epoch_ms;
  if (j.contains("timestamp_zero_unix_ms") && j["timestamp_zero_unix_ms"].is_number_integer()) {
    epoch_ms = j["timestamp_zero_unix_ms"].get<int64_t>();
    epoch_from = "manifest";
  } else if (mooncake && last_ts) {
    epoch_ms = info.modified_wall_nanos / 1000000 - *last_ts;
    epoch_from = "file_mtime";
  }
  if (epoch_ms) {
    j["timestamp_zero_unix_ms"] = *epoch_ms;
    j["timestamp_zero_utc"] = FormatUtcMillis(*epoch_ms * 1000000);
  } else {
    j["timestamp_zero_unix_ms"] = nullptr;
    j["timestamp_zero_utc"] = nullptr;
  }
  j["state"] = "recovered";
  Json file = j.contains("file") && j["file"].is_object() ? j["file"] : Json::object();
  file["records"] = records;
  file["bytes"] = info.size;
  file["last_timestamp_ms"] = mooncake && last_ts ? Json(*last_ts) : Json(0);
  j["file"] = std::move(file);
  j["recovered"] = {
      {"recovered_utc", FormatUtcMillis(env->NowWallNanos())},
      {"previous_state", old_state},
      {"epoch_from", epoch_from != nullptr ? Json(epoch_from) : Json(nullptr)},
      {"torn_tail_bytes_cut", torn_bytes_cut},
      // The killed run's counters are as of its last manifest; what it had queued and not
      // written when it stopped is counted nowhere.
      {"counters_as_of_utc", had_manifest ? as_of : Json(nullptr)},
  };
  return env->WriteFileAtomic(manifest_path,
                              j.dump(2, ' ', false, Json::error_handler_t::replace) + "\n");
}

}  // namespace llmtap
