#include "capture/file_names.h"

#include <cstdio>
#include <ctime>

namespace llmtap {

std::string DirName(const std::string& path) {
  size_t slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

std::string ManifestPathFor(const std::string& capture_path) {
  return capture_path + ".manifest.json";
}

std::string OutcomesPathFor(const std::string& capture_path) {
  return capture_path + ".outcomes.ndjson";
}

std::string ShadowPairsPathFor(const std::string& capture_path) {
  return capture_path + ".shadow.ndjson";
}

std::string LegacyOutcomesPathFor(const std::string& capture_path) {
  return capture_path + ".outcomes.jsonl";
}

bool IsOutcomesName(std::string_view name) {
  if (name.ends_with(".zst")) name.remove_suffix(4);
  return name.ends_with(".outcomes.ndjson") || name.ends_with(".outcomes.jsonl");
}

namespace {

// "dir/stem.<UTC time>[-attempt].ext", the time to the second or to the millisecond.
std::string TimeStampedName(const std::string& capture_path, int64_t wall_nanos, bool millis,
                            int attempt) {
  time_t secs = static_cast<time_t>(wall_nanos / 1000000000);
  struct tm tm;
  gmtime_r(&secs, &tm);
  char stamp[40];
  size_t n = strftime(stamp, sizeof(stamp), "%Y%m%dT%H%M%S", &tm);
  if (millis) {
    snprintf(stamp + n, sizeof(stamp) - n, ".%03dZ",
             static_cast<int>((wall_nanos / 1000000) % 1000));
  } else {
    snprintf(stamp + n, sizeof(stamp) - n, "Z");
  }
  std::string suffix = stamp;
  if (attempt > 0) {
    suffix.push_back('-');
    suffix.append(std::to_string(attempt));
  }

  size_t slash = capture_path.rfind('/');
  size_t name_start = slash == std::string::npos ? 0 : slash + 1;
  size_t dot = capture_path.rfind('.');
  if (dot == std::string::npos || dot <= name_start) return capture_path + "." + suffix;
  return capture_path.substr(0, dot) + "." + suffix + capture_path.substr(dot);
}

}  // namespace

std::string AsideName(const std::string& capture_path, int64_t wall_nanos, int attempt) {
  return TimeStampedName(capture_path, wall_nanos, true, attempt);
}

std::string RotatedName(const std::string& capture_path, int64_t first_record_wall_nanos,
                        int attempt) {
  return TimeStampedName(capture_path, first_record_wall_nanos, true, attempt);
}

}  // namespace llmtap
