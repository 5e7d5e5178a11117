#include "report/run_dir.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <set>
#include <sstream>

#include "common/version.h"
#include "report/html_report.h"
#include "report/json_util.h"
#include "store/s3_url.h"
#include "store/stream.h"
#include "trace/line_reader.h"

namespace llmtap::report {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

bool ReadFile(const std::string& path, std::string* out, std::string* error) {
  Status s = store::ReadWhole(path, out, size_t{1} << 30);
  if (!s.ok()) *error = s.ToString();
  return s.ok();
}

// DIR/NAME for a local directory or an s3:// prefix ("s3://b/run/" + "summary.json").
std::string Join(const std::string& dir, const char* name) {
  if (store::IsS3Url(dir)) return dir + (dir.ends_with('/') ? "" : "/") + name;
  return (fs::path(dir) / name).string();
}

std::string StringAt(const json& j, const char* key) {
  auto it = j.find(key);
  return it != j.end() && it->is_string() ? it->get<std::string>() : "";
}

// summary.goodput.constraints, or an empty object.
json GoodputConstraints(const json& summary) {
  const json* v = JsonAt(summary, "/goodput/constraints");
  return v && v->is_object() ? *v : json::object();
}

// The merged run's "sessions", recomputed from the requests' per-turn fields, or null. Each
// shard's requests.jsonl must mark every turn its summary.json counts: a shard written by an
// llmtap without the fields, or replayed with another schedule than causal (whose lines carry
// none), would make the merged figures short, so then they are left out, with a warning.
// `from`'s counts added into *into, member by member (objects recursively); a member only one of
// them has is kept as it is.
void AddCounts(const json& from, json* into) {
  for (const auto& [key, value] : from.items()) {
    json& to = (*into)[key];
    if (value.is_object()) {
      AddCounts(value, &to);
    } else if (value.is_number_unsigned() && to.is_number_unsigned()) {
      to = to.get<uint64_t>() + value.get<uint64_t>();
    } else if (to.is_null()) {
      to = value;
    }
  }
}

json MergedSessions(const std::vector<RunDir>& runs, const std::vector<RequestResult>& requests,
                    std::vector<std::string>* warnings) {
  bool any = false;
  for (const RunDir& run : runs) {
    uint64_t marked = 0;
    for (const RequestResult& r : run.requests) {
      if (r.session_turn && r.sent_ms && !r.warmup) ++marked;
    }
    const json* schedule = JsonAt(run.summary, "/sessions/schedule");
    const double turns = JsonNumberAt(run.summary, "/sessions/turns", 0);
    if (turns == 0 && marked == 0) continue;
    any = true;
    std::string why;
    if (schedule && *schedule != "causal") {
      why = "its sessions were replayed on the " + schedule->dump() + " schedule";
    } else if (static_cast<double>(marked) != turns) {
      why = "summary.json counts " + std::to_string(static_cast<uint64_t>(turns)) +
            " session turns, requests.jsonl marks " + std::to_string(marked) +
            " (written by an llmtap that did not mark them?)";
    }
    if (!why.empty()) {
      warnings->push_back(run.path + ": " + why + "; \"sessions\" left out");
      return nullptr;
    }
  }
  return any ? SummarizeSessions(requests) : json(nullptr);
}

}  // namespace

bool ReadRequestsJsonl(const std::string& file, std::vector<RequestResult>* out,
                       std::string* error) {
  trace::LineReader reader;
  Status s = reader.Open(file);
  if (!s.ok()) {
    *error = s.ToString();
    return false;
  }
  std::vector<RequestResult> result;
  trace::Line l;
  while (reader.Next(&l)) {
    const size_t line_no = l.number;
    const std::string_view line = l.bytes;
    if (line.find_first_not_of(" \t") == std::string::npos) continue;
    json j = json::parse(line, nullptr, /*allow_exceptions=*/false);
    RequestResult r;
    std::string why;
    if (j.is_discarded()) why = "not JSON";
    if (!why.empty() || !RequestResultFromJson(j, &r, &why)) {
      *error = file + ":" + std::to_string(line_no) + ": " + why;
      return false;
    }
    result.push_back(std::move(r));
  }
  if (!reader.status().ok()) {
    *error = reader.status().ToString();
    return false;
  }
  *out = std::move(result);
  return true;
}

bool LoadRun(const std::string& path, bool with_requests, RunDir* out, std::string* error) {
  RunDir run;
  run.path = path;
  std::error_code ec;
  std::string summary_file;
  if (store::IsS3Url(path) && !path.ends_with(".json")) {
    run.dir = path;  // a prefix in the store, as `replay --out s3://...` writes it
    summary_file = Join(path, kSummaryFile);
  } else if (fs::is_directory(path, ec)) {
    run.dir = path;
    summary_file = (fs::path(path) / kSummaryFile).string();
  } else if (store::IsS3Url(path)) {
    summary_file = path;
    run.dir = path.substr(0, path.rfind('/') + 1);
  } else {
    summary_file = path;
    run.dir = fs::path(path).parent_path().string();
    if (run.dir.empty()) run.dir = ".";
  }
  std::string text;
  if (!ReadFile(summary_file, &text, error)) return false;
  run.summary = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (run.summary.is_discarded() || !run.summary.is_object()) {
    *error = summary_file + ": not a JSON object";
    return false;
  }
  if (with_requests && !ReadRequestsJsonl(Join(run.dir, kRequestsFile), &run.requests, error)) {
    return false;
  }
  *out = std::move(run);
  return true;
}

bool MergeRuns(const std::vector<RunDir>& runs, MergeOutput* out, std::string* error) {
  if (runs.empty()) {
    *error = "nothing to merge";
    return false;
  }
  MergeOutput merged;
  double t0 = std::numeric_limits<double>::infinity();
  for (const RunDir& run : runs) {
    t0 = std::min(t0, JsonNumberAt(run.summary, "/started_at_unix_ms", 0));
  }

  const json& first = runs[0].summary;
  std::set<int64_t> shard_indexes;
  std::set<std::string> sources;
  std::set<std::pair<int, int64_t>> seen;  // (shard, index)
  size_t duplicates = 0;
  int64_t shard_count = 0;
  const json* best_metrics = nullptr;
  double best_window = -1;
  for (const RunDir& run : runs) {
    const json& s = run.summary;
    sources.insert(StringAt(s, "trace") + "\n" + StringAt(s, "url"));
    int64_t index = static_cast<int64_t>(JsonNumberAt(s, "/shard/index", -1));
    int64_t count = static_cast<int64_t>(JsonNumberAt(s, "/shard/count", 0));
    if (!shard_indexes.insert(index).second) {
      merged.warnings.push_back(run.path + ": shard index " + std::to_string(index) +
                                " appears more than once");
    }
    if (shard_count == 0) shard_count = count;
    if (count != shard_count) {
      merged.warnings.push_back(run.path + ": shard count " + std::to_string(count) +
                                " differs from " + std::to_string(shard_count));
    }
    if (s.contains("server_metrics") && s["server_metrics"].is_object()) {
      double window = JsonNumberAt(s["server_metrics"], "/window_s", 0);
      if (window > best_window) {
        best_window = window;
        best_metrics = &s["server_metrics"];
      }
    }
    // Onto the earliest shard's clock.
    double shift = JsonNumberAt(s, "/started_at_unix_ms", 0) - t0;
    for (RequestResult r : run.requests) {
      if (!seen.insert({r.shard, r.index}).second) ++duplicates;
      r.scheduled_ms += shift;
      if (r.sent_ms) *r.sent_ms += shift;
      r.done_ms += shift;
      merged.requests.push_back(std::move(r));
    }
  }
  if (sources.size() > 1) {
    merged.warnings.push_back("the shards name different traces or URLs");
  }
  if (shard_count > 0 && static_cast<int64_t>(runs.size()) != shard_count) {
    merged.warnings.push_back(std::to_string(runs.size()) + " outputs merged, but the shards say " +
                              std::to_string(shard_count) + " shards");
  }
  if (duplicates) {
    merged.warnings.push_back(std::to_string(duplicates) +
                              " requests share a (shard, index) with another");
  }
  std::stable_sort(merged.requests.begin(), merged.requests.end(),
                   [](const RequestResult& a, const RequestResult& b) {
                     if (a.scheduled_ms != b.scheduled_ms) return a.scheduled_ms < b.scheduled_ms;
                     if (a.shard != b.shard) return a.shard < b.shard;
                     return a.index < b.index;
                   });

  SummaryOptions options;
  const json constraints = GoodputConstraints(first);
  for (const auto& [metric, limit] : constraints.items()) {
    if (limit.is_number()) options.goodput.push_back({metric, limit.get<double>()});
  }
  for (const RunDir& run : runs) {
    if (GoodputConstraints(run.summary) != constraints) {
      merged.warnings.push_back(run.path + ": goodput constraints differ from " + runs[0].path +
                                "'s, which are used");
    }
  }
  std::set<double> limits;
  for (const RunDir& run : runs) {
    limits.insert(JsonNumberAt(run.summary, "/open_loop/max_concurrency", -1));
  }
  if (limits.size() == 1 && *limits.begin() >= 0) {
    options.max_concurrency = static_cast<uint32_t>(*limits.begin());
  }

  json summary = {
      {"tool", "llmtap report merge"},
      {"version", kVersion},
      {"command", first.value("command", "")},
      {"url", first.value("url", json())},
      {"trace", first.value("trace", json())},
      {"shard", {{"index", nullptr}, {"count", shard_count ? shard_count : runs.size()}}},
      {"started_at_unix_ms", std::isfinite(t0) ? json(t0) : json(nullptr)}};
  json merged_from = json::array();
  for (const RunDir& run : runs) merged_from.push_back(run.path);
  summary["merged_from"] = std::move(merged_from);
  summary.update(SummarizeRequests(merged.requests, options));
  // requests.jsonl may hold only the requests that were sent; the shards' own scheduled counts
  // are then the larger, true figure.
  double scheduled = 0;
  for (const RunDir& run : runs) scheduled += JsonNumberAt(run.summary, "/requests/scheduled", 0);
  if (scheduled > summary["requests"]["scheduled"].get<double>()) {
    summary["requests"]["scheduled"] = static_cast<uint64_t>(scheduled);
  }
  if (limits.size() > 1) {
    summary["open_loop"]["max_concurrency_by_shard"] = json::array();
    for (const RunDir& run : runs) {
      summary["open_loop"]["max_concurrency_by_shard"].push_back(
          run.summary.contains("open_loop")
              ? run.summary["open_loop"].value("max_concurrency", json())
              : json());
    }
  }
  json sessions = MergedSessions(runs, merged.requests, &merged.warnings);
  if (!sessions.is_null()) summary["sessions"] = std::move(sessions);
  // A Responses chain is replayed by one shard (as a session is): the shards' counts add up.
  json chains;
  for (const RunDir& run : runs) {
    if (run.summary.contains("response_chains") && run.summary["response_chains"].is_object()) {
      AddCounts(run.summary["response_chains"], &chains);
    }
  }
  if (!chains.is_null()) summary["response_chains"] = std::move(chains);
  // The capture's server cache over each shard's rows: their token counts add up.
  uint64_t cache_requests = 0, prompt_tokens = 0, cached_tokens = 0;
  for (const RunDir& run : runs) {
    auto it = run.summary.find("captured_server");
    if (it == run.summary.end() || !it->is_object()) continue;
    auto cache = it->find("cache");
    if (cache == it->end() || !cache->is_object()) continue;
    const json& c = *cache;
    auto count = [&c](const char* key) {
      return c.contains(key) && c[key].is_number_unsigned() ? c[key].get<uint64_t>() : 0;
    };
    cache_requests += count("requests");
    prompt_tokens += count("prompt_tokens");
    cached_tokens += count("cached_tokens");
  }
  if (cache_requests > 0) {
    summary["captured_server"] = {
        {"cache", CacheJson(cache_requests, prompt_tokens, cached_tokens)}};
  }
  summary["server_metrics"] = best_metrics ? *best_metrics : json(nullptr);
  summary["warnings"] = merged.warnings;
  merged.summary = std::move(summary);
  *out = std::move(merged);
  return true;
}

bool WriteFileAtomically(const std::string& path, const std::string& content, std::string* error) {
  if (store::IsS3Url(path)) {
    // An object appears whole or not at all: PUT (or a completed multipart upload) is atomic.
    std::unique_ptr<store::ByteSink> sink;
    Status s = store::OpenSink(path, &sink, store::SinkOptions{.force = true});
    if (s.ok()) s = sink->Write(content);
    if (s.ok()) s = sink->Close();
    if (!s.ok()) *error = s.ToString();
    return s.ok();
  }
  std::string tmp = path + ".tmp";
  {
    std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
    if (!f) {
      *error = tmp + ": " + std::strerror(errno);
      return false;
    }
    f.write(content.data(), static_cast<std::streamsize>(content.size()));
    f.flush();
    if (!f) {
      *error = tmp + ": write failed";
      return false;
    }
  }
  std::error_code ec;
  fs::rename(tmp, path, ec);
  if (ec) {
    *error = path + ": " + ec.message();
    return false;
  }
  return true;
}

bool WriteRunDir(const std::string& dir, const json& summary,
                 const std::vector<RequestResult>& requests, std::string* error) {
  std::error_code ec;
  if (!store::IsS3Url(dir)) fs::create_directories(dir, ec);
  if (ec) {
    *error = dir + ": " + ec.message();
    return false;
  }
  std::string lines;
  for (const RequestResult& r : requests) {
    lines += RequestResultToJson(r).dump();
    lines.push_back('\n');
  }
  return WriteFileAtomically(Join(dir, kRequestsFile), lines, error) &&
         WriteFileAtomically(Join(dir, kSummaryFile), summary.dump(2) + "\n", error) &&
         WriteFileAtomically(Join(dir, kReportFile), RenderHtmlReport(summary, requests), error);
}

}  // namespace llmtap::report
