// The reports of `llmtap stats` (stats.h): the text table and --json.
#include "trace/stats.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <nlohmann/json.hpp>
#include <vector>

#include "trace/histogram_json.h"
#include "trace/outcomes.h"

namespace llmtap::trace {

namespace {

std::string Fmt(const char* fmt, double v) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), fmt, v);
  return buf;
}

std::string Pct(uint64_t part, uint64_t whole) {
  return whole ? Fmt("%.1f%%", 100.0 * static_cast<double>(part) / static_cast<double>(whole))
               : "n/a";
}

std::string HistText(const Histogram& h) {
  if (h.count() == 0) return "none";
  return "mean " + Fmt("%.1f", h.mean()) + ", min " + std::to_string(h.min()) + ", p50 " +
         std::to_string(h.Percentile(50)) + ", p90 " + std::to_string(h.Percentile(90)) + ", p99 " +
         std::to_string(h.Percentile(99)) + ", max " + std::to_string(h.max()) + " (" +
         std::to_string(h.count()) + " values)";
}

std::string PrefixText(const PrefixReuse::Result& p, bool weighted) {
  std::string s = Fmt("cache hit rate %.3f", p.cache_hit_rate) +
                  Fmt(", prefix reuse ratio %.3f", p.prefix_reuse_ratio) + ", " +
                  std::to_string(p.unique_prefixes) + " unique prefixes, " +
                  std::to_string(p.prefix_groups) + " prefix groups over " +
                  std::to_string(p.requests) + " requests";
  if (weighted)
    s += Fmt("; %.1f%% of message characters are in a prefix seen before",
             100.0 * p.weighted_hit_share);
  return s;
}

// llmtap's own estimate beside the server's cache hit rate: the share of message characters in
// a prefix seen before (payload traces), else AIPerf's hash_ids cache hit rate (hashed ones).
struct CacheEstimate {
  const char* name = nullptr;  // summary key, null when the trace gives none
  const char* text = nullptr;
  double value = 0;
};
CacheEstimate EstimateOf(const StatsReport& r) {
  if (r.message_prefix && r.message_prefix->requests > 0) {
    return {"message_prefix_reuse.reused_char_share",
            "of message characters in a prefix seen before", r.message_prefix->weighted_hit_share};
  }
  if (r.hash_prefix && r.hash_prefix->requests > 0) {
    return {"hash_ids_prefix_reuse.cache_hit_rate", "hash_ids cache hit rate",
            r.hash_prefix->cache_hit_rate};
  }
  return {};
}

double HitRate(const StatsReport::ServerCache& c) {
  return c.prompt_tokens
             ? static_cast<double>(c.cached_tokens) / static_cast<double>(c.prompt_tokens)
             : 0;
}

nlohmann::ordered_json PrefixJson(const PrefixReuse::Result& p, bool weighted) {
  nlohmann::ordered_json j = {{"requests", p.requests},
                              {"cache_hit_rate", p.cache_hit_rate},
                              {"prefix_reuse_ratio", p.prefix_reuse_ratio},
                              {"unique_prefixes", p.unique_prefixes},
                              {"prefix_groups", p.prefix_groups}};
  if (weighted) j["reused_char_share"] = p.weighted_hit_share;
  return j;
}

std::vector<std::pair<std::string, uint64_t>> TopModels(const StatsReport& r, size_t n) {
  std::vector<std::pair<std::string, uint64_t>> v(r.models.begin(), r.models.end());
  std::stable_sort(v.begin(), v.end(), [](auto& a, auto& b) { return a.second > b.second; });
  if (v.size() > n) v.resize(n);
  return v;
}

}  // namespace

std::string RenderStatsText(const StatsReport& r) {
  std::string out = RenderIssues(r.path, r.skipped, "more skipped lines not shown", r.warnings);
  if (!r.io.ok()) return out + "error: " + r.io.ToString() + "\n";
  out += r.path + " (" + std::string(TraceFormatName(r.format)) + ", format from " +
         r.format_source + ")\n";
  out += "  rows:        " + std::to_string(r.rows);
  if (r.skipped.total) out += " (" + std::to_string(r.skipped.total) + " lines skipped)";
  out += "\n";
  if (r.timed_rows > 0) {
    out += "  duration:    " + Fmt("%.3f s", r.duration_s) + " (timestamps " +
           Fmt("%.0f", r.first_ts_ms) + " .. " + Fmt("%.0f ms)\n", r.last_ts_ms);
    out += "  rate:        mean " + (r.duration_s > 0 ? Fmt("%.2f req/s", r.mean_rate) : "n/a") +
           ", peak " + std::to_string(r.peak_second_count) + " req in one second (from " +
           Fmt("%.0f ms)\n", r.peak_second_start_ms);
  } else {
    out += "  duration:    n/a (no timestamps)\n";
  }
  out += "  endpoints:  ";
  for (const auto& [k, v] : r.endpoints)
    out += " " + k + " " + std::to_string(v) + " (" + Pct(v, r.rows) + ")";
  out += "\n";
  if (r.requests > 0) {
    out += "  models:     ";
    for (const auto& [k, v] : TopModels(r, 10)) out += " " + k + " " + std::to_string(v);
    if (r.models.size() > 10) out += " ... (" + std::to_string(r.models.size()) + " models)";
    out += "\n  streaming:   " + std::to_string(r.stream_requests) + " of " +
           std::to_string(r.requests) + " requests (" + Pct(r.stream_requests, r.requests) + ")\n";
    out += "  max_tokens:  " + HistText(r.max_tokens);
    if (r.no_max_tokens) out += "; " + std::to_string(r.no_max_tokens) + " requests without";
    out += "\n";
  }
  out += "  prompt chars: " + HistText(r.prompt_chars) + "\n";
  if (r.prompt_chars_by_api.size() > 1) {
    for (const auto& [api, h] : r.prompt_chars_by_api) {
      out += "    " + api + ": " + HistText(h) + "\n";
    }
  }
  if (r.input_length.count()) out += "  input_length: " + HistText(r.input_length) + "\n";
  if (r.output_length.count()) out += "  output_length: " + HistText(r.output_length) + "\n";
  if (r.message_prefix)
    out += "  message prefix reuse: " + PrefixText(*r.message_prefix, true) + "\n";
  if (const SessionStats& s = r.sessions; s.sessions() > 0) {
    out += "  sessions: " + std::to_string(s.sessions()) + " (" + std::to_string(s.rows()) +
           " rows with a session_id, " + Pct(s.rows(), r.rows) + " of rows)\n";
    out += "    turns per session: " + HistText(s.turns()) + "\n";
    out += "    gap between turns' starts, ms: " + HistText(s.gap_ms()) + "\n";
    if (r.outcomes_path.empty()) {
      out += "    think time: needs the outcomes sidecar (response ends), none joined\n";
    } else {
      out += "    think time (response end to next turn), ms: " + HistText(s.think_ms());
      if (s.overlapping()) {
        out += "; " + std::to_string(s.overlapping()) + " turns started before the previous ended";
      }
      if (s.without_latency()) {
        out += "; " + std::to_string(s.without_latency()) +
               " turns follow one without a known latency";
      }
      out += "\n";
    }
  }
  if (r.hash_prefix)
    out += "  hash_ids prefix reuse (AIPerf analyze-trace): " + PrefixText(*r.hash_prefix, false) +
           "\n";
  if (const StatsReport::ServerCache& c = r.server_cache; c.requests > 0) {
    out += Fmt("  server cache (outcomes): %.1f%% of prompt tokens reused", 100 * HitRate(c)) +
           " (" + std::to_string(c.cached_tokens) + " of " + std::to_string(c.prompt_tokens) +
           ", " + std::to_string(c.requests) + " requests reporting)";
    if (CacheEstimate e = EstimateOf(r); e.name != nullptr) {
      out += Fmt("; llmtap's estimate %.1f%% ", 100 * e.value) + e.text;
      if (e.value > 0) out += Fmt(" (server / estimate %.2f)", HitRate(c) / e.value);
    }
    out += "\n";
  }
  if (r.manifest) {
    out += "  manifest (" + r.manifest->path + ", " + r.manifest->state + "):";
    for (const auto& [k, v] : r.manifest->counters) out += " " + k + " " + std::to_string(v);
    out += "\n";
    if (r.effective_sample_rate) {
      out += "  effective sample rate: " + Fmt("%.4f", *r.effective_sample_rate) +
             " (recorded / matched; every loss reason lowers it)";
      if (r.manifest->has_sample_rate) out += Fmt(", configured %.4f", r.manifest->sample_rate);
      out += "\n";
    }
  } else {
    out += "  manifest: none next to the file\n";
  }
  return out;
}

std::string RenderStatsJson(const StatsReport& r) {
  using J = nlohmann::ordered_json;
  J j;
  j["file"] = r.path;
  if (!r.io.ok()) j["error"] = r.io.ToString();
  j["format"] = TraceFormatName(r.format);
  j["format_source"] = r.format_source;
  j["lines"] = r.lines;
  j["rows"] = r.rows;
  j["blank_lines"] = r.blank;
  j["skipped_lines"] = r.skipped.total;
  j["torn_tail"] = r.torn_tail;
  if (r.timed_rows) {
    j["timestamps"] = {{"rows", r.timed_rows},
                       {"first_ms", r.first_ts_ms},
                       {"last_ms", r.last_ts_ms},
                       {"duration_s", r.duration_s},
                       {"mean_rate_per_s", r.duration_s > 0 ? J(r.mean_rate) : J(nullptr)},
                       {"peak_second_count", r.peak_second_count},
                       {"peak_second_start_ms", r.peak_second_start_ms}};
  } else {
    j["timestamps"] = nullptr;
  }
  j["endpoints"] = r.endpoints;
  j["models"] = r.models;
  j["requests"] = r.requests;
  j["stream_requests"] = r.stream_requests;
  j["stream_share"] =
      r.requests ? J(static_cast<double>(r.stream_requests) / static_cast<double>(r.requests))
                 : J(nullptr);
  j["prompt_chars"] = HistogramJson(r.prompt_chars);
  J by_api = J::object();
  for (const auto& [api, h] : r.prompt_chars_by_api) by_api[api] = HistogramJson(h);
  j["prompt_chars_by_api"] = by_api;
  j["max_tokens"] = HistogramJson(r.max_tokens);
  j["requests_without_max_tokens"] = r.no_max_tokens;
  j["input_length"] = HistogramJson(r.input_length);
  j["output_length"] = HistogramJson(r.output_length);
  j["message_prefix_reuse"] = r.message_prefix ? PrefixJson(*r.message_prefix, true) : J(nullptr);
  j["hash_ids_prefix_reuse"] = r.hash_prefix ? PrefixJson(*r.hash_prefix, false) : J(nullptr);
  if (const SessionStats& s = r.sessions; s.sessions() > 0) {
    j["sessions"] = {
        {"sessions", s.sessions()},
        {"rows", s.rows()},
        {"turns_per_session", HistogramJson(s.turns())},
        {"gap_ms", HistogramJson(s.gap_ms())},
        {"think_ms", r.outcomes_path.empty() ? J(nullptr) : HistogramJson(s.think_ms())},
        {"overlapping_turns", s.overlapping()},
        {"turns_after_unknown_latency", s.without_latency()}};
  } else {
    j["sessions"] = nullptr;
  }
  j["outcomes"] = r.outcomes_path.empty() ? J(nullptr) : J(r.outcomes_path);
  if (const StatsReport::ServerCache& c = r.server_cache; c.requests > 0) {
    const CacheEstimate e = EstimateOf(r);
    j["server_cache"] = {
        {"requests", c.requests},
        {"prompt_tokens", c.prompt_tokens},
        {"cached_tokens", c.cached_tokens},
        {"hit_rate", c.prompt_tokens ? J(HitRate(c)) : J(nullptr)},
        {"estimate", e.name ? J(e.name) : J(nullptr)},
        {"estimate_value", e.name ? J(e.value) : J(nullptr)},
        {"server_over_estimate", e.name && e.value > 0 ? J(HitRate(c) / e.value) : J(nullptr)}};
  } else {
    j["server_cache"] = nullptr;
  }
  if (r.manifest) {
    j["manifest"] = {{"path", r.manifest->path},
                     {"state", r.manifest->state},
                     {"counters", r.manifest->counters},
                     {"configured_sample_rate",
                      r.manifest->has_sample_rate ? J(r.manifest->sample_rate) : J(nullptr)},
                     {"effective_sample_rate",
                      r.effective_sample_rate ? J(*r.effective_sample_rate) : J(nullptr)}};
  } else {
    j["manifest"] = nullptr;
  }
  j["warnings"] = r.warnings;
  return j.dump(2, ' ', false, J::error_handler_t::replace) + "\n";
}

}  // namespace llmtap::trace
