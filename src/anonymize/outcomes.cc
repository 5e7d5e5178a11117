#include "anonymize/outcomes.h"

#include <sys/stat.h>

#include <cerrno>

#include "trace/line_reader.h"
#include "trace/record.h"

namespace llmtap::anonymize {

namespace {

std::optional<uint64_t> NonNegativeInteger(simdjson::dom::element e) {
  uint64_t u;
  if (e.get(u) == simdjson::SUCCESS) return u;
  return std::nullopt;
}

}  // namespace

Status OutcomeTable::Load(const std::string& path, bool* loaded) {
  *loaded = false;
  struct stat st;
  if (::stat(path.c_str(), &st) != 0 && errno == ENOENT) return Status::Ok();
  trace::LineReader reader;
  Status status = reader.Open(path);
  if (!status.ok()) return status;
  trace::RowParser parser;
  trace::Line line;
  while (reader.Next(&line)) {
    const trace::ParsedRow& row = parser.Parse(line.bytes);
    if (row.status == trace::ParseStatus::kBlank) continue;
    simdjson::dom::element e;
    std::optional<uint64_t> number;
    if (row.status != trace::ParseStatus::kOk || row.object.at_key("line").get(e) ||
        !(number = NonNegativeInteger(e))) {
      ++bad_lines_;
      continue;
    }
    Outcome o;
    bool cancelled = false;
    if (row.object.at_key("cancelled").get(e) == simdjson::SUCCESS && e.is_bool()) {
      cancelled = e.get_bool().value_unsafe();
    }
    int64_t http = 200;
    if (row.object.at_key("status").get(e) == simdjson::SUCCESS &&
        e.get(http) != simdjson::SUCCESS) {
      http = 0;  // a status that is not a number: not a normal end
    }
    bool error = row.object.at_key("error").get(e) == simdjson::SUCCESS && !e.is_null();
    std::optional<uint64_t> tokens;
    if (row.object.at_key("completion_tokens").get(e) == simdjson::SUCCESS) {
      tokens = NonNegativeInteger(e);
    }
    // A cancelled or failed response was cut short: its token count says nothing about how
    // long the answer would have been.
    if (cancelled) {
      o.unusable = "cancelled";
    } else if (error) {
      o.unusable = "upstream error";
    } else if (http < 200 || http > 299) {
      o.unusable = "HTTP status";
    } else if (!tokens) {
      o.unusable = "no usage reported";
    } else {
      o.completion_tokens = tokens;
    }
    auto [it, inserted] = by_line_.insert_or_assign(*number, std::move(o));
    if (!inserted) ++duplicates_;
  }
  if (!reader.status().ok()) return reader.status();
  *loaded = true;
  return Status::Ok();
}

}  // namespace llmtap::anonymize
