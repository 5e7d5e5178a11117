#include "sessions/sessions.h"

#include <simdjson.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstring>
#include <nlohmann/json.hpp>
#include <unordered_map>

#include "capture/session.h"
#include "common/json_escape.h"
#include "trace/histogram_json.h"
#include "trace/line_reader.h"
#include "trace/outcomes.h"
#include "trace/record.h"
#include "trace/trace_io.h"

namespace llmtap::sessions {

bool ParseWindow(std::string_view text, double* ms) {
  double value = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || !std::isfinite(value) || value <= 0) return false;
  std::string_view unit(end, text.data() + text.size() - end);
  double scale = 0;
  if (unit.empty() || unit == "s") {
    scale = 1000;
  } else if (unit == "ms") {
    scale = 1;
  } else if (unit == "m" || unit == "min") {
    scale = 60 * 1000.0;
  } else if (unit == "h") {
    scale = 3600 * 1000.0;
  } else {
    return false;
  }
  *ms = value * scale;
  return true;
}

namespace {

namespace od = simdjson::ondemand;

// What the pass needs from one row, read with simdjson on-demand: no DOM is built, message
// contents are skipped structurally and only their bytes are hashed.
struct RowFacts {
  std::optional<double> timestamp;
  bool mooncake = false;        // has a key only mooncake rows have (timestamp, payload, ...)
  bool has_messages = false;    // payload.messages (or a mooncake row's own messages) is a list
  bool has_session_id = false;  // a session_id key, of any type
  std::string_view session_id;  // its raw JSON token when a string, quotes included
  std::vector<std::string_view> messages;  // each message's JSON bytes
  std::vector<uint64_t> prefix;            // prefix[i]: hash of messages[0..i]
  bool responses = false;                  // a Responses API row (see SessionsReport)
  std::string previous_response_id;        // payload.previous_response_id, unescaped
};

std::string_view TrimRight(std::string_view s) {
  while (!s.empty() &&
         (s.back() == ' ' || s.back() == '\t' || s.back() == '\n' || s.back() == '\r')) {
    s.remove_suffix(1);
  }
  return s;
}

simdjson::error_code ReadMessages(od::value value, RowFacts* row) {
  od::array array;
  if (auto e = value.get_array().get(array))
    return e == simdjson::INCORRECT_TYPE ? simdjson::SUCCESS : e;
  row->has_messages = true;
  row->messages.clear();  // a key given twice: the last one counts, as Python servers read it
  row->prefix.clear();
  uint64_t chain = kChainSeed;
  for (auto element : array) {
    od::value v;
    if (auto e = element.get(v)) return e;
    od::json_type type;
    if (auto e = v.type().get(type)) return e;
    std::string_view bytes;
    if (type == od::json_type::object) {
      od::object o;
      if (auto e = v.get_object().get(o)) return e;
      if (auto e = o.raw_json().get(bytes)) return e;
    } else if (type == od::json_type::array) {
      od::array a;
      if (auto e = v.get_array().get(a)) return e;
      if (auto e = a.raw_json().get(bytes)) return e;
    } else {
      bytes = v.raw_json_token();
    }
    bytes = TrimRight(bytes);
    chain = ChainMessage(chain, bytes);
    row->messages.push_back(bytes);
    row->prefix.push_back(chain);
  }
  return simdjson::SUCCESS;
}

class RowReader {
 public:
  // Reads `line` (LineReader::kPadding readable bytes after it). Returns "" or why the row
  // could not be read.
  std::string Read(std::string_view line, RowFacts* row) {
    row->timestamp.reset();
    row->mooncake = row->has_messages = false;
    row->has_session_id = false;
    row->session_id = {};
    row->messages.clear();
    row->prefix.clear();
    row->responses = false;
    row->previous_response_id.clear();
    od::document doc;
    if (auto e =
            parser_.iterate(line.data(), line.size(), line.size() + trace::LineReader::kPadding)
                .get(doc)) {
      return Why(e);
    }
    od::object top;
    if (auto e = doc.get_object().get(top)) {
      return e == simdjson::INCORRECT_TYPE ? "not a JSON object" : Why(e);
    }
    for (auto field : top) {
      std::string_view key;
      if (auto e = field.unescaped_key().get(key)) return Why(e);
      od::value value;
      if (auto e = field.value().get(value)) return Why(e);
      if (key == "timestamp") {
        row->mooncake = true;
        double ts;
        if (value.get_double().get(ts) == simdjson::SUCCESS) row->timestamp = ts;
      } else if (key == "payload") {
        row->mooncake = true;
        od::object payload;
        if (value.get_object().get(payload) != simdjson::SUCCESS) continue;
        for (auto pf : payload) {
          std::string_view pkey;
          if (auto e = pf.unescaped_key().get(pkey)) return Why(e);
          if (pkey == "previous_response_id") {
            std::string_view id;
            if (pf.value().get_string().get(id) == simdjson::SUCCESS && !id.empty()) {
              row->previous_response_id.assign(id);
              row->responses = true;
            }
            continue;
          }
          if (pkey != "messages") continue;
          od::value messages;
          if (auto e = pf.value().get(messages)) return Why(e);
          if (auto e = ReadMessages(messages, row)) return Why(e);
        }
      } else if (key == "session_id") {
        row->mooncake = true;
        row->has_session_id = true;
        od::json_type type;
        if (value.type().get(type) == simdjson::SUCCESS && type == od::json_type::string) {
          row->session_id = value.raw_json_token();
        }
      } else if (key == "endpoint_type") {
        std::string_view type;
        if (value.get_string().get(type) == simdjson::SUCCESS && type == "responses") {
          row->responses = true;
        }
      } else if (key == "messages") {  // AIPerf's mooncake messages rows; a raw body too
        if (auto e = ReadMessages(value, row)) return Why(e);
      } else if (key == "input_length" || key == "text_input" || key == "hash_ids" ||
                 key == "output_length" || key == "delay") {
        row->mooncake = true;
      }
    }
    // current_location() fails (OUT_OF_BOUNDS) exactly when the object was the whole line.
    if (doc.current_location().error() == simdjson::SUCCESS) {
      return "trailing content after the JSON object";
    }
    return {};
  }

 private:
  static std::string Why(simdjson::error_code e) {
    return std::string("invalid JSON (") + simdjson::error_message(e) + ")";
  }
  od::parser parser_;
};

// The trace::AnswerKeyHasher key of an assistant message as a client sent it back: its
// `content` (a string, null, or text parts) and its tool_calls' function names and arguments
// (strings), decoded. nullopt when the message holds anything else there (a non-text part,
// arguments that are not a string): the key could not match a captured response then.
class AnswerKeyReader {
 public:
  // `message` lies in a line with LineReader::kPadding readable bytes after `readable_end`.
  std::optional<uint64_t> Read(std::string_view message, const char* readable_end) {
    std::optional<uint64_t> key;
    if (ReadInto(message, readable_end)) key = hasher_.Finish();
    hasher_.Finish();  // empty again either way
    return key;
  }

 private:
  bool ReadInto(std::string_view message, const char* readable_end) {
    od::document doc;
    const size_t capacity = static_cast<size_t>(readable_end - message.data());
    if (parser_.iterate(message.data(), message.size(), capacity).get(doc)) return false;
    od::object o;
    if (doc.get_object().get(o)) return false;
    for (auto field : o) {
      std::string_view key;
      od::value value;
      if (field.unescaped_key().get(key) || field.value().get(value)) return false;
      if (key == "content") {
        if (!ReadContent(value)) return false;
      } else if (key == "tool_calls") {
        od::json_type type;
        if (value.type().get(type)) return false;
        if (type == od::json_type::null) continue;
        od::array calls;
        if (value.get_array().get(calls)) return false;
        for (auto call : calls) {
          od::object c;
          if (call.get_object().get(c)) return false;
          od::object function;
          if (c.find_field_unordered("function").get_object().get(function)) return false;
          std::string_view name, arguments;  // in the parser's string buffer: both stay valid
          if (function.find_field_unordered("name").get_string().get(name) ||
              function.find_field_unordered("arguments").get_string().get(arguments)) {
            return false;
          }
          hasher_.ToolCall(name, arguments);
        }
      }
    }
    return true;
  }

  bool ReadContent(od::value value) {
    od::json_type type;
    if (value.type().get(type)) return false;
    if (type == od::json_type::null) return true;
    std::string_view text;
    if (type == od::json_type::string) {
      if (value.get_string().get(text)) return false;
      hasher_.Text(text);
      return true;
    }
    od::array parts;
    if (value.get_array().get(parts)) return false;
    for (auto part : parts) {
      od::value p;
      if (part.get(p)) return false;
      if (p.type().get(type)) return false;
      if (type == od::json_type::string) {
        if (p.get_string().get(text)) return false;
        hasher_.Text(text);
        continue;
      }
      od::object po;
      if (p.get_object().get(po)) return false;
      std::string_view part_type;
      if (po.find_field_unordered("type").get_string().get(part_type) || part_type != "text" ||
          po.find_field_unordered("text").get_string().get(text)) {
        return false;
      }
      hasher_.Text(text);
    }
    return true;
  }

  od::parser parser_;
  trace::AnswerKeyHasher hasher_;
};

bool IsAssistantMessage(std::string_view message) {
  static constexpr std::string_view kFast = "{\"role\":\"assistant\"";
  if (message.starts_with(kFast)) return true;
  if (message.starts_with("{\"role\":\"")) return false;  // another role, written first
  std::optional<trace::Span> role = trace::FindTopLevelValue(message, "role");
  return role && message.substr(role->begin, role->end - role->begin) == "\"assistant\"";
}

void AppendWithSessionId(std::string_view row, std::string_view quoted_id, std::string* out) {
  out->append(row.substr(0, row.size() - 1));  // without the closing '}'
  out->append(kSessionIdMemberHead.substr(0, kSessionIdMemberHead.size() - 1));  // no '"'
  out->append(quoted_id);
  out->push_back('}');
}

}  // namespace

SessionsReport InferSessions(const SessionsOptions& options) {
  SessionsReport r;
  r.path = options.path;
  r.out = options.out;
  r.window_ms = options.linker.window_ms;
  r.late_ms = options.linker.late_ms;
  r.bad.limit = options.max_failures;
  if (options.out.empty()) {
    r.io = Status::InvalidArgument("no output: give -o OUT");
    return r;
  }
  if (options.out == options.path) {
    r.io = Status::InvalidArgument("the output " + options.out +
                                   " is the input; write to another file");
    return r;
  }
  if (!(options.linker.window_ms > 0)) {
    r.io = Status::InvalidArgument("--window must be positive");
    return r;
  }
  {
    trace::FormatResolver resolver;
    resolver.InitFor(options.path, std::nullopt, &r.warnings, " (format taken from the rows)");
    if (resolver.format() == trace::TraceFormat::kRaw) {
      r.io = Status::InvalidArgument(
          options.path +
          " is raw_payload (by its manifest): its rows are request bodies with no "
          "timestamp and no place for a session_id; convert it first with "
          "`llmtap convert " +
          options.path + " --to mooncake_payload`");
      return r;
    }
  }
  r.io = trace::CheckOutputPath(options.out, options.force);
  if (!r.io.ok()) return r;

  // The outcomes sidecar: response ends for think time and for telling apart conversations
  // whose turns look alike.
  trace::OutcomeTable outcomes;
  std::optional<trace::OutcomeJoin> join;
  {
    bool loaded = false;
    Status s = outcomes.LoadFor(options.path, options.outcomes, options.no_outcomes,
                                {.answer_keys = true, .response_ids = true}, &loaded, &r.warnings);
    if (!s.ok()) {
      r.io = Status::IoError(s.ToString() + " (give another with --outcomes, or --no-outcomes)");
      return r;
    }
    if (loaded) {
      r.outcomes_path = outcomes.path();
      join.emplace(&outcomes, options.path);
    }
  }

  trace::LineReader reader;
  trace::OutputFile out;
  r.io = trace::OpenInputAndOutput(options.path, &reader, options.out, options.force, &out);
  if (!r.io.ok()) return r;
  trace::Progress progress("sessions", options.progress);

  SessionLinker linker(options.linker);
  RowReader rows;
  AnswerKeyReader answer_keys;
  RowFacts row;
  std::string id;  // the quoted id being written
  auto drain = [&r](const ClosedConversation& c) {
    r.turns.Add(c.turns);
    r.single_turn_sessions += c.turns == 1;
  };
  const std::string quoted_prefix = [&] {
    std::string q;
    AppendJsonEscaped(&q, options.id_prefix);
    return q;
  }();
  // The row with a session_id generated from `conversation` (its first turn's line).
  auto WriteWithId = [&](std::string_view bytes, uint64_t conversation) {
    id.assign("\"");
    id.append(quoted_prefix);
    char digits[24];
    id.append(digits, std::to_chars(digits, digits + sizeof digits, conversation).ptr);
    id.push_back('"');
    std::string_view kept = TrimRight(bytes);
    std::string* buf = out.BeginLine(kept.size() + kSessionIdMemberHead.size() + id.size());
    AppendWithSessionId(kept, id, buf);
    out.EndLine();
  };
  // A Responses row's response_id -> its conversation (the line of its first turn).
  std::unordered_map<std::string, uint64_t> responses_conversation;
  bool saw_mooncake = false;
  double last_ts = -INFINITY;
  bool warned_backwards = false;
  trace::Line line;
  while (reader.Next(&line)) {
    progress.Update(reader.bytes_consumed(), reader.file_size());
    ++r.lines;
    if (line.torn) r.torn_tail = true;
    std::string_view bytes = trace::TrimJsonWhitespace(line.bytes);
    if (bytes.empty()) {
      ++r.blank;
      out.WriteLine(line.bytes);  // every line stays, so the sidecar's line numbers still fit
      continue;
    }
    std::string why = rows.Read(line.bytes, &row);
    if (why.empty() && !row.mooncake && row.has_messages) {
      if (!saw_mooncake) {
        r.io = Status::InvalidArgument(
            options.path + ":" + std::to_string(line.number) +
            ": a raw_payload row (a request body, no timestamp): sessions needs "
            "mooncake_payload rows; convert first with `llmtap convert " +
            options.path + " --to mooncake_payload`");
        break;
      }
      why = "a raw_payload row in a mooncake_payload file";
    }
    if (why.empty() && !row.messages.empty() && !row.timestamp) why = "no numeric timestamp";
    if (!why.empty()) {
      r.bad.Add(line.number, line.torn ? "torn last line (no trailing newline): " + why : why);
      out.WriteLine(line.bytes);
      continue;
    }
    saw_mooncake = saw_mooncake || row.mooncake;
    std::optional<double> end;
    trace::AnswerText answer = trace::AnswerText::kNone;
    uint64_t answer_key = 0;
    const trace::Outcome* responded = nullptr;
    if (join && row.timestamp) {
      if (const trace::Outcome* o = join->Join(line.number, row.timestamp)) {
        responded = o;
        if (o->latency_ms) end = *row.timestamp + *o->latency_ms;
        answer = o->answer;
        if (std::optional<uint64_t> k = outcomes.AnswerKey(*o)) answer_key = *k;
      }
    }
    if (row.has_session_id) {
      ++r.named_rows;
      std::string_view inner = row.session_id.empty() ? "" : row.session_id.substr(1);
      if (inner.starts_with(quoted_prefix) && inner.size() > quoted_prefix.size() + 1 &&
          inner[quoted_prefix.size()] >= '0' && inner[quoted_prefix.size()] <= '9') {
        ++r.generated_id_clashes;
      }
      out.WriteLine(line.bytes);
      continue;
    }
    if (row.responses && row.timestamp) {
      // A Responses conversation: each turn names its predecessor's response.
      ++r.responses_rows;
      uint64_t conversation = line.number;
      if (!row.previous_response_id.empty()) {
        auto it = responses_conversation.find(row.previous_response_id);
        if (it != responses_conversation.end()) {
          conversation = it->second;
          ++r.responses_linked;
        } else {
          ++r.responses_missing;
        }
      }
      if (conversation == line.number) ++r.responses_sessions;
      if (responded != nullptr) {
        if (std::string_view rid = outcomes.ResponseId(*responded); !rid.empty()) {
          responses_conversation.emplace(std::string(rid), conversation);
        }
      }
      WriteWithId(line.bytes, conversation);
      continue;
    }
    if (!row.has_messages || row.messages.empty()) {
      ++r.other_rows;
      out.WriteLine(line.bytes);
      continue;
    }
    double ts = *row.timestamp;
    if (ts < last_ts && !warned_backwards) {
      warned_backwards = true;
      r.warnings.push_back(
          trace::Located(options.path, line.number,
                         "timestamp goes backwards; rows are linked in file order, "
                         "and the window assumes time order"));
    }
    last_ts = std::max(last_ts, ts);
    TurnInput turn{.line = line.number,
                   .timestamp_ms = ts,
                   .response_end_ms = end,
                   .prefix = row.prefix,
                   .answer = answer,
                   .answer_key = answer_key};
    const char* readable_end = line.bytes.data() + line.bytes.size() + trace::LineReader::kPadding;
    TurnResult t = linker.Add(
        turn, [&](size_t i) { return IsAssistantMessage(row.messages[i]); },
        [&](size_t i) { return answer_keys.Read(row.messages[i], readable_end); });
    linker.DrainClosed(drain);
    ++r.chat_rows;
    if (t.linked) {
      ++r.linked;
      r.ambiguous += t.ambiguous;
      r.late += t.late;
      switch (t.pick) {
        case PickKind::kOnly:
          break;
        case PickKind::kByAnswer:
          ++r.by_answer;
          break;
        case PickKind::kGuessNoText:
          ++r.guessed_no_text;
          break;
        case PickKind::kGuessTruncated:
          ++r.guessed_truncated;
          break;
        case PickKind::kGuessNoMatch:
          ++r.guessed_no_match;
          break;
        case PickKind::kGuessSameAnswer:
          ++r.guessed_same_answer;
          break;
      }
      r.gap_ms.Add(static_cast<uint64_t>(std::llround(std::max(0.0, t.gap_ms))));
      if (t.think_ms) {
        if (*t.think_ms < 0) ++r.negative_think;
        r.think_ms.Add(static_cast<uint64_t>(std::llround(std::max(0.0, *t.think_ms))));
      }
    } else {
      ++r.sessions;
      for (size_t i = 1; i < row.messages.size(); ++i) {
        if (IsAssistantMessage(row.messages[i])) {
          ++r.unlinked;
          break;
        }
      }
    }
    WriteWithId(line.bytes, t.conversation);
  }
  progress.Finish();
  if (r.io.ok()) r.io = reader.status();
  linker.CloseAll();
  linker.DrainClosed(drain);
  r.peak_open = linker.peak_open();
  if (join) {
    Status s = join->Finish(r.lines);
    r.outcomes_matched = join->matched();
    r.outcomes_mismatched = join->mismatched();
    r.outcomes_note = join->MismatchSummary();
    if (r.io.ok() && !s.ok()) {
      r.io = s;
    }
  }
  if (r.generated_id_clashes > 0) {
    r.warnings.push_back(std::to_string(r.generated_id_clashes) +
                         " rows already carry an id that looks like a generated one (" +
                         options.id_prefix + "<line>); choose another --id-prefix");
  }
  Status closed = out.Close();
  if (r.io.ok()) {
    r.io = closed;
  } else if (options.out.find("://") == std::string::npos) {
    ::unlink(options.out.c_str());  // ours (created just now) and not trustworthy
  }
  return r;
}

namespace {

std::string Ms(double ms) {
  std::string s;
  trace::AppendNumber(std::round(ms), &s);
  return s + " ms";
}

std::string Dist(const trace::Histogram& h, bool ms) {
  auto v = [&](uint64_t x) { return ms ? Ms(static_cast<double>(x)) : std::to_string(x); };
  char mean[32];
  std::snprintf(mean, sizeof mean, "%.2f", h.mean());
  return "n " + std::to_string(h.count()) + ", mean " + mean + (ms ? " ms" : "") + ", p50 " +
         v(h.Percentile(50)) + ", p90 " + v(h.Percentile(90)) + ", p99 " + v(h.Percentile(99)) +
         ", max " + v(h.max());
}

}  // namespace

std::string RenderSessionsText(const SessionsReport& r) {
  std::string out = trace::RenderIssues(r.path, r.bad, "more bad rows not shown", r.warnings);
  if (!r.io.ok()) return out + "error: " + r.io.ToString() + "\n";
  out += r.path + " -> " + r.out + ": " + std::to_string(r.lines) + " lines\n";
  out += "  chat rows:        " + std::to_string(r.chat_rows) + " in " +
         std::to_string(r.sessions) + " inferred sessions (" +
         std::to_string(r.sessions - r.single_turn_sessions) + " multi-turn, " +
         std::to_string(r.single_turn_sessions) + " single-turn)\n";
  out += "  linked turns:     " + std::to_string(r.linked) + " (continue an earlier turn";
  if (r.by_answer) {
    out += "; " + std::to_string(r.by_answer) + " told from look-alikes by the response text";
  }
  if (r.ambiguous) {
    out += "; " + std::to_string(r.ambiguous) + " guessed among look-alikes:";
    const char* sep = " ";
    auto reason = [&](uint64_t n, const char* why) {
      if (n == 0) return;
      out += sep + std::to_string(n) + " " + why;
      sep = ", ";
    };
    reason(r.guessed_no_text, "without response text");
    reason(r.guessed_truncated, "with response text cut at max_response_bytes");
    reason(r.guessed_no_match, "whose response texts did not match");
    reason(r.guessed_same_answer, "with the same answer");
  }
  if (r.late) {
    out += "; " + std::to_string(r.late) +
           " whose predecessor's recorded end was after them, by at most " +
           Ms(r.late_ms) + " (a loaded host's clock)";
  }
  out += ")\n";
  out += "  not linked:       " + std::to_string(r.unlinked) +
         " rows hold earlier turns that were not found (new session each)\n";
  if (r.named_rows) {
    out += "  named rows:       " + std::to_string(r.named_rows) +
           " already had a session_id (kept, not linked)\n";
  }
  if (r.responses_rows) {
    out += "  responses rows:   " + std::to_string(r.responses_rows) + " in " +
           std::to_string(r.responses_sessions) + " sessions (" +
           std::to_string(r.responses_linked) + " linked by previous_response_id";
    if (r.responses_missing) {
      out += "; " + std::to_string(r.responses_missing) +
             " name a response not in the capture or its outcomes (new session each)";
    }
    out += ")\n";
  }
  if (r.other_rows) {
    out += "  other rows:       " + std::to_string(r.other_rows) +
           " without messages (unchanged, no session_id)\n";
  }
  if (r.bad.total) {
    out += "  bad rows:         " + std::to_string(r.bad.total) +
           " (passed through unchanged, no session_id)\n";
  }
  if (r.turns.count()) out += "  turns/session:    " + Dist(r.turns, false) + "\n";
  if (r.gap_ms.count()) out += "  turn gap (start to start): " + Dist(r.gap_ms, true) + "\n";
  if (r.think_ms.count()) {
    out += "  think time (response end to next turn): " + Dist(r.think_ms, true) + "\n";
  } else if (r.linked) {
    out += "  think time: unknown (no outcomes sidecar)\n";
  }
  if (!r.outcomes_path.empty()) {
    out += "  outcomes:         " + r.outcomes_path + " (" + std::to_string(r.outcomes_matched) +
           " rows joined";
    if (r.outcomes_mismatched) out += ", " + std::to_string(r.outcomes_mismatched) + " mismatched";
    out += ")\n";
    if (!r.outcomes_note.empty()) out += "  " + r.outcomes_note + "\n";
  }
  out += "  window:           " + Ms(r.window_ms) + ", peak open conversations " +
         std::to_string(r.peak_open) + "\n";
  return out;
}

std::string RenderSessionsJson(const SessionsReport& r) {
  nlohmann::json j;
  j["input"] = r.path;
  j["output"] = r.out;
  j["ok"] = r.io.ok();
  if (!r.io.ok()) j["error"] = r.io.ToString();
  j["lines"] = r.lines;
  j["blank"] = r.blank;
  j["torn_tail"] = r.torn_tail;
  j["chat_rows"] = r.chat_rows;
  j["sessions"] = r.sessions;
  j["single_turn_sessions"] = r.single_turn_sessions;
  j["linked"] = r.linked;
  j["by_response_text"] = r.by_answer;
  j["ambiguous"] = r.ambiguous;
  j["guessed"] = {{"no_response_text", r.guessed_no_text},
                  {"truncated", r.guessed_truncated},
                  {"no_match", r.guessed_no_match},
                  {"same_answer", r.guessed_same_answer}};
  j["late"] = r.late;
  j["unlinked"] = r.unlinked;
  j["named_rows"] = r.named_rows;
  j["other_rows"] = r.other_rows;
  j["responses"] = {{"rows", r.responses_rows},
                    {"sessions", r.responses_sessions},
                    {"linked", r.responses_linked},
                    {"missing_previous", r.responses_missing}};
  j["bad_rows"] = r.bad.total;
  nlohmann::json bad = nlohmann::json::array();
  for (const trace::LineFailure& f : r.bad.kept)
    bad.push_back({{"line", f.line}, {"reason", f.reason}});
  j["bad"] = bad;
  j["turns_per_session"] = trace::HistogramJson<nlohmann::json>(r.turns);
  j["turn_gap_ms"] = trace::HistogramJson<nlohmann::json>(r.gap_ms);
  j["think_time_ms"] = trace::HistogramJson<nlohmann::json>(r.think_ms);
  j["negative_think"] = r.negative_think;
  j["outcomes"] = r.outcomes_path.empty() ? nlohmann::json(nullptr)
                                          : nlohmann::json{{"path", r.outcomes_path},
                                                           {"matched", r.outcomes_matched},
                                                           {"mismatched", r.outcomes_mismatched}};
  j["window_ms"] = r.window_ms;
  j["peak_open_conversations"] = r.peak_open;
  j["warnings"] = r.warnings;
  return j.dump(2) + "\n";
}

}  // namespace llmtap::sessions
