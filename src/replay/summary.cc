#include "replay/summary.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <limits>

#include "common/version.h"
#include "report/html_report.h"
#include "report/run_dir.h"

namespace llmtap::replay {
namespace {

using nlohmann::json;

double Round3(double v) { return std::round(v * 1000.0) / 1000.0; }
std::optional<double> Round3(const std::optional<double>& v) {
  return v ? std::optional<double>(Round3(*v)) : std::nullopt;
}
std::optional<int64_t> Int(const std::optional<uint64_t>& v) {
  return v ? std::optional<int64_t>(static_cast<int64_t>(*v)) : std::nullopt;
}

// Metrics in the order the console shows them.
constexpr const char* kMetrics[] = {"ttft_ms",    "ttst_ms",      "itl_ms",        "inter_chunk_ms",
                                    "latency_ms", "input_tokens", "output_tokens", "lag_ms"};

double NumberOr(const json& j, double fallback) {
  return j.is_number() ? j.get<double>() : fallback;
}

}  // namespace

report::RequestResult ToReportResult(const RequestResult& r, uint32_t shard, bool causal_sessions) {
  report::RequestResult o;
  o.index = static_cast<int64_t>(r.index);
  o.shard = static_cast<int>(shard);
  o.endpoint = r.chat ? "chat" : "completions";
  o.stream = r.stream;
  o.scheduled_ms = Round3(r.scheduled_ms);
  o.warmup = r.warmup;
  o.held_ms = Round3(r.held_ms);
  o.session_turn = causal_sessions && r.session_turn;
  if (!r.sent) return o;
  if (o.session_turn) {
    o.causal_shift_ms = Round3(r.causal_shift_ms);
    o.captured_latency = r.captured_latency;
  }
  o.sent_ms = Round3(r.sent_ms);
  o.lag_ms = Round3(r.lag_ms());
  o.done_ms = Round3(r.done_ms);
  o.latency_ms = Round3(r.latency_ms());
  o.status = r.status;
  o.error = std::string(ErrorKindName(r.error));
  o.ttft_ms = Round3(r.ttft_ms);
  o.ttst_ms = Round3(r.ttst_ms);
  o.itl_ms = Round3(r.itl_ms);
  o.max_chunk_gap_ms = Round3(r.max_chunk_gap_ms);
  o.chunks = r.chunks;
  o.input_tokens = Int(r.input_tokens);
  o.output_tokens = Int(r.output_tokens);
  o.tokens_from = r.tokens_from_usage ? "usage" : "counted";
  o.chunk_gaps_ms.reserve(r.gaps_ms.size());
  for (float g : r.gaps_ms) o.chunk_gaps_ms.push_back(Round3(g));
  return o;
}

namespace {

// Order-preserving keys of doubles: a < b exactly when Key(a) < Key(b) (for -0.0 < +0.0 too,
// which Add avoids by storing every zero as +0.0).
uint64_t Key(double v) {
  uint64_t u;
  std::memcpy(&u, &v, sizeof(u));
  return (u >> 63) ? ~u : (u | (uint64_t{1} << 63));
}

double Value(uint64_t key) {
  const uint64_t u = (key >> 63) ? (key & ~(uint64_t{1} << 63)) : ~key;
  double v;
  std::memcpy(&v, &u, sizeof(v));
  return v;
}

constexpr size_t kBufferKeys = size_t{1} << 16;  // 512 KiB per spool, for writing and reading
constexpr int kBucketBits = 16;

}  // namespace

// Values in [lo, hi] (keys) of which `below` lie below lo and `count` inside, with the ranks
// (0-based, in sorted order) wanted from it.
struct ValueSpool::Range {
  uint64_t lo = 0, hi = 0;
  uint64_t below = 0, count = 0;
  std::vector<uint64_t> ranks;
  // This pass: count in buckets of 2^shift keys, or (few values left) collect them.
  bool collect = false;
  int shift = 0;
  std::vector<uint64_t> buckets;
  std::vector<uint64_t> values;
};

ValueSpool::~ValueSpool() {
  if (fd_ >= 0) ::close(fd_);
}

bool ValueSpool::Open(const std::vector<std::string>& dirs, std::string* error) {
  std::string why;
  for (const std::string& dir : dirs) {
    if (dir.empty()) continue;
    // Unlinked from the start: nothing is left behind, however the process ends.
    fd_ = ::open(dir.c_str(), O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
    if (fd_ < 0) {
      std::string path = dir + "/.llmtap-replay-values-XXXXXX";
      fd_ = mkostemp(path.data(), O_CLOEXEC);
      if (fd_ >= 0) ::unlink(path.c_str());
    }
    if (fd_ >= 0) {
      buffer_.reserve(kBufferKeys);
      return true;
    }
    why += (why.empty() ? "" : "; ") + dir + ": " + std::strerror(errno);
  }
  *error = "no temporary file for the statistics' values (" + why + "); they stay in memory";
  return false;
}

void ValueSpool::Add(double value) {
  if (!std::isfinite(value)) return;
  if (value == 0) value = 0;  // -0.0 -> +0.0
  const uint64_t key = Key(value);
  ++count_;
  sum_ += value;
  min_key_ = std::min(min_key_, key);
  max_key_ = std::max(max_key_, key);
  buffer_.push_back(key);
  if (fd_ >= 0 && buffer_.size() == kBufferKeys) Flush();
}

bool ValueSpool::Flush() {
  if (fd_ < 0) return true;  // in memory
  const char* p = reinterpret_cast<const char*>(buffer_.data());
  size_t left = error_.empty() ? buffer_.size() * sizeof(uint64_t) : 0;
  while (left > 0) {
    const ssize_t n = ::write(fd_, p, left);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      error_ = std::string("writing the statistics' temporary file: ") + std::strerror(errno);
      break;
    }
    p += n;
    left -= static_cast<size_t>(n);
  }
  buffer_.clear();
  return error_.empty();
}

// One read of the values: every range counts (or collects) the values that fall in it.
bool ValueSpool::Pass(std::vector<Range>* ranges, std::string* error) {
  auto take = [&](const uint64_t* keys, size_t got) {
    for (Range& r : *ranges) {
      const uint64_t lo = r.lo, hi = r.hi;
      if (r.collect) {
        for (size_t i = 0; i < got; ++i) {
          if (keys[i] >= lo && keys[i] <= hi) r.values.push_back(keys[i]);
        }
      } else {
        uint64_t* buckets = r.buckets.data();
        const int shift = r.shift;
        for (size_t i = 0; i < got; ++i) {
          if (keys[i] >= lo && keys[i] <= hi) ++buckets[(keys[i] - lo) >> shift];
        }
      }
    }
  };
  if (fd_ < 0) {
    take(buffer_.data(), buffer_.size());
    return true;
  }
  std::vector<uint64_t> keys(kBufferKeys);
  off_t offset = 0;
  for (;;) {
    const ssize_t n = ::pread(fd_, keys.data(), keys.size() * sizeof(uint64_t), offset);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      *error = std::string("reading the statistics' temporary file: ") + std::strerror(errno);
      return false;
    }
    if (n == 0) break;
    offset += n;
    take(keys.data(), static_cast<size_t>(n) / sizeof(uint64_t));
  }
  return true;
}

bool ValueSpool::Compute(report::Stats* stats, std::string* error) {
  *stats = report::Stats();
  if (fd_ >= 0 && !buffer_.empty()) Flush();
  if (!error_.empty()) {
    *error = error_;
    return false;
  }
  const size_t n = count_;
  stats->count = n;
  if (n == 0) return true;
  // The ranks report::Percentile reads.
  const double qs[] = {0.50, 0.90, 0.95, 0.99};
  std::vector<uint64_t> wanted;
  for (double q : qs) {
    const double h = q * static_cast<double>(n - 1);
    const size_t lo = static_cast<size_t>(std::floor(h));
    wanted.push_back(lo);
    wanted.push_back(std::min(lo + 1, n - 1));
  }
  std::sort(wanted.begin(), wanted.end());
  wanted.erase(std::unique(wanted.begin(), wanted.end()), wanted.end());

  std::map<uint64_t, uint64_t> found;  // rank -> key
  std::vector<Range> open(1);
  open[0].lo = min_key_;
  open[0].hi = max_key_;
  open[0].count = n;
  open[0].ranks = wanted;
  while (!open.empty()) {
    std::vector<Range> active;
    for (Range& r : open) {
      if (r.lo == r.hi) {
        for (uint64_t rank : r.ranks) found[rank] = r.lo;
        continue;
      }
      active.push_back(std::move(r));
    }
    if (active.empty()) break;
    const size_t collect_each = std::max<size_t>(1, collect_limit_ / active.size());
    for (Range& r : active) {
      r.collect = r.count <= collect_each;
      if (r.collect) {
        r.values.reserve(r.count);
      } else {
        r.shift = std::max(0, static_cast<int>(std::bit_width(r.hi - r.lo)) - kBucketBits);
        r.buckets.assign(static_cast<size_t>(((r.hi - r.lo) >> r.shift) + 1), 0);
      }
    }
    if (!Pass(&active, error)) return false;
    std::vector<Range> next;
    for (Range& r : active) {
      if (r.collect) {
        std::sort(r.values.begin(), r.values.end());
        for (uint64_t rank : r.ranks) found[rank] = r.values[rank - r.below];
        continue;
      }
      // Each wanted rank moves into its bucket; ranks in the same bucket share the next range.
      uint64_t before = r.below;
      size_t k = 0;
      for (size_t b = 0; b < r.buckets.size() && k < r.ranks.size(); ++b) {
        const uint64_t c = r.buckets[b];
        if (c == 0 || r.ranks[k] >= before + c) {
          before += c;
          continue;
        }
        Range sub;
        sub.lo = r.lo + (static_cast<uint64_t>(b) << r.shift);
        sub.hi = std::min(r.hi, sub.lo + ((uint64_t{1} << r.shift) - 1));
        sub.below = before;
        sub.count = c;
        while (k < r.ranks.size() && r.ranks[k] < before + c) sub.ranks.push_back(r.ranks[k++]);
        next.push_back(std::move(sub));
        before += c;
      }
    }
    open = std::move(next);
  }
  auto at = [&](uint64_t rank) { return Value(found.at(rank)); };
  auto percentile = [&](double q) {
    // report::Percentile's arithmetic, on the same two values.
    const double h = q * static_cast<double>(n - 1);
    const size_t lo = static_cast<size_t>(std::floor(h));
    const size_t hi = std::min(lo + 1, n - 1);
    return at(lo) + (h - static_cast<double>(lo)) * (at(hi) - at(lo));
  };
  stats->mean = static_cast<double>(sum_ / static_cast<long double>(n));
  stats->p50 = percentile(0.50);
  stats->p90 = percentile(0.90);
  stats->p95 = percentile(0.95);
  stats->p99 = percentile(0.99);
  stats->max = Value(max_key_);
  return true;
}

SummaryBuilder::SummaryBuilder(report::SummaryOptions options)
    : options_(std::move(options)),
      first_sent_(std::numeric_limits<double>::infinity()),
      last_done_(-std::numeric_limits<double>::infinity()) {}

bool SummaryBuilder::Open(const std::vector<std::string>& dirs, std::string* error) {
  bool files = true;
  for (ValueSpool* v : {&ttft_, &ttst_, &itl_, &gaps_, &latency_, &input_, &output_, &lag_}) {
    files = v->Open(dirs, error) && files;
  }
  return files;
}

// report::SummarizeRequests' loop, one request at a time.
void SummaryBuilder::Add(const report::RequestResult& r) {
  if (r.warmup) {
    ++warmup_;
    return;
  }
  ++scheduled_;
  if (r.held_ms > 0) ++violations_;
  held_total_ += r.held_ms;
  if (r.sent_ms) {
    ++sent_;
    lag_.Add(r.lag_ms);
    first_sent_ = std::min(first_sent_, *r.sent_ms);
    last_done_ = std::max(last_done_, r.done_ms);
  }
  if (!r.error.empty()) {
    ++errors_;
    ++errors_by_kind_[r.error];
  }
  if (!(r.error.empty() && r.status >= 200 && r.status < 300)) return;
  ++completed_;
  if (r.ttft_ms) ttft_.Add(*r.ttft_ms);
  if (r.ttst_ms) ttst_.Add(*r.ttst_ms);
  if (r.itl_ms) itl_.Add(*r.itl_ms);
  for (double g : r.chunk_gaps_ms) gaps_.Add(g);
  latency_.Add(r.latency_ms);
  if (r.input_tokens) input_.Add(static_cast<double>(*r.input_tokens));
  if (r.output_tokens) {
    output_.Add(static_cast<double>(*r.output_tokens));
    output_sum_ += static_cast<double>(*r.output_tokens);
  }
  bool good = true;
  for (const report::GoodputConstraint& c : options_.goodput) {
    std::optional<double> v;
    if (c.metric == "ttft_ms") v = r.ttft_ms;
    if (c.metric == "ttst_ms") v = r.ttst_ms;
    if (c.metric == "itl_ms") v = r.itl_ms;
    if (c.metric == "latency_ms") v = r.latency_ms;
    if (c.metric == "max_chunk_gap_ms") v = r.max_chunk_gap_ms;
    if (!v || *v > c.max_ms) good = false;
  }
  if (good) ++good_;
}

bool SummaryBuilder::Summarize(json* out_json, std::string* error) {
  const double duration_s = options_.duration_s ? *options_.duration_s
                            : sent_             ? std::max(0.0, (last_done_ - first_sent_) / 1000.0)
                                                : 0.0;
  auto rate = [&](double n) { return duration_s > 0 ? json(n / duration_s) : json(nullptr); };
  json out;
  out["duration_s"] = duration_s;
  json by_kind = json::object();
  for (const auto& [kind, n] : errors_by_kind_) by_kind[kind] = n;
  out["requests"] = {{"scheduled", scheduled_},   {"sent", sent_},
                     {"completed", completed_},   {"errors", errors_},
                     {"errors_by_kind", by_kind}, {"warmup", warmup_}};
  out["throughput"] = {{"requests_per_s", rate(static_cast<double>(completed_))},
                       {"output_tokens_per_s", rate(output_sum_)}};
  if (options_.goodput.empty()) {
    out["goodput"] = nullptr;
  } else {
    json constraints = json::object();
    for (const report::GoodputConstraint& c : options_.goodput) constraints[c.metric] = c.max_ms;
    out["goodput"] = {
        {"constraints", constraints},
        {"good", good_},
        {"requests_per_s", rate(static_cast<double>(good_))},
        {"fraction", completed_ ? json(static_cast<double>(good_) / static_cast<double>(completed_))
                                : json(nullptr)}};
  }
  json metrics = json::object();
  const std::pair<const char*, ValueSpool*> spools[] = {
      {"ttft_ms", &ttft_},         {"ttst_ms", &ttst_},       {"itl_ms", &itl_},
      {"inter_chunk_ms", &gaps_},  {"latency_ms", &latency_}, {"input_tokens", &input_},
      {"output_tokens", &output_}, {"lag_ms", &lag_}};
  for (const auto& [name, spool] : spools) {
    report::Stats stats;
    if (!spool->Compute(&stats, error)) return false;
    metrics[name] = report::StatsToJson(stats);
  }
  out["metrics"] = std::move(metrics);
  out["open_loop"] = {{"max_concurrency",
                       options_.max_concurrency ? json(*options_.max_concurrency) : json(nullptr)},
                      {"violations", violations_},
                      {"held_ms_total", held_total_}};
  out["definitions"] = report::MetricDefinitions();
  *out_json = std::move(out);
  return true;
}

namespace {
// DIR/requests.jsonl: for a local DIR written as .tmp first and renamed at the end; an s3://
// object appears only when complete anyway.
std::string LinesTarget(const std::string& dir) {
  const std::string lines = (std::filesystem::path(dir) / report::kRequestsFile).string();
  return store::IsS3Url(dir) ? lines : lines + ".tmp";
}
}  // namespace

RunOutputs::~RunOutputs() {
  if (lines_ != nullptr && !store::IsS3Url(dir_)) {
    lines_.reset();
    std::remove(LinesTarget(dir_).c_str());
  }
  // An s3:// sink dropped before Finish aborts its upload: no partial requests.jsonl.
}

bool RunOutputs::Open(const std::string& dir, std::string* error, std::string* warning) {
  dir_ = dir;
  warning->clear();
  const bool in_store = store::IsS3Url(dir);
  if (!dir.empty()) {
    std::error_code ec;
    if (!in_store) std::filesystem::create_directories(dir, ec);
    if (ec) {
      *error = dir + ": " + ec.message();
      return false;
    }
    Status s = store::OpenSink(LinesTarget(dir), &lines_, store::SinkOptions{.force = true});
    if (!s.ok()) {
      *error = s.ToString();
      return false;
    }
    lines_buffer_.reserve(kLinesBufferBytes);
  }
  // The values' files: where the user points temporary files, else beside the outputs (a
  // container's writable volume), else /tmp.
  const char* tmpdir = std::getenv("TMPDIR");
  const std::vector<std::string> dirs = {tmpdir != nullptr ? tmpdir : "", in_store ? "" : dir,
                                         "/tmp"};
  bool files = summary_.Open(dirs, warning);
  files = shift_.Open(dirs, warning) && files;
  if (!files) {
    *warning += " (set TMPDIR to a writable directory)";
  }
  return true;
}

void RunOutputs::Add(const RequestResult& r) {
  const report::RequestResult line = ToReportResult(r, shard_, causal_sessions_);
  summary_.Add(line);
  ++requests_;
  if (r.sent && !r.ok()) ++failed_;
  if (r.session_turn && r.sent && !r.warmup) {
    ++turns_;
    if (!r.captured_latency) ++without_latency_;
    // The shift as requests.jsonl has it (to the microsecond), so that report::SummarizeSessions
    // over the file, as `llmtap report merge` computes it, counts the same turns as moved.
    const double shift = Round3(r.causal_shift_ms);
    if (shift > 0) {
      ++moved_;
      shift_.Add(shift);
    }
  }
  if (lines_ != nullptr && lines_status_.ok()) {
    lines_buffer_ += report::RequestResultToJson(line).dump();
    lines_buffer_.push_back('\n');
    if (lines_buffer_.size() >= kLinesBufferBytes) {
      lines_status_ = lines_->Write(lines_buffer_);
      lines_buffer_.clear();
    }
  }
}

bool RunOutputs::Finish(const json& summary, bool* html_skipped, std::string* error) {
  *html_skipped = false;
  if (dir_.empty()) return true;
  const std::filesystem::path dir(dir_);
  const std::string lines = (dir / report::kRequestsFile).string();
  if (lines_status_.ok() && !lines_buffer_.empty()) lines_status_ = lines_->Write(lines_buffer_);
  if (lines_status_.ok()) lines_status_ = lines_->Close();
  lines_.reset();
  if (!lines_status_.ok()) {
    *error = lines_status_.ToString();
    return false;
  }
  std::error_code ec;
  if (!store::IsS3Url(dir_)) std::filesystem::rename(LinesTarget(dir_), lines, ec);
  if (ec) {
    *error = lines + ": " + ec.message();
    return false;
  }
  if (!report::WriteFileAtomically((dir / report::kSummaryFile).string(), summary.dump(2) + "\n",
                                   error)) {
    return false;
  }
  const std::string html = (dir / report::kReportFile).string();
  if (requests_ > kHtmlMaxRequests) {
    // An older run's report would be taken for this one's.
    if (!store::IsS3Url(dir_)) std::filesystem::remove(html, ec);
    *html_skipped = true;
    return true;
  }
  std::vector<report::RequestResult> requests;
  if (!report::ReadRequestsJsonl(lines, &requests, error)) return false;
  return report::WriteFileAtomically(html, report::RenderHtmlReport(summary, requests), error);
}

bool RunOutputs::Sessions(const std::string& schedule, json* out, std::string* error) {
  *out = nullptr;
  if (turns_ == 0) return true;
  report::Stats shift;
  if (!shift_.Compute(&shift, error)) return false;
  *out = report::SessionsJson(schedule, turns_, moved_,
                              schedule == "causal" ? json(without_latency_) : json(nullptr), shift);
  return true;
}

json BuildSummary(json s, const RunFacts& f) {
  s["tool"] = "llmtap replay";
  s["version"] = kVersion;
  s["command"] = f.command;
  s["url"] = f.url;
  s["trace"] = f.trace;
  s["shard"] = {{"index", f.shard_index}, {"count", f.shard_count}};
  s["started_at_unix_ms"] = f.started_at_unix_ms;
  if (!f.input.is_null()) s["input"] = f.input;
  if (!f.sessions.is_null()) s["sessions"] = f.sessions;
  s["server_metrics"] = nullptr;
  if (!f.server_metrics_json.empty()) {
    json m = json::parse(f.server_metrics_json, nullptr, false);
    if (!m.is_discarded()) s["server_metrics"] = std::move(m);
  }
  return s;
}

std::string RenderConsole(const json& s) {
  std::string out;
  char buf[256];
  const json& q = s["requests"];
  auto count = [](const json& j) { return j.is_number() ? j.get<unsigned long long>() : 0ull; };
  std::snprintf(buf, sizeof(buf),
                "requests: %llu scheduled, %llu sent, %llu completed, %llu errors (%llu warmup "
                "requests not counted)\n",
                count(q["scheduled"]), count(q["sent"]), count(q["completed"]), count(q["errors"]),
                count(q["warmup"]));
  out += buf;
  if (count(q["errors"]) > 0) {
    out += "errors by kind:";
    for (auto& [k, v] : q["errors_by_kind"].items()) {
      if (count(v) > 0) out += " " + k + "=" + std::to_string(count(v));
    }
    out += "\n";
  }
  std::snprintf(buf, sizeof(buf), "measured %.3f s: %.2f req/s, %.1f output tok/s\n",
                NumberOr(s["duration_s"], 0), NumberOr(s["throughput"]["requests_per_s"], 0),
                NumberOr(s["throughput"]["output_tokens_per_s"], 0));
  out += buf;
  if (!s["goodput"].is_null()) {
    std::snprintf(buf, sizeof(buf), "goodput: %.2f req/s (%.1f%% of completed requests)\n",
                  NumberOr(s["goodput"]["requests_per_s"], 0),
                  100 * NumberOr(s["goodput"]["fraction"], 0));
    out += buf;
  }
  const json& ol = s["open_loop"];
  if (!ol["max_concurrency"].is_null()) {
    std::snprintf(buf, sizeof(buf),
                  "open loop: %llu requests held back by --max-concurrency %llu, %.1f ms in all\n",
                  count(ol["violations"]), count(ol["max_concurrency"]),
                  NumberOr(ol["held_ms_total"], 0));
    out += buf;
  }
  if (s.contains("sessions") && s["sessions"].is_object()) {
    const json& se = s["sessions"];
    const json& sh = se["causal_shift_ms"];
    std::snprintf(buf, sizeof(buf), "sessions (%s schedule): %llu turns, %llu moved by causality",
                  se["schedule"].get<std::string>().c_str(), count(se["turns"]),
                  count(se["moved"]));
    out += buf;
    if (count(sh["count"]) > 0) {
      std::snprintf(buf, sizeof(buf), " (shift ms: p50 %.3f, p90 %.3f, p99 %.3f, max %.3f)",
                    NumberOr(sh["p50"], 0), NumberOr(sh["p90"], 0), NumberOr(sh["p99"], 0),
                    NumberOr(sh["max"], 0));
      out += buf;
    }
    if (se["without_captured_latency"].is_number()) {
      std::snprintf(buf, sizeof(buf),
                    "; %llu without captured latency (next turn: no think time)\n",
                    count(se["without_captured_latency"]));
      out += buf;
    } else {
      out += " (sessions not followed: every turn on the plan's schedule)\n";
    }
  }
  std::snprintf(buf, sizeof(buf), "%-15s %8s %10s %10s %10s %10s %10s %10s\n", "metric", "count",
                "mean", "p50", "p90", "p95", "p99", "max");
  out += buf;
  for (const char* name : kMetrics) {
    const json& d = s["metrics"][name];
    if (count(d["count"]) == 0) {
      std::snprintf(buf, sizeof(buf), "%-15s %8d %10s\n", name, 0, "-");
    } else {
      std::snprintf(buf, sizeof(buf), "%-15s %8llu %10.3f %10.3f %10.3f %10.3f %10.3f %10.3f\n",
                    name, count(d["count"]), NumberOr(d["mean"], 0), NumberOr(d["p50"], 0),
                    NumberOr(d["p90"], 0), NumberOr(d["p95"], 0), NumberOr(d["p99"], 0),
                    NumberOr(d["max"], 0));
    }
    out += buf;
  }
  return out;
}

}  // namespace llmtap::replay
