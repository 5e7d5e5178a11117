// upload_bench: the capture uploader and its zstd step on one file, timed from inside, for
// bench/upload_vs_curl.sh (which times `curl -T` of the same file beside it).
//
//   upload_bench upload FILE s3://bucket/prefix/ [PART_MIB]
//       One Uploader (as the proxy runs it, keep_local on) sends FILE as a finished capture
//       file under prefix/bench/ and waits for its manifest. Prints "upload_s BYTES SECONDS".
//   upload_bench zstd FILE [LEVEL] [WINDOW_LOG]
//       Compresses FILE through the same zstd stream the uploader uses (one thread; WINDOW_LOG 0:
//       no long-distance matching; default 24 as the uploader), to FILE.bench.zst (removed
//       after), then reads it back through the tools' reader. Prints
//       "zstd_s BYTES COMPRESSED_BYTES SECONDS DECOMPRESS_SECONDS".
//
// Credentials and endpoint come from the AWS_* environment, as for llmtap itself.
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>

#include "capture/counters.h"
#include "common/log.h"
#include "capture/uploader.h"
#include "store/stream.h"

namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

double Seconds(Clock::time_point since) {
  return std::chrono::duration<double>(Clock::now() - since).count();
}

int Upload(const std::string& file, const std::string& url, size_t part_mib) {
  // A hard link of FILE under a rotated name, handed over as the writer hands over a finished
  // file (with its record count); keep_local leaves it in place.
  const fs::path dir = fs::temp_directory_path() / ("upload_bench." + std::to_string(getpid()));
  fs::create_directories(dir);
  const fs::path name = dir / "requests.20260101T000000.000Z.jsonl";
  int64_t records = 0;
  {
    std::unique_ptr<llmtap::store::ByteSource> source;
    if (!llmtap::store::OpenSource(file, &source).ok()) return 1;
    std::string buf(size_t{1} << 20, '\0');
    size_t n = 0;
    while (source->Read(buf.data(), buf.size(), &n).ok() && n > 0) {
      records += std::count(buf.data(), buf.data() + n, '\n');
    }
  }
  std::error_code ec;
  fs::create_hard_link(file, name, ec);
  if (ec) fs::copy_file(file, name);
  llmtap::CaptureConfig config;
  // Another stem than the file's, so that the start-up scan does not take it for a leftover.
  config.path = (dir / "live.jsonl").string();
  config.upload_url = url;
  config.replica = "bench";
  config.keep_local = true;
  llmtap::UploaderOptions options;
  options.part_bytes = part_mib << 20;
  if (const char* streams = std::getenv("PART_STREAMS")) options.part_streams = std::atoi(streams);
  options.stop_timeout = std::chrono::minutes(10);
  llmtap::CaptureCounters counters;
  const auto start = Clock::now();
  {
    llmtap::Uploader uploader(config, options, llmtap::Env::Default(), llmtap::Logger::Stderr(),
                              &counters);
    uploader.Start();
    uploader.FileFinished(name.string(), "", records);
    uploader.Stop();
  }
  const double s = Seconds(start);
  fs::remove_all(dir);
  const auto c = counters.Snapshot();
  if (c.files_uploaded != 1) {
    std::fprintf(stderr, "upload_bench: the file was not uploaded\n");
    return 1;
  }
  std::printf("upload_s %llu %.4f\n", static_cast<unsigned long long>(fs::file_size(file)), s);
  return 0;
}

int Zstd(const std::string& file, int level, int window_log) {
  const std::string out = file + ".bench.zst";
  std::unique_ptr<llmtap::store::ByteSource> source;
  std::unique_ptr<llmtap::store::ByteSink> sink;
  llmtap::store::SinkOptions o;
  o.force = true;
  o.zstd_level = level;
  o.zstd_window_log = window_log;
  o.pledged_size = fs::file_size(file);
  if (!llmtap::store::OpenSource(file, &source).ok() || !llmtap::store::OpenSink(out, &sink, o).ok()) {
    std::fprintf(stderr, "upload_bench: cannot open %s or %s\n", file.c_str(), out.c_str());
    return 1;
  }
  std::string buf(size_t{1} << 20, '\0');
  uint64_t bytes = 0;
  const auto start = Clock::now();
  for (;;) {
    size_t n = 0;
    if (!source->Read(buf.data(), buf.size(), &n).ok()) return 1;
    if (n == 0) break;
    bytes += n;
    if (!sink->Write(std::string_view(buf.data(), n)).ok()) return 1;
  }
  if (!sink->Close().ok()) return 1;
  const double s = Seconds(start);
  const auto read_start = Clock::now();
  if (!llmtap::store::OpenSource(out, &source).ok()) return 1;
  uint64_t back = 0;
  for (size_t n = 1; n > 0;) {
    if (!source->Read(buf.data(), buf.size(), &n).ok()) return 1;
    back += n;
  }
  const double d = Seconds(read_start);
  if (back != bytes) return 1;
  std::printf("zstd_s %llu %llu %.4f %.4f\n", static_cast<unsigned long long>(bytes),
              static_cast<unsigned long long>(fs::file_size(out)), s, d);
  fs::remove(out);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  if (mode == "upload" && argc >= 4) {
    return Upload(argv[2], argv[3], argc > 4 ? std::strtoul(argv[4], nullptr, 10) : 16);
  }
  if (mode == "zstd" && argc >= 3) {
    return Zstd(argv[2], argc > 3 ? std::atoi(argv[3]) : 3, argc > 4 ? std::atoi(argv[4]) : 24);
  }
  std::fprintf(stderr,
               "usage: upload_bench upload FILE s3://bucket/prefix/ [PART_MIB]\n"
               "       upload_bench zstd FILE [LEVEL] [WINDOW_LOG]\n");
  return 2;
}
