#include "trace/stats.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <nlohmann/json.hpp>
#include <vector>

#include "trace/hash_bytes.h"
#include "trace/histogram_json.h"
#include "trace/outcomes.h"

namespace llmtap::trace {

uint64_t FlatCounter::Add(uint64_t key, uint64_t n) {
  if (key == 0) {
    uint64_t before = zero_count_;
    if (!has_zero_) ++size_;
    has_zero_ = true;
    zero_count_ += n;
    return before;
  }
  if ((size_ + 1) * 2 > slots_.size()) Grow();
  size_t mask = slots_.size() - 1;
  for (size_t i = Index(key, mask);; i = (i + 1) & mask) {
    Slot& s = slots_[i];
    if (s.key == key) {
      uint64_t before = s.count;
      s.count += n;
      return before;
    }
    if (s.key == 0) {
      s.key = key;
      s.count = n;
      ++size_;
      return 0;
    }
  }
}

uint64_t FlatCounter::Get(uint64_t key) const {
  if (key == 0) return zero_count_;
  if (slots_.empty()) return 0;
  size_t mask = slots_.size() - 1;
  for (size_t i = Index(key, mask);; i = (i + 1) & mask) {
    const Slot& s = slots_[i];
    if (s.key == key) return s.count;
    if (s.key == 0) return 0;
  }
}

void FlatCounter::Grow() {
  std::vector<Slot> old;
  old.swap(slots_);
  slots_.resize(old.empty() ? 64 : old.size() * 2);
  size_t mask = slots_.size() - 1;
  for (const Slot& s : old) {
    if (s.key == 0) continue;
    size_t i = Index(s.key, mask);
    while (slots_[i].key != 0) i = (i + 1) & mask;
    slots_[i] = s;
  }
}

void Histogram::Add(uint64_t v) {
  uint64_t key = v;
  if (v >= 1024) {
    int shift = std::bit_width(v) - 10;
    key = (v >> shift) << shift;
  }
  buckets_.Add(key);
  ++count_;
  sum_ += v;
  if (v < min_) min_ = v;
  if (v > max_) max_ = v;
}

uint64_t Histogram::Percentile(double p) const {
  if (count_ == 0) return 0;
  uint64_t rank = static_cast<uint64_t>(std::ceil(p / 100.0 * static_cast<double>(count_)));
  if (rank == 0) rank = 1;
  std::vector<std::pair<uint64_t, uint64_t>> sorted;
  sorted.reserve(buckets_.size());
  buckets_.ForEach([&](uint64_t k, uint64_t c) { sorted.emplace_back(k, c); });
  std::sort(sorted.begin(), sorted.end());
  uint64_t seen = 0;
  for (const auto& [k, c] : sorted) {
    seen += c;
    if (seen >= rank) return std::min(std::max(k, min_), max_);
  }
  return max_;
}

void PrefixReuse::AddRequest(const uint64_t* blocks, size_t n, const uint64_t* weights) {
  if (n == 0) return;
  ++requests_;
  size_t first_unseen = n;
  for (size_t i = 0; i < n; ++i) {
    if (seen_blocks_.Get(blocks[i]) == 0) {
      first_unseen = i;
      break;
    }
  }
  hit_rate_sum_ += static_cast<double>(first_unseen) / static_cast<double>(n);
  if (weights) {
    for (size_t i = 0; i < n; ++i) {
      weight_total_ += weights[i];
      if (i < first_unseen) weight_hit_ += weights[i];
    }
  }
  // Prefix identity: a chain over the blocks, so blocks[0..i] maps to one 64-bit value.
  uint64_t chain = 0x9E3779B97F4A7C15ull;
  for (size_t i = 0; i < n; ++i) {
    seen_blocks_.Add(blocks[i]);
    chain = (chain ^ blocks[i]) * 0xff51afd7ed558ccdull;
    chain ^= chain >> 32;
    prefix_counts_.Add(chain);
  }
  first_block_counts_.Add(blocks[0]);
}

PrefixReuse::Result PrefixReuse::Compute() const {
  Result r;
  r.requests = requests_;
  r.unique_prefixes = prefix_counts_.size();
  first_block_counts_.ForEach([&](uint64_t, uint64_t c) { r.prefix_groups += c > 1; });
  uint64_t reused = 0, total = 0;
  prefix_counts_.ForEach([&](uint64_t, uint64_t c) {
    total += c;
    if (c > 1) reused += c;
  });
  r.prefix_reuse_ratio = total ? static_cast<double>(reused) / static_cast<double>(total) : 0;
  r.cache_hit_rate = requests_ ? hit_rate_sum_ / static_cast<double>(requests_) : 0;
  r.weighted_hit_share =
      weight_total_ ? static_cast<double>(weight_hit_) / static_cast<double>(weight_total_) : 0;
  return r;
}

uint64_t CountChars(std::string_view s) {
  uint64_t continuation = 0;
  for (unsigned char c : s) continuation += (c & 0xC0) == 0x80;
  return s.size() - continuation;
}

namespace {

using simdjson::dom::array;
using simdjson::dom::element;
using simdjson::dom::element_type;
using simdjson::dom::object;

uint64_t HashElement(element e, uint64_t h) {
  switch (e.type()) {
    case element_type::STRING:
      return HashBytes(e.get_string().value_unsafe(), h ^ 1);
    case element_type::ARRAY: {
      h = HashBytes("[", h);
      array a = e.get_array().value_unsafe();
      for (element x : a) h = HashElement(x, h);
      return h;
    }
    case element_type::OBJECT: {
      h = HashBytes("{", h);
      object o = e.get_object().value_unsafe();
      for (auto field : o) {
        h = HashBytes(field.key, h);
        h = HashElement(field.value, h);
      }
      return h;
    }
    case element_type::INT64:
    case element_type::UINT64:
    case element_type::DOUBLE: {
      double d = e.get_double().value_unsafe();
      uint64_t bits;
      std::memcpy(&bits, &d, 8);
      return HashBytes(std::string_view(reinterpret_cast<const char*>(&bits), 8), h ^ 2);
    }
    case element_type::BOOL:
      return HashBytes(e.get_bool().value_unsafe() ? "t" : "f", h ^ 3);
    case element_type::NULL_VALUE:
      return HashBytes("n", h ^ 4);
  }
  return h;
}

// Characters of the text a message carries: a content string, or the text parts of a
// content list.
uint64_t ContentChars(element content) {
  std::string_view s;
  if (content.get(s) == simdjson::SUCCESS) return CountChars(s);
  array parts;
  uint64_t n = 0;
  if (content.get(parts) == simdjson::SUCCESS) {
    for (element part : parts) {
      if (part.get(s) == simdjson::SUCCESS) {
        n += CountChars(s);
        continue;
      }
      object po;
      if (part.get(po) == simdjson::SUCCESS && po["text"].get(s) == simdjson::SUCCESS) {
        n += CountChars(s);
      }
    }
  }
  return n;
}

class StatsBuilder {
 public:
  explicit StatsBuilder(StatsReport* r) : r_(r) {}

  void AddRow(object row, TraceFormat format) {
    Endpoint endpoint = RowEndpoint(row, format);
    r_->endpoints[std::string(EndpointName(endpoint))]++;
    if (auto ts = RowTimestamp(row)) AddTimestamp(*ts);
    if (auto request = RowRequest(row, format)) {
      AddRequest(*request, endpoint);
    } else {
      AddMooncakeRow(row);
    }
  }

  void Finish() {
    StatsReport& r = *r_;
    if (r.timed_rows > 0) {
      r.duration_s = (r.last_ts_ms - r.first_ts_ms) / 1000.0;
      if (r.duration_s > 0) r.mean_rate = static_cast<double>(r.timed_rows) / r.duration_s;
      for (const auto& [sec, c] : per_second_) {
        if (c > r.peak_second_count || (c == r.peak_second_count &&
                                        static_cast<double>(sec) * 1000 < r.peak_second_start_ms)) {
          r.peak_second_count = c;
          r.peak_second_start_ms = static_cast<double>(sec) * 1000.0;
        }
      }
    }
    if (message_prefix_used_) r.message_prefix = message_prefix_.Compute();
    if (hash_prefix_used_) r.hash_prefix = hash_prefix_.Compute();
    if (models_overflow_ > 0) r.models["(other models)"] += models_overflow_;
  }

 private:
  void AddTimestamp(double ts) {
    StatsReport& r = *r_;
    if (r.timed_rows == 0 || ts < r.first_ts_ms) r.first_ts_ms = ts;
    if (r.timed_rows == 0 || ts > r.last_ts_ms) r.last_ts_ms = ts;
    ++r.timed_rows;
    ++per_second_[static_cast<int64_t>(std::floor(ts / 1000.0))];
  }

  void AddModel(std::string_view model) {
    auto it = r_->models.find(std::string(model));  // few distinct models: a map is fine
    if (it != r_->models.end()) {
      ++it->second;
    } else if (r_->models.size() < 10000) {
      r_->models.emplace(std::string(model), 1);
    } else {
      ++models_overflow_;
    }
  }

  void AddRequest(object request, Endpoint endpoint) {
    StatsReport& r = *r_;
    ++r.requests;
    std::string_view model;
    AddModel(request["model"].get(model) == simdjson::SUCCESS ? model : "(none)");
    bool stream = false;
    if (request["stream"].get(stream) == simdjson::SUCCESS && stream) ++r.stream_requests;
    uint64_t mt;
    if (request["max_tokens"].get(mt) == simdjson::SUCCESS ||
        request["max_completion_tokens"].get(mt) == simdjson::SUCCESS ||
        request["max_output_tokens"].get(mt) == simdjson::SUCCESS) {
      r.max_tokens.Add(mt);
    } else {
      ++r.no_max_tokens;
    }
    StartPrompt();
    element e;
    switch (endpoint) {
      case Endpoint::kResponses:
        // instructions as the system turn, then the input: a string (one user turn) or items.
        if (request["instructions"].get(e) == simdjson::SUCCESS && !e.is_null()) AddTurn(e);
        if (request["input"].get(e) == simdjson::SUCCESS) AddTurns(e);
        break;
      case Endpoint::kMessages:
        if (request["system"].get(e) == simdjson::SUCCESS) AddTurn(e);
        if (request["messages"].get(e) == simdjson::SUCCESS) AddTurns(e);
        break;
      case Endpoint::kEmbeddings:
        if (request["input"].get(e) == simdjson::SUCCESS) prompt_chars_ += ContentChars(e);
        break;
      case Endpoint::kRerank:
        if (request["query"].get(e) == simdjson::SUCCESS) prompt_chars_ += ContentChars(e);
        if (request["documents"].get(e) == simdjson::SUCCESS) prompt_chars_ += ContentChars(e);
        break;
      default:
        if (request["messages"].get(e) == simdjson::SUCCESS) {
          AddTurns(e);
        } else if (request["prompt"].get(e) == simdjson::SUCCESS) {
          prompt_chars_ += ContentChars(e);
        } else {
          return;
        }
    }
    EndPrompt(endpoint);
  }

  void AddMessages(array messages) {
    StartPrompt();
    for (element m : messages) AddTurn(m);
    EndPrompt(std::nullopt);
  }

  // A prompt, turn by turn: each turn a block of the message prefix reuse (chained hashes of
  // the turns' JSON, weighted by their text).
  void StartPrompt() {
    blocks_.clear();
    weights_.clear();
    prompt_chars_ = 0;
    chain_ = 0;
  }
  // A list of turns (a string: one turn).
  void AddTurns(element turns) {
    array list;
    if (turns.get(list) != simdjson::SUCCESS) {
      AddTurn(turns);
      return;
    }
    for (element t : list) AddTurn(t);
  }
  // One turn: a message ({"content": ...}), a Responses item (function_call arguments,
  // function_call_output output), or a bare string or list of parts (instructions, system).
  void AddTurn(element turn) {
    uint64_t c = 0;
    object o;
    element content;
    if (turn.get(o) != simdjson::SUCCESS) {
      c = ContentChars(turn);
    } else if (o["content"].get(content) == simdjson::SUCCESS ||
               o["arguments"].get(content) == simdjson::SUCCESS ||
               o["output"].get(content) == simdjson::SUCCESS) {
      c = ContentChars(content);
    }
    prompt_chars_ += c;
    chain_ = HashElement(turn, chain_ * 0x9E3779B97F4A7C15ull + 1);
    blocks_.push_back(chain_);
    weights_.push_back(c);
  }
  // A request's prompt ends (`endpoint`: its API, for the per-API sizes; none for mooncake
  // messages rows).
  void EndPrompt(std::optional<Endpoint> endpoint) {
    r_->prompt_chars.Add(prompt_chars_);
    if (endpoint) r_->prompt_chars_by_api[std::string(EndpointName(*endpoint))].Add(prompt_chars_);
    if (blocks_.empty()) return;
    message_prefix_used_ = true;
    message_prefix_.AddRequest(blocks_.data(), blocks_.size(), weights_.data());
  }

  void AddMooncakeRow(object row) {
    StatsReport& r = *r_;
    uint64_t v;
    if (row["input_length"].get(v) == simdjson::SUCCESS) r.input_length.Add(v);
    if (row["output_length"].get(v) == simdjson::SUCCESS) r.output_length.Add(v);
    std::string_view text;
    if (row["text_input"].get(text) == simdjson::SUCCESS) r.prompt_chars.Add(CountChars(text));
    array list;
    if (row["messages"].get(list) == simdjson::SUCCESS) AddMessages(list);
    if (row["hash_ids"].get(list) == simdjson::SUCCESS) {
      blocks_.clear();
      for (element id : list) {
        int64_t i;
        uint64_t u;
        if (id.get(i) == simdjson::SUCCESS) {
          blocks_.push_back(static_cast<uint64_t>(i));
        } else if (id.get(u) == simdjson::SUCCESS) {
          blocks_.push_back(u);
        }
      }
      hash_prefix_used_ = true;
      hash_prefix_.AddRequest(blocks_.data(), blocks_.size());
    }
  }

  StatsReport* r_;
  std::unordered_map<int64_t, uint64_t> per_second_;
  uint64_t prompt_chars_ = 0;  // the prompt being read
  uint64_t chain_ = 0;
  PrefixReuse message_prefix_, hash_prefix_;
  bool message_prefix_used_ = false, hash_prefix_used_ = false;
  uint64_t models_overflow_ = 0;
  std::vector<uint64_t> blocks_, weights_;
};

}  // namespace

void SessionStats::Add(std::string_view session_id, std::optional<double> timestamp_ms,
                       const Outcome* outcome) {
  if (session_id.empty()) return;
  ++rows_;
  Session& s = sessions_[HashSessionId(session_id)];
  ++s.turns;
  if (!timestamp_ms) return;
  if (s.last_start_ms) {
    gap_ms_.Add(static_cast<uint64_t>(std::max(0.0, std::round(*timestamp_ms - *s.last_start_ms))));
    if (!s.last_end_ms) {
      ++without_latency_;
    } else if (*timestamp_ms < *s.last_end_ms) {
      ++overlapping_;
    } else {
      think_ms_.Add(static_cast<uint64_t>(std::round(*timestamp_ms - *s.last_end_ms)));
    }
  }
  s.last_start_ms = timestamp_ms;
  s.last_end_ms.reset();
  if (outcome && outcome->latency_ms) s.last_end_ms = *timestamp_ms + *outcome->latency_ms;
}

void SessionStats::Finish() {
  turns_ = {};
  for (const auto& [id, s] : sessions_) turns_.Add(s.turns);
}

StatsReport ComputeStats(const StatsOptions& options) {
  StatsReport r;
  r.path = options.path;
  r.skipped.limit = options.max_failures;
  FormatResolver resolver;
  r.manifest = resolver.InitFor(options.path, options.format, &r.warnings, "");

  RowScanner scanner("stats", options.progress,
                     {.lines = &r.lines, .blank = &r.blank, .torn_tail = &r.torn_tail});
  r.io = scanner.Open(options.path);
  if (!r.io.ok()) return r;
  OutcomeTable outcomes;
  bool have_outcomes = false;
  r.io = outcomes.LoadFor(options.path, options.outcomes_path, options.no_outcomes, {},
                          &have_outcomes, &r.warnings);
  if (!r.io.ok()) return r;
  OutcomeJoin join(&outcomes, options.path);
  StatsBuilder builder(&r);
  Line line;
  while (scanner.Next(&line)) {
    const ParsedRow& row = scanner.row();
    if (row.status != ParseStatus::kOk) {
      r.skipped.Add(line.number,
                    line.torn ? "torn last line (no trailing newline), not counted: " + row.error
                              : row.error + " (not counted)");
      continue;
    }
    ++r.rows;
    TraceFormat format = resolver.Resolve(row.object);
    builder.AddRow(row.object, format);
    const std::optional<double> ts = RowTimestamp(row.object);
    const Outcome* outcome = have_outcomes ? join.Join(line.number, ts) : nullptr;
    if (outcome && outcome->cached_tokens != Outcome::kNoCache) {
      ++r.server_cache.requests;
      r.server_cache.prompt_tokens += outcome->prompt_tokens;
      r.server_cache.cached_tokens += outcome->cached_tokens;
    }
    std::string_view session_id;
    if (format == TraceFormat::kMooncake &&
        row.object["session_id"].get(session_id) == simdjson::SUCCESS) {
      r.sessions.Add(session_id, ts, outcome);
    }
  }
  if (Status read = scanner.Finish(); !read.ok()) r.io = read;
  builder.Finish();
  r.sessions.Finish();
  if (have_outcomes) {
    // Think times need each turn's own response: a sidecar of another file gives none.
    if (Status s = join.Finish(r.lines); !s.ok()) {
      r.warnings.push_back(s.message() + "; think times and the server cache not computed");
      r.sessions.DropThinkTimes();
      r.server_cache = {};
    } else {
      r.outcomes_path = outcomes.path();
      r.outcomes_joined = join.matched() + join.unchecked();
      if (std::string m = join.MismatchSummary(); !m.empty()) r.warnings.push_back(m);
    }
  }
  r.format = resolver.format();
  r.format_source = resolver.source();
  if (r.manifest) {
    auto matched = r.manifest->counters.find("matched");
    auto recorded = r.manifest->counters.find("recorded");
    if (matched != r.manifest->counters.end() && recorded != r.manifest->counters.end() &&
        matched->second > 0) {
      r.effective_sample_rate =
          static_cast<double>(recorded->second) / static_cast<double>(matched->second);
    }
    std::optional<uint64_t> file_records = r.manifest->file_records;
    if (!file_records && recorded != r.manifest->counters.end()) file_records = recorded->second;
    if (file_records && *file_records != r.rows) {
      r.warnings.push_back("the manifest says " + std::to_string(*file_records) +
                           " rows were recorded, the file holds " + std::to_string(r.rows) +
                           (r.manifest->state == "running" ? " (the capture is still running)"
                                                           : " (edited or truncated?)"));
    }
  }
  return r;
}

}  // namespace llmtap::trace
