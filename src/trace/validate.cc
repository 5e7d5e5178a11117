#include "trace/validate.h"

#include <locale.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <nlohmann/json.hpp>

namespace llmtap::trace {

namespace {

using simdjson::dom::array;
using simdjson::dom::element;
using simdjson::dom::element_type;
using simdjson::dom::object;

// Every warning names its rule; --help lists them all (trace_commands.cc prints this table).
constexpr ValidateWarningRule kWarningRules[] = {
    {"number-coerced",
     "input_length, output_length, a hash id, timestamp or delay written as a string (\"100\", "
     "\" 1_000 \", \"1e3\", \"nan\") or a boolean: AIPerf loads the row with the number "
     "pydantic reads from it; llmtap's other tools (replay, stats, split --rebase, merge) take "
     "JSON numbers only"},
    {"big-integer",
     "an integer beyond 64 bits where AIPerf takes a float (a timestamp, or anywhere in a "
     "payload): AIPerf loads the row (orjson reads the integer as a float) and sends the float, "
     "which a server may refuse (a float `seed`); llmtap's tools keep the row, and llmtap "
     "replay sends the captured digits"},
    {"duplicate-key",
     "a key written twice: AIPerf loads the row with the last value (orjson); llmtap's other "
     "tools read the first"},
    {"line-whitespace",
     "whitespace JSON does not allow (a no-break space, \\v, \\f, U+001C..U+001F, U+2028, "
     "...) at the ends of a line, or a line holding only such whitespace: AIPerf loads the row "
     "(or skips the line) once it strips it; llmtap's other tools cannot read the line"},
    {"line-split",
     "a carriage return inside a line of a mooncake_trace file: AIPerf loads each part as a row "
     "of its own (it reads such files as text, where a lone '\\r' ends a line); llmtap's other "
     "tools read one line"},
    {"deep-nesting",
     "JSON nested deeper than 1024 levels: AIPerf loads the row, and so do llmtap's tools, but "
     "AIPerf's worker cannot send a request nested deeper than 254 (orjson)"},
    {"negative-timestamp",
     "a timestamp below 0: AIPerf loads the row and sends it at the start of the run unless "
     "--fixed-schedule-auto-offset moves the schedule's zero to the first timestamp; llmtap "
     "merge skips such rows"},
    {"timestamp-order",
     "a timestamp lower than an earlier row's: AIPerf loads the row and sends the sessions' first "
     "rows in timestamp order (a later turn at its own timestamp); llmtap merge skips such rows"},
    {"not-finite",
     "a timestamp of \"nan\" or \"inf\", or a delay of \"inf\" (strings pydantic reads as "
     "such numbers): AIPerf loads the row, but no schedule can place it"},
    {"session-endpoint",
     "a session holding both chat and completions requests: AIPerf loads the rows and sends "
     "every turn to the run's one --endpoint-type, which refuses the other kind; `llmtap split` "
     "routes a session by its first row"},
    {"endpoint-mismatch",
     "with --endpoint-type, a request for the other endpoint (a payload without 'messages' in "
     "a chat run, without 'prompt' in a completions run; a 'messages' row or raw_payload row in "
     "a completions run): AIPerf loads the row and sends it as it is (a 'messages' row as an "
     "empty prompt), and the server refuses it"},
    {"request-shape",
     "a request ('payload', or a raw_payload row) whose 'messages' is empty or holds an entry "
     "that is not an object with a 'role': AIPerf loads the row and sends it as it is; a server "
     "refuses it"},
    {"raw-mooncake-keys",
     "a raw_payload row with mooncake_trace keys (timestamp, payload, session_id, ...): AIPerf "
     "loads the row and sends those keys in the request body; load the file as mooncake_trace"},
};

// ---------------------------------------------------------------------------------------------
// Characters and numbers as AIPerf's Python reads them.

constexpr char32_t kBadCodePoint = 0xFFFFFFFF;

struct CodePoint {
  char32_t c;
  size_t len;
};

// The UTF-8 code point at s[i] (kBadCodePoint, length 1, when it is not one).
CodePoint DecodeAt(std::string_view s, size_t i) {
  auto b = static_cast<unsigned char>(s[i]);
  if (b < 0x80) return {b, 1};
  size_t n = b >= 0xF8 ? 0 : b >= 0xF0 ? 4 : b >= 0xE0 ? 3 : b >= 0xC0 ? 2 : 0;
  if (n == 0 || i + n > s.size()) return {kBadCodePoint, 1};
  char32_t c = b & (0x3F >> (n - 1));
  for (size_t k = 1; k < n; ++k) {
    auto x = static_cast<unsigned char>(s[i + k]);
    if ((x & 0xC0) != 0x80) return {kBadCodePoint, 1};
    c = (c << 6) | (x & 0x3F);
  }
  return {c, n};
}

// Unicode White_Space: what pydantic-core (Rust's str::trim) strips around a number.
bool IsUnicodeWhiteSpace(char32_t c) {
  return (c >= 0x9 && c <= 0xD) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F ||
         c == 0x3000;
}
// Python's str.isspace(): what str.strip() removes from a line of a text-mode file.
bool IsPythonSpace(char32_t c) { return IsUnicodeWhiteSpace(c) || (c >= 0x1C && c <= 0x1F); }
// bytes.strip(): what AIPerf's raw_payload loader removes from a line read in binary mode.
bool IsPythonBytesSpace(char32_t c) { return c == ' ' || (c >= 0x9 && c <= 0xD); }
bool IsJsonSpace(char32_t c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

// `s` without the code points `strip` takes at either end. *odd is set when one of them is not
// JSON whitespace.
template <class Pred>
std::string_view Strip(std::string_view s, Pred strip, bool* odd) {
  while (!s.empty()) {
    CodePoint cp = DecodeAt(s, 0);
    if (cp.c == kBadCodePoint || !strip(cp.c)) break;
    if (odd && !IsJsonSpace(cp.c)) *odd = true;
    s.remove_prefix(cp.len);
  }
  while (!s.empty()) {
    size_t start = s.size() - 1;
    while (start > 0 && s.size() - start < 4 &&
           (static_cast<unsigned char>(s[start]) & 0xC0) == 0x80) {
      --start;
    }
    CodePoint cp = DecodeAt(s, start);
    if (cp.c == kBadCodePoint || start + cp.len != s.size() || !strip(cp.c)) break;
    if (odd && !IsJsonSpace(cp.c)) *odd = true;
    s.remove_suffix(cp.len);
  }
  return s;
}

bool IsDigit(char c) { return c >= '0' && c <= '9'; }

// strtod in the "C" locale, whatever the process's.
double StrToDouble(const std::string& s) {
  static locale_t c_locale = newlocale(LC_ALL_MASK, "C", nullptr);
  return strtod_l(s.c_str(), nullptr, c_locale);
}

// An integer as pydantic 2 (lax mode) reads one into an `int` field.
struct IntValue {
  bool coerced = false;  // read from a string or a boolean
  bool big = false;      // beyond int64: only its sign is kept
  bool negative = false;
  int64_t value = 0;  // when !big
  // value >= n (for big values: their sign decides).
  bool AtLeast(int64_t n) const { return big ? !negative : value >= n; }
  std::string ToString() const {
    return big ? (negative ? "a negative integer beyond 64 bits" : "an integer beyond 64 bits")
               : std::to_string(value);
  }
};

// pydantic-core's str -> int: White_Space trimmed, an optional sign, digits with single
// underscores between them, then optionally '.' and zeros only ("5.00"), at most 4300 digits
// (Python's limit on int()).
bool ParseIntString(std::string_view s, IntValue* out) {
  s = Strip(s, IsUnicodeWhiteSpace, nullptr);
  bool negative = false;
  if (!s.empty() && (s[0] == '+' || s[0] == '-')) {
    negative = s[0] == '-';
    s.remove_prefix(1);
  }
  size_t dot = s.find('.');
  std::string_view digits = s.substr(0, dot);
  if (dot != std::string_view::npos) {
    std::string_view zeros = s.substr(dot + 1);
    if (zeros.empty() || zeros.find_first_not_of('0') != std::string_view::npos) return false;
  }
  if (digits.empty() || !IsDigit(digits.front()) || !IsDigit(digits.back())) return false;
  uint64_t magnitude = 0;
  bool overflow = false;
  size_t count = 0;
  char prev = '0';
  for (char c : digits) {
    if (c == '_') {
      if (prev == '_') return false;
    } else if (IsDigit(c)) {
      ++count;
      if (!overflow && magnitude > (UINT64_MAX - (c - '0')) / 10) overflow = true;
      if (!overflow) magnitude = magnitude * 10 + (c - '0');
    } else {
      return false;
    }
    prev = c;
  }
  if (count > 4300) return false;
  out->negative = negative && (overflow || magnitude != 0);
  constexpr uint64_t kMaxPositive = INT64_MAX;
  if (overflow || magnitude > kMaxPositive + (negative ? 1 : 0)) {
    out->big = true;
  } else {
    out->value = negative ? static_cast<int64_t>(0 - magnitude) : static_cast<int64_t>(magnitude);
  }
  return true;
}

// pydantic-core's str -> float: White_Space trimmed; underscores allowed except first, last or
// doubled (then dropped); an optional sign; digits with an optional '.' and exponent, or
// inf / infinity / nan in any case. Too large a value is infinity.
bool ParseFloatString(std::string_view in, double* out) {
  std::string_view s = Strip(in, IsUnicodeWhiteSpace, nullptr);
  if (s.empty()) return false;
  std::string t;
  if (s.find('_') != std::string_view::npos) {
    if (s.front() == '_' || s.back() == '_' || s.find("__") != std::string_view::npos) {
      return false;
    }
    for (char c : s) {
      if (c != '_') t.push_back(c);
    }
  } else {
    t = s;
  }
  size_t i = 0;
  bool negative = false;
  if (i < t.size() && (t[i] == '+' || t[i] == '-')) negative = t[i++] == '-';
  std::string word;
  for (size_t k = i; k < t.size(); ++k) {
    word.push_back(static_cast<char>(std::tolower(static_cast<unsigned char>(t[k]))));
  }
  if (word == "inf" || word == "infinity") {
    *out = negative ? -HUGE_VAL : HUGE_VAL;
    return true;
  }
  if (word == "nan") {
    *out = std::nan("");
    return true;
  }
  size_t digits = 0;
  while (i < t.size() && IsDigit(t[i])) ++i, ++digits;
  if (i < t.size() && t[i] == '.') {
    ++i;
    while (i < t.size() && IsDigit(t[i])) ++i, ++digits;
  }
  if (digits == 0) return false;
  if (i < t.size() && (t[i] == 'e' || t[i] == 'E')) {
    ++i;
    if (i < t.size() && (t[i] == '+' || t[i] == '-')) ++i;
    size_t exp_digits = 0;
    while (i < t.size() && IsDigit(t[i])) ++i, ++exp_digits;
    if (exp_digits == 0) return false;
  }
  if (i != t.size()) return false;
  *out = StrToDouble(t);
  return true;
}

// A JSON value into an `int` field of an AIPerf model (pydantic lax mode): an integer; a
// boolean; a float without a fraction within int64 (open interval); a string as above.
bool CoerceInt(element e, IntValue* out) {
  switch (e.type()) {
    case element_type::INT64:
      out->value = e.get_int64().value_unsafe();
      return true;
    case element_type::UINT64: {
      uint64_t u = e.get_uint64().value_unsafe();
      if (u > static_cast<uint64_t>(INT64_MAX)) {
        out->big = true;
      } else {
        out->value = static_cast<int64_t>(u);
      }
      return true;
    }
    case element_type::DOUBLE: {
      double d = e.get_double().value_unsafe();
      if (!std::isfinite(d) || d != std::trunc(d) || d <= -9223372036854775808.0 ||
          d >= 9223372036854775808.0) {
        return false;
      }
      out->value = static_cast<int64_t>(d);
      return true;
    }
    case element_type::BOOL:
      out->coerced = true;
      out->value = e.get_bool().value_unsafe() ? 1 : 0;
      return true;
    case element_type::STRING:
      out->coerced = true;
      return ParseIntString(e.get_string().value_unsafe(), out);
    default:
      return false;
  }
}

// A JSON value into an `int | float` field (timestamp, delay): a number; a boolean; a string
// pydantic reads as an integer or a float.
struct NumberValue {
  bool coerced = false;
  double value = 0;
};
bool CoerceNumber(element e, NumberValue* out) {
  switch (e.type()) {
    case element_type::INT64:
    case element_type::UINT64:
    case element_type::DOUBLE:
      out->value = e.get_double().value_unsafe();
      return true;
    case element_type::BOOL:
      out->coerced = true;
      out->value = e.get_bool().value_unsafe() ? 1 : 0;
      return true;
    case element_type::STRING: {
      out->coerced = true;
      std::string_view s = e.get_string().value_unsafe();
      IntValue i;
      // Every string int() takes float() takes too; the int's value is the float's, rounded.
      return ParseFloatString(s, &out->value) || ParseIntString(s, &i);
    }
    default:
      return false;
  }
}

std::string Quoted(element e) {
  std::string s = simdjson::minify(e);
  return s.size() > 40 ? s.substr(0, 37) + "..." : s;
}

// ---------------------------------------------------------------------------------------------
// A line as AIPerf reads it.

// The rows AIPerf finds on a line. A mooncake_trace file is read as text (BaseFileLoader: a lone
// '\r' ends a line as '\n' does, str.strip()); a raw_payload file as bytes (bytes.strip()).
struct AIPerfLine {
  std::vector<std::string_view> rows;
  bool odd_whitespace = false;  // stripped whitespace that JSON does not allow
};

AIPerfLine ReadAsAIPerf(std::string_view line, TraceFormat format) {
  AIPerfLine out;
  if (format == TraceFormat::kRaw) {
    std::string_view s = Strip(line, IsPythonBytesSpace, &out.odd_whitespace);
    if (!s.empty()) out.rows.push_back(s);
    return out;
  }
  size_t begin = 0;
  while (begin <= line.size()) {
    size_t end = line.find('\r', begin);
    if (end == std::string_view::npos) end = line.size();
    std::string_view s = Strip(line.substr(begin, end - begin), IsPythonSpace, &out.odd_whitespace);
    if (!s.empty()) out.rows.push_back(s);
    begin = end + 1;
  }
  return out;
}

// Parses a row AIPerf reads from a line (ReadAsAIPerf: not padded, so copied) as RowParser
// does, which reads JSON as orjson, AIPerf's JSON parser, does.
class PieceParser {
 public:
  const ParsedRow& Parse(std::string_view text) {
    buffer_.assign(text);
    buffer_.append(LineReader::kPadding, ' ');
    return parser_.Parse(std::string_view(buffer_).substr(0, text.size()));
  }

 private:
  RowParser parser_;
  std::string buffer_;
};

// ---------------------------------------------------------------------------------------------
// The rules of a row.

// The top-level keys AIPerf's models read, the last value of each (orjson keeps the last of a
// key written twice), and "prompt" (a request's endpoint).
enum Key : int {
  kType,
  kInputLength,
  kTextInput,
  kMessages,
  kTools,
  kPayload,
  kOutputLength,
  kHashIds,
  kTimestamp,
  kDelay,
  kSessionId,
  kExtra,
  kPrompt,
  kKeyCount
};
constexpr std::string_view kKeyNames[kKeyCount] = {
    "type",     "input_length", "text_input", "messages",   "tools", "payload", "output_length",
    "hash_ids", "timestamp",    "delay",      "session_id", "extra", "prompt"};

struct Fields {
  std::optional<element> value[kKeyCount];
  std::string_view duplicate;  // the first key found written twice

  // Present and not null (AIPerf's Optional fields take null as absent).
  std::optional<element> Get(Key k) const {
    if (value[k] && !value[k]->is_null()) return value[k];
    return std::nullopt;
  }
  bool Has(Key k) const { return value[k].has_value(); }
};

Fields ReadFields(object obj) {
  Fields f;
  uint32_t seen = 0;
  for (auto field : obj) {
    for (int k = 0; k < kKeyCount; ++k) {
      if (field.key != kKeyNames[k]) continue;
      if ((seen & (1u << k)) && f.duplicate.empty()) f.duplicate = kKeyNames[k];
      seen |= 1u << k;
      f.value[k] = field.value;
      break;
    }
  }
  return f;
}

// A session's input mode (AIPerf refuses a session that mixes them).
enum class Mode : uint8_t { kPayload, kMessages, kSynthesized };

// What checking one row found.
struct RowResult {
  std::string failure;
  std::vector<std::pair<std::string_view, std::string>> warnings;  // rule, reason
  Endpoint endpoint = Endpoint::kOther;
  Mode mode = Mode::kSynthesized;
  std::string_view session_id;      // non-empty when the row names a session
  bool has_timestamp = false;       // a non-null timestamp
  std::optional<double> timestamp;  // its value

  void Warn(std::string_view rule, std::string reason) {
    warnings.emplace_back(rule, std::move(reason));
  }
};

std::string EndpointWord(Endpoint e) { return std::string(EndpointName(e)); }

// A list of objects (AIPerf: list[dict[str, Any]]).
bool IsListOfObjects(element e) {
  array list;
  if (e.get(list) != simdjson::SUCCESS) return false;
  for (element x : list) {
    if (!x.is_object()) return false;
  }
  return true;
}

// A request body's 'messages' (when it has one) against what a server takes: a non-empty list
// of objects with a 'role'. Empty when it does; else why not.
std::string RequestShape(const Fields& body) {
  if (!body.Has(kMessages)) return {};
  auto m = body.Get(kMessages);
  array list;
  if (!m) return "its 'messages' is null";
  if (m->get(list) != simdjson::SUCCESS) return "its 'messages' is not a list";
  if (list.size() == 0) return "its 'messages' is empty";
  size_t i = 0;
  for (element x : list) {
    object o;
    if (x.get(o) != simdjson::SUCCESS || o.at_key("role").error() != simdjson::SUCCESS) {
      return "its 'messages'[" + std::to_string(i) + "] is not an object with a 'role'";
    }
    ++i;
  }
  return {};
}

void WarnDuplicate(const Fields& f, std::string_view where, RowResult* r) {
  if (f.duplicate.empty()) return;
  r->Warn("duplicate-key", std::string(where) + "'" + std::string(f.duplicate) +
                               "' is written twice: AIPerf loads the row with the last value, "
                               "llmtap's other tools read the first");
}

// A request body (a mooncake row's payload, a raw_payload row) against --endpoint-type.
void CheckBodyAgainstEndpoint(const Fields& body, std::optional<Endpoint> endpoint_type,
                              std::string_view what, RowResult* r) {
  if (std::string why = RequestShape(body); !why.empty()) {
    r->Warn("request-shape", std::string(what) + ": " + why +
                                 "; AIPerf loads it and sends it as it is, a server refuses it");
  }
  if (endpoint_type == Endpoint::kChat && !body.Has(kMessages)) {
    r->Warn("endpoint-mismatch", std::string(what) +
                                     " has no 'messages': AIPerf loads it and sends it as it is "
                                     "to the chat endpoint, which refuses it");
  }
  if (endpoint_type == Endpoint::kCompletions && !body.Has(kPrompt)) {
    r->Warn("endpoint-mismatch", std::string(what) +
                                     " has no 'prompt': AIPerf loads it and sends it as it is to "
                                     "the completions endpoint, which refuses it");
  }
}

constexpr int64_t kHashBlock = 512;  // AIPerf 0.11's block size for mooncake_trace files

// AIPerf's MooncakeTrace model (pydantic lax mode), then the Turn it becomes and the prompt it
// synthesizes (BaseTraceDatasetLoader, PromptGenerator._build_token_sequence).
void CheckMooncake(object row, const ValidateOptions& options, RowResult* r) {
  Fields f = ReadFields(row);
  auto fail = [&](std::string why) { r->failure = std::move(why); };

  if (f.Has(kType)) {
    std::string_view t;
    if (f.value[kType]->get(t) != simdjson::SUCCESS || t != "mooncake_trace") {
      return fail("'type' is " + Quoted(*f.value[kType]) +
                  ": AIPerf's mooncake_trace rows take only \"mooncake_trace\" there");
    }
  }
  std::vector<std::string> coerced;
  auto coerce_int = [&](Key k, IntValue* v) {
    auto e = f.Get(k);
    if (!e) return true;
    if (!CoerceInt(*e, v)) {
      fail("'" + std::string(kKeyNames[k]) + "' is " + Quoted(*e) +
           ": AIPerf needs an integer there (a number without a fraction, within 64 bits, or a "
           "string holding one)");
      return false;
    }
    if (v->coerced) coerced.push_back("'" + std::string(kKeyNames[k]) + "' " + Quoted(*e));
    return true;
  };
  auto coerce_number = [&](Key k, NumberValue* v) {
    auto e = f.Get(k);
    if (!e) return true;
    if (!CoerceNumber(*e, v)) {
      fail("'" + std::string(kKeyNames[k]) + "' is " + Quoted(*e) +
           ": AIPerf needs a number of milliseconds there (or a string holding one)");
      return false;
    }
    if (v->coerced) coerced.push_back("'" + std::string(kKeyNames[k]) + "' " + Quoted(*e));
    return true;
  };

  IntValue input_length, output_length;
  NumberValue timestamp, delay;
  if (!coerce_int(kInputLength, &input_length)) return;
  if (auto e = f.Get(kTextInput); e && !e->is_string()) {
    return fail("'text_input' is " + Quoted(*e) + ": AIPerf needs a string there");
  }
  if (auto e = f.Get(kMessages); e && !IsListOfObjects(*e)) {
    return fail("'messages' must be a list of objects");
  }
  if (auto e = f.Get(kTools); e && !IsListOfObjects(*e)) {
    return fail("'tools' must be a list of objects");
  }
  if (auto e = f.Get(kPayload); e && !e->is_object()) return fail("'payload' must be an object");
  if (!coerce_int(kOutputLength, &output_length)) return;
  size_t hash_count = 0;
  bool coerced_id = false;
  if (auto e = f.Get(kHashIds)) {
    array ids;
    if (e->get(ids) != simdjson::SUCCESS) return fail("'hash_ids' must be a list of integers");
    for (element id : ids) {
      IntValue v;
      if (!CoerceInt(id, &v)) {
        return fail("'hash_ids' holds " + Quoted(id) + ": AIPerf needs a list of integers");
      }
      if (v.coerced && !coerced_id) coerced.push_back("a hash id " + Quoted(id));
      coerced_id = coerced_id || v.coerced;
      ++hash_count;
    }
  }
  if (!coerce_number(kTimestamp, &timestamp)) return;
  if (!coerce_number(kDelay, &delay)) return;
  if (auto e = f.Get(kSessionId); e && !e->is_string()) {
    return fail("'session_id' is " + Quoted(*e) +
                ": AIPerf needs a string there (it does not turn numbers into ids)");
  }
  if (auto e = f.Get(kExtra); e && !e->is_object()) return fail("'extra' must be an object");

  // The model's validators.
  static constexpr Key kModes[] = {kInputLength, kTextInput, kMessages, kPayload};
  std::string present;
  int modes = 0;
  for (Key k : kModes) {
    if (f.Get(k)) {
      if (modes++ > 0) present += " and ";
      present.append("'").append(kKeyNames[k]).append("'");
    }
  }
  if (modes == 0) {
    return fail(
        "mooncake row without input: needs exactly one of 'input_length', "
        "'text_input', 'messages', 'payload'");
  }
  if (modes > 1) return fail("mooncake row has " + present + "; they are mutually exclusive");
  if (f.Get(kHashIds) && !f.Get(kInputLength)) {
    return fail("'hash_ids' is only allowed together with 'input_length'");
  }
  auto payload = f.Get(kPayload);
  if (payload && payload->get_object().value_unsafe().size() == 0) {
    return fail("'payload' must be a non-empty object");
  }
  auto messages = f.Get(kMessages);
  if (auto tools = f.Get(kTools)) {
    if (!messages) return fail("'tools' is only allowed together with 'messages'");
    if (tools->get_array().value_unsafe().size() == 0) {
      return fail("'tools' must be a non-empty list");
    }
  }
  if (messages) {
    array list = messages->get_array().value_unsafe();
    if (list.size() == 0) return fail("'messages' must be a non-empty list");
    size_t i = 0;
    for (element m : list) {
      if (m.get_object().value_unsafe().at_key("role").error() != simdjson::SUCCESS) {
        return fail("'messages'[" + std::to_string(i) + "] has no 'role'");
      }
      ++i;
    }
  }

  // The turn's metadata (DatasetManager): a delay of at least 0 (NaN is not).
  if (f.Get(kDelay) && !(delay.value >= 0)) {
    return fail("'delay' is " + Quoted(*f.Get(kDelay)) +
                ": AIPerf's turn metadata needs a delay of at least 0 milliseconds (delay_ms: "
                "Input should be greater than or equal to 0), and it refuses the whole file");
  }
  // The Turn: max_tokens >= 1.
  if (f.Get(kOutputLength) && !output_length.AtLeast(1)) {
    return fail("'output_length' is " + output_length.ToString() +
                ": AIPerf makes it the turn's max_tokens, which must be at least 1 (Turn "
                "max_tokens: Input should be greater than or equal to 1), and refuses the whole "
                "file");
  }
  // The synthesized prompt: hash_ids name 512-token blocks, the last one partial.
  if (hash_count > 0) {
    int64_t n = static_cast<int64_t>(hash_count);
    bool fits = input_length.big ? false
                                 : input_length.value > (n - 1) * kHashBlock &&
                                       input_length.value <= n * kHashBlock;
    if (!fits) {
      return fail("'input_length' " + input_length.ToString() + " with " + std::to_string(n) +
                  " hash_ids: AIPerf " + std::string(kValidateAIPerfVersion) +
                  " builds a mooncake_trace prompt from 512-token hash blocks (and refuses "
                  "--isl-block-size with --input-file), so " +
                  std::to_string(n) + " ids need an input_length above " +
                  std::to_string((n - 1) * kHashBlock) + " and at most " +
                  std::to_string(n * kHashBlock) +
                  "; a trace hashed with another block size does not load. AIPerf refuses the "
                  "whole file");
    }
  }

  // Passes. What it is, and the deliberate warnings.
  if (auto id = f.Get(kSessionId)) r->session_id = id->get_string().value_unsafe();
  r->has_timestamp = f.Get(kTimestamp).has_value();
  if (r->has_timestamp) r->timestamp = timestamp.value;
  WarnDuplicate(f, "", r);
  for (const std::string& c : coerced) {
    r->Warn("number-coerced", c + " is not a JSON number: AIPerf loads the row, reading it as "
                                  "pydantic converts it; llmtap's other tools take JSON numbers "
                                  "only");
  }
  if (r->has_timestamp && !std::isfinite(timestamp.value)) {
    r->Warn("not-finite",
            "'timestamp' is not a finite number: AIPerf loads the row, no "
            "schedule can place it");
  } else if (r->has_timestamp && timestamp.value < 0) {
    r->Warn("negative-timestamp",
            "'timestamp' is below 0: AIPerf loads the row and sends it at the start of the run "
            "unless --fixed-schedule-auto-offset; llmtap merge skips it");
  }
  if (f.Get(kDelay) && !std::isfinite(delay.value)) {
    r->Warn("not-finite",
            "'delay' is infinite: AIPerf loads the row, no schedule can place "
            "it");
  }
  if (payload) {
    r->mode = Mode::kPayload;
    Fields body = ReadFields(payload->get_object().value_unsafe());
    // The API the capture recorded, else the body's shape (RowEndpoint's rules).
    r->endpoint = RowEndpoint(row, TraceFormat::kMooncake);
    WarnDuplicate(body, "the payload's ", r);
    // A row of another API than the run's (chat against completions is checked by its body's
    // shape below, as before).
    if (options.endpoint_type && r->endpoint != *options.endpoint_type &&
        r->endpoint != Endpoint::kOther &&
        (!SessionEndpoints::IsChatOrCompletions(r->endpoint) ||
         !SessionEndpoints::IsChatOrCompletions(*options.endpoint_type))) {
      r->Warn("endpoint-mismatch",
              "a request of the " + EndpointWord(r->endpoint) + " API in a " +
                  EndpointWord(*options.endpoint_type) +
                  " run: AIPerf loads it and sends it as it is to that endpoint, which refuses "
                  "it (split gives each API its own file)");
    } else {
      CheckBodyAgainstEndpoint(body, options.endpoint_type, "the payload", r);
    }
  } else if (messages) {
    r->mode = Mode::kMessages;
    r->endpoint = Endpoint::kChat;
    if (options.endpoint_type == Endpoint::kCompletions) {
      r->Warn("endpoint-mismatch",
              "a 'messages' row in a completions run: AIPerf loads it, and the completions "
              "endpoint, which ignores 'messages', sends an empty prompt");
    }
  } else {
    r->mode = Mode::kSynthesized;
    r->endpoint = Endpoint::kAny;
  }
}

constexpr Key kMooncakeOnlyKeys[] = {kTimestamp, kPayload,      kInputLength, kTextInput,
                                     kHashIds,   kOutputLength, kDelay,       kSessionId};

// AIPerf's raw_payload loader (_validate_payload_shape): an object with a 'messages' list.
void CheckRaw(object row, const ValidateOptions& options, RowResult* r) {
  Fields f = ReadFields(row);
  std::string keys;
  for (Key k : kMooncakeOnlyKeys) {
    if (f.Has(k)) keys += (keys.empty() ? "'" : ", '") + std::string(kKeyNames[k]) + "'";
  }
  if (!f.Has(kMessages) || !f.value[kMessages]->is_array()) {
    std::string why =
        "raw_payload row without a 'messages' list: AIPerf's raw_payload loader "
        "needs one in every row (completions runs included)";
    if (f.Has(kPayload) || f.Has(kTimestamp)) {
      why +=
          "; it looks like a mooncake row ('payload'/'timestamp' keys): load the file as "
          "mooncake_trace";
    }
    r->failure = why;
    return;
  }
  if (options.fixed_schedule) {
    r->failure =
        "--fixed-schedule: AIPerf refuses it with a raw_payload file, whose rows carry "
        "no timestamps (First turn ... missing timestamp_ms)";
    return;
  }
  r->endpoint = RowEndpoint(row, TraceFormat::kRaw);  // chat, or messages by its shape
  WarnDuplicate(f, "", r);
  if (!keys.empty()) {
    r->Warn("raw-mooncake-keys", "mooncake_trace keys (" + keys +
                                     ") in a raw_payload row: AIPerf loads the row and sends them "
                                     "in the request body; load the file as mooncake_trace");
  }
  CheckBodyAgainstEndpoint(f, std::nullopt, "the request", r);
  if (options.endpoint_type == Endpoint::kCompletions) {
    r->Warn("endpoint-mismatch",
            "a chat request ('messages') in a completions run: AIPerf loads "
            "it and sends it as it is to the completions endpoint, which "
            "refuses it");
  }
}

// The rules AIPerf's mooncake_trace loader sets on the rows that share a session_id: one input
// mode (verbatim `payload` rows, `messages` rows, or synthesized `input_length`/`text_input`
// rows; a mix makes it refuse the whole file). One endpoint type is not its rule (it loads such
// a session, and sends every turn to the run's endpoint): a warning. Ids are not printed (they
// may name users): a session is named by the line of its first row.
class SessionRules {
 public:
  struct Outcome {
    bool first = true;  // the session's first row (or a row without a session)
    std::string failure;
    std::string warning;  // session-endpoint
  };
  Outcome Check(std::string_view id, Endpoint endpoint, Mode mode, uint64_t line) {
    Outcome out;
    if (id.empty()) return out;
    ++rows_;
    auto [s, added] = sessions_.Add(id, endpoint, line, static_cast<uint8_t>(mode));
    if (added) return out;
    out.first = false;
    std::string where = "session_id of line " + std::to_string(s->first_line);
    Mode first_mode = static_cast<Mode>(s->tag);
    if (first_mode != mode) {
      out.failure = where + " has " + ModeName(first_mode) + " rows, this is a " + ModeName(mode) +
                    " row: AIPerf refuses a session that mixes input modes (the whole file)";
      return out;
    }
    if (!SessionEndpoints::IsChatOrCompletions(s->endpoint) &&
        SessionEndpoints::IsChatOrCompletions(endpoint)) {
      s->endpoint = endpoint;  // the first row that says which
    } else if (SessionEndpoints::Breaks(s->endpoint, endpoint)) {
      out.warning = where + " is a " + EndpointWord(s->endpoint) + " session and this is a " +
                    EndpointWord(endpoint) +
                    " request: AIPerf loads it and sends every turn to the run's one endpoint "
                    "type, which refuses the other kind";
    }
    return out;
  }
  uint64_t sessions() const { return sessions_.size(); }
  uint64_t rows() const { return rows_; }

 private:
  static std::string ModeName(Mode m) {
    return m == Mode::kPayload ? "'payload'" : m == Mode::kMessages ? "'messages'" : "synthesized";
  }
  SessionEndpoints sessions_;
  uint64_t rows_ = 0;
};

// How AIPerf schedules a mooncake_trace file: on its timestamps (FixedScheduleStrategy) with
// --fixed-schedule or when the first row has a timestamp (the CLI's trace auto-promotion).
enum class Schedule { kUndecided, kFixedFlag, kFixedFirstRow, kRate };

class Validator {
 public:
  Validator(const ValidateOptions& options, ValidateReport* r) : options_(options), r_(r) {
    resolver_.InitFor(options.path, options.format, &r->warnings, " (format taken from the rows)");
    if (options.fixed_schedule) schedule_ = Schedule::kFixedFlag;
    // With --endpoint-type the run's API is chosen; else a row may be a guess.
    guess_apis_ = !options.endpoint_type;
    apis_ = ApiRecord::For(options.path);
  }

  const ApiRecord& apis() const { return apis_; }

  void Line(const llmtap::trace::Line& line, const ParsedRow& parsed) {
    std::vector<std::pair<std::string_view, std::string>> warnings;
    std::string failure;
    bool fast = parsed.status == ParseStatus::kOk && !parsed.big_integers && !parsed.deep &&
                !(resolver_.format() != TraceFormat::kRaw &&
                  line.bytes.find('\r') != std::string_view::npos);
    if (fast) {
      ++r_->rows;
      Row(parsed.object, line.number, &failure, &warnings);
    } else {
      TraceFormat format = resolver_.format();
      AIPerfLine pieces = ReadAsAIPerf(line.bytes, format);
      if (pieces.rows.empty()) {  // blank to AIPerf
        ++r_->blank;
        AddWarning(line.number, "line-whitespace",
                   "a line of whitespace JSON does not allow: AIPerf loads the file, skipping "
                   "the line as blank; llmtap's other tools cannot read the line");
        return;
      }
      if (pieces.odd_whitespace) {
        warnings.emplace_back("line-whitespace",
                              "whitespace JSON does not allow at the ends of the line: AIPerf "
                              "loads the row once it strips it; llmtap's other tools cannot "
                              "read the line");
      }
      ++r_->rows;
      if (pieces.rows.size() > 1) {
        warnings.emplace_back("line-split",
                              "a carriage return splits the line: AIPerf loads " +
                                  std::to_string(pieces.rows.size()) +
                                  " rows from it (a mooncake_trace file is read as text); "
                                  "llmtap's other tools read one line");
      }
      for (std::string_view text : pieces.rows) {
        const ParsedRow& piece = slow_parser_.Parse(text);
        if (piece.status != ParseStatus::kOk) {
          failure = piece.error;
          if (line.torn) {
            failure =
                "torn last line (no trailing newline; the capture was cut mid-write): " + failure;
          }
          NoteFirstRow(nullptr);
          break;
        }
        const bool big = piece.big_integers, deep = piece.deep;
        object obj = piece.object;
        if (big) {
          warnings.emplace_back("big-integer",
                                "an integer beyond 64 bits: AIPerf loads the row, reading it as "
                                "a float, and sends the float; llmtap replay sends the digits");
        }
        if (deep) {
          warnings.emplace_back("deep-nesting",
                                "nested deeper than 1024 levels: AIPerf loads it, but its "
                                "worker cannot send a request nested deeper than 254");
        }
        Row(obj, line.number, &failure, &warnings);
        if (!failure.empty()) break;
      }
    }
    if (!failure.empty()) {
      r_->failures.Add(line.number, std::move(failure));
      return;
    }
    ++r_->passed;
    if (!warnings.empty()) ++r_->warned;
    for (auto& [rule, why] : warnings) AddWarning(line.number, rule, std::move(why));
  }

  void Finish() {
    r_->sessions = sessions_.sessions();
    r_->session_rows = sessions_.rows();
    r_->format = resolver_.format();
    r_->format_source = resolver_.source();
    if (r_->format != TraceFormat::kRaw) {
      r_->schedule = schedule_ == Schedule::kFixedFlag       ? "fixed (--fixed-schedule)"
                     : schedule_ == Schedule::kFixedFirstRow ? "fixed (its first row has a "
                                                               "timestamp)"
                     : schedule_ == Schedule::kRate          ? "rate (its first row has no "
                                                               "timestamp)"
                                                             : "";
    }
    if (schedule_ == Schedule::kRate && timestamped_rows_ > 0 && r_->format != TraceFormat::kRaw) {
      r_->warnings.push_back(
          std::to_string(timestamped_rows_) +
          " rows have a timestamp, but the first row has none: AIPerf does not replay this file "
          "on its timestamps (it sends at the run's rate or concurrency) unless --fixed-schedule, "
          "which needs one on every session's first row");
    }
  }

 private:
  void AddWarning(uint64_t line, std::string_view rule, std::string reason) {
    ++r_->row_warnings_total;
    ++r_->warning_rules[std::string(rule)];
    if (r_->row_warnings.size() < r_->failures.limit) {
      r_->row_warnings.push_back({line, std::string(rule), std::move(reason)});
    }
  }

  // The first row AIPerf reads decides the schedule (null: it is not a JSON object).
  void NoteFirstRow(const object* row) {
    if (schedule_ != Schedule::kUndecided) return;
    schedule_ = Schedule::kRate;
    if (row && resolver_.format() == TraceFormat::kMooncake) {
      Fields f = ReadFields(*row);
      if (f.Get(kTimestamp)) schedule_ = Schedule::kFixedFirstRow;
    }
  }

  void Row(object row, uint64_t line, std::string* failure,
           std::vector<std::pair<std::string_view, std::string>>* warnings) {
    TraceFormat format = resolver_.Resolve(row);
    NoteFirstRow(&row);
    RowResult res;
    if (format == TraceFormat::kRaw) {
      CheckRaw(row, options_, &res);
    } else {
      CheckMooncake(row, options_, &res);
    }
    r_->endpoints[EndpointWord(apis_.Resolve(RowEndpoint(row, format), line))]++;
    if (guess_apis_ && apis_.Guesses(line)) r_->chat_or_messages.Note(row, format, line);
    if (!res.failure.empty()) {
      *failure = std::move(res.failure);
      return;
    }
    if (format != TraceFormat::kRaw) {
      SessionRules::Outcome s = sessions_.Check(res.session_id, res.endpoint, res.mode, line);
      if (!s.failure.empty()) {
        *failure = std::move(s.failure);
        return;
      }
      bool fixed = schedule_ == Schedule::kFixedFlag || schedule_ == Schedule::kFixedFirstRow;
      if (fixed && s.first && !res.has_timestamp) {
        *failure =
            std::string(
                "no 'timestamp' on the first row of a session (a row without a "
                "session_id is a session of its own): AIPerf replays this file "
                "on its timestamps (") +
            (schedule_ == Schedule::kFixedFlag ? "--fixed-schedule" : "its first row has one") +
            ") and refuses it (First turn ... missing timestamp_ms)";
        return;
      }
      if (!s.warning.empty()) res.Warn("session-endpoint", std::move(s.warning));
      if (res.has_timestamp) {
        ++timestamped_rows_;
        double ts = *res.timestamp;
        if (last_ts_ && ts < *last_ts_) {
          std::string t, p;
          AppendNumber(ts, &t);
          AppendNumber(*last_ts_, &p);
          res.Warn("timestamp-order", "timestamp " + t + " is lower than " + p + " on line " +
                                          std::to_string(last_ts_line_) +
                                          ": AIPerf loads it (it orders the sessions' first "
                                          "rows by timestamp); llmtap merge skips such rows");
        } else if (std::isfinite(ts)) {
          last_ts_ = ts;
          last_ts_line_ = line;
        }
      }
    }
    for (auto& w : res.warnings) warnings->push_back(std::move(w));
  }

  const ValidateOptions& options_;
  ValidateReport* r_;
  FormatResolver resolver_;
  SessionRules sessions_;
  PieceParser slow_parser_;
  Schedule schedule_ = Schedule::kUndecided;
  std::optional<double> last_ts_;
  uint64_t last_ts_line_ = 0;
  uint64_t timestamped_rows_ = 0;
  bool guess_apis_ = false;  // no --endpoint-type: a row's API may be a guess
  ApiRecord apis_;           // what the manifest says of the rows' APIs
};

}  // namespace

std::span<const ValidateWarningRule> ValidateWarningRules() { return kWarningRules; }

ValidateReport ValidateTrace(const ValidateOptions& options) {
  ValidateReport r;
  r.path = options.path;
  r.endpoint_type = options.endpoint_type;
  r.failures.limit = options.max_failures;
  Validator validator(options, &r);
  // Blank lines are counted by the scanner; lines blank only to AIPerf by the validator.
  RowScanner scanner(
      "validate", options.progress,
      {.lines = &r.lines, .blank = &r.blank, .torn_tail = &r.torn_tail, .crlf = &r.crlf});
  r.io = scanner.Open(options.path);
  if (!r.io.ok()) return r;
  Line line;
  while (scanner.Next(&line)) validator.Line(line, scanner.row());
  if (Status read = scanner.Finish(); !read.ok()) r.io = read;
  validator.Finish();
  if (r.torn_tail) r.warnings.push_back("the last line has no trailing newline");
  if (r.crlf > 0) {
    r.warnings.push_back(std::to_string(r.crlf) + " lines end in CRLF (accepted)");
  }
  // The APIs a run of one --endpoint-type cannot all reach (rows for any endpoint, and those
  // of no known API, left out): "chat (2) and completions (2)", "a (1), b (2), c (3)".
  std::vector<std::string> apis;
  for (const auto& [name, n] : r.endpoints) {
    if (n > 0 && name != EndpointName(Endpoint::kOther) && name != EndpointName(Endpoint::kAny)) {
      apis.push_back(name + " (" + std::to_string(n) + ")");
    }
  }
  if (!options.endpoint_type && apis.size() > 1) {
    std::string mixed = apis[0];
    for (size_t i = 1; i < apis.size(); ++i) {
      mixed += (apis.size() == 2 ? " and " : ", ") + apis[i];
    }
    r.warnings.push_back("the file mixes " + mixed +
                         " requests; AIPerf replays one endpoint type per run: use `llmtap "
                         "split " +
                         r.path + "`");
  }
  if (std::string w =
          r.chat_or_messages.Warning("counted and read as chat", validator.apis().Note());
      !w.empty()) {
    r.warnings.push_back(std::move(w));
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
  for (const ValidateReport::RowWarning& w : r.row_warnings) {
    out += Located(r.path, w.line, "warning (" + w.rule + "): " + w.reason) + "\n";
  }
  if (r.row_warnings_total > r.row_warnings.size()) {
    out += "... " + std::to_string(r.row_warnings_total - r.row_warnings.size()) +
           " more row warnings not shown (--max-errors)\n";
  }
  const std::string aiperf = "AIPerf " + std::string(kValidateAIPerfVersion);
  out += r.path + ": " + std::string(TraceFormatName(r.format)) + " (format from " +
         r.format_source + "), checked with the rules of " + aiperf;
  if (r.endpoint_type) out += ", endpoint type " + std::string(EndpointName(*r.endpoint_type));
  out += "\n  " + std::to_string(r.rows) + " rows: " + std::to_string(r.passed) + " pass";
  if (r.warned) out += " (" + std::to_string(r.warned) + " with a warning)";
  out += ", " + std::to_string(r.failed()) + " fail";
  if (r.blank) out += "; " + std::to_string(r.blank) + " blank lines skipped";
  out += "\n  requests:";
  for (const auto& [k, v] : r.endpoints) out += " " + k + " " + std::to_string(v);
  if (!r.schedule.empty()) out += "\n  schedule: " + r.schedule;
  if (r.sessions > 0) {
    out += "\n  sessions: " + std::to_string(r.sessions) + " (" + std::to_string(r.session_rows) +
           " rows with a session_id; AIPerf sends each session's rows one after another)";
  }
  if (!r.warning_rules.empty()) {
    out += "\n  row warnings (AIPerf loads these rows; see --help):";
    for (const auto& [k, v] : r.warning_rules) out += " " + k + " " + std::to_string(v);
  }
  out += "\n";
  out += r.ok()
             ? "OK: every row would load in " + aiperf + "\n"
             : "FAILED: " + std::to_string(r.failed()) + " rows would not load in " + aiperf + "\n";
  return out;
}

std::string RenderValidateJson(const ValidateReport& r) {
  nlohmann::ordered_json j;
  j["file"] = r.path;
  j["ok"] = r.ok();
  if (!r.io.ok()) j["error"] = r.io.ToString();
  j["aiperf_version"] = kValidateAIPerfVersion;
  j["format"] = TraceFormatName(r.format);
  j["format_source"] = r.format_source;
  j["endpoint_type"] = r.endpoint_type ? nlohmann::ordered_json(EndpointName(*r.endpoint_type))
                                       : nlohmann::ordered_json(nullptr);
  j["schedule"] = r.schedule;
  j["lines"] = r.lines;
  j["rows"] = r.rows;
  j["passed"] = r.passed;
  j["warned"] = r.warned;
  j["failed"] = r.failed();
  j["blank_lines"] = r.blank;
  j["crlf_lines"] = r.crlf;
  j["torn_tail"] = r.torn_tail;
  j["endpoints"] = r.endpoints;
  j["chat_or_messages_rows"] = r.chat_or_messages.rows;
  j["sessions"] = r.sessions;
  j["session_rows"] = r.session_rows;
  auto& fails = j["failures"] = nlohmann::ordered_json::array();
  for (const LineFailure& f : r.failures.kept)
    fails.push_back({{"line", f.line}, {"reason", f.reason}});
  j["failures_not_listed"] = r.failures.total - r.failures.kept.size();
  auto& warns = j["row_warnings"] = nlohmann::ordered_json::array();
  for (const ValidateReport::RowWarning& w : r.row_warnings)
    warns.push_back({{"line", w.line}, {"rule", w.rule}, {"reason", w.reason}});
  j["row_warnings_not_listed"] = r.row_warnings_total - r.row_warnings.size();
  j["warning_rules"] = r.warning_rules;
  j["warnings"] = r.warnings;
  return j.dump(2, ' ', false, nlohmann::ordered_json::error_handler_t::replace) + "\n";
}

}  // namespace llmtap::trace
