#include "trace/outcomes.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "capture/file_names.h"
#include "trace/hash_bytes.h"
#include "trace/line_reader.h"
#include "trace/record.h"

namespace llmtap::trace {

namespace {

std::optional<uint64_t> NonNegativeInteger(simdjson::dom::element e) {
  uint64_t u;
  if (e.get(u) == simdjson::SUCCESS) return u;
  return std::nullopt;
}

// Integer milliseconds; a JSON number with a fraction of zero (5400.0) counts too.
std::optional<int64_t> IntegerMs(simdjson::dom::element e) {
  int64_t i;
  if (e.get(i) == simdjson::SUCCESS) return i;
  double d;
  if (e.get(d) == simdjson::SUCCESS && std::trunc(d) == d && std::fabs(d) < 9.0e15) {
    return static_cast<int64_t>(d);
  }
  return std::nullopt;
}

std::string FormatMs(double v) {
  std::string s;
  AppendNumber(v, &s);
  return s;
}

// The line's `response` member: kNone when absent or not an object; kWhole (and the key) when
// it holds the whole text.
AnswerText ReadAnswer(simdjson::dom::object line, AnswerKeyHasher* hasher, uint64_t* key) {
  simdjson::dom::object response;
  if (line.at_key("response").get(response) != simdjson::SUCCESS) return AnswerText::kNone;
  bool truncated = false;
  simdjson::dom::element e;
  if (response.at_key("truncated").get(e) == simdjson::SUCCESS && e.is_bool()) {
    truncated = e.get_bool().value_unsafe();
  }
  if (truncated) return AnswerText::kTruncated;
  std::string_view text;
  if (response.at_key("text").get(e) == simdjson::SUCCESS && e.get(text) == simdjson::SUCCESS) {
    hasher->Text(text);
  }
  simdjson::dom::array calls;
  if (response.at_key("tool_calls").get(calls) == simdjson::SUCCESS) {
    for (simdjson::dom::element call : calls) {
      std::string_view name, arguments;  // as the capture writes them: strings
      if (call["name"].get(name) != simdjson::SUCCESS) name = {};
      if (call["arguments"].get(arguments) != simdjson::SUCCESS) arguments = {};
      hasher->ToolCall(name, arguments);
    }
  }
  *key = hasher->Finish();
  return AnswerText::kWhole;
}

}  // namespace

static_assert(sizeof(Outcome) <= 80, "the sidecar is held whole: keep an outcome small");

void AnswerKeyHasher::ToolCall(std::string_view name, std::string_view arguments) {
  calls_ = Mix(Mix(calls_, HashBytes(name, 0x6e616d65)), HashBytes(arguments, 0x61726773));
  ++n_calls_;
}

uint64_t AnswerKeyHasher::Finish() {
  uint64_t key = Mix(Mix(HashBytes(text_, 0x74657874), calls_), n_calls_);
  text_.clear();
  calls_ = n_calls_ = 0;
  return key;
}

std::string_view UnusableName(Unusable why) {
  switch (why) {
    case Unusable::kNone:
      return "";
    case Unusable::kCancelled:
      return "cancelled";
    case Unusable::kUpstreamError:
      return "upstream error";
    case Unusable::kHttpStatus:
      return "HTTP status";
    case Unusable::kNoUsage:
      return "no usage reported";
  }
  return "";
}

namespace {

// The outcome line's members as a fidelity pair's captured side (OutcomeTable::Side).
std::string CapturedSide(simdjson::dom::object line, bool cancelled) {
  std::string out = "{";
  auto member = [&](std::string_view key) {
    if (out.size() > 1) out.push_back(',');
    out.push_back('"');
    out.append(key);
    out.append("\":");
    simdjson::dom::element e;
    if (line.at_key(key).get(e) == simdjson::SUCCESS) {
      out.append(simdjson::minify(e));
    } else {
      out.append("null");
    }
  };
  member("status");
  member("ttft_ms");
  double ttft = 0, latency = 0;
  uint64_t tokens = 0;
  simdjson::dom::element e;
  out.append(",\"itl_ms\":");
  if (line.at_key("ttft_ms").get(e) == simdjson::SUCCESS && e.get(ttft) == simdjson::SUCCESS &&
      line.at_key("latency_ms").get(e) == simdjson::SUCCESS &&
      e.get(latency) == simdjson::SUCCESS &&
      line.at_key("completion_tokens").get(e) == simdjson::SUCCESS &&
      e.get(tokens) == simdjson::SUCCESS && tokens > 1 && latency >= ttft) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.3f", (latency - ttft) / static_cast<double>(tokens - 1));
    out.append(buf);
  } else {
    out.append("null");
  }
  member("latency_ms");
  member("prompt_tokens");
  member("completion_tokens");
  member("finish_reason");
  if (cancelled) {
    out.append(",\"error\":\"cancelled\"");
  } else {
    member("error");
  }
  member("cached_tokens");
  member("server");
  member("spec");
  out.push_back('}');
  return out;
}

}  // namespace

Status OutcomeTable::Load(const std::string& path, const LoadOptions& options, bool* loaded) {
  *loaded = false;
  path_ = path;
  LineReader reader;
  Status status = reader.Open(path);
  if (status.code() == Status::Code::kNotFound) return Status::Ok();  // a file or an object
  if (!status.ok()) return status;
  RowParser parser;
  AnswerKeyHasher hasher;
  Line line;
  while (reader.Next(&line)) {
    const ParsedRow& row = parser.Parse(line.bytes);
    if (row.status == ParseStatus::kBlank) continue;
    simdjson::dom::element e;
    std::optional<uint64_t> number;
    std::optional<int64_t> timestamp;
    if (row.status != ParseStatus::kOk || row.object.at_key("line").get(e) ||
        !(number = NonNegativeInteger(e)) || row.object.at_key("timestamp").get(e) ||
        !(timestamp = IntegerMs(e))) {
      ++bad_lines_;
      continue;
    }
    Outcome o;
    o.line = *number;
    o.timestamp = *timestamp;
    bool cancelled = false;
    if (row.object.at_key("cancelled").get(e) == simdjson::SUCCESS && e.is_bool()) {
      cancelled = e.get_bool().value_unsafe();
    }
    int64_t http = 200;
    if (row.object.at_key("status").get(e) == simdjson::SUCCESS &&
        (e.get(http) != simdjson::SUCCESS || http < 0 || http > 999)) {
      http = 0;  // a status that is not a number: not a normal end
    }
    o.status = static_cast<int32_t>(http);
    bool error = row.object.at_key("error").get(e) == simdjson::SUCCESS && !e.is_null();
    if (row.object.at_key("completion_tokens").get(e) == simdjson::SUCCESS) {
      o.completion_tokens = NonNegativeInteger(e);
    }
    std::optional<uint64_t> prompt, cached;
    if (row.object.at_key("prompt_tokens").get(e) == simdjson::SUCCESS)
      prompt = NonNegativeInteger(e);
    if (row.object.at_key("cached_tokens").get(e) == simdjson::SUCCESS)
      cached = NonNegativeInteger(e);
    if (prompt && cached && *cached <= *prompt && *prompt < Outcome::kNoCache) {
      o.prompt_tokens = static_cast<uint32_t>(*prompt);
      o.cached_tokens = static_cast<uint32_t>(*cached);
    }
    double latency;
    if (row.object.at_key("latency_ms").get(e) == simdjson::SUCCESS &&
        e.get(latency) == simdjson::SUCCESS) {
      o.latency_ms = latency;
    }
    // A cancelled or failed response was cut short: its token count says nothing about how
    // long the answer would have been.
    if (cancelled) {
      o.unusable = Unusable::kCancelled;
    } else if (error) {
      o.unusable = Unusable::kUpstreamError;
    } else if (http < 200 || http > 299) {
      o.unusable = Unusable::kHttpStatus;
    } else if (!o.completion_tokens) {
      o.unusable = Unusable::kNoUsage;
    }
    std::string_view id;
    if (options.response_ids && row.object.at_key("response_id").get(id) == simdjson::SUCCESS &&
        !id.empty()) {
      ids_[o.line] = std::string(id);
      simdjson::dom::object response;
      simdjson::dom::element truncated;
      if (options.responses && row.object.at_key("response").get(response) == simdjson::SUCCESS &&
          !(response.at_key("truncated").get(truncated) == simdjson::SUCCESS &&
            truncated.is_bool() && truncated.get_bool().value_unsafe())) {
        responses_[o.line] = simdjson::minify(response);
      }
    }
    if (options.sides) sides_[o.line] = CapturedSide(row.object, cancelled);
    if (options.answer_keys) {
      uint64_t key = 0;
      o.answer = ReadAnswer(row.object, &hasher, &key);
      if (o.answer == AnswerText::kWhole) {
        o.answer_index = static_cast<uint32_t>(answer_keys_.size());
        answer_keys_.push_back(key);
      }
    }
    if (options.keep_text) {
      std::string_view text = TrimJsonWhitespace(line.bytes);
      o.text_offset = text_.size();
      o.text_size = static_cast<uint32_t>(text.size());
      text_.append(text);
    }
    by_line_.push_back(o);
  }
  if (!reader.status().ok()) return reader.status();
  // Completion order is nearly line order; stable, so that of two outcomes for one line the
  // later one in the file stays last and wins.
  std::stable_sort(by_line_.begin(), by_line_.end(),
                   [](const Outcome& a, const Outcome& b) { return a.line < b.line; });
  size_t kept = 0;
  for (size_t i = 0; i < by_line_.size(); ++i) {
    if (i + 1 < by_line_.size() && by_line_[i + 1].line == by_line_[i].line) {
      ++duplicates_;
      continue;
    }
    by_line_[kept++] = by_line_[i];
  }
  by_line_.resize(kept);
  by_line_.shrink_to_fit();
  *loaded = true;
  return Status::Ok();
}

Status OutcomeTable::LoadFor(const std::string& capture_path, const std::string& explicit_path,
                             bool off, const LoadOptions& options, bool* loaded,
                             std::vector<std::string>* warnings) {
  *loaded = false;
  if (off || (capture_path == "-" && explicit_path.empty())) return Status::Ok();
  std::string sidecar = explicit_path;
  if (explicit_path.empty()) {
    // The writer's name for it; a compressed segment's (as the uploader stores it) is that of
    // the data without ".zst", compressed or not.
    std::string plain = capture_path.ends_with(".zst")
                            ? capture_path.substr(0, capture_path.size() - 4)
                            : capture_path;
    for (const std::string& candidate :
         {OutcomesPathFor(plain), OutcomesPathFor(plain) + ".zst", LegacyOutcomesPathFor(plain),
          LegacyOutcomesPathFor(plain) + ".zst"}) {
      sidecar = candidate;
      Status s = Load(sidecar, options, loaded);
      if (!s.ok()) return s;
      if (*loaded) break;
    }
  } else {
    Status s = Load(sidecar, options, loaded);
    if (!s.ok()) return s;
    if (!*loaded) return Status::NotFound("outcomes file " + sidecar + " does not exist");
  }
  if (!*loaded) return Status::Ok();
  if (bad_lines_) {
    warnings->push_back(sidecar + ": " + std::to_string(bad_lines_) +
                        " lines are not outcome objects (ignored)");
  }
  if (duplicates_) {
    warnings->push_back(sidecar + ": " + std::to_string(duplicates_) +
                        " capture lines have more than one outcome (the last is used)");
  }
  return Status::Ok();
}

const Outcome* OutcomeTable::Find(uint64_t line) const {
  auto it = std::lower_bound(by_line_.begin(), by_line_.end(), line,
                             [](const Outcome& o, uint64_t l) { return o.line < l; });
  return it != by_line_.end() && it->line == line ? &*it : nullptr;
}

const Outcome* OutcomeJoin::Join(uint64_t line, std::optional<double> timestamp) {
  if (refused_) return nullptr;
  const Outcome* o = table_->Find(line);
  if (o == nullptr) return nullptr;
  if (!timestamp) {
    ++unchecked_;
    return o;
  }
  if (static_cast<double>(o->timestamp) == *timestamp) {
    ++matched_;
    return o;
  }
  ++mismatched_;
  if (examples_.size() < kNamedMismatches) {
    examples_.push_back("line " + std::to_string(line) + ": timestamp " +
                        std::to_string(o->timestamp) + " in the sidecar, " + FormatMs(*timestamp) +
                        " in the capture");
  }
  if (matched_ + mismatched_ >= kEarlyRows) CheckMajority(false);
  return nullptr;
}

void OutcomeJoin::CheckMajority(bool at_end) {
  if (refused_ || mismatched_ <= matched_ || (at_end && mismatched_ < 2)) return;
  refused_ = true;
  why_ = std::to_string(mismatched_) + " of " + std::to_string(matched_ + mismatched_) +
         " outcomes checked" + (at_end ? "" : " so far") + " name a row whose timestamp differs (" +
         examples_.front() + ")";
}

Status OutcomeJoin::Finish(uint64_t capture_lines) {
  if (!refused_ && table_->max_line() > capture_lines) {
    refused_ = true;
    why_ = "it has an outcome for line " + std::to_string(table_->max_line()) +
           ", past the capture's last line (" + std::to_string(capture_lines) + ")";
  }
  CheckMajority(true);
  return RefusedStatus();
}

Status OutcomeJoin::RefusedStatus() const {
  if (!refused_) return Status::Ok();
  return Status::Refused("the outcomes sidecar " + table_->path() + " does not belong to " +
                         capture_path_ + ": " + why_ +
                         "; pass the sidecar of this file (or --no-outcomes)");
}

std::string OutcomeJoin::MismatchSummary() const {
  if (mismatched_ == 0) return "";
  std::string s = table_->path() + ": " + std::to_string(mismatched_) +
                  " outcomes not used, their timestamp differs from their row's (";
  for (size_t i = 0; i < examples_.size(); ++i) s += (i ? "; " : "") + examples_[i];
  if (mismatched_ > examples_.size()) s += "; ...";
  return s + ")";
}

bool AppendOutcomeRenumbered(std::string_view text, uint64_t line, std::optional<double> timestamp,
                             std::string* out) {
  std::optional<Span> line_span = FindTopLevelValue(text, "line");
  std::optional<Span> ts_span = FindTopLevelValue(text, "timestamp");
  if (!line_span || !ts_span) return false;
  std::string line_value = std::to_string(line), ts_value;
  if (timestamp) {
    AppendNumber(*timestamp, &ts_value);
  } else {
    ts_value = text.substr(ts_span->begin, ts_span->end - ts_span->begin);
  }
  struct Edit {
    Span span;
    const std::string* value;
  };
  Edit edits[2] = {{*line_span, &line_value}, {*ts_span, &ts_value}};
  if (edits[1].span.begin < edits[0].span.begin) std::swap(edits[0], edits[1]);
  size_t at = 0;
  for (const Edit& e : edits) {
    out->append(text.substr(at, e.span.begin - at));
    out->append(*e.value);
    at = e.span.end;
  }
  out->append(text.substr(at));
  return true;
}

}  // namespace llmtap::trace
