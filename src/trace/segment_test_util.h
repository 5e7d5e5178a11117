// Helpers for the merge tests: synthetic capture segments laid out as the capture writes them
// (rotated names, RenderManifest manifests) and as its uploader puts them in the store
// ("replica", "records", "objects" with sizes and SHA-256). Test code; one thread.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "capture/file_names.h"
#include "capture/manifest.h"
#include "store/sha256.h"
#include "store/stream.h"
#include "trace/trace_test_util.h"

namespace llmtap::trace::testing {

// One finished capture file of one replica.
struct SegmentSpec {
  std::string replica;
  std::string host = "host";
  int pid = 1;
  int64_t started_ms = 1796378400000;  // 2026-12-04T10:00:00Z
  uint64_t sequence = 1;
  int64_t epoch_ms = 0;            // wall clock of its timestamp 0 (its first record)
  std::vector<std::string> lines;  // rows, without '\n'
  int64_t last_timestamp_ms = 0;
  uint64_t recorded_so_far = 0;  // the run's "recorded" counter when this file was finished
  bool zstd = false;

  // "requests.<UTC of the first record>.jsonl" (the rotated name), ".zst" when compressed.
  std::string DataName() const {
    std::string plain = BaseOf(RotatedName("requests.jsonl", epoch_ms * 1000000, 0));
    return zstd ? plain + ".zst" : plain;
  }
  std::string PlainName() const {
    return BaseOf(RotatedName("requests.jsonl", epoch_ms * 1000000, 0));
  }
  std::string Text() const {
    std::string t;
    for (const std::string& l : lines) t += l + "\n";
    return t;
  }
  static std::string BaseOf(const std::string& p) {
    size_t s = p.rfind('/');
    return s == std::string::npos ? p : p.substr(s + 1);
  }
};

// Rows at timestamps 0, then increasing by 1..max_gap ms; each names its replica and index.
inline SegmentSpec MakeSegment(const std::string& replica, int64_t epoch_ms, int rows,
                               uint32_t seed, int max_gap = 40) {
  SegmentSpec s;
  s.replica = replica;
  s.epoch_ms = epoch_ms;
  std::mt19937 rng(seed);
  int64_t t = 0;
  for (int i = 0; i < rows; ++i) {
    if (i > 0) t += 1 + static_cast<int64_t>(rng() % static_cast<uint32_t>(max_gap));
    s.lines.push_back("{\"timestamp\":" + std::to_string(t) +
                      ",\"payload\":{\"model\":\"m\",\"prompt\":\"" + replica + "-" +
                      std::to_string(seed) + "-" + std::to_string(i) + " " +
                      std::string(rng() % 300, 'x') + "\",\"max_tokens\":8}}");
  }
  s.last_timestamp_ms = t;
  return s;
}

// The capture's own manifest of a rotated file, rendered by the capture code.
inline std::string LocalManifest(const SegmentSpec& s, const std::string& capture_path) {
  ManifestInfo info;
  info.capture_path = capture_path;
  info.config.path = capture_path;
  info.timestamp_zero_wall_nanos = s.epoch_ms * 1000000;
  info.started_wall_nanos = s.started_ms * 1000000;
  info.updated_wall_nanos = (s.epoch_ms + s.last_timestamp_ms) * 1000000;
  info.host = s.host;
  info.pid = s.pid;
  info.file_sequence = s.sequence;
  info.file_records = s.lines.size();
  info.file_bytes = s.Text().size();
  info.file_last_timestamp_ms = s.last_timestamp_ms;
  info.rotated = true;
  info.counters.recorded = s.recorded_so_far;
  info.counters.matched = s.recorded_so_far;
  info.counters.offered = s.recorded_so_far;
  return RenderManifest(info);
}

// The stored bytes of a segment's data: plain, or compressed as the uploader does (through
// store::OpenSink: level 3, a checksum, long-distance matching over 2^24 bytes, the size
// pledged). `scratch` is a local path to use.
inline std::string StoredBytes(const SegmentSpec& s, const std::string& scratch) {
  if (!s.zstd) return s.Text();
  std::unique_ptr<store::ByteSink> sink;
  store::SinkOptions o;
  o.force = true;
  o.zstd_window_log = 24;
  o.pledged_size = s.Text().size();
  EXPECT_TRUE(store::OpenSink(scratch + ".zst", &sink, o).ok());
  EXPECT_TRUE(sink->Write(s.Text()).ok());
  EXPECT_TRUE(sink->Close().ok());
  return ReadAll(scratch + ".zst");
}

// The whole of a local, .zst or s3:// file, decoded as the trace tools read it.
inline std::string ReadDecoded(const std::string& path) {
  std::string text;
  Status s = store::ReadWhole(path, &text);
  EXPECT_TRUE(s.ok()) << path << ": " << s.ToString();
  return text;
}

inline std::string Sha256Hex(const std::string& bytes) {
  store::Sha256 sha;
  sha.Update(bytes);
  return sha.HexDigest();
}

// The manifest the uploader puts in the store: the local one plus replica, records, objects.
inline std::string StoreManifest(const std::string& local, const std::string& replica,
                                 const std::string& data_key, const std::string& stored,
                                 uint64_t records) {
  nlohmann::ordered_json j = nlohmann::ordered_json::parse(local);
  j["replica"] = replica;
  j["records"] = records;
  j["objects"] = nlohmann::ordered_json::array({{{"role", "data"},
                                                 {"key", data_key},
                                                 {"bytes", stored.size()},
                                                 {"sha256", Sha256Hex(stored)}}});
  j["uploaded_utc"] = "2026-12-04T12:00:00.000Z";
  return j.dump(2) + "\n";
}

// A run's files: `files` segments of one replica one after another (gaps of 1..`gap` ms
// between files), sequence numbers and cumulative counters as a rotating capture writes them.
inline std::vector<SegmentSpec> MakeRun(const std::string& replica, int64_t start_ms, int files,
                                        int rows_per_file, uint32_t seed, bool zstd_every_other,
                                        int pid = 1) {
  std::vector<SegmentSpec> out;
  int64_t t = start_ms;
  uint64_t recorded = 0;
  for (int f = 0; f < files; ++f) {
    SegmentSpec s = MakeSegment(replica, t, rows_per_file, seed * 1000 + static_cast<uint32_t>(f));
    s.host = "host-" + replica;
    s.pid = pid;
    s.sequence = static_cast<uint64_t>(f) + 1;
    recorded += s.lines.size();
    s.recorded_so_far = recorded;
    s.zstd = zstd_every_other && f % 2 == 1;
    t += s.last_timestamp_ms + 1 + (seed + static_cast<uint32_t>(f)) % 30;
    out.push_back(std::move(s));
  }
  return out;
}

// What a merge must produce: every row placed at epoch + timestamp, sorted by that time,
// ties by input order then line order, re-timed from the first row. `order` lists the
// segments in input order.
inline std::vector<std::string> ExpectedMerge(const std::vector<const SegmentSpec*>& order,
                                              std::optional<int64_t> from = std::nullopt,
                                              std::optional<int64_t> to = std::nullopt) {
  std::vector<std::tuple<int64_t, size_t, size_t, std::string>> rows;
  for (size_t i = 0; i < order.size(); ++i) {
    for (size_t k = 0; k < order[i]->lines.size(); ++k) {
      const std::string& l = order[i]->lines[k];
      size_t comma = l.find(',');
      int64_t ts = std::stoll(l.substr(13, comma - 13));
      int64_t abs = order[i]->epoch_ms + ts;
      if ((from && abs < *from) || (to && abs >= *to)) continue;
      rows.emplace_back(abs, i, k, l.substr(comma));
    }
  }
  std::sort(rows.begin(), rows.end());
  std::vector<std::string> out;
  for (auto& [abs, i, k, rest] : rows) {
    out.push_back("{\"timestamp\":" + std::to_string(abs - std::get<0>(rows[0])) + rest);
  }
  return out;
}

}  // namespace llmtap::trace::testing
