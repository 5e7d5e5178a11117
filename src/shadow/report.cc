#include "shadow/report.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <set>

#include <simdjson.h>

#include "trace/line_reader.h"

namespace llmtap::shadow {
namespace {

using nlohmann::json;
using simdjson::dom::element;
using simdjson::dom::element_type;

// SplitMix64 (Steele, Lea, Flood 2014): a fixed generator, so that the same seed gives the same
// resamples on every platform and standard library (std::uniform_int_distribution does not).
class SplitMix64 {
 public:
  explicit SplitMix64(uint64_t seed) : state_(seed) {}
  uint64_t Next() {
    uint64_t z = (state_ += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  }
  // Uniform in [0, n) for n < 2^32, by Lemire's multiply-shift on the high 32 bits (bias below
  // n / 2^32: under 10^-4 for a million pairs, far under the bootstrap's own error).
  size_t Below(size_t n) { return static_cast<size_t>(((Next() >> 32) * n) >> 32); }

 private:
  uint64_t state_;
};

uint64_t Fnv1a(std::string_view s, uint64_t h = 0xcbf29ce484222325ULL) {
  for (unsigned char c : s) h = (h ^ c) * 0x100000001b3ULL;
  return h;
}

// A number member: absent or null leaves `out` empty; another type is an error.
bool OptNumber(element obj, std::string_view key, std::optional<double>* out, std::string* error) {
  element v;
  if (obj[key].get(v) != simdjson::SUCCESS || v.is_null()) return true;
  double d;
  if (v.get_double().get(d) != simdjson::SUCCESS) {
    *error = "\"" + std::string(key) + "\" is not a number";
    return false;
  }
  *out = d;
  return true;
}

bool ParseSide(element root, std::string_view name, PairSideValues* side, std::string* error) {
  element obj;
  if (root[name].get(obj) != simdjson::SUCCESS || obj.type() != element_type::OBJECT) {
    *error = "\"" + std::string(name) + "\" is missing or not an object";
    return false;
  }
  std::string inner;
  std::optional<double> status, tokens;
  if (!OptNumber(obj, "status", &status, &inner) ||
      !OptNumber(obj, "ttft_ms", &side->ttft_ms, &inner) ||
      !OptNumber(obj, "itl_p50_ms", &side->itl_p50_ms, &inner) ||
      !OptNumber(obj, "latency_ms", &side->latency_ms, &inner) ||
      !OptNumber(obj, "completion_tokens", &side->completion_tokens, &inner)) {
    *error = std::string(name) + "." + inner;
    return false;
  }
  if (status) side->status = static_cast<int>(*status);
  element err;
  if (obj["error"].get(err) == simdjson::SUCCESS && !err.is_null()) {
    std::string_view text;
    side->error = err.get_string().get(text) == simdjson::SUCCESS ? std::string(text) : "error";
  }
  return true;
}

double Median(std::vector<double> v) {
  const size_t n = v.size(), mid = n / 2;
  std::nth_element(v.begin(), v.begin() + mid, v.end());
  double m = v[mid];
  if (n % 2 == 0) m = (m + *std::max_element(v.begin(), v.begin() + mid)) / 2;
  return m;
}

double Percentile(const std::vector<double>& sorted, double q) {
  const double h = q * static_cast<double>(sorted.size() - 1);
  const size_t lo = static_cast<size_t>(h), hi = std::min(lo + 1, sorted.size() - 1);
  return sorted[lo] + (h - static_cast<double>(lo)) * (sorted[hi] - sorted[lo]);
}

// The metrics compared, in the report's order, with the pair line's member names.
struct MetricDef {
  const char* key;
  const char* label;
  const char* unit;
  std::optional<double> PairSideValues::*field;
  bool length;  // longer / shorter instead of worse / better
};
constexpr MetricDef kMetrics[] = {
    {"ttft_ms", "TTFT", "ms", &PairSideValues::ttft_ms, false},
    {"itl_p50_ms", "ITL p50", "ms", &PairSideValues::itl_p50_ms, false},
    {"latency_ms", "latency", "ms", &PairSideValues::latency_ms, false},
    {"completion_tokens", "output length", "tokens", &PairSideValues::completion_tokens, true},
};
constexpr size_t kNumMetrics = std::size(kMetrics);

// The values of several metrics over the same pairs, a row per pair (primary, candidate for each
// metric in turn: one resampled pair is one cache line), NaN where a side lacks the value. One
// bootstrap draws the pair indices once for all the metrics.
class PairedColumns {
 public:
  explicit PairedColumns(size_t metrics) : metrics_(metrics) {}
  // Called for metric 0, 1, ... of each pair in turn.
  void Add(std::optional<double> p, std::optional<double> c) {
    values_.push_back(p && c ? *p : NAN);
    values_.push_back(p && c ? *c : NAN);
  }
  size_t metrics() const { return metrics_; }
  size_t size() const { return metrics_ ? values_.size() / (2 * metrics_) : 0; }
  const double* row(size_t i) const { return values_.data() + 2 * metrics_ * i; }

 private:
  size_t metrics_;
  std::vector<double> values_;
};

std::vector<RatioEstimate> Bootstrap(const PairedColumns& cols, int resamples, uint64_t seed) {
  const size_t metrics = cols.metrics(), n = cols.size();
  std::vector<RatioEstimate> out(metrics);
  for (size_t m = 0; m < metrics; ++m) {
    double sum_p = 0, sum_c = 0;
    std::vector<double> deltas;
    for (size_t i = 0; i < n; ++i) {
      const double p = cols.row(i)[2 * m], c = cols.row(i)[2 * m + 1];
      if (std::isnan(p)) continue;
      sum_p += p;
      sum_c += c;
      deltas.push_back(c - p);
    }
    RatioEstimate& e = out[m];
    e.n = deltas.size();
    if (e.n == 0) continue;
    e.mean_primary = sum_p / static_cast<double>(e.n);
    e.mean_candidate = sum_c / static_cast<double>(e.n);
    e.median_delta = Median(std::move(deltas));
    if (sum_p > 0) e.ratio = sum_c / sum_p;
  }
  if (n < 2 || resamples < 1) return out;
  std::vector<std::vector<double>> ratios(metrics);
  for (auto& r : ratios) r.reserve(resamples);
  SplitMix64 rng(seed);
  std::vector<double> sums(2 * metrics);
  // How many times each pair was drawn: the draws land in this small array, and the rows are then
  // read in order (drawing rows directly missed the cache on every draw: 2x slower at 100k pairs).
  std::vector<uint32_t> drawn(n);
  for (int b = 0; b < resamples; ++b) {
    std::fill(sums.begin(), sums.end(), 0.0);
    std::fill(drawn.begin(), drawn.end(), 0);
    for (size_t k = 0; k < n; ++k) ++drawn[rng.Below(n)];
    for (size_t i = 0; i < n; ++i) {
      if (drawn[i] == 0) continue;
      const double w = drawn[i];
      const double* row = cols.row(i);
      for (size_t m = 0; m < 2 * metrics; m += 2) {
        if (std::isnan(row[m])) continue;
        sums[m] += w * row[m];
        sums[m + 1] += w * row[m + 1];
      }
    }
    for (size_t m = 0; m < metrics; ++m) {
      if (sums[2 * m] > 0) ratios[m].push_back(sums[2 * m + 1] / sums[2 * m]);
    }
  }
  for (size_t m = 0; m < metrics; ++m) {
    if (!out[m].ratio || out[m].n < 2 || ratios[m].empty()) continue;
    std::sort(ratios[m].begin(), ratios[m].end());
    out[m].ci_low = Percentile(ratios[m], 0.025);
    out[m].ci_high = Percentile(ratios[m], 0.975);
  }
  return out;
}

json Opt(const std::optional<double>& v) { return v ? json(*v) : json(nullptr); }

std::string GroupName(const std::string& kind, const std::string& name) {
  return kind + ":" + name;
}

// Which groups a pair belongs to: all pairs, its path, its model.
std::vector<std::pair<std::string, std::string>> GroupsOf(const PairRecord& p) {
  return {{"all", "all pairs"}, {"path", p.path}, {"model", p.model.value_or("(none)")}};
}

struct GroupAccumulator {
  std::string kind, name;
  std::vector<const PairRecord*> pairs;
};

// Groups in the report's order: all, then paths, then models, each sorted by name.
std::vector<GroupAccumulator> Group(const std::vector<const PairRecord*>& pairs) {
  std::map<std::pair<int, std::string>, GroupAccumulator> groups;
  for (const PairRecord* p : pairs) {
    int order = 0;
    for (auto& [kind, name] : GroupsOf(*p)) {
      GroupAccumulator& g = groups[{order++, name}];
      g.kind = kind;
      g.name = name;
      g.pairs.push_back(p);
    }
  }
  std::vector<GroupAccumulator> out;
  for (auto& [key, g] : groups) out.push_back(std::move(g));
  return out;
}

json EstimateJson(const RatioEstimate& e) {
  json ci = e.ci_low ? json::array({*e.ci_low, *e.ci_high}) : json(nullptr);
  return {{"n", e.n},
          {"mean_primary", e.n ? json(e.mean_primary) : json(nullptr)},
          {"mean_candidate", e.n ? json(e.mean_candidate) : json(nullptr)},
          {"ratio", Opt(e.ratio)},
          {"ci", ci},
          {"median_delta", Opt(e.median_delta)}};
}

std::optional<double> Band(const RatioEstimate& e) {
  if (!e.ci_low) return std::nullopt;
  return std::max(std::abs(*e.ci_low - 1), std::abs(*e.ci_high - 1));
}

json OutputJson(const std::vector<const PairRecord*>& pairs) {
  size_t with_output = 0, equal = 0, greedy = 0, greedy_equal = 0;
  std::vector<double> chars, tokens;
  for (const PairRecord* p : pairs) {
    if (!p->has_output) continue;
    ++with_output;
    equal += p->output_equal;
    if (p->temperature && *p->temperature == 0) {
      ++greedy;
      greedy_equal += p->output_equal;
    }
    if (p->output_equal) continue;
    if (p->first_diff_char) chars.push_back(static_cast<double>(*p->first_diff_char));
    if (p->first_diff_token) tokens.push_back(static_cast<double>(*p->first_diff_token));
  }
  auto rate = [](size_t k, size_t n) {
    return n ? json(static_cast<double>(k) / n) : json(nullptr);
  };
  return {{"compared", with_output},
          {"equal", equal},
          {"match_rate", rate(equal, with_output)},
          {"greedy_compared", greedy},
          {"greedy_equal", greedy_equal},
          {"greedy_match_rate", rate(greedy_equal, greedy)},
          {"differing", with_output - equal},
          {"first_diff_char_n", chars.size()},
          {"first_diff_char_median", chars.empty() ? json(nullptr) : json(Median(chars))},
          {"first_diff_token_n", tokens.size()},
          {"first_diff_token_median", tokens.empty() ? json(nullptr) : json(Median(tokens))}};
}

std::string ErrorKind(const PairSideValues& s) {
  if (s.error) return *s.error;
  if (!s.status) return "no status";
  return "status " + std::to_string(*s.status);
}

// The A/A noise floor (aa: kShadows or kPrimary), per group of the request (its path and model,
// as the candidate's groups), and its estimates into `noise` by group.
json NoiseFloor(const PairSet& set, AaMode aa, const ReportOptions& o,
                std::map<std::string, std::vector<RatioEstimate>>* noise) {
  std::map<std::string, std::pair<GroupAccumulator, PairedColumns>> groups;
  std::vector<std::string> order;
  auto add = [&](const PairRecord& key, const PairSideValues& a, const PairSideValues& b) {
    for (auto& [kind, name] : GroupsOf(key)) {
      const std::string gk = GroupName(kind, name);
      auto it = groups.find(gk);
      if (it == groups.end()) {
        it = groups
                 .emplace(gk, std::make_pair(GroupAccumulator{kind, name, {}},
                                             PairedColumns(kNumMetrics)))
                 .first;
        order.push_back(gk);
      }
      it->second.first.pairs.push_back(&key);
      for (size_t m = 0; m < kNumMetrics; ++m) {
        it->second.second.Add(a.*kMetrics[m].field, b.*kMetrics[m].field);
      }
    }
  };
  if (aa == AaMode::kPrimary) {
    for (const PairRecord& p : set.pairs) {
      if (p.shadow == 0 && p.primary.ok() && p.candidate.ok()) add(p, p.primary, p.candidate);
    }
  } else {
    // Joined on (file, request): request numbers are one proxy's (or one replay's) own.
    std::map<std::pair<size_t, uint64_t>, const PairRecord*> first;
    for (const PairRecord& p : set.pairs) {
      if (p.shadow == 0 && p.request) first.emplace(std::make_pair(p.file, *p.request), &p);
    }
    for (const PairRecord& p : set.pairs) {
      if (p.shadow != 1 || !p.request) continue;
      auto it = first.find({p.file, *p.request});
      if (it == first.end() || !it->second->candidate.ok() || !p.candidate.ok()) continue;
      add(*it->second, it->second->candidate, p.candidate);
    }
  }
  std::sort(order.begin(), order.end(), [&](const std::string& a, const std::string& b) {
    auto rank = [](const std::string& k) {
      return k.rfind("all:", 0) == 0 ? 0 : k.rfind("path:", 0) == 0 ? 1 : 2;
    };
    return std::make_pair(rank(a), a) < std::make_pair(rank(b), b);
  });
  json gs = json::array();
  for (const std::string& gk : order) {
    auto& [acc, cols] = groups.at(gk);
    std::vector<RatioEstimate> est = Bootstrap(cols, o.resamples, o.seed ^ Fnv1a("aa/" + gk));
    json metrics = json::object();
    for (size_t m = 0; m < kNumMetrics; ++m) {
      json j = EstimateJson(est[m]);
      j["band"] = Opt(est[m].n >= o.min_pairs ? Band(est[m]) : std::nullopt);
      metrics[kMetrics[m].key] = j;
    }
    gs.push_back({{"kind", acc.kind},
                  {"name", acc.name},
                  {"requests", acc.pairs.size()},
                  {"metrics", metrics}});
    (*noise)[gk] = std::move(est);
  }
  return {{"mode", AaModeName(aa)},
          {"what", aa == AaMode::kShadows
                       ? "shadow 1 over shadow 0 on the same requests (the same candidate "
                         "twice)"
                       : "shadow 0 (a copy of the primary) over the primary"},
          {"groups", gs}};
}

}  // namespace

bool ParsePairLine(std::string_view line, PairRecord* out, std::string* error) {
  thread_local simdjson::dom::parser parser;
  element root;
  if (parser.parse(line.data(), line.size(), true).get(root) != simdjson::SUCCESS) {
    *error = "not JSON";
    return false;
  }
  if (root.type() != element_type::OBJECT) {
    *error = "not a JSON object";
    return false;
  }
  PairRecord p;
  if (!ParseSide(root, "primary", &p.primary, error) ||
      !ParseSide(root, "candidate", &p.candidate, error)) {
    return false;
  }
  element v;
  if (root["request"].get(v) == simdjson::SUCCESS && !v.is_null()) {
    uint64_t r;
    if (v.get_uint64().get(r) != simdjson::SUCCESS) {
      *error = "\"request\" is not a whole number";
      return false;
    }
    p.request = r;
  }
  if (root["shadow"].get(v) == simdjson::SUCCESS && !v.is_null()) {
    int64_t s;
    if (v.get_int64().get(s) != simdjson::SUCCESS || s < 0 || s > 1000) {
      *error = "\"shadow\" is not a small whole number";
      return false;
    }
    p.shadow = static_cast<int>(s);
  }
  std::string_view text;
  if (root["candidate_url"].get(v) == simdjson::SUCCESS &&
      v.get_string().get(text) == simdjson::SUCCESS) {
    p.candidate_url = std::string(text);
  }
  if (root["path"].get(v) == simdjson::SUCCESS && v.get_string().get(text) == simdjson::SUCCESS) {
    p.path = text;
  } else {
    p.path = "(none)";
  }
  if (root["model"].get(v) == simdjson::SUCCESS && v.get_string().get(text) == simdjson::SUCCESS) {
    p.model = std::string(text);
  }
  std::optional<double> at;
  if (!OptNumber(root, "temperature", &p.temperature, error) ||
      !OptNumber(root, "at_ms", &at, error)) {
    return false;
  }
  if (at) p.at_ms = static_cast<int64_t>(*at);
  element output;
  if (root["output"].get(output) == simdjson::SUCCESS && !output.is_null()) {
    if (output.type() != element_type::OBJECT) {
      *error = "\"output\" is not an object or null";
      return false;
    }
    bool equal;
    if (output["equal"].get(equal) != simdjson::SUCCESS) {
      *error = "\"output.equal\" is not true or false";
      return false;
    }
    p.has_output = true;
    p.output_equal = equal;
    std::optional<double> c, t;
    if (!OptNumber(output, "first_diff_char", &c, error) ||
        !OptNumber(output, "first_diff_token", &t, error)) {
      *error = "output." + *error;
      return false;
    }
    if (c && *c >= 0) p.first_diff_char = static_cast<int64_t>(*c);
    if (t && *t >= 0) p.first_diff_token = static_cast<int64_t>(*t);
  }
  *out = std::move(p);
  return true;
}

void PairSet::AddLine(std::string_view file, uint64_t number, std::string_view line) {
  if (line.find_first_not_of(" \t\r") == std::string_view::npos) return;
  ++lines;
  PairRecord p;
  std::string error;
  if (ParsePairLine(line, &p, &error)) {
    p.file = files.empty() ? 0 : files.size() - 1;
    pairs.push_back(std::move(p));
    return;
  }
  ++malformed;
  if (messages.size() < kMaxMessages) {
    messages.push_back(std::string(file) + ":" + std::to_string(number) + ": " + error);
  }
}

bool ReadPairsFile(const std::string& path, PairSet* set, std::string* error) {
  trace::LineReader reader;
  Status s = reader.Open(path);
  if (!s.ok()) {
    *error = path + ": " + s.ToString();
    return false;
  }
  set->files.push_back(path);
  trace::Line line;
  while (reader.Next(&line)) set->AddLine(path, line.number, line.bytes);
  if (!reader.status().ok()) {
    *error = path + ": " + reader.status().ToString();
    return false;
  }
  return true;
}

bool ParseAaMode(std::string_view text, AaMode* mode) {
  for (AaMode m : {AaMode::kAuto, AaMode::kNone, AaMode::kShadows, AaMode::kPrimary}) {
    if (text == AaModeName(m)) {
      *mode = m;
      return true;
    }
  }
  return false;
}

const char* AaModeName(AaMode mode) {
  switch (mode) {
    case AaMode::kAuto:
      return "auto";
    case AaMode::kNone:
      return "none";
    case AaMode::kShadows:
      return "shadows";
    case AaMode::kPrimary:
      return "primary";
  }
  return "?";
}

bool ParseFraction(std::string_view text, double* fraction) {
  std::string s(text);
  double scale = 1;
  if (!s.empty() && s.back() == '%') {
    s.pop_back();
    scale = 0.01;
  }
  if (s.empty()) return false;
  char* end = nullptr;
  const double v = std::strtod(s.c_str(), &end);
  if (end != s.c_str() + s.size() || !std::isfinite(v)) return false;
  *fraction = v * scale;
  return true;
}

bool ParseThreshold(std::string_view text, double* threshold) {
  double t = 0;
  if (!ParseFraction(text, &t) || !(t > 0 && t < 1)) return false;
  *threshold = t;
  return true;
}

RatioEstimate PairedRatio(const std::vector<double>& primary, const std::vector<double>& candidate,
                          int resamples, uint64_t seed) {
  PairedColumns cols(1);
  for (size_t i = 0; i < primary.size() && i < candidate.size(); ++i) {
    cols.Add(primary[i], candidate[i]);
  }
  return Bootstrap(cols, resamples, seed)[0];
}

Verdict Decide(const RatioEstimate& e, double t, std::optional<double> noise_band, size_t min_pairs,
               std::string* note) {
  char buf[256];
  if (e.n < min_pairs || !e.ratio || !e.ci_low) {
    std::snprintf(buf, sizeof(buf), "%zu pairs with both values; a verdict needs %zu", e.n,
                  min_pairs);
    *note = buf;
    return Verdict::kInsufficientData;
  }
  const double r = *e.ratio, lo = *e.ci_low, hi = *e.ci_high;
  const bool significant = lo > 1 || hi < 1;
  if (significant && std::abs(r - 1) >= t / 2) {
    if (noise_band && lo > 1 - *noise_band && hi < 1 + *noise_band) {
      std::snprintf(buf, sizeof(buf),
                    "the CI lies within the A/A noise floor 1 +/- %.4f: the same server differs "
                    "as much from itself",
                    *noise_band);
      *note = buf;
      return Verdict::kWithinNoise;
    }
    std::snprintf(buf, sizeof(buf),
                  "the CI excludes 1 and the ratio is %.1f %% from 1 (at least half the "
                  "threshold)",
                  100 * std::abs(r - 1));
    *note = buf;
    return r > 1 ? Verdict::kWorse : Verdict::kBetter;
  }
  if (lo > 1 - t && hi < 1 + t) {
    *note = significant ? "significant but below the threshold: a real difference under half of it"
                        : "the CI lies inside 1 +/- the threshold";
    return Verdict::kNoDifference;
  }
  *note = significant ? "significant, but the ratio is under half the threshold from 1 while the "
                        "CI reaches past the threshold: more pairs needed"
                      : "the CI contains 1 but reaches past the threshold: more pairs needed";
  return Verdict::kInconclusive;
}

const char* VerdictName(Verdict v, bool length) {
  switch (v) {
    case Verdict::kInsufficientData:
      return "insufficient data";
    case Verdict::kNoDifference:
      return "no detectable difference";
    case Verdict::kWorse:
      return length ? "longer" : "worse";
    case Verdict::kBetter:
      return length ? "shorter" : "better";
    case Verdict::kInconclusive:
      return "inconclusive";
    case Verdict::kWithinNoise:
      return "within noise floor";
  }
  return "?";
}

json BuildReport(const PairSet& set, const ReportOptions& o) {
  std::set<int> shadows;
  for (const PairRecord& p : set.pairs) shadows.insert(p.shadow);
  const bool two = shadows.count(0) && shadows.count(1);
  AaMode aa = o.aa;
  if (aa == AaMode::kAuto) aa = two ? AaMode::kShadows : AaMode::kNone;
  std::vector<std::string> warnings;
  if ((aa == AaMode::kShadows || aa == AaMode::kPrimary) && !two) {
    warnings.push_back(std::string("--aa ") + AaModeName(aa) +
                       " needs pairs of shadows 0 and 1; there is no noise floor");
    aa = AaMode::kNone;
  }

  std::map<std::string, std::vector<RatioEstimate>> noise;
  const json noise_json = aa == AaMode::kNone ? json(nullptr) : NoiseFloor(set, aa, o, &noise);

  json shadows_json = json::array();
  for (int s : shadows) {
    const char* role = "candidate";
    if (aa == AaMode::kShadows && s == 1) role = "repeat";
    if (aa == AaMode::kPrimary && s == 0) role = "copy of primary";
    const bool judged_with_noise = std::string(role) == "candidate" && aa != AaMode::kNone;
    std::vector<const PairRecord*> mine;
    std::set<std::string> urls;
    for (const PairRecord& p : set.pairs) {
      if (p.shadow != s) continue;
      mine.push_back(&p);
      if (!p.candidate_url.empty()) urls.insert(p.candidate_url);
    }
    json groups = json::array();
    for (const GroupAccumulator& g : Group(mine)) {
      const std::string gk = GroupName(g.kind, g.name);
      PairedColumns cols(kNumMetrics);
      size_t both_ok = 0, primary_failed = 0, candidate_failed = 0, both_failed = 0;
      std::map<std::string, uint64_t> primary_errors, candidate_errors;
      for (const PairRecord* p : g.pairs) {
        const bool pok = p->primary.ok(), cok = p->candidate.ok();
        if (!pok) ++primary_errors[ErrorKind(p->primary)];
        if (!cok) ++candidate_errors[ErrorKind(p->candidate)];
        if (pok && cok) {
          ++both_ok;
          for (size_t m = 0; m < kNumMetrics; ++m) {
            cols.Add(p->primary.*kMetrics[m].field, p->candidate.*kMetrics[m].field);
          }
        } else if (!pok && !cok) {
          ++both_failed;
        } else if (!pok) {
          ++primary_failed;
        } else {
          ++candidate_failed;
        }
      }
      std::vector<RatioEstimate> est =
          Bootstrap(cols, o.resamples, o.seed ^ Fnv1a(std::to_string(s) + "/" + gk));
      json metrics = json::object();
      auto nit = noise.find(gk);
      for (size_t m = 0; m < kNumMetrics; ++m) {
        std::optional<double> band;
        if (judged_with_noise && nit != noise.end() && nit->second[m].n >= o.min_pairs) {
          band = Band(nit->second[m]);
        }
        std::string note;
        Verdict v = Decide(est[m], o.threshold, band, o.min_pairs, &note);
        json j = EstimateJson(est[m]);
        j["verdict"] = VerdictName(v, kMetrics[m].length);
        j["note"] = note;
        j["noise_band"] = Opt(band);
        metrics[kMetrics[m].key] = j;
      }
      const double n = static_cast<double>(g.pairs.size());
      groups.push_back({{"kind", g.kind},
                        {"name", g.name},
                        {"counts",
                         {{"pairs", g.pairs.size()},
                          {"both_ok", both_ok},
                          {"primary_failed", primary_failed},
                          {"candidate_failed", candidate_failed},
                          {"both_failed", both_failed},
                          {"primary_error_rate", (primary_failed + both_failed) / n},
                          {"candidate_error_rate", (candidate_failed + both_failed) / n}}},
                        {"errors", {{"primary", primary_errors}, {"candidate", candidate_errors}}},
                        {"metrics", metrics},
                        {"output", OutputJson(g.pairs)}});
    }
    shadows_json.push_back(
        {{"shadow", s}, {"role", role}, {"candidate_urls", urls}, {"groups", groups}});
  }

  json metric_defs = json::array();
  for (const MetricDef& m : kMetrics) {
    metric_defs.push_back(
        {{"key", m.key}, {"label", m.label}, {"unit", m.unit}, {"lower_is_better", !m.length}});
  }
  return {{"tool", "llmtap shadow report"},
          {"inputs",
           {{"files", set.files},
            {"lines", set.lines},
            {"pairs", set.pairs.size()},
            {"malformed", set.malformed},
            {"malformed_examples", set.messages}}},
          {"options",
           {{"threshold", o.threshold},
            {"confidence", 0.95},
            {"seed", o.seed},
            {"resamples", o.resamples},
            {"min_pairs", o.min_pairs},
            {"aa", AaModeName(aa)}}},
          {"metrics", metric_defs},
          {"warnings", warnings},
          {"noise_floor", noise_json},
          {"shadows", shadows_json}};
}

json BuildPlotSeries(const PairSet& set, const json& report, size_t max_points) {
  std::optional<int64_t> t0;
  for (const PairRecord& p : set.pairs) {
    if (p.at_ms && (!t0 || *p.at_ms < *t0)) t0 = p.at_ms;
  }
  json out = json::array();
  for (const json& sh : report.value("shadows", json::array())) {
    if (sh.value("role", "") != "candidate") continue;
    const int s = sh.value("shadow", 0);
    std::vector<const PairRecord*> mine;
    for (const PairRecord& p : set.pairs) {
      if (p.shadow == s && p.primary.ok() && p.candidate.ok()) mine.push_back(&p);
    }
    std::stable_sort(mine.begin(), mine.end(), [](const PairRecord* a, const PairRecord* b) {
      return a->at_ms.value_or(0) < b->at_ms.value_or(0);
    });
    const size_t stride = std::max<size_t>(1, (mine.size() + max_points - 1) / max_points);
    json t = json::array(), cols[3] = {json::array(), json::array(), json::array()};
    const MetricDef* defs[3] = {&kMetrics[0], &kMetrics[1], &kMetrics[2]};
    auto round3 = [](double v) { return std::round(v * 1000) / 1000; };
    for (size_t i = 0; i < mine.size(); i += stride) {
      const PairRecord& p = *mine[i];
      t.push_back(p.at_ms && t0 ? json(round3((*p.at_ms - *t0) / 1000.0)) : json(nullptr));
      for (int m = 0; m < 3; ++m) {
        const auto& a = p.primary.*(defs[m]->field);
        const auto& b = p.candidate.*(defs[m]->field);
        cols[m].push_back(a && b ? json(round3(*b - *a)) : json(nullptr));
      }
    }
    out.push_back({{"shadow", s},
                   {"stride", stride},
                   {"t_s", t},
                   {"ttft_ms", cols[0]},
                   {"itl_p50_ms", cols[1]},
                   {"latency_ms", cols[2]}});
  }
  return out;
}

}  // namespace llmtap::shadow
