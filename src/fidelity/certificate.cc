#include "fidelity/certificate.h"

#include <algorithm>
#include <cmath>
#include <cstdarg>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <map>
#include <set>
#include <unordered_map>

#include "fidelity/pairs.h"
#include "report/summary.h"
#include "shadow/report.h"
#include "trace/line_reader.h"

namespace llmtap::fidelity {
namespace {

using json = nlohmann::ordered_json;

constexpr size_t kMaxMessages = 20;

// A member's value: absent or null is unknown; another type than expected is an error.
template <class T>
bool Opt(const nlohmann::json& obj, const char* key, std::optional<T>* out, std::string* error) {
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return true;
  if constexpr (std::is_same_v<T, std::string>) {
    if (!it->is_string()) {
      *error = std::string("\"") + key + "\" is not a string";
      return false;
    }
  } else {
    if (!it->is_number()) {
      *error = std::string("\"") + key + "\" is not a number";
      return false;
    }
  }
  *out = it->get<T>();
  return true;
}

bool ParseSide(const nlohmann::json& root, const char* name, Side* side, std::string* error) {
  auto it = root.find(name);
  if (it == root.end() || !it->is_object()) {
    *error = std::string("\"") + name + "\" is missing or not an object";
    return false;
  }
  const nlohmann::json& o = *it;
  std::string inner;
  std::optional<double> status;
  bool ok = Opt(o, "status", &status, &inner) && Opt(o, "ttft_ms", &side->ttft_ms, &inner) &&
            Opt(o, "itl_ms", &side->itl_ms, &inner) &&
            Opt(o, "latency_ms", &side->latency_ms, &inner) &&
            Opt(o, "prompt_tokens", &side->prompt_tokens, &inner) &&
            Opt(o, "completion_tokens", &side->completion_tokens, &inner) &&
            Opt(o, "cached_tokens", &side->cached_tokens, &inner) &&
            Opt(o, "finish_reason", &side->finish_reason, &inner);
  if (ok) {
    if (auto e = o.find("error"); e != o.end() && !e->is_null()) {
      side->error = e->is_string() ? e->get<std::string>() : "error";
    }
    if (auto s = o.find("server"); s != o.end() && s->is_object()) {
      ok = Opt(*s, "prompt_ms", &side->server_prompt_ms, &inner) &&
           Opt(*s, "decode_ms", &side->server_decode_ms, &inner);
    }
    if (auto s = o.find("spec"); ok && s != o.end() && s->is_object()) {
      ok = Opt(*s, "num_draft_tokens", &side->spec_drafted, &inner) &&
           Opt(*s, "num_accepted_draft_tokens", &side->spec_accepted, &inner);
    }
  }
  if (!ok) {
    *error = std::string(name) + "." + inner;
    return false;
  }
  if (status) side->status = static_cast<int>(*status);
  return true;
}

std::string Format(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
std::string Format(const char* fmt, ...) {
  char buf[512];
  va_list args;
  va_start(args, fmt);
  std::vsnprintf(buf, sizeof buf, fmt, args);
  va_end(args);
  return buf;
}

enum class Kind { kShare, kPoints, kTiming };

struct MetricDef {
  const char* name;
  const char* side;  // "tokens", "errors", "server", "client"
  Kind kind;
};

const MetricDef kMetrics[] = {
    {"prompt_tokens", "tokens", Kind::kShare},     {"completion_tokens", "tokens", Kind::kShare},
    {"finish_reason", "tokens", Kind::kShare},     {"failures", "errors", Kind::kShare},
    {"cache_hit_rate", "server", Kind::kPoints},   {"spec_acceptance", "server", Kind::kPoints},
    {"server_prompt_ms", "server", Kind::kTiming}, {"server_decode_ms", "server", Kind::kTiming},
    {"ttft_ms", "client", Kind::kTiming},          {"itl_ms", "client", Kind::kTiming},
    {"latency_ms", "client", Kind::kTiming},
};

std::optional<double> TimingOf(const Side& s, const std::string& metric) {
  if (!s.ok()) return std::nullopt;
  if (metric == "ttft_ms") return s.ttft_ms;
  if (metric == "itl_ms") return s.itl_ms;
  if (metric == "latency_ms") return s.latency_ms;
  if (metric == "server_prompt_ms") return s.server_prompt_ms;
  if (metric == "server_decode_ms") return s.server_decode_ms;
  return std::nullopt;
}

// A rate's numerator and denominator on one side: cache (cached / prompt tokens) or spec
// (accepted / drafted tokens).
std::optional<std::pair<double, double>> RateOf(const Side& s, const std::string& metric) {
  if (!s.ok()) return std::nullopt;
  if (metric == "cache_hit_rate") {
    if (!s.cached_tokens || !s.prompt_tokens) return std::nullopt;
    return std::make_pair(static_cast<double>(*s.cached_tokens),
                          static_cast<double>(*s.prompt_tokens));
  }
  if (!s.spec_accepted || !s.spec_drafted) return std::nullopt;
  return std::make_pair(static_cast<double>(*s.spec_accepted),
                        static_cast<double>(*s.spec_drafted));
}

struct Verdict {
  std::string verdict;  // "reproduced", "not reproduced", "unknown", "n/a"
  std::optional<std::string> direction;
  std::optional<double> value;
  std::string detail;
};

json VerdictJson(const MetricDef& m, const Verdict& v) {
  return {{"metric", m.name},
          {"side", m.side},
          {"verdict", v.verdict},
          {"direction", v.direction ? json(*v.direction) : json(nullptr)},
          {"value", v.value ? json(*v.value) : json(nullptr)},
          {"detail", v.detail}};
}

double Round(double v, double unit) { return std::round(v / unit) * unit; }

// The pairs of one group, with the floor's two replayed sides of the same row where the floor
// has both (the run's own replay and the second one, or two other replays).
struct Member {
  const Pair* pair;
  const Side* floor_a;  // null: not in the floor
  const Side* floor_b;
};

class GroupJudge {
 public:
  GroupJudge(const std::vector<Member>& members, bool has_floor, const Options& o)
      : m_(members), has_floor_(has_floor), o_(o) {}

  json Build(const std::string& group, const std::string& label) {
    json g = {{"group", group}, {"label", label}, {"pairs", m_.size()}};
    g["arrival"] = Arrival();
    json tokens, metrics = json::array();
    std::map<std::string, Verdict> v;
    v["prompt_tokens"] = Equal("prompt_tokens", false, &tokens);
    v["completion_tokens"] = Equal("completion_tokens", true, &tokens);
    v["finish_reason"] = Equal("finish_reason", true, &tokens);
    g["tokens"] = tokens;
    json server = json::object();
    v["cache_hit_rate"] = Points("cache_hit_rate", &server["cache"]);
    v["spec_acceptance"] = Points("spec_acceptance", &server["spec"]);
    g["server"] = server;
    json errors;
    v["failures"] = Failures(&errors);
    g["errors"] = errors;
    json timing = json::object();
    for (const MetricDef& d : kMetrics) {
      if (d.kind == Kind::kTiming) v[d.name] = Timing(d.name, &timing[d.name]);
    }
    g["timing"] = timing;
    for (const MetricDef& d : kMetrics) metrics.push_back(VerdictJson(d, v[d.name]));
    g["metrics"] = metrics;
    g["client_vs_server"] = ClientVsServer(v);
    return g;
  }

 private:
  json Arrival() const {
    std::vector<double> lag, shift;
    size_t moved = 0;
    for (const Member& m : m_) {
      if (m.pair->lag_ms) lag.push_back(*m.pair->lag_ms);
      if (m.pair->causal_shift_ms && *m.pair->causal_shift_ms > 0) {
        ++moved;
        shift.push_back(*m.pair->causal_shift_ms);
      }
    }
    std::sort(lag.begin(), lag.end());
    std::sort(shift.begin(), shift.end());
    json a;
    a["lag_ms"] = lag.empty() ? json(nullptr)
                              : json{{"p50", Round(report::Percentile(lag, 0.5), 0.001)},
                                     {"p99", Round(report::Percentile(lag, 0.99), 0.001)}};
    a["causal_moved"] = moved;
    a["causal_shift_ms"] = shift.empty()
                               ? json(nullptr)
                               : json{{"p50", Round(report::Percentile(shift, 0.5), 0.001)},
                                      {"max", Round(shift.back(), 0.001)}};
    return a;
  }

  // prompt_tokens, completion_tokens or finish_reason equal on both sides (both ok); the last two
  // over greedy pairs only.
  Verdict Equal(const std::string& metric, bool greedy_only, json* tokens) {
    size_t compared = 0, equal = 0, greedy = 0, sampled = 0, only_one = 0;
    for (const Member& m : m_) {
      const Pair& p = *m.pair;
      if (!p.captured.ok() || !p.replayed.ok()) continue;
      if (greedy_only && !p.greedy()) {
        ++sampled;
        continue;
      }
      ++greedy;
      bool have_c, have_r, same;
      if (metric == "prompt_tokens") {
        have_c = p.captured.prompt_tokens.has_value();
        have_r = p.replayed.prompt_tokens.has_value();
        same = p.captured.prompt_tokens == p.replayed.prompt_tokens;
      } else if (metric == "completion_tokens") {
        have_c = p.captured.completion_tokens.has_value();
        have_r = p.replayed.completion_tokens.has_value();
        same = p.captured.completion_tokens == p.replayed.completion_tokens;
      } else {
        have_c = p.captured.finish_reason.has_value();
        have_r = p.replayed.finish_reason.has_value();
        same = p.captured.finish_reason == p.replayed.finish_reason;
      }
      if (have_c != have_r) ++only_one;
      if (!have_c || !have_r) continue;
      ++compared;
      equal += same;
    }
    const char* key = metric == "prompt_tokens"       ? "prompt_equal"
                      : metric == "completion_tokens" ? "completion_equal"
                                                      : "finish_equal";
    const std::optional<double> share =
        compared > 0 ? std::optional<double>(static_cast<double>(equal) / compared) : std::nullopt;
    if (metric == "prompt_tokens") {
      (*tokens)["compared"] = compared;
    } else if (metric == "completion_tokens") {
      (*tokens)["greedy"] = greedy;
      (*tokens)["sampled"] = sampled;
    }
    (*tokens)[key] = share ? json(Round(*share, 1e-6)) : json(nullptr);
    const double need = metric == "prompt_tokens" ? o_.prompt_equal_share : o_.equal_share;
    Verdict v;
    v.value = share;
    if (compared == 0) {
      v.verdict = only_one > 0 || (greedy_only && sampled > 0 && greedy == 0) ? "unknown" : "n/a";
      if (only_one > 0) {
        v.detail = Format("only one side reports it (%zu pairs)", only_one);
      } else if (greedy_only && sampled > 0 && greedy == 0) {
        v.verdict = "n/a";
        v.detail =
            Format("all %zu pairs are sampled (temperature not 0): not expected to match", sampled);
      } else {
        v.detail = "not reported";
      }
      return v;
    }
    std::string scope = greedy_only ? Format("greedy pairs (%zu sampled not judged)", sampled)
                                    : std::string("pairs");
    v.detail = Format("%.1f %% of %zu %s equal (needs >= %.1f %%)", 100 * *share, compared,
                      scope.c_str(), 100 * need);
    if (compared < o_.min_pairs) {
      v.verdict = "unknown";
      v.detail += Format("; a verdict needs %zu pairs", o_.min_pairs);
    } else {
      v.verdict = *share >= need - 1e-12 ? "reproduced" : "not reproduced";
    }
    return v;
  }

  Verdict Failures(json* errors) {
    std::map<std::string, uint64_t> captured, replayed;
    size_t one_side = 0, higher = 0;
    for (const Member& m : m_) {
      const Pair& p = *m.pair;
      if (!p.captured.ok()) ++captured[p.captured.Kind()];
      if (!p.replayed.ok()) ++replayed[p.replayed.Kind()];
      if (p.captured.ok() != p.replayed.ok()) {
        ++one_side;
        higher += !p.replayed.ok();
      }
    }
    (*errors)["captured"] = captured;
    (*errors)["replayed"] = replayed;
    (*errors)["one_side_failed"] = one_side;
    Verdict v;
    if (m_.empty()) {
      v.verdict = "n/a";
      v.detail = "no pairs";
      return v;
    }
    const double share = static_cast<double>(one_side) / m_.size();
    v.value = share;
    v.detail = Format(
        "%zu of %zu pairs failed on one side only (%zu the replay's), at most "
        "%.1f %% allowed",
        one_side, m_.size(), higher, 100 * (1 - o_.equal_share));
    if (m_.size() < o_.min_pairs) {
      v.verdict = "unknown";
    } else if (share <= 1 - o_.equal_share + 1e-12) {
      v.verdict = "reproduced";
    } else {
      v.verdict = "not reproduced";
      v.direction = 2 * higher >= one_side ? "higher" : "lower";
    }
    return v;
  }

  Verdict Points(const std::string& metric, json* out) {
    double cn = 0, cd = 0, rn = 0, rd = 0, fn = 0, fd = 0, mn = 0, md = 0;
    size_t both = 0, one = 0, floor_both = 0;
    for (const Member& m : m_) {
      auto c = RateOf(m.pair->captured, metric), r = RateOf(m.pair->replayed, metric);
      if (c.has_value() != r.has_value()) ++one;
      if (!c || !r) continue;
      ++both;
      cn += c->first, cd += c->second, rn += r->first, rd += r->second;
      if (m.floor_a != nullptr) {
        auto fa = RateOf(*m.floor_a, metric), fb = RateOf(*m.floor_b, metric);
        if (fa && fb) {
          ++floor_both;
          fn += fb->first, fd += fb->second, mn += fa->first, md += fa->second;
        }
      }
    }
    Verdict v;
    if (both == 0 || cd == 0 || rd == 0) {
      *out = nullptr;
      v.verdict = one > 0 ? "unknown" : "n/a";
      v.detail = one > 0 ? Format("only one side reports it (%zu pairs)", one) : "not reported";
      return v;
    }
    const double captured = cn / cd, replayed = rn / rd, points = 100 * (replayed - captured);
    std::optional<double> floor_points;
    if (floor_both > 0 && fd > 0 && md > 0) floor_points = 100 * std::abs(fn / fd - mn / md);
    const double tolerance = std::max(o_.points, floor_points.value_or(0));
    *out = {{"pairs", both},
            {"captured", Round(captured, 1e-6)},
            {"replayed", Round(replayed, 1e-6)},
            {"points", Round(points, 1e-3)},
            {"floor_points", floor_points ? json(Round(*floor_points, 1e-3)) : json(nullptr)},
            {"tolerance", Round(tolerance, 1e-3)}};
    v.value = Round(points, 1e-3);
    v.detail = Format("captured %.1f %%, replayed %.1f %%: %+.1f points (tolerance %.1f%s)",
                      100 * captured, 100 * replayed, points, tolerance,
                      floor_points && *floor_points > o_.points ? ", the floor" : "");
    if (both < o_.min_pairs) {
      v.verdict = "unknown";
      v.detail += Format("; a verdict needs %zu pairs", o_.min_pairs);
    } else if (std::abs(points) <= tolerance + 1e-9) {
      v.verdict = "reproduced";
    } else {
      v.verdict = "not reproduced";
      v.direction = points > 0 ? "higher" : "lower";
    }
    return v;
  }

  Verdict Timing(const std::string& metric, json* out) {
    std::vector<double> c, r, fm, ff;
    size_t one = 0;
    for (const Member& m : m_) {
      auto cv = TimingOf(m.pair->captured, metric), rv = TimingOf(m.pair->replayed, metric);
      if (m.pair->captured.ok() && m.pair->replayed.ok() && cv.has_value() != rv.has_value()) {
        ++one;
      }
      if (!cv || !rv) continue;
      c.push_back(*cv);
      r.push_back(*rv);
      if (m.floor_a != nullptr) {
        auto fa = TimingOf(*m.floor_a, metric), fb = TimingOf(*m.floor_b, metric);
        if (fa && fb) {
          fm.push_back(*fa);
          ff.push_back(*fb);
        }
      }
    }
    const shadow::RatioEstimate e = shadow::PairedRatio(c, r, o_.resamples, o_.seed);
    std::optional<double> band;
    if (has_floor_ && fm.size() >= o_.min_pairs) {
      const shadow::RatioEstimate f = shadow::PairedRatio(fm, ff, o_.resamples, o_.seed + 1);
      if (f.ci_low && f.ci_high) band = std::max(std::abs(*f.ci_low - 1), std::abs(*f.ci_high - 1));
    }
    const double t = std::max(o_.timing, band.value_or(0));
    auto r6 = [](const std::optional<double>& x) {
      return x ? json(Round(*x, 1e-6)) : json(nullptr);
    };
    *out = {{"n", e.n},
            {"mean_captured", Round(e.mean_primary, 1e-3)},
            {"mean_replayed", Round(e.mean_candidate, 1e-3)},
            {"ratio", r6(e.ratio)},
            {"ci_low", r6(e.ci_low)},
            {"ci_high", r6(e.ci_high)},
            {"floor_band", r6(band)},
            {"tolerance", Round(t, 1e-6)}};
    Verdict v;
    if (e.n == 0) {
      v.verdict = one > 0 ? "unknown" : "n/a";
      v.detail = one > 0 ? Format("only one side reports it (%zu pairs)", one) : "not reported";
      return v;
    }
    v.value = e.ratio;
    // The shadow report's rule (shadow::Decide) with the tolerance t and the floor's band as its
    // noise floor: a significant move of at least t/2 is "not reproduced" unless the CI lies
    // within the floor's band; a CI inside 1 +- t is "reproduced"; otherwise too wide to tell.
    std::string note;
    const shadow::Verdict d = shadow::Decide(e, t, band, o_.min_pairs, &note);
    if (e.ratio && e.ci_low && e.ci_high) {
      v.detail = Format("replayed/captured %.3f [%.3f, %.3f], tolerance 1 +- %.3f%s: ", *e.ratio,
                        *e.ci_low, *e.ci_high, t, band && *band > o_.timing ? " (the floor)" : "");
    }
    v.detail += note;
    switch (d) {
      case shadow::Verdict::kNoDifference:
      case shadow::Verdict::kWithinNoise:
        v.verdict = "reproduced";
        break;
      case shadow::Verdict::kWorse:
      case shadow::Verdict::kBetter:
        v.verdict = "not reproduced";
        v.direction = d == shadow::Verdict::kWorse ? "higher" : "lower";
        break;
      case shadow::Verdict::kInsufficientData:
      case shadow::Verdict::kInconclusive:
        v.verdict = "unknown";
        break;
    }
    return v;
  }

  static json ClientVsServer(const std::map<std::string, Verdict>& v) {
    auto is = [&](const char* m, const char* verdict) { return v.at(m).verdict == verdict; };
    const bool client_moved = is("ttft_ms", "not reproduced") || is("latency_ms", "not reproduced");
    const bool server_known = !is("server_prompt_ms", "n/a") || !is("server_decode_ms", "n/a");
    if (!client_moved || !server_known) return nullptr;
    const bool server_moved =
        is("server_prompt_ms", "not reproduced") || is("server_decode_ms", "not reproduced");
    if (server_moved) {
      return "the server's own timings moved too: the server did different work or ran slower";
    }
    if (is("server_prompt_ms", "reproduced") && is("server_decode_ms", "reproduced")) {
      return "the client-side timings moved but the server's own did not: contention on the "
             "client, the proxy or the network, not a different server";
    }
    return nullptr;
  }

  const std::vector<Member>& m_;
  const bool has_floor_;
  const Options& o_;
};

}  // namespace

std::string Side::Kind() const {
  if (ok()) return "ok";
  if (error) return *error;
  if (!status || *status == 0) return "no_response";
  if (*status >= 500) return "http_5xx";
  if (*status >= 400) return "http_4xx";
  return "http_" + std::to_string(*status);
}

bool ParsePairLine(std::string_view line, Pair* out, std::string* error) {
  nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
  if (j.is_discarded() || !j.is_object()) {
    *error = "not a JSON object";
    return false;
  }
  Pair p;
  auto req = j.find("request");
  if (req == j.end() || !req->is_number_unsigned()) {
    *error = "\"request\" is missing or not a non-negative integer";
    return false;
  }
  p.request = req->get<uint64_t>();
  std::optional<std::string> api;
  std::optional<double> turn;
  if (!Opt(j, "api", &api, error) || !Opt(j, "model", &p.model, error) ||
      !Opt(j, "temperature", &p.temperature, error) || !Opt(j, "turn", &turn, error) ||
      !Opt(j, "lag_ms", &p.lag_ms, error) ||
      !Opt(j, "causal_shift_ms", &p.causal_shift_ms, error) ||
      !ParseSide(j, "primary", &p.captured, error) ||
      !ParseSide(j, "candidate", &p.replayed, error)) {
    return false;
  }
  p.api = api.value_or("");
  if (auto s = j.find("stream"); s != j.end() && s->is_boolean()) p.stream = s->get<bool>();
  if (!p.stream) {
    for (Side* side : {&p.captured, &p.replayed}) side->ttft_ms = side->itl_ms = std::nullopt;
  }
  if (turn) p.turn = static_cast<int64_t>(*turn);
  *out = std::move(p);
  return true;
}

bool ReadPairFile(const std::string& path, PairFile* out, std::string* error) {
  trace::LineReader reader;
  Status s = reader.Open(path);
  if (!s.ok()) {
    *error = path + ": " + s.ToString();
    return false;
  }
  out->path = path;
  trace::Line line;
  while (reader.Next(&line)) {
    std::string_view bytes = line.bytes;
    while (!bytes.empty() && (bytes.back() == '\r' || bytes.back() == ' ')) bytes.remove_suffix(1);
    if (bytes.empty()) continue;
    ++out->lines;
    Pair p;
    std::string why;
    if (ParsePairLine(bytes, &p, &why)) {
      out->pairs.push_back(std::move(p));
    } else {
      ++out->malformed;
      if (out->messages.size() < kMaxMessages) {
        out->messages.push_back(path + ":" + std::to_string(line.number) + ": " + why);
      }
    }
  }
  if (!reader.status().ok()) {
    *error = path + ": " + reader.status().ToString();
    return false;
  }
  return true;
}

bool ReadFloor(const std::string& path, PairFile* out, std::string* error) {
  std::error_code ec;
  std::string file = path;
  if (std::filesystem::is_directory(path, ec) ||
      (path.starts_with("s3://") && path.ends_with("/"))) {
    file = (std::filesystem::path(path) / kPairsFile).string();
  }
  if (!ReadPairFile(file, out, error)) return false;
  if (out->pairs.empty()) {
    *error = file +
             ": no fidelity pairs (a replay with --out and the trace's outcomes sidecar "
             "writes them)";
    return false;
  }
  return true;
}

bool FloorRuns::Load(const std::vector<std::string>& paths, std::string* error) {
  floor_ = {};
  if (paths.empty()) return true;
  if (paths.size() > 2) {
    *error = "a floor is one replay (beside the run judged) or two; " +
             std::to_string(paths.size()) + " given";
    return false;
  }
  if (!ReadFloor(paths.back(), &second_, error)) return false;
  floor_.pairs = &second_;
  floor_.label = paths.back();
  if (paths.size() == 2) {
    if (!ReadFloor(paths[0], &first_, error)) return false;
    floor_.first = &first_;
    floor_.label = paths[0] + " vs " + paths[1];
  }
  return true;
}

const std::vector<std::string>& MetricNames() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> n;
    for (const MetricDef& d : kMetrics) n.push_back(d.name);
    return n;
  }();
  return names;
}

nlohmann::json BuildCertificate(const PairFile& pairs, const Floor& floor, const Options& o) {
  // The floor's sides by trace row: the second replay's, and the first one's when the floor is
  // two other replays (else the run's own).
  std::unordered_map<uint64_t, const Side*> floor_a, floor_b;
  if (floor.pairs != nullptr) {
    for (const Pair& p : floor.pairs->pairs) floor_b[p.request] = &p.replayed;
    if (floor.first != nullptr) {
      for (const Pair& p : floor.first->pairs) floor_a[p.request] = &p.replayed;
    }
  }
  std::vector<Member> all;
  size_t joined = 0;
  for (const Pair& p : pairs.pairs) {
    const Side* a = nullptr;
    const Side* b = nullptr;
    if (auto it = floor_b.find(p.request); it != floor_b.end()) {
      b = it->second;
      if (floor.first == nullptr) {
        a = &p.replayed;
      } else if (auto ia = floor_a.find(p.request); ia != floor_a.end()) {
        a = ia->second;
      }
    }
    if (a == nullptr) b = nullptr;
    joined += a != nullptr;
    all.push_back({&p, a, b});
  }
  json doc;
  doc["version"] = 1;
  doc["pairs_file"] = pairs.path;
  doc["pairs"] = pairs.pairs.size();
  doc["malformed"] = pairs.malformed;
  if (floor.pairs == nullptr) {
    doc["floor"] = {{"source", "none"}};
  } else {
    doc["floor"] = {
        {"source", "replay"},
        {"label", floor.label},
        {"of", floor.first == nullptr ? "this run and another replay" : "two other replays"},
        {"pairs", floor.pairs->pairs.size()},
        {"joined", joined}};
  }
  const std::vector<std::string>& gates = o.gates.empty() ? MetricNames() : o.gates;
  doc["options"] = {{"timing", o.timing},
                    {"points", o.points},
                    {"prompt_equal_share", o.prompt_equal_share},
                    {"equal_share", o.equal_share},
                    {"min_pairs", o.min_pairs},
                    {"gates", gates}};
  const bool has_floor = floor.pairs != nullptr;
  json groups = json::array();
  groups.push_back(GroupJudge(all, has_floor, o).Build("all", "all requests"));
  // api and model groups when there is more than one of them; turn groups when some pair is a
  // later turn.
  auto split = [&](const char* prefix, const std::function<std::string(const Pair&)>& key,
                   const std::function<std::string(const std::string&)>& label) {
    std::map<std::string, std::vector<Member>> by;
    for (const Member& m : all) by[key(*m.pair)].push_back(m);
    if (by.size() < 2) return;
    for (const auto& [k, members] : by) {
      groups.push_back(GroupJudge(members, has_floor, o).Build(prefix + k, label(k)));
    }
  };
  split(
      "api:", [](const Pair& p) { return p.api.empty() ? std::string("unknown") : p.api; },
      [](const std::string& k) { return "API " + k; });
  split(
      "model:", [](const Pair& p) { return p.model.value_or("(none)"); },
      [](const std::string& k) { return "model " + k; });
  const bool later = std::any_of(all.begin(), all.end(),
                                 [](const Member& m) { return m.pair->turn.value_or(0) > 0; });
  if (later) {
    split(
        "turn:", [](const Pair& p) { return p.turn.value_or(0) > 0 ? "later" : "first"; },
        [](const std::string& k) {
          return k == "first" ? std::string("first turns (and rows without a session)")
                              : std::string("later turns");
        });
  }
  // The verdict: every gated metric of group "all" that is not n/a must be reproduced.
  json moved = json::array(), unknown = json::array();
  size_t gated = 0, reproduced = 0;
  for (const json& m : groups[0]["metrics"]) {
    const std::string name = m["metric"].get<std::string>();
    if (std::find(gates.begin(), gates.end(), name) == gates.end()) continue;
    const std::string verdict = m["verdict"].get<std::string>();
    if (verdict == "n/a") continue;
    ++gated;
    if (verdict == "reproduced") {
      ++reproduced;
    } else if (verdict == "not reproduced") {
      moved.push_back(name + ": " + m["detail"].get<std::string>());
    } else {
      unknown.push_back(name + ": " + m["detail"].get<std::string>());
    }
  }
  // A run where no pair succeeded on both sides compared nothing: never certified.
  const bool compared = std::any_of(pairs.pairs.begin(), pairs.pairs.end(), [](const Pair& p) {
    return p.captured.ok() && p.replayed.ok();
  });
  if (!compared) unknown.push_back("no pair succeeded on both sides: nothing was compared");
  const bool certified = compared && gated > 0 && reproduced == gated;
  doc["certified"] = certified;
  doc["verdict"] = certified ? "certified" : "not certified";
  doc["reproduced"] = reproduced;
  doc["gated"] = gated;
  doc["moved"] = moved;
  doc["unknown"] = unknown;
  doc["groups"] = groups;
  return nlohmann::json::parse(doc.dump());
}

std::string RenderCertificateText(const nlohmann::json& c) {
  std::string out;
  const nlohmann::json& floor = c["floor"];
  out += Format("fidelity: %s (%zu of %zu gated metrics reproduced; %zu pairs; floor: %s)\n",
                c.value("verdict", "?").c_str(), c.value("reproduced", size_t{0}),
                c.value("gated", size_t{0}), c.value("pairs", size_t{0}),
                floor.value("source", "none") == "none"
                    ? "none, thresholds only"
                    : ("replay " + floor.value("label", std::string()) + ", " +
                       std::to_string(floor.value("joined", size_t{0})) + " rows joined")
                          .c_str());
  // Group "all" in full; the others by their counts and what did not reproduce.
  for (const nlohmann::json& g : c["groups"]) {
    const bool all = g["group"] == "all";
    std::map<std::string, size_t> counts;
    for (const nlohmann::json& m : g["metrics"]) ++counts[m.value("verdict", "?")];
    out += Format("  %s (%zu pairs)", g.value("label", "?").c_str(), g.value("pairs", size_t{0}));
    if (!all) {
      out += Format(": %zu reproduced, %zu not, %zu unknown", counts["reproduced"],
                    counts["not reproduced"], counts["unknown"]);
    }
    out += "\n";
    for (const nlohmann::json& m : g["metrics"]) {
      const std::string verdict = m.value("verdict", "?");
      if (!all && verdict != "not reproduced") continue;
      std::string dir;
      if (m["direction"].is_string()) dir = " (" + m["direction"].get<std::string>() + ")";
      out += Format("    %-18s %-15s %s\n", m.value("metric", "?").c_str(), (verdict + dir).c_str(),
                    m.value("detail", "").c_str());
    }
    if (g["client_vs_server"].is_string()) {
      out += "    note: " + g["client_vs_server"].get<std::string>() + "\n";
    }
  }
  return out;
}

bool ParseShare(std::string_view text, double* share) {
  double x = 0;
  if (!shadow::ParseFraction(text, &x) || !(x > 0 && x <= 1)) return false;
  *share = x;
  return true;
}

}  // namespace llmtap::fidelity
