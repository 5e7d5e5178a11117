#include "proxy/usage_scanner.h"

#include <algorithm>
#include <array>
#include <charconv>
#include <cmath>
#include <cstring>
#include <limits>
#include <span>

#include "common/ascii.h"
#include "common/json_escape.h"
#include "net/byte_search.h"

namespace llmtap::proxy {
namespace {

using net::FindEither;

bool IsSpace(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

const char* SkipSpace(const char* p, const char* end) {
  while (p < end && IsSpace(*p)) ++p;
  return p;
}

// Bytes that matter while skipping a container: string starts and brackets.
constexpr std::array<bool, 256> kSkipStops = [] {
  std::array<bool, 256> stops{};
  for (const unsigned char c : {'"', '{', '}', '[', ']'}) stops[c] = true;
  return stops;
}();

// How many bytes at the end of s[0..n) form a UTF-8 sequence that a cut left incomplete (0 to 3).
size_t IncompleteUtf8Tail(const char* s, size_t n) {
  size_t i = n;
  size_t continuation = 0;
  while (i > 0 && continuation < 3 && (static_cast<uint8_t>(s[i - 1]) & 0xC0) == 0x80) {
    --i;
    ++continuation;
  }
  if (i == 0) return 0;
  const auto lead = static_cast<uint8_t>(s[i - 1]);
  const size_t length = lead >= 0xF0 ? 4 : lead >= 0xE0 ? 3 : lead >= 0xC0 ? 2 : 1;
  return length > continuation + 1 ? continuation + 1 : 0;
}

}  // namespace

namespace {

std::string_view TrimSpaceAndTab(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

}  // namespace

bool UsageScanner::IsArray(Slot slot) { return slot == Slot::kChoices || slot == Slot::kHistogram; }

UsageScanner::Slot UsageScanner::ElementSlot(Slot array) {
  return array == Slot::kChoices ? Slot::kChoice : Slot::kHistogramEntry;
}

[[gnu::always_inline]] inline UsageScanner::Slot UsageScanner::KeySlot(Slot container,
                                                                       std::string_view key) {
  // Every key of every entered object comes here (a chat stream: about 9 per event), so each
  // container compares the key only with its own members.
  struct Entry {
    std::string_view key;
    Slot slot;
  };
  static constexpr Entry kRoot[] = {{"usage", Slot::kUsage},
                                    {"choices", Slot::kChoices},
                                    {"timings", Slot::kTimings},
                                    {"metrics", Slot::kMetrics},
                                    {"sglext", Slot::kSglext}};
  static constexpr Entry kUsage[] = {{"prompt_tokens", Slot::kPromptTokens},
                                     {"completion_tokens", Slot::kCompletionTokens},
                                     {"prompt_tokens_details", Slot::kPromptDetails}};
  static constexpr Entry kPromptDetails[] = {{"cached_tokens", Slot::kCachedTokens}};
  static constexpr Entry kChoice[] = {{"finish_reason", Slot::kFinishReason}};
  static constexpr Entry kTimings[] = {{"prompt_n", Slot::kPromptN},
                                       {"cache_n", Slot::kCacheN},
                                       {"prompt_ms", Slot::kPromptMs},
                                       {"predicted_n", Slot::kPredictedN},
                                       {"predicted_ms", Slot::kPredictedMs},
                                       {"draft_n", Slot::kDraftN},
                                       {"draft_n_accepted", Slot::kDraftAccepted}};
  static constexpr Entry kMetrics[] = {{"speculative_decoding", Slot::kVllmSpec}};
  static constexpr Entry kVllmSpec[] = {{"num_draft_tokens", Slot::kSpecDrafted},
                                        {"num_accepted_draft_tokens", Slot::kSpecAccepted},
                                        {"num_spec_steps", Slot::kSpecSteps},
                                        {"num_spec_tokens", Slot::kSpecK},
                                        {"acceptance_histogram", Slot::kHistogram}};
  static constexpr Entry kSglext[] = {{"spec_tokens_details", Slot::kSglangSpec}};
  static constexpr Entry kSglangSpec[] = {{"spec_num_proposed_drafts", Slot::kSpecDrafted},
                                          {"spec_num_correct_drafts", Slot::kSpecAccepted},
                                          {"spec_verify_ct", Slot::kSpecSteps},
                                          {"spec_correct_drafts_histogram", Slot::kHistogram}};
  std::span<const Entry> members;
  switch (container) {
    case Slot::kRoot:
      members = kRoot;
      break;
    case Slot::kUsage:
      members = kUsage;
      break;
    case Slot::kPromptDetails:
      members = kPromptDetails;
      break;
    case Slot::kChoice:
      members = kChoice;
      break;
    case Slot::kTimings:
      members = kTimings;
      break;
    case Slot::kMetrics:
      members = kMetrics;
      break;
    case Slot::kVllmSpec:
      members = kVllmSpec;
      break;
    case Slot::kSglext:
      members = kSglext;
      break;
    case Slot::kSglangSpec:
      members = kSglangSpec;
      break;
    default:
      return Slot::kOther;
  }
  for (const Entry& e : members) {
    if (e.key.size() == key.size() && e.key[0] == key[0] && e.key == key) return e.slot;
  }
  return Slot::kOther;
}

UsageScanner::Mode UsageScanner::ModeFor(std::string_view content_type,
                                         std::string_view content_encoding) {
  content_encoding = TrimSpaceAndTab(content_encoding);
  if (!content_encoding.empty() && !AsciiEqualsIgnoreCase(content_encoding, "identity")) {
    return Mode::kNone;
  }
  content_type = TrimSpaceAndTab(content_type.substr(0, content_type.find(';')));
  if (AsciiEqualsIgnoreCase(content_type, "text/event-stream")) return Mode::kSse;
  if (AsciiEqualsIgnoreCase(content_type, "application/json")) return Mode::kJson;
  constexpr std::string_view kApplication = "application/";
  constexpr std::string_view kJsonSuffix = "+json";
  if (content_type.size() > kApplication.size() + kJsonSuffix.size() &&
      AsciiEqualsIgnoreCase(content_type.substr(0, kApplication.size()), kApplication) &&
      AsciiEqualsIgnoreCase(content_type.substr(content_type.size() - kJsonSuffix.size()),
                            kJsonSuffix)) {
    return Mode::kJson;
  }
  return Mode::kNone;
}

UsageScanner::UsageScanner(Mode mode) : mode_(mode) {
  // Committing a finish reason then never allocates.
  usage_.finish_reason.reserve(kMaxFinishReasonBytes);
}

UsageScanner::UsageScanner(UsageScanner&&) noexcept = default;
UsageScanner& UsageScanner::operator=(UsageScanner&&) noexcept = default;
UsageScanner::~UsageScanner() = default;

void UsageScanner::Feed(std::string_view bytes) noexcept {
  if (mode_ == Mode::kNone || bytes.empty()) return;
  const char* p = bytes.data();
  const char* const end = p + bytes.size();
  if (mode_ == Mode::kSse) {
    FeedSse(p, end);
    return;
  }
  if (!bom_.done()) {
    bool broken = false;
    p = bom_.Skip(p, end, &broken);
    // The bytes of a partial BOM begin the document, which cannot be JSON any more.
    if (broken) Fail();
  }
  ScanJson(p, end);
}

void UsageScanner::FeedSse(const char* p, const char* const end) noexcept {
  // The data lines' bytes are scanned in place; each event is one JSON document.
  struct Sink {
    UsageScanner* s;
    void OnDataLine(bool first) noexcept {
      if (first) return;
      constexpr char kNewline = '\n';
      s->ScanJson(&kNewline, &kNewline + 1);
    }
    void OnData(const char* b, const char* e) noexcept { s->ScanJson(b, e); }
    void OnEventEnd() noexcept { s->ResetJson(); }
  } sink{this};
  sse_.Feed(p, end, sink);
}

void UsageScanner::ResetJson() noexcept {
  state_ = JsonState::kValue;
  slot_ = Slot::kRoot;
  depth_ = 0;
  pending_ = Slot::kOther;
  escape_ = false;
}

void UsageScanner::ScanJson(const char* p, const char* const end) noexcept {
  while (p < end) {
    switch (state_) {
      case JsonState::kValue:
        p = SkipSpace(p, end);
        if (p < end) p = StartValue(p);
        break;
      case JsonState::kObjectFirst:
      case JsonState::kKey:
        p = SkipSpace(p, end);
        if (p == end) break;
        if (*p == '"') {
          StartDecode(/*key=*/true);
        } else if (*p == '}' && state_ == JsonState::kObjectFirst) {
          Pop();
        } else {
          Fail();
          return;
        }
        ++p;
        break;
      case JsonState::kColon:
        p = SkipSpace(p, end);
        if (p == end) break;
        if (*p != ':') {
          Fail();
          return;
        }
        ++p;
        state_ = JsonState::kValue;
        break;
      case JsonState::kArrayFirst:
        p = SkipSpace(p, end);
        if (p == end) break;
        if (*p == ']') {
          ++p;
          Pop();
        } else {
          slot_ = ElementSlot(stack_[depth_ - 1]);
          state_ = JsonState::kValue;
        }
        break;
      case JsonState::kAfterValue: {
        p = SkipSpace(p, end);
        if (p == end) break;
        if (depth_ == 0) {  // something after the document
          Fail();
          return;
        }
        const Slot container = stack_[depth_ - 1];
        const bool in_object = !IsArray(container);
        const char c = *p++;
        if (c == ',') {
          Commit();
          if (in_object) {
            state_ = JsonState::kKey;
          } else {
            slot_ = ElementSlot(container);
            state_ = JsonState::kValue;
          }
        } else if (c == (in_object ? '}' : ']')) {
          Commit();
          Pop();
        } else {
          Fail();
          return;
        }
        break;
      }
      case JsonState::kSkipString: {
        if (escape_) {
          escape_ = false;
          ++p;
          break;
        }
        const char* const q = FindEither(p, end, '"', '\\');
        if (q == end) return;
        p = q + 1;
        if (*q == '"') {
          state_ = JsonState::kAfterValue;
        } else {
          escape_ = true;
        }
        break;
      }
      case JsonState::kDecode:
        p = Decode(p, end);
        break;
      case JsonState::kNumber:
        p = Number(p, end);
        break;
      case JsonState::kLiteral:
        while (p < end && *p >= 'a' && *p <= 'z') ++p;
        if (p < end) state_ = JsonState::kAfterValue;
        break;
      case JsonState::kSkip:
        p = Skip(p, end);
        break;
      case JsonState::kError:
        return;
    }
  }
}

const char* UsageScanner::StartValue(const char* p) noexcept {
  const char c = *p;
  switch (c) {
    case '{':
    case '[': {
      const bool array = c == '[';
      // The slots of the containers entered.
      constexpr uint64_t kObjects = Bit(Slot::kRoot) | Bit(Slot::kUsage) | Bit(Slot::kChoice) |
                                    Bit(Slot::kPromptDetails) | Bit(Slot::kTimings) |
                                    Bit(Slot::kMetrics) | Bit(Slot::kVllmSpec) |
                                    Bit(Slot::kSglext) | Bit(Slot::kSglangSpec);
      const bool wanted = array ? IsArray(slot_) : In(kObjects, slot_);
      if (wanted) return Push(slot_, p + 1);
      if (slot_ == Slot::kHistogramEntry) histogram_ok_ = false;
      skip_depth_ = 1;
      skip_arrays_ = array ? 1 : 0;
      skip_in_string_ = false;
      state_ = JsonState::kSkip;
      return p + 1;
    }
    case '"':
      if (slot_ == Slot::kFinishReason) {
        StartDecode(/*key=*/false);
      } else {
        if (slot_ == Slot::kHistogramEntry) histogram_ok_ = false;
        escape_ = false;
        state_ = JsonState::kSkipString;
      }
      return p + 1;
    case 't':
    case 'f':
    case 'n':
      if (slot_ == Slot::kHistogramEntry) histogram_ok_ = false;
      state_ = JsonState::kLiteral;
      return p + 1;
    default:
      if (c == '-' || (c >= '0' && c <= '9')) {
        number_ = 0;
        number_digits_ = 0;
        number_ok_ = true;
        number_len_ = 0;
        state_ = JsonState::kNumber;
        return p;
      }
      Fail();
      return p;
  }
}

void UsageScanner::StartDecode(bool key) noexcept {
  decoding_key_ = key;
  escape_state_ = 0;
  high_surrogate_ = 0;
  str_full_ = false;
  str_len_ = 0;
  state_ = JsonState::kDecode;
}

const char* UsageScanner::Number(const char* p, const char* const end) noexcept {
  // Only a duration's characters are kept (read with from_chars at its end); one past the cap:
  // too long to be a duration worth reading.
  const bool duration = slot_ == Slot::kPromptMs || slot_ == Slot::kPredictedMs;
  auto keep = [this, duration](char c) {
    if (!duration || number_len_ > kMaxNumberChars) return;
    if (number_len_ < kMaxNumberChars) number_text_[number_len_] = c;
    ++number_len_;
  };
  for (; p < end; ++p) {
    const char c = *p;
    if (c >= '0' && c <= '9') {
      keep(c);
      if (number_digits_ == 1 && number_ == 0) number_ok_ = false;  // a leading zero
      if (number_digits_ < 2) ++number_digits_;
      if (__builtin_mul_overflow(number_, 10u, &number_) ||
          __builtin_add_overflow(number_, static_cast<unsigned>(c - '0'), &number_)) {
        number_ok_ = false;
      }
    } else if (c == '-' || c == '+' || c == '.' || c == 'e' || c == 'E') {
      keep(c);
      number_ok_ = false;  // a sign, fraction or exponent: not a token count
    } else {
      constexpr uint64_t kCounted =
          Bit(Slot::kPromptTokens) | Bit(Slot::kCompletionTokens) | Bit(Slot::kCachedTokens) |
          Bit(Slot::kPromptN) | Bit(Slot::kCacheN) | Bit(Slot::kPredictedN) | Bit(Slot::kDraftN) |
          Bit(Slot::kDraftAccepted) | Bit(Slot::kSpecDrafted) | Bit(Slot::kSpecAccepted) |
          Bit(Slot::kSpecSteps) | Bit(Slot::kSpecK) | Bit(Slot::kHistogramEntry);
      const bool count = number_ok_ && number_digits_ > 0 &&
                         number_ <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max());
      if (In(kCounted, slot_) && count) {
        pending_ = slot_;
        pending_number_ = static_cast<int64_t>(number_);
      } else if (slot_ == Slot::kHistogramEntry) {
        histogram_ok_ = false;
      } else if (duration && number_len_ <= kMaxNumberChars) {
        double ms = -1;
        const auto r = std::from_chars(number_text_, number_text_ + number_len_, ms);
        if (r.ec == std::errc() && r.ptr == number_text_ + number_len_ && ms >= 0 && ms < 9e12) {
          pending_ = slot_;
          pending_number_ = std::llround(ms * 1000);
        }
      }
      state_ = JsonState::kAfterValue;  // which checks the byte that ended the number
      return p;
    }
  }
  return p;
}

const char* UsageScanner::Decode(const char* p, const char* const end) noexcept {
  while (p < end) {
    if (escape_state_ == 0) {
      const char* const q = FindEither(p, end, '"', '\\');
      if (q != p) {
        FlushSurrogate();
        Append(p, static_cast<size_t>(q - p));
      }
      if (q == end) return end;
      p = q + 1;
      if (*q == '"') {
        EndDecodedString();
        return p;
      }
      escape_state_ = 1;
    } else if (escape_state_ == 1) {
      const char e = *p++;
      if (e == 'u') {
        escape_state_ = 2;
        unit_ = 0;
        continue;
      }
      const int value = JsonShortEscapeValue(e);
      if (value < 0) {
        Fail();
        return p;
      }
      const char c = static_cast<char>(value);
      escape_state_ = 0;
      FlushSurrogate();
      Append(&c, 1);
    } else {
      const int digit = HexDigitValue(*p);
      if (digit < 0) {
        Fail();
        return p;
      }
      ++p;
      unit_ = unit_ * 16 + static_cast<uint32_t>(digit);
      if (++escape_state_ == 6) {
        escape_state_ = 0;
        AppendUnit(unit_);
      }
    }
  }
  return p;
}

void UsageScanner::EndDecodedString() noexcept {
  FlushSurrogate();
  if (decoding_key_) {
    // Keys longer than the buffer match nothing: every key sought is short.
    const std::string_view key(str_, str_full_ ? 0 : str_len_);
    slot_ = Slot::kOther;
    state_ = JsonState::kColon;
    slot_ = KeySlot(stack_[depth_ - 1], key);
    return;
  }
  // Cut at the cap: drop a UTF-8 sequence the cut left incomplete.
  if (str_full_) str_len_ = static_cast<uint8_t>(str_len_ - IncompleteUtf8Tail(str_, str_len_));
  if (str_len_ > 0) pending_ = Slot::kFinishReason;
  state_ = JsonState::kAfterValue;
}

const char* UsageScanner::Skip(const char* p, const char* const end) noexcept {
  while (p < end) {
    if (skip_in_string_) {
      if (escape_) {
        escape_ = false;
        ++p;
        continue;
      }
      const char* const q = FindEither(p, end, '"', '\\');
      if (q == end) return end;
      p = q + 1;
      if (*q == '"') {
        skip_in_string_ = false;
      } else {
        escape_ = true;
      }
      continue;
    }
    while (p < end && !kSkipStops[static_cast<uint8_t>(*p)]) ++p;
    if (p == end) return end;
    const char c = *p++;
    if (c == '"') {
      skip_in_string_ = true;
      escape_ = false;
    } else if (c == '{' || c == '[') {
      if (skip_depth_ < 64) {
        const uint64_t bit = uint64_t{1} << skip_depth_;
        skip_arrays_ = c == '[' ? skip_arrays_ | bit : skip_arrays_ & ~bit;
      }
      ++skip_depth_;
    } else {
      --skip_depth_;
      if (skip_depth_ < 64 && ((skip_arrays_ >> skip_depth_) & 1) != (c == ']' ? 1u : 0u)) {
        Fail();
        return end;
      }
      if (skip_depth_ == 0) {
        state_ = JsonState::kAfterValue;
        return p;
      }
    }
  }
  return p;
}

const char* UsageScanner::Push(Slot container, const char* next) noexcept {
  stack_[depth_++] = container;
  state_ = IsArray(container) ? JsonState::kArrayFirst : JsonState::kObjectFirst;
  if (container == Slot::kTimings || container == Slot::kVllmSpec ||
      container == Slot::kSglangSpec) {
    spec_ = api::SpecDecodeCounts{};
    histogram_ok_ = true;
  } else if (container == Slot::kHistogram) {
    spec_.histogram_size = 0;
    histogram_ok_ = true;
  }
  return next;
}

void UsageScanner::Pop() noexcept {
  const Slot container = stack_[--depth_];
  state_ = JsonState::kAfterValue;
  // A timings or spec object counts once the member holding it is complete, as a value does.
  if (container == Slot::kTimings || container == Slot::kVllmSpec ||
      container == Slot::kSglangSpec) {
    pending_ = container;
  }
}

void UsageScanner::Append(const char* bytes, size_t n) noexcept {
  if (str_full_) return;
  const size_t room = kMaxFinishReasonBytes - str_len_;
  if (n > room) {
    n = room;
    str_full_ = true;
  }
  std::memcpy(str_ + str_len_, bytes, n);
  str_len_ = static_cast<uint8_t>(str_len_ + n);
}

void UsageScanner::AppendCodePoint(uint32_t cp) noexcept {
  char utf8[4];
  const size_t n = EncodeUtf8(cp, utf8);
  // Whole characters only, so a cut never splits one.
  if (str_full_ || n > kMaxFinishReasonBytes - str_len_) {
    str_full_ = true;
    return;
  }
  Append(utf8, n);
}

void UsageScanner::AppendUnit(uint32_t unit) noexcept {
  if (unit >= 0xDC00 && unit <= 0xDFFF) {
    if (high_surrogate_ != 0) {
      const uint32_t cp = 0x10000 + ((high_surrogate_ - 0xD800) << 10) + (unit - 0xDC00);
      high_surrogate_ = 0;
      AppendCodePoint(cp);
    } else {
      AppendCodePoint(0xFFFD);
    }
    return;
  }
  FlushSurrogate();
  if (unit >= 0xD800 && unit <= 0xDBFF) {
    high_surrogate_ = unit;
  } else {
    AppendCodePoint(unit);
  }
}

void UsageScanner::FlushSurrogate() noexcept {
  if (high_surrogate_ == 0) return;
  high_surrogate_ = 0;
  AppendCodePoint(0xFFFD);  // a high surrogate with no low half
}

void UsageScanner::Commit() noexcept {
  api::ServerReport& server = usage_.server;
  const int64_t v = pending_number_;
  switch (pending_) {
    case Slot::kPromptTokens:
      usage_.prompt_tokens = v;
      break;
    case Slot::kCompletionTokens:
      usage_.completion_tokens = v;
      break;
    case Slot::kFinishReason:
      usage_.finish_reason.assign(str_, str_len_);
      break;
    case Slot::kCachedTokens:
      server.cached_tokens = v;
      break;
    case Slot::kPromptN:
      server.timings.prompt_n = v;
      break;
    case Slot::kCacheN:
      server.timings.cache_n = v;
      break;
    case Slot::kPromptMs:
      server.timings.prompt_us = v;
      break;
    case Slot::kPredictedN:
      server.timings.decode_n = v;
      break;
    case Slot::kPredictedMs:
      server.timings.decode_us = v;
      break;
    case Slot::kDraftN:
    case Slot::kSpecDrafted:
      spec_.num_draft_tokens = v;
      break;
    case Slot::kDraftAccepted:
    case Slot::kSpecAccepted:
      spec_.num_accepted_draft_tokens = v;
      break;
    case Slot::kSpecSteps:
      spec_.num_spec_steps = v;
      break;
    case Slot::kSpecK:
      spec_.num_spec_tokens = v;
      break;
    case Slot::kHistogramEntry:
      if (spec_.histogram_size < api::SpecDecodeCounts::kMaxHistogram) {
        spec_.histogram[spec_.histogram_size++] = v;
      } else {
        histogram_ok_ = false;
      }
      break;
    case Slot::kTimings:
    case Slot::kVllmSpec:
    case Slot::kSglangSpec:
      CommitSpec(pending_);
      break;
    default:
      break;
  }
  pending_ = Slot::kOther;
}

void UsageScanner::CommitSpec(Slot container) noexcept {
  if (spec_.num_draft_tokens < 0 || spec_.num_accepted_draft_tokens < 0) return;
  api::SpecDecodeCounts& s = usage_.server.spec;
  s = spec_;
  if (container == Slot::kTimings) {
    // llama.cpp reports the token counts only.
    s.engine = api::SpecEngine::kLlamaCpp;
    s.num_spec_steps = s.num_spec_tokens = -1;
    s.histogram_size = 0;
    return;
  }
  s.engine = container == Slot::kVllmSpec ? api::SpecEngine::kVllm : api::SpecEngine::kSglang;
  if (!histogram_ok_) s.histogram_size = 0;
}

void UsageScanner::Fail() noexcept {
  state_ = JsonState::kError;
  pending_ = Slot::kOther;
}

}  // namespace llmtap::proxy
