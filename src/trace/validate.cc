#include "trace/validate.h"

#include <nlohmann/json.hpp>
#include <unordered_map>

namespace llmtap::trace {

namespace {

using simdjson::dom::array;
using simdjson::dom::element;
using simdjson::dom::element_type;
using simdjson::dom::object;

std::optional<element> NonNull(object obj, std::string_view key) {
  element e;
  if (obj.at_key(key).get(e) != simdjson::SUCCESS || e.is_null()) return std::nullopt;
  return e;
}

// AIPerf: `messages` is a non-empty list of objects that each have a `role`.
std::string CheckMessages(element messages, std::string_view where) {
  array list;
  if (messages.get(list) != simdjson::SUCCESS) {
    return std::string(where) + "'messages' must be a list";
  }
  if (list.size() == 0) return std::string(where) + "'messages' must be a non-empty list";
  size_t i = 0;
  for (element m : list) {
    object mo;
    if (m.get(mo) != simdjson::SUCCESS) {
      return std::string(where) + "'messages'[" + std::to_string(i) + "] must be an object";
    }
    if (!NonNull(mo, "role")) {
      return std::string(where) + "'messages'[" + std::to_string(i) + "] has no 'role'";
    }
    ++i;
  }
  return {};
}

bool IsNonNegativeInteger(element e) {
  int64_t i;
  if (e.get(i) == simdjson::SUCCESS) return i >= 0;
  uint64_t u;
  return e.get(u) == simdjson::SUCCESS;
}

// A request body (a raw_payload row, or a mooncake row's 'payload') against the endpoint type:
// chat needs 'messages', completions 'prompt'; with no type, 'messages' (when present) must
// be well formed. `what` names the body in the failures, `prefix` starts CheckMessages' ones.
std::string CheckRequestBody(object body, std::optional<Endpoint> endpoint_type,
                             const std::string& what, const std::string& prefix) {
  if (endpoint_type == Endpoint::kChat) {
    auto m = NonNull(body, "messages");
    if (!m) return "chat endpoint: " + what + " has no 'messages'";
    return CheckMessages(*m, "chat endpoint: " + prefix);
  }
  if (endpoint_type == Endpoint::kCompletions) {
    if (!NonNull(body, "prompt")) return "completions endpoint: " + what + " has no 'prompt'";
    return {};
  }
  if (auto m = NonNull(body, "messages")) return CheckMessages(*m, prefix);
  return {};
}

std::string CheckMooncake(object row, std::optional<Endpoint> endpoint_type) {
  static constexpr std::string_view kModes[] = {"input_length", "text_input", "messages",
                                                "payload"};
  std::string present;
  int modes = 0;
  for (std::string_view k : kModes) {
    if (NonNull(row, k)) {
      if (modes++ > 0) present += " and ";
      present.append("'").append(k).append("'");
    }
  }
  if (modes == 0) {
    return "mooncake row without input: needs exactly one of 'input_length', 'text_input', "
           "'messages', 'payload'";
  }
  if (modes > 1) return "mooncake row has " + present + "; they are mutually exclusive";

  auto payload = NonNull(row, "payload");
  auto input_length = NonNull(row, "input_length");
  if (payload) {
    object p;
    if (payload->get(p) != simdjson::SUCCESS) return "'payload' must be an object";
    if (p.size() == 0) return "'payload' must be a non-empty object";
  }
  if (NonNull(row, "hash_ids") && !input_length) {
    return "'hash_ids' is only allowed together with 'input_length'";
  }
  if (input_length && !IsNonNegativeInteger(*input_length)) {
    return "'input_length' must be a non-negative integer";
  }
  if (auto hash_ids = NonNull(row, "hash_ids")) {
    array ids;
    if (hash_ids->get(ids) != simdjson::SUCCESS) return "'hash_ids' must be a list of integers";
    for (element id : ids) {
      if (!id.is_int64() && !id.is_uint64()) return "'hash_ids' must be a list of integers";
    }
  }
  if (auto text = NonNull(row, "text_input"); text && !text->is_string()) {
    return "'text_input' must be a string";
  }
  if (auto ts = NonNull(row, "timestamp")) {
    double d;
    if (ts->get_double().get(d) != simdjson::SUCCESS || ts->is_bool()) {
      return "'timestamp' must be a number";
    }
    if (d < 0) return "'timestamp' must be >= 0";
  }
  if (auto delay = NonNull(row, "delay")) {
    double d;
    if (delay->get_double().get(d) != simdjson::SUCCESS || delay->is_bool()) {
      return "'delay' must be a number (milliseconds)";
    }
  }
  if (auto id = NonNull(row, "session_id"); id && !id->is_string()) {
    return "'session_id' must be a string (AIPerf does not turn numbers into ids)";
  }
  auto messages = NonNull(row, "messages");
  if (messages) {
    std::string why = CheckMessages(*messages, "");
    if (!why.empty()) return why;
  }
  if (NonNull(row, "tools") && !messages) return "'tools' is only allowed together with 'messages'";

  if (payload) {
    object p = payload->get_object().value_unsafe();  // checked above
    return CheckRequestBody(p, endpoint_type, "'payload'", "payload ");
  }
  if (messages && endpoint_type == Endpoint::kCompletions) {
    return "completions endpoint: a 'messages' row can only be replayed against chat";
  }
  return {};
}

std::string CheckRaw(object row, std::optional<Endpoint> endpoint_type) {
  if (NonNull(row, "payload") || NonNull(row, "timestamp")) {
    return "raw_payload row looks like a mooncake row ('payload'/'timestamp' keys): AIPerf "
           "would send it verbatim; load the file as mooncake_trace";
  }
  return CheckRequestBody(row, endpoint_type, "request", "");
}

// What AIPerf's mooncake_trace loader requires of the rows that share a session_id: one input
// mode for the whole session (verbatim `payload` rows, `messages` rows, or synthesized
// `input_length`/`text_input` rows; a mix makes it refuse the whole file), and, since it
// replays one endpoint type per run, one endpoint type (SessionEndpoints' rule, which split
// routes by). Ids are not printed (they may name users): a session is named by the line of
// its first row.
class SessionRules {
 public:
  // The failure of this row against its session's earlier rows; empty when none.
  std::string Check(object row, Endpoint endpoint, uint64_t line) {
    std::string_view id;
    if (row.at_key("session_id").get(id) != simdjson::SUCCESS || id.empty()) return {};
    ++rows_;
    Mode mode = NonNull(row, "payload")    ? Mode::kPayload
                : NonNull(row, "messages") ? Mode::kMessages
                                           : Mode::kSynthesized;
    auto [s, added] = sessions_.Add(id, endpoint, line, static_cast<uint8_t>(mode));
    if (added) return {};
    std::string where = "session_id of line " + std::to_string(s->first_line);
    Mode first_mode = static_cast<Mode>(s->tag);
    if (first_mode != mode) {
      return where + " has " + ModeName(first_mode) + " rows, this is a " + ModeName(mode) +
             " row: AIPerf refuses a session that mixes input modes (the whole file)";
    }
    if (SessionEndpoints::Breaks(s->endpoint, endpoint)) {
      return where + " is a " + std::string(EndpointName(s->endpoint)) + " session and this is a " +
             std::string(EndpointName(endpoint)) +
             " request: one AIPerf run replays one endpoint type";
    }
    return {};
  }
  uint64_t sessions() const { return sessions_.size(); }
  uint64_t rows() const { return rows_; }

 private:
  enum class Mode : uint8_t { kPayload, kMessages, kSynthesized };
  static std::string ModeName(Mode m) {
    return m == Mode::kPayload ? "'payload'" : m == Mode::kMessages ? "'messages'" : "synthesized";
  }
  SessionEndpoints sessions_;
  uint64_t rows_ = 0;
};

}  // namespace

std::string CheckRow(object row, TraceFormat format, std::optional<Endpoint> endpoint_type) {
  return format == TraceFormat::kRaw ? CheckRaw(row, endpoint_type)
                                     : CheckMooncake(row, endpoint_type);
}

ValidateReport ValidateTrace(const ValidateOptions& options) {
  ValidateReport r;
  r.path = options.path;
  r.endpoint_type = options.endpoint_type;
  r.failures.limit = options.max_failures;
  FormatResolver resolver;
  resolver.InitFor(options.path, options.format, &r.warnings, " (format taken from the rows)");

  RowScanner scanner(
      "validate", options.progress,
      {.lines = &r.lines, .blank = &r.blank, .torn_tail = &r.torn_tail, .crlf = &r.crlf});
  r.io = scanner.Open(options.path);
  if (!r.io.ok()) return r;
  Line line;
  std::optional<double> last_ts;
  uint64_t last_ts_line = 0;
  SessionRules sessions;
  while (scanner.Next(&line)) {
    const ParsedRow& row = scanner.row();
    ++r.rows;
    if (row.status != ParseStatus::kOk) {
      std::string why = row.error;
      if (line.torn) {
        why = "torn last line (no trailing newline; the capture was cut mid-write): " + why;
      }
      r.failures.Add(line.number, why);
      continue;
    }
    TraceFormat format = resolver.Resolve(row.object);
    Endpoint endpoint = RowEndpoint(row.object, format);
    r.endpoints[std::string(EndpointName(endpoint))]++;
    std::string why = CheckRow(row.object, format, options.endpoint_type);
    if (why.empty() && format == TraceFormat::kMooncake) {
      why = sessions.Check(row.object, endpoint, line.number);
    }
    if (why.empty()) {
      if (auto ts = RowTimestamp(row.object)) {
        if (last_ts && *ts < *last_ts) {
          std::string t, p;
          AppendNumber(*ts, &t);
          AppendNumber(*last_ts, &p);
          why = "timestamp " + t + " is lower than " + p + " on line " +
                std::to_string(last_ts_line) + "; timestamps must never decrease";
        } else {
          last_ts = ts;
          last_ts_line = line.number;
        }
      }
    }
    if (why.empty()) {
      ++r.passed;
    } else {
      r.failures.Add(line.number, why);
    }
  }
  if (Status read = scanner.Finish(); !read.ok()) r.io = read;
  r.sessions = sessions.sessions();
  r.session_rows = sessions.rows();
  r.format = resolver.format();
  r.format_source = resolver.source();
  if (r.torn_tail) r.warnings.push_back("the last line has no trailing newline");
  if (r.crlf > 0) {
    r.warnings.push_back(std::to_string(r.crlf) + " lines end in CRLF (accepted)");
  }
  if (!options.endpoint_type && r.endpoints["chat"] > 0 && r.endpoints["completions"] > 0) {
    r.warnings.push_back("the file mixes chat (" + std::to_string(r.endpoints["chat"]) +
                         ") and completions (" + std::to_string(r.endpoints["completions"]) +
                         ") requests; AIPerf replays one endpoint type per run: use `llmtap "
                         "split " +
                         r.path + "`");
  }
  if (r.rows == 0 && r.io.ok()) r.warnings.push_back("the file holds no rows");
  // Drop zero entries created by the lookups above.
  std::erase_if(r.endpoints, [](const auto& kv) { return kv.second == 0; });
  return r;
}

std::string RenderValidateText(const ValidateReport& r) {
  std::string out;
  if (!r.io.ok()) {
    out += "error: " + r.io.ToString() + "\n";
    return out;
  }
  out +=
      RenderIssues(r.path, r.failures, "more failing lines not shown (--max-errors)", r.warnings);
  out += r.path + ": " + std::string(TraceFormatName(r.format)) + " (format from " +
         r.format_source + ")";
  if (r.endpoint_type) out += ", endpoint type " + std::string(EndpointName(*r.endpoint_type));
  out += "\n  " + std::to_string(r.rows) + " rows: " + std::to_string(r.passed) + " pass, " +
         std::to_string(r.failed()) + " fail";
  if (r.blank) out += "; " + std::to_string(r.blank) + " blank lines skipped";
  out += "\n  requests:";
  for (const auto& [k, v] : r.endpoints) out += " " + k + " " + std::to_string(v);
  if (r.sessions > 0) {
    out += "\n  sessions: " + std::to_string(r.sessions) + " (" + std::to_string(r.session_rows) +
           " rows with a session_id; AIPerf sends each session's rows one after another)";
  }
  out += "\n";
  out += r.ok() ? "OK: every row would load in AIPerf\n"
                : "FAILED: " + std::to_string(r.failed()) + " rows would not load in AIPerf\n";
  return out;
}

std::string RenderValidateJson(const ValidateReport& r) {
  nlohmann::ordered_json j;
  j["file"] = r.path;
  j["ok"] = r.ok();
  if (!r.io.ok()) j["error"] = r.io.ToString();
  j["format"] = TraceFormatName(r.format);
  j["format_source"] = r.format_source;
  j["endpoint_type"] = r.endpoint_type ? nlohmann::ordered_json(EndpointName(*r.endpoint_type))
                                       : nlohmann::ordered_json(nullptr);
  j["lines"] = r.lines;
  j["rows"] = r.rows;
  j["passed"] = r.passed;
  j["failed"] = r.failed();
  j["blank_lines"] = r.blank;
  j["crlf_lines"] = r.crlf;
  j["torn_tail"] = r.torn_tail;
  j["endpoints"] = r.endpoints;
  j["sessions"] = r.sessions;
  j["session_rows"] = r.session_rows;
  auto& fails = j["failures"] = nlohmann::ordered_json::array();
  for (const LineFailure& f : r.failures.kept)
    fails.push_back({{"line", f.line}, {"reason", f.reason}});
  j["failures_not_listed"] = r.failures.total - r.failures.kept.size();
  j["warnings"] = r.warnings;
  return j.dump(2, ' ', false, nlohmann::ordered_json::error_handler_t::replace) + "\n";
}

}  // namespace llmtap::trace
