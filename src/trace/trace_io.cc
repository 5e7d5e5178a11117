#include "trace/trace_io.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "capture/file_names.h"
#include "trace/line_reader.h"

namespace llmtap::trace {

OutputFile::~OutputFile() {
  if (sink_) (void)Close();
}

Status OutputFile::Open(const std::string& path, bool force) {
  path_ = path;
  store::SinkOptions options;
  options.force = force;
  status_ = store::OpenSink(path, &sink_, options);
  if (status_.ok()) buf_.reserve(kFlushBytes);
  return status_;
}

void OutputFile::Flush() {
  if (status_.ok() && !buf_.empty()) status_ = sink_->Write(buf_);
  buf_.clear();
}

Status OutputFile::Close() {
  if (!sink_) return status_;
  Flush();
  Status c = sink_->Close();
  if (status_.ok()) status_ = c;
  sink_.reset();
  return status_;
}

Status OpenInputAndOutput(const std::string& in_path, LineReader* in, const std::string& out_path,
                          bool force, OutputFile* out) {
  Status s = in->Open(in_path);
  if (!s.ok()) return s;
  return out->Open(out_path, force);
}

Status CheckOutputPath(const std::string& path, bool force) {
  return store::CheckSinkTarget(path, force);
}

ApiRecord::ApiRecord(const std::optional<ManifestView>& manifest) {
  if (!manifest) return;
  if (manifest->format == "mooncake_payload") {
    kind_ = Kind::kNamed;
    return;
  }
  if (!manifest->file_apis) return;
  for (const auto& [name, n] : *manifest->file_apis) lines_ += n;
  auto count = [&](const char* name) {
    auto it = manifest->file_apis->find(name);
    return it == manifest->file_apis->end() ? uint64_t{0} : it->second;
  };
  chat_ = count("chat");
  messages_ = count("messages");
  kind_ = messages_ == 0 ? Kind::kNoMessages : chat_ == 0 ? Kind::kMessagesOnly : Kind::kBoth;
}

ApiRecord ApiRecord::For(const std::string& capture_path) {
  Status status;
  return ApiRecord(ReadManifestFor(capture_path, &status));
}

api::Endpoint ApiRecord::Resolve(api::Endpoint by_shape, uint64_t line) const {
  if (!Covers(line) || (by_shape != api::Endpoint::kChat && by_shape != api::Endpoint::kMessages)) {
    return by_shape;
  }
  return kind_ == Kind::kMessagesOnly ? api::Endpoint::kMessages : api::Endpoint::kChat;
}

std::string ApiRecord::Note() const {
  if (kind_ == Kind::kBoth) {
    return " (the capture's manifest counts " + std::to_string(chat_) + " chat and " +
           std::to_string(messages_) +
           " /v1/messages requests in this file, so it cannot tell these rows apart)";
  }
  if (kind_ == Kind::kNoMessages || kind_ == Kind::kMessagesOnly) {
    return " (the capture's manifest counts only its first " + std::to_string(lines_) +
           " rows; the later ones were written after it)";
  }
  return "";
}

std::optional<ManifestView> ReadManifestFor(const std::string& capture_path, Status* status) {
  *status = Status::Ok();
  if (capture_path == "-") return std::nullopt;
  // A compressed segment's manifest is named after the uncompressed file it describes.
  std::string data_path = capture_path;
  if (data_path.ends_with(".zst")) data_path.resize(data_path.size() - 4);
  const std::string path = ManifestPathFor(data_path);
  std::string text;
  Status read = store::ReadWhole(path, &text);
  if (read.code() == Status::Code::kNotFound) return std::nullopt;
  if (!read.ok()) {
    *status = read;
    return std::nullopt;
  }
  nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object()) {
    *status = Status::InvalidArgument(path + ": not a JSON object (a damaged manifest?)");
    return std::nullopt;
  }
  ManifestView m;
  m.path = path;
  if (j.contains("format") && j["format"].is_string()) m.format = j["format"];
  if (j.contains("timestamp_zero_unix_ms") && j["timestamp_zero_unix_ms"].is_number_integer()) {
    m.timestamp_zero_unix_ms = j["timestamp_zero_unix_ms"].get<int64_t>();
  }
  if (j.contains("state") && j["state"].is_string()) m.state = j["state"];
  if (j.contains("config") && j["config"].is_object() && j["config"].contains("sample_rate") &&
      j["config"]["sample_rate"].is_number()) {
    m.sample_rate = j["config"]["sample_rate"].get<double>();
    m.has_sample_rate = true;
  }
  if (j.contains("file") && j["file"].is_object() && j["file"].contains("records") &&
      j["file"]["records"].is_number_unsigned()) {
    m.file_records = j["file"]["records"].get<uint64_t>();
  }
  if (j.contains("file") && j["file"].is_object() && j["file"].contains("apis") &&
      j["file"]["apis"].is_object()) {
    std::map<std::string, uint64_t> apis;
    for (auto& [k, v] : j["file"]["apis"].items()) {
      if (v.is_number_unsigned()) apis[k] = v.get<uint64_t>();
    }
    m.file_apis = std::move(apis);
  }
  if (j.contains("counters") && j["counters"].is_object()) {
    for (auto& [k, v] : j["counters"].items()) {
      if (v.is_number_unsigned() || v.is_number_integer()) m.counters[k] = v.get<uint64_t>();
    }
  }
  return m;
}

Progress::Progress(std::string tool, bool force)
    : tool_(std::move(tool)), enabled_(force || ::isatty(2) == 1) {
  start_ = last_ = std::chrono::steady_clock::now();
}

namespace {
// "512.0 MB" below a gigabyte, "1.25 GB" from there.
std::string Bytes(uint64_t n) {
  char buf[32];
  if (n < 1000000000) {
    std::snprintf(buf, sizeof buf, "%.1f MB", static_cast<double>(n) / 1e6);
  } else {
    std::snprintf(buf, sizeof buf, "%.2f GB", static_cast<double>(n) / 1e9);
  }
  return buf;
}
}  // namespace

void Progress::Maybe(uint64_t done, uint64_t total) {
  auto now = std::chrono::steady_clock::now();
  if (now - last_ < std::chrono::seconds(2)) return;
  last_ = now;
  double secs = std::chrono::duration<double>(now - start_).count();
  double mb_s = secs > 0 ? static_cast<double>(done) / 1e6 / secs : 0.0;
  if (total > 0) {
    std::fprintf(stderr, "%s: %s of %s (%.0f%%), %.1f MB/s\n", tool_.c_str(), Bytes(done).c_str(),
                 Bytes(total).c_str(),
                 100.0 * static_cast<double>(done) / static_cast<double>(total), mb_s);
  } else {
    std::fprintf(stderr, "%s: %s, %.1f MB/s\n", tool_.c_str(), Bytes(done).c_str(), mb_s);
  }
  printed_ = true;
}

void Progress::Finish() {
  if (printed_) std::fprintf(stderr, "%s: done\n", tool_.c_str());
}

std::string DerivedPath(const std::string& in, const std::string& out_dir,
                        std::string_view suffix) {
  std::string dir, base = in;
  size_t slash = in.rfind('/');
  if (slash != std::string::npos) {
    dir = in.substr(0, slash + 1);
    base = in.substr(slash + 1);
  }
  if (base.size() > 6 && base.ends_with(".jsonl")) base.resize(base.size() - 6);
  if (base == "-" || base.empty()) base = "stdin";
  if (!out_dir.empty()) dir = out_dir.back() == '/' ? out_dir : out_dir + "/";
  return dir + base + "." + std::string(suffix) + ".jsonl";
}

}  // namespace llmtap::trace
