#include "trace/record.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstring>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define LLMTAP_X86 1
#endif

#include "capture/json_compact.h"

namespace llmtap::trace {

std::string_view TraceFormatName(TraceFormat format) {
  switch (format) {
    case TraceFormat::kMooncake:
      return "mooncake_trace";
    case TraceFormat::kRaw:
      return "raw_payload";
    case TraceFormat::kUnknown:
      break;
  }
  return "unknown";
}

std::optional<TraceFormat> ParseTraceFormat(std::string_view name) {
  if (name == "mooncake_trace" || name == "mooncake_payload" || name == "mooncake") {
    return TraceFormat::kMooncake;
  }
  if (name == "raw_payload" || name == "raw") return TraceFormat::kRaw;
  return std::nullopt;
}

namespace {

bool Has(simdjson::dom::object obj, std::string_view key) {
  return obj.at_key(key).error() == simdjson::SUCCESS;
}

// Present and not null (AIPerf's models treat an explicit null as absent).
bool HasNonNull(simdjson::dom::object obj, std::string_view key) {
  auto v = obj.at_key(key);
  return v.error() == simdjson::SUCCESS && !v.value_unsafe().is_null();
}

}  // namespace

TraceFormat RowFormat(simdjson::dom::object row) {
  static constexpr std::string_view kMooncakeKeys[] = {"timestamp",  "payload",   "input_length",
                                                       "text_input", "hash_ids",  "output_length",
                                                       "delay",      "session_id"};
  // Captured rows start with "timestamp"; check the first key before a full search.
  for (auto field : row) {
    for (std::string_view k : kMooncakeKeys) {
      if (field.key == k) return TraceFormat::kMooncake;
    }
  }
  return TraceFormat::kRaw;
}

std::optional<simdjson::dom::object> RowRequest(simdjson::dom::object row, TraceFormat format) {
  if (format == TraceFormat::kRaw) return row;
  simdjson::dom::object payload;
  if (row.at_key("payload").get(payload) == simdjson::SUCCESS) return payload;
  return std::nullopt;
}

// A `messages` list holds a block only Anthropic's Messages API has: tool_use, tool_result,
// thinking, redacted_thinking, document, or an image given by "source" (chat's is image_url).
static bool HasMessagesOnlyBlock(simdjson::dom::object request) {
  simdjson::dom::array messages;
  if (request["messages"].get(messages) != simdjson::SUCCESS) return false;
  for (simdjson::dom::element m : messages) {
    simdjson::dom::array blocks;
    if (m["content"].get(blocks) != simdjson::SUCCESS) continue;  // a string: either API
    for (simdjson::dom::element b : blocks) {
      std::string_view type;
      if (b["type"].get(type) != simdjson::SUCCESS) continue;
      if (type == "tool_use" || type == "tool_result" || type == "thinking" ||
          type == "redacted_thinking" || type == "document" ||
          (type == "image" && Has(b.get_object().value_unsafe(), "source"))) {
        return true;
      }
    }
  }
  return false;
}

static Endpoint RequestEndpoint(simdjson::dom::object request) {
  if (Has(request, "messages")) {
    // Keys and blocks only Anthropic's Messages API has; anything else is read as chat.
    for (const char* key : {"system", "anthropic_version", "stop_sequences"}) {
      if (Has(request, key)) return Endpoint::kMessages;
    }
    return HasMessagesOnlyBlock(request) ? Endpoint::kMessages : Endpoint::kChat;
  }
  if (Has(request, "prompt")) return Endpoint::kCompletions;
  if (Has(request, "query") && Has(request, "documents")) return Endpoint::kRerank;
  if (Has(request, "input")) {
    for (const char* key :
         {"instructions", "previous_response_id", "max_output_tokens", "tools", "reasoning"}) {
      if (Has(request, key)) return Endpoint::kResponses;
    }
    if (Has(request, "encoding_format") || Has(request, "dimensions")) {
      return Endpoint::kEmbeddings;
    }
  }
  return Endpoint::kOther;
}

Endpoint RowEndpoint(simdjson::dom::object row, TraceFormat format) {
  if (format == TraceFormat::kMooncake) {
    std::string_view type;
    if (row["endpoint_type"].get(type) == simdjson::SUCCESS) {
      if (std::optional<Endpoint> e = api::EndpointForType(type)) return *e;
    }
  }
  if (auto request = RowRequest(row, format)) return RequestEndpoint(*request);
  if (HasNonNull(row, "messages")) return Endpoint::kChat;
  if (HasNonNull(row, "input_length") || HasNonNull(row, "text_input")) return Endpoint::kAny;
  return Endpoint::kOther;
}

// Whether a request read as chat is also, key for key, one Anthropic's Messages API takes: every
// top-level key one both APIs define (max_tokens, which Messages requires, among them), every
// message a user or assistant turn holding a string or text blocks only, tools and tool_choice
// absent. One key or block the other API lacks (n, stop, seed, a system-role message, an
// image_url block...) decides it; so does a Messages-only one, before this is asked.
static bool ChatBodyIsAlsoMessages(simdjson::dom::object request) {
  if (!Has(request, "max_tokens")) return false;
  static constexpr std::string_view kShared[] = {"model",  "messages",    "max_tokens",
                                                 "stream", "temperature", "top_p",
                                                 "top_k",  "metadata",    "service_tier"};
  for (auto field : request) {
    if (std::find(std::begin(kShared), std::end(kShared), field.key) == std::end(kShared)) {
      return false;
    }
  }
  simdjson::dom::array messages;
  if (request["messages"].get(messages) != simdjson::SUCCESS) return false;
  for (simdjson::dom::element m : messages) {
    simdjson::dom::object turn;
    if (m.get(turn) != simdjson::SUCCESS) return false;
    for (auto field : turn) {
      if (field.key != "role" && field.key != "content") return false;
    }
    std::string_view role;
    if (turn["role"].get(role) != simdjson::SUCCESS || (role != "user" && role != "assistant")) {
      return false;
    }
    simdjson::dom::element content;
    if (turn["content"].get(content) != simdjson::SUCCESS) return false;
    if (content.is_string()) continue;
    simdjson::dom::array blocks;
    if (content.get(blocks) != simdjson::SUCCESS) return false;
    for (simdjson::dom::element b : blocks) {
      std::string_view type;
      if (b["type"].get(type) != simdjson::SUCCESS || type != "text") return false;
    }
  }
  return true;
}

bool RowChatOrMessages(simdjson::dom::object row, TraceFormat format) {
  if (format == TraceFormat::kMooncake && Has(row, "endpoint_type")) return false;
  std::optional<simdjson::dom::object> request = RowRequest(row, format);
  return request && RequestEndpoint(*request) == Endpoint::kChat &&
         ChatBodyIsAlsoMessages(*request);
}

std::string ChatOrMessagesRows::Warning(std::string_view taken_as, std::string_view note) const {
  if (rows == 0) return "";
  return std::to_string(rows) + (rows == 1 ? " row" : " rows") + " (the first on line " +
         std::to_string(first_line) +
         ") could be chat or Anthropic Messages requests (no endpoint_type, and nothing in them "
         "only one of the two APIs takes)" +
         std::string(note) + ": " + std::string(taken_as) +
         "; if they were sent to /v1/messages, give them \"endpoint_type\":\"messages\" (a "
         "mooncake_trace row; llmtap's capture writes it)";
}

std::optional<double> RowTimestamp(simdjson::dom::object row) {
  auto v = row.at_key("timestamp");
  if (v.error() != simdjson::SUCCESS) return std::nullopt;
  double d;
  if (v.value_unsafe().get_double().get(d) != simdjson::SUCCESS) return std::nullopt;
  return d;
}

std::string_view TrimJsonWhitespace(std::string_view s) {
  auto ws = [](char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; };
  while (!s.empty() && ws(s.front())) s.remove_prefix(1);
  while (!s.empty() && ws(s.back())) s.remove_suffix(1);
  return s;
}

const ParsedRow& RowParser::Parse(std::string_view line) {
  row_.error.clear();
  row_.deep = false;
  row_.big_integers = false;
  row_.text = line;
  if (TrimJsonWhitespace(line).empty()) {
    row_.status = ParseStatus::kBlank;
    return row_;
  }
  simdjson::dom::element root;
  simdjson::error_code err = parser_.parse(line.data(), line.size(), false).get(root);
  if (err == simdjson::DEPTH_ERROR) {
    // orjson reads any depth: a parser as deep as the line could nest (kept for later rows).
    if (parser_.allocate(std::max(line.size(), parser_.capacity()), line.size() / 2 + 2) ==
        simdjson::SUCCESS) {
      err = parser_.parse(line.data(), line.size(), false).get(root);
      row_.deep = err != simdjson::DEPTH_ERROR;
    }
  }
  if ((err == simdjson::NUMBER_ERROR || err == simdjson::NUMBER_OUT_OF_RANGE) &&
      WidenBigIntegers(line, &widened_)) {
    // AIPerf reads such an integer as a float and loads the row: so does every tool here.
    const size_t size = widened_.size();
    widened_.append(LineReader::kPadding, ' ');
    row_.text = std::string_view(widened_).substr(0, size);
    err = parser_.parse(row_.text.data(), row_.text.size(), false).get(root);
    row_.big_integers = err == simdjson::SUCCESS;
    if (!row_.big_integers) row_.text = line;
  }
  if (err != simdjson::SUCCESS) {
    if (err == simdjson::NUMBER_ERROR || err == simdjson::NUMBER_OUT_OF_RANGE) {
      std::string scratch;
      if (CompactJsonReference(line, &scratch) == CompactError::kOk) {
        row_.status = ParseStatus::kNumberOutOfRange;
        row_.error =
            "holds a number no double can hold (like 1e400); AIPerf's JSON parser (orjson) "
            "refuses the row too";
        return row_;
      }
    }
    row_.status = ParseStatus::kInvalidJson;
    row_.error = std::string("invalid JSON: ") + simdjson::error_message(err);
    return row_;
  }
  if (root.get(row_.object) != simdjson::SUCCESS) {
    row_.status = ParseStatus::kNotObject;
    row_.error = "not a JSON object";
    return row_;
  }
  row_.status = ParseStatus::kOk;
  return row_;
}

bool WidenBigIntegers(std::string_view line, std::string* out) {
  out->clear();
  bool any = false;
  size_t copied = 0;
  size_t i = 0;
  while (i < line.size()) {
    const char c = line[i];
    if (c == '"') {  // a string: skip it, escapes included
      for (++i; i < line.size() && line[i] != '"'; ++i) {
        if (line[i] == '\\') ++i;
      }
      ++i;
      continue;
    }
    if (c != '-' && (c < '0' || c > '9')) {
      ++i;
      continue;
    }
    size_t end = i + (c == '-' ? 1 : 0);
    while (end < line.size() && line[end] >= '0' && line[end] <= '9') ++end;
    const bool integer =
        end == line.size() || (line[end] != '.' && line[end] != 'e' && line[end] != 'E');
    size_t next = end;  // past the whole number (fraction and exponent too)
    while (next < line.size() &&
           (line[next] == '.' || line[next] == 'e' || line[next] == 'E' || line[next] == '+' ||
            line[next] == '-' || (line[next] >= '0' && line[next] <= '9'))) {
      ++next;
    }
    if (integer && end > i + (c == '-' ? 1 : 0)) {
      bool fits;
      if (c == '-') {
        int64_t v;
        fits = std::from_chars(line.data() + i, line.data() + end, v).ec == std::errc();
      } else {
        uint64_t v;
        fits = std::from_chars(line.data() + i, line.data() + end, v).ec == std::errc();
      }
      if (!fits) {
        out->append(line.substr(copied, end - copied));
        out->append(".0");
        copied = end;
        any = true;
      }
    }
    i = next;
  }
  if (!any) return false;
  out->append(line.substr(copied));
  return true;
}

namespace {

bool IsWs(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

// `s[i]` is '"'; returns the index one past the closing quote.
size_t SkipString(std::string_view s, size_t i) {
  ++i;
  while (i < s.size()) {
    char c = s[i];
    if (c == '\\') {
      i += 2;
    } else if (c == '"') {
      return i + 1;
    } else {
      ++i;
    }
  }
  return s.size();
}

size_t SkipValue(std::string_view s, size_t i) {
  if (i >= s.size()) return i;
  char c = s[i];
  if (c == '"') return SkipString(s, i);
  if (c == '{' || c == '[') {
    int depth = 0;
    while (i < s.size()) {
      c = s[i];
      if (c == '"') {
        i = SkipString(s, i);
        continue;
      }
      if (c == '{' || c == '[') ++depth;
      if (c == '}' || c == ']') {
        if (--depth == 0) return i + 1;
      }
      ++i;
    }
    return i;
  }
  while (i < s.size() && s[i] != ',' && s[i] != '}' && s[i] != ']' && !IsWs(s[i])) ++i;
  return i;
}

size_t SkipWs(std::string_view s, size_t i) {
  while (i < s.size() && IsWs(s[i])) ++i;
  return i;
}

}  // namespace

std::optional<Span> FindTopLevelValue(std::string_view line, std::string_view key) {
  size_t i = SkipWs(line, 0);
  if (i >= line.size() || line[i] != '{') return std::nullopt;
  ++i;
  for (;;) {
    i = SkipWs(line, i);
    if (i >= line.size() || line[i] != '"') return std::nullopt;
    size_t key_end = SkipString(line, i);
    std::string_view k = line.substr(i + 1, key_end - i - 2);
    i = SkipWs(line, key_end);
    if (i >= line.size() || line[i] != ':') return std::nullopt;
    i = SkipWs(line, i + 1);
    size_t value_end = SkipValue(line, i);
    if (k == key) return Span{i, value_end};
    i = SkipWs(line, value_end);
    if (i >= line.size() || line[i] != ',') return std::nullopt;
    ++i;
  }
}

std::optional<Span> FindSessionId(std::string_view line) {
  static constexpr std::string_view kKey = ",\"session_id\":";
  // A valid object ending in `"}` has a string as its last value: scanning back, the first
  // quote not escaped (an even run of backslashes before it) opens that string.
  if (line.ends_with("\"}") && line.size() >= kKey.size() + 4) {
    size_t close = line.size() - 2;
    for (size_t i = close; i-- > 0;) {
      if (line[i] != '"') continue;
      size_t backslashes = 0;
      while (backslashes < i && line[i - 1 - backslashes] == '\\') ++backslashes;
      if (backslashes % 2 != 0) continue;
      if (i >= kKey.size() && line.substr(i - kKey.size(), kKey.size()) == kKey) {
        if (close == i + 1) return std::nullopt;  // ""
        return Span{i, close + 1};
      }
      break;
    }
  }
  if (line.find("\"session_id\"") == std::string_view::npos) return std::nullopt;
  std::optional<Span> span = FindTopLevelValue(line, "session_id");
  if (!span || span->end - span->begin < 3 || line[span->begin] != '"') return std::nullopt;
  return span;
}

void AppendNumber(double value, std::string* out) {
  char buf[64];
  std::to_chars_result r;
  if (std::isfinite(value) && std::trunc(value) == value && std::fabs(value) < 9.0e15) {
    r = std::to_chars(buf, buf + sizeof(buf), static_cast<int64_t>(value));
  } else {
    r = std::to_chars(buf, buf + sizeof(buf), value);
  }
  out->append(buf, r.ptr);
}

bool AppendWithTimestamp(std::string_view line, double timestamp, std::string* out) {
  std::optional<Span> span;
  static constexpr std::string_view kPrefix = "{\"timestamp\":";
  if (line.starts_with(kPrefix)) {
    // The captured layout: the number follows directly.
    size_t end = SkipValue(line, kPrefix.size());
    span = Span{kPrefix.size(), end};
  } else {
    span = FindTopLevelValue(line, "timestamp");
  }
  if (!span) return false;
  out->append(line.data(), span->begin);
  AppendNumber(timestamp, out);
  out->append(line.data() + span->end, line.size() - span->end);
  return true;
}

namespace {

// MatchCaptureRow's scan for what the parser could refuse in JSON the capture's validator
// accepted, 64 bytes at a time: a mask per kind of byte (bit i: byte i of the block), where
// strings are (as simdjson finds them: quotes not escaped by an odd run of backslashes), and
// what crosses a block boundary carried over. Numbers are looked at outside strings only.
constexpr unsigned kDigitRun = 19;    // 2^64 has 20 digits, -2^63 19
constexpr size_t kMaxOpeners = 1000;  // simdjson's DOM parser takes 1024 levels

struct Masks {
  uint64_t digit = 0;      // 0-9
  uint64_t e = 0;          // e E
  uint64_t backslash = 0;  // a backslash
  uint64_t quote = 0;      // "
  uint64_t u = 0;          // u
  uint64_t d = 0;          // d D
  uint64_t opener = 0;     // { [
};

struct ScanState {
  uint64_t odd_backslash = 0;   // bit 0: the previous block ended in an odd run of backslashes
  uint64_t in_string = 0;       // all ones: the previous block ended inside a string
  uint64_t prev_digit = 0;      // bit 0: its last byte was a digit outside strings
  uint64_t prev_escaped_u = 0;  // bit 0: its last byte was an escaped 'u'
  unsigned run = 0;             // digits outside strings ending it
  size_t openers = 0;
};

inline uint64_t PrefixXor(uint64_t x) {
  x ^= x << 1;
  x ^= x << 2;
  x ^= x << 4;
  x ^= x << 8;
  x ^= x << 16;
  x ^= x << 32;
  return x;
}

// True when the block holds something to leave to the parser.
template <uint64_t (*kPrefixXor)(uint64_t) = PrefixXor>
inline bool Risky(const Masks& m, ScanState* s) {
  // Bytes escaped by a backslash (simdjson's odd-backslash-run method).
  constexpr uint64_t kEven = 0x5555555555555555ULL, kOdd = ~kEven;
  const uint64_t bs = m.backslash;
  const uint64_t start_edges = bs & ~(bs << 1);
  const uint64_t even_start_mask = kEven ^ s->odd_backslash;
  const uint64_t even_starts = start_edges & even_start_mask;
  const uint64_t odd_starts = start_edges & ~even_start_mask;
  const uint64_t even_carries = bs + even_starts;
  uint64_t odd_carries;
  const bool ends_odd = __builtin_add_overflow(bs, odd_starts, &odd_carries);
  odd_carries |= s->odd_backslash;
  s->odd_backslash = ends_odd ? 1 : 0;
  const uint64_t escaped = ((even_carries & ~bs) & kOdd) | ((odd_carries & ~bs) & kEven);
  const uint64_t quote = m.quote & ~escaped;
  const uint64_t in_string = kPrefixXor(quote) ^ s->in_string;
  s->in_string = static_cast<uint64_t>(static_cast<int64_t>(in_string) >> 63);

  // \uD...: a surrogate (lone ones are refused), or close to one.
  const uint64_t escaped_u = escaped & m.u;
  if ((m.d & ((escaped_u << 1) | s->prev_escaped_u)) != 0) return true;
  s->prev_escaped_u = escaped_u >> 63;

  // An exponent: 'e' right after a digit outside strings.
  const uint64_t digit = m.digit & ~in_string;
  if ((m.e & ~in_string & ((digit << 1) | s->prev_digit)) != 0) return true;
  s->prev_digit = digit >> 63;
  // A long run of digits outside strings.
  if (digit == ~uint64_t{0}) {
    s->run += 64;
    if (s->run >= kDigitRun) return true;
  } else {
    if (s->run + static_cast<unsigned>(__builtin_ctzll(~digit)) >= kDigitRun) return true;
    // Bit i of y: bytes i..i+18 are all digits (runs reaching the block's end are counted by
    // `run`).
    uint64_t y = digit & (digit >> 1);
    y &= y >> 2;
    y &= y >> 4;
    y &= y >> 8;
    y &= y >> 3;
    if (y != 0) return true;
    s->run = static_cast<unsigned>(__builtin_clzll(~digit));
  }
  s->openers += static_cast<size_t>(__builtin_popcountll(m.opener & ~in_string));
  return s->openers >= kMaxOpeners;
}

Masks ScalarMasks(const char* p) {
  Masks m;
  for (int i = 0; i < 64; ++i) {
    const unsigned char c = static_cast<unsigned char>(p[i]);
    const uint64_t bit = uint64_t{1} << i;
    if (c >= '0' && c <= '9') m.digit |= bit;
    if ((c | 0x20) == 'e') m.e |= bit;
    if (c == '\\') m.backslash |= bit;
    if (c == '"') m.quote |= bit;
    if (c == 'u') m.u |= bit;
    if ((c | 0x20) == 'd') m.d |= bit;
    if ((c | 0x20) == '{') m.opener |= bit;  // '[' | 0x20 is '{'
  }
  return m;
}

#ifdef LLMTAP_X86
inline uint64_t Bits16(__m128i eq, int at) {
  return static_cast<uint64_t>(static_cast<uint32_t>(_mm_movemask_epi8(eq)) & 0xffff) << at;
}

Masks Sse2Masks(const char* p) {
  Masks m;
  const __m128i zero = _mm_set1_epi8('0'), nine = _mm_set1_epi8(9), low = _mm_set1_epi8(0x20);
  for (int at = 0; at < 64; at += 16) {
    const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + at));
    const __m128i t = _mm_sub_epi8(v, zero);
    const __m128i w = _mm_or_si128(v, low);
    m.digit |= Bits16(_mm_cmpeq_epi8(_mm_min_epu8(t, nine), t), at);
    m.e |= Bits16(_mm_cmpeq_epi8(w, _mm_set1_epi8('e')), at);
    m.backslash |= Bits16(_mm_cmpeq_epi8(v, _mm_set1_epi8('\\')), at);
    m.quote |= Bits16(_mm_cmpeq_epi8(v, _mm_set1_epi8('"')), at);
    m.u |= Bits16(_mm_cmpeq_epi8(v, _mm_set1_epi8('u')), at);
    m.d |= Bits16(_mm_cmpeq_epi8(w, _mm_set1_epi8('d')), at);
    m.opener |= Bits16(_mm_cmpeq_epi8(w, _mm_set1_epi8('{')), at);
  }
  return m;
}

__attribute__((target("avx2"))) inline uint64_t Bits32(__m256i eq, int at) {
  return static_cast<uint64_t>(static_cast<uint32_t>(_mm256_movemask_epi8(eq))) << at;
}

__attribute__((target("pclmul"))) inline uint64_t ClmulPrefixXor(uint64_t x) {
  return static_cast<uint64_t>(_mm_cvtsi128_si64(_mm_clmulepi64_si128(
      _mm_set_epi64x(0, static_cast<int64_t>(x)), _mm_set1_epi8(static_cast<char>(0xFF)), 0)));
}

__attribute__((target("avx2,pclmul"))) bool RiskyAvx2(const char* p, size_t blocks,
                                                      ScanState* state) {
  ScanState local = *state;  // in registers, not through the pointer
  ScanState* s = &local;
  const __m256i zero = _mm256_set1_epi8('0'), nine = _mm256_set1_epi8(9),
                low = _mm256_set1_epi8(0x20), e = _mm256_set1_epi8('e'),
                bs = _mm256_set1_epi8('\\'), quote = _mm256_set1_epi8('"'),
                u = _mm256_set1_epi8('u'), d = _mm256_set1_epi8('d'), open = _mm256_set1_epi8('{');
  for (size_t b = 0; b < blocks; ++b, p += 64) {
    Masks m;
    for (int at = 0; at < 64; at += 32) {
      const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + at));
      const __m256i t = _mm256_sub_epi8(v, zero);
      const __m256i w = _mm256_or_si256(v, low);
      m.digit |= Bits32(_mm256_cmpeq_epi8(_mm256_min_epu8(t, nine), t), at);
      m.e |= Bits32(_mm256_cmpeq_epi8(w, e), at);
      m.backslash |= Bits32(_mm256_cmpeq_epi8(v, bs), at);
      m.quote |= Bits32(_mm256_cmpeq_epi8(v, quote), at);
      m.u |= Bits32(_mm256_cmpeq_epi8(v, u), at);
      m.d |= Bits32(_mm256_cmpeq_epi8(w, d), at);
      m.opener |= Bits32(_mm256_cmpeq_epi8(w, open), at);
    }
    if (Risky<ClmulPrefixXor>(m, s)) return true;
  }
  *state = local;
  return false;
}

bool HasAvx2() {
  static const bool has =
      (__builtin_cpu_init(), __builtin_cpu_supports("avx2") && __builtin_cpu_supports("pclmul"));
  return has;
}
#endif

Masks BlockMasks(const char* p) {
#ifdef LLMTAP_X86
  return Sse2Masks(p);
#else
  return ScalarMasks(p);
#endif
}

bool MayBeRefusedByParser(std::string_view s) {
  ScanState state;
  const char* p = s.data();
  size_t blocks = s.size() / 64;
#ifdef LLMTAP_X86
  if (HasAvx2()) {
    if (RiskyAvx2(p, blocks, &state)) return true;
    p += blocks * 64;
    blocks = 0;
  }
#endif
  for (; blocks > 0; --blocks, p += 64) {
    if (Risky(BlockMasks(p), &state)) return true;
  }
  // The tail, padded with spaces (none of the bytes looked for).
  char tail[64];
  std::memset(tail, ' ', sizeof tail);
  std::memcpy(tail, p, s.size() % 64);
  return Risky(ScalarMasks(tail), &state);
}

}  // namespace

bool MatchCaptureRow(std::string_view row, double* timestamp_ms) {
  static constexpr std::string_view kHead = "{\"timestamp\":";
  static constexpr std::string_view kMiddle = ",\"payload\":";
  if (!row.starts_with(kHead) || row.back() != '}') return false;
  size_t i = kHead.size();
  int64_t n = 0;
  while (i < row.size() && row[i] >= '0' && row[i] <= '9') {
    if (i - kHead.size() < 15) n = n * 10 + (row[i] - '0');  // more digits are refused below
    ++i;
  }
  const size_t digits = i - kHead.size();
  // JSON has no leading zeros; 15 digits stay exact in a double (and need no overflow check).
  if (digits == 0 || digits > 15 || (digits > 1 && row[kHead.size()] == '0')) return false;
  if (row.substr(i, kMiddle.size()) != kMiddle) return false;
  const std::string_view payload = row.substr(i + kMiddle.size());
  if (payload.size() < 2) return false;  // at least a value and the closing '}'
  if (MayBeRefusedByParser(payload)) return false;
  *timestamp_ms = static_cast<double>(n);
  return true;
}

void SetTopLevel(std::string* json, std::string_view key, std::string_view value) {
  if (std::optional<Span> span = FindTopLevelValue(*json, key)) {
    json->replace(span->begin, span->end - span->begin, value);
    return;
  }
  size_t close = json->find_last_of('}');
  if (close == std::string::npos) return;
  size_t last = json->find_last_not_of(" \t\r\n", close == 0 ? 0 : close - 1);
  const bool empty = last == std::string::npos || (*json)[last] == '{';
  std::string add = empty ? "\"" : ",\"";
  add.append(key).append("\":").append(value);
  json->insert(close, add);
}

bool RemoveTopLevel(std::string* json, std::string_view key) {
  const std::optional<Span> span = FindTopLevelValue(*json, key);
  if (!span) return false;
  constexpr std::string_view kSpace = " \t\r\n";
  // Back over `"key"` and the colon: the key's opening quote.
  size_t colon = json->find_last_not_of(kSpace, span->begin - 1);
  size_t close_quote = json->find_last_not_of(kSpace, colon - 1);
  size_t begin = close_quote - key.size() - 1;
  size_t end = span->end;
  const size_t before = json->find_last_not_of(kSpace, begin - 1);
  if ((*json)[before] == ',') {
    begin = before;  // `,"key":value`
  } else {
    // The first member: `{"key":value,` (or the only one).
    const size_t after = json->find_first_not_of(kSpace, end);
    if (after != std::string::npos && (*json)[after] == ',') end = after + 1;
  }
  json->erase(begin, end - begin);
  return true;
}

}  // namespace llmtap::trace
