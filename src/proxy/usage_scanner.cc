#include "proxy/usage_scanner.h"

#include <algorithm>
#include <array>
#include <cstring>
#include <limits>
#include <new>

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

// Collects choice 0's text (capture_responses). The scanner reports the containers it enters and
// leaves, the indexes it reads and the strings it decodes; this decides where each string goes:
// choice 0's ResponseText (out_), the held text of a choice whose index is not known yet
// (held_), or nowhere. Every byte stored counts against the cap, held ones included; dropping a
// held choice gives its bytes back. Strings are appended with std::string, so an allocation
// failure ends collection (marked truncated) instead of throwing through Feed. The scanner's
// calls are kept out of line, so that its own loop stays as small as without text.
class UsageScanner::TextCollector {
 public:
  explicit TextCollector(size_t max_bytes) : max_bytes_(max_bytes) {}

  [[gnu::noinline]] void Enter(Slot container) noexcept {
    switch (container) {
      case Slot::kChoices:
        choice_position_ = -1;
        break;
      case Slot::kChoice:
        ++choice_position_;
        in_choice_ = true;
        choice_index_known_ = false;
        route_ = Route::kUndecided;
        break;
      case Slot::kMessage:
        reasoning_key_ = Slot::kOther;
        break;
      case Slot::kToolCalls:
        call_position_ = -1;
        break;
      case Slot::kToolCall:
        ++call_position_;
        in_call_ = true;
        call_index_ = -1;
        call_has_strings_ = false;
        held_name_.clear();
        held_arguments_.clear();
        break;
      default:
        break;
    }
  }

  [[gnu::noinline]] void Leave(Slot container) noexcept {
    if (container == Slot::kToolCall) {
      EndCall();
    } else if (container == Slot::kChoice) {
      EndChoice();
    }
  }

  // A choice known to be another than 0: the scanner skips its members.
  bool ChoiceDropped() const { return route_ == Route::kDrop; }

  [[gnu::noinline]] void ChoiceIndex(int64_t index) noexcept {
    if (!in_choice_ || choice_index_known_) return;
    choice_index_known_ = true;
    Decide(index == 0);
  }

  [[gnu::noinline]] void ToolCallIndex(int64_t index) noexcept {
    if (!in_call_ || call_index_ >= 0) return;
    call_index_ = index;
    FlushCall();
  }

  // The opening quote of a collected string (`slot`: kText ... kToolArguments).
  [[gnu::noinline]] void StartString(Slot slot) noexcept {
    target_ = nullptr;
    if (!in_choice_ || route_ == Route::kDrop) return;
    switch (slot) {
      case Slot::kText:
        target_ = &Choice().text;
        break;
      case Slot::kReasoningContent:
      case Slot::kReasoning:
        if (reasoning_key_ != Slot::kOther && reasoning_key_ != slot) break;  // its twin counted
        reasoning_key_ = slot;
        target_ = &Choice().reasoning;
        break;
      case Slot::kToolName:
      case Slot::kToolArguments: {
        if (!in_call_) break;
        call_has_strings_ = true;
        if (call_index_ < 0) {
          target_ = slot == Slot::kToolName ? &held_name_ : &held_arguments_;
        } else if (ResponseToolCall* call = Call(&Choice(), call_index_)) {
          target_ = slot == Slot::kToolName ? &call->name : &call->arguments;
        }
        break;
      }
      default:
        break;
    }
  }

  void EndString() noexcept { target_ = nullptr; }

  // Decoded bytes of the current string, as they come (a cut may split a character: trimmed).
  [[gnu::noinline]] void Append(const char* bytes, size_t n) noexcept {
    if (target_ == nullptr || full_) return;
    const size_t room = max_bytes_ - bytes_;
    const bool cut = n > room;
    if (cut) n = room;
    if (!Store(bytes, n)) return;
    if (cut) {
      const size_t drop = IncompleteUtf8Tail(target_->data(), target_->size());
      if (drop > 0) target_->erase(target_->size() - drop);
      bytes_ -= drop;
      full_ = true;
    }
  }

  // One whole decoded character (from an escape): kept whole or not at all.
  [[gnu::noinline]] void AppendChar(const char* utf8, size_t n) noexcept {
    if (target_ == nullptr || full_) return;
    if (n > max_bytes_ - bytes_) {
      full_ = true;
      return;
    }
    Store(utf8, n);
  }

  // The end of a document: an open tool call and choice end here.
  [[gnu::noinline]] void Settle() noexcept {
    target_ = nullptr;
    if (in_call_) EndCall();
    if (in_choice_) EndChoice();
  }

  ResponseText Take() noexcept {
    Settle();
    out_.truncated = out_.truncated || full_;
    return std::move(out_);
  }

 private:
  enum class Route : uint8_t {
    kUndecided,  // no string yet and the index is not known
    kOut,        // choice 0: out_
    kHeld,       // index not known yet: held_
    kDrop,       // another choice
  };
  // More tool calls than this in one response are not kept (marked truncated).
  static constexpr size_t kMaxToolCalls = 1024;

  // The current choice's text: its first string before its index decides to hold it.
  ResponseText& Choice() noexcept {
    if (route_ == Route::kUndecided) {
      route_ = Route::kHeld;
      bytes_before_held_ = bytes_;
      full_before_held_ = full_;
    }
    return route_ == Route::kOut ? out_ : held_;
  }

  // The tool call with `index` in `text`, added in index order if new; nullptr past the limit.
  static ResponseToolCall* Call(ResponseText* text, int64_t index) noexcept {
    auto& calls = text->tool_calls;
    auto it = std::lower_bound(calls.begin(), calls.end(), index,
                               [](const ResponseToolCall& c, int64_t i) { return c.index < i; });
    if (it != calls.end() && it->index == index) return &*it;
    if (calls.size() >= kMaxToolCalls) {
      text->truncated = true;
      return nullptr;
    }
    try {
      it = calls.insert(it, ResponseToolCall{index, {}, {}});
    } catch (const std::bad_alloc&) {
      text->truncated = true;
      return nullptr;
    }
    return &*it;
  }

  bool Store(const char* bytes, size_t n) noexcept {
    try {
      target_->append(bytes, n);
    } catch (const std::bad_alloc&) {
      full_ = true;
      target_ = nullptr;
      return false;
    }
    bytes_ += n;
    return true;
  }

  void Decide(bool choice_zero) noexcept {
    if (route_ == Route::kHeld) {
      if (choice_zero) {
        MergeHeld();
      } else {
        bytes_ = bytes_before_held_;
        full_ = full_before_held_;
      }
      ClearHeld();
    }
    route_ = choice_zero ? Route::kOut : Route::kDrop;
  }

  void MergeHeld() noexcept {
    try {
      out_.text += held_.text;
      out_.reasoning += held_.reasoning;
      for (const ResponseToolCall& held : held_.tool_calls) {
        if (ResponseToolCall* call = Call(&out_, held.index)) {
          call->name += held.name;
          call->arguments += held.arguments;
        }
      }
      out_.truncated = out_.truncated || held_.truncated;
    } catch (const std::bad_alloc&) {
      full_ = true;
    }
  }

  void ClearHeld() noexcept {
    held_.text.clear();
    held_.reasoning.clear();
    held_.tool_calls.clear();
    held_.truncated = false;
  }

  // A tool call's index is known: the strings held for it go to its entry.
  void FlushCall() noexcept {
    if (!call_has_strings_ || route_ == Route::kDrop) return;
    ResponseToolCall* call = Call(&Choice(), call_index_);
    if (call == nullptr) return;
    try {
      call->name += held_name_;
      call->arguments += held_arguments_;
    } catch (const std::bad_alloc&) {
      full_ = true;
    }
    held_name_.clear();
    held_arguments_.clear();
  }

  void EndCall() noexcept {
    in_call_ = false;
    if (call_index_ >= 0) return;
    call_index_ = call_position_;  // no "index": a message's tool calls are in order
    FlushCall();
  }

  void EndChoice() noexcept {
    in_choice_ = false;
    if (!choice_index_known_) Decide(choice_position_ == 0);
  }

  const size_t max_bytes_;
  size_t bytes_ = 0;   // decoded bytes stored: out_, held_ and the held tool call strings
  bool full_ = false;  // the cap cut a string: nothing more is stored
  ResponseText out_;
  ResponseText held_;
  size_t bytes_before_held_ = 0;
  bool full_before_held_ = false;
  std::string* target_ = nullptr;  // where the current string's bytes go; nullptr: nowhere

  bool in_choice_ = false;
  bool choice_index_known_ = false;
  Route route_ = Route::kUndecided;
  int64_t choice_position_ = -1;       // in its choices array
  Slot reasoning_key_ = Slot::kOther;  // the reasoning key counted in this message object

  bool in_call_ = false;
  bool call_has_strings_ = false;
  int64_t call_index_ = -1;  // -1: not known yet
  int64_t call_position_ = -1;
  std::string held_name_;  // a tool call's strings until its index is known
  std::string held_arguments_;
};

namespace {

std::string_view TrimSpaceAndTab(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

}  // namespace

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

UsageScanner::UsageScanner(Mode mode, size_t max_text_bytes) : mode_(mode) {
  // Committing a finish reason then never allocates.
  usage_.finish_reason.reserve(kMaxFinishReasonBytes);
  if (max_text_bytes > 0 && mode != Mode::kNone) {
    text_.reset(new (std::nothrow) TextCollector(max_text_bytes));
  }
}

UsageScanner::UsageScanner(UsageScanner&&) noexcept = default;
UsageScanner& UsageScanner::operator=(UsageScanner&&) noexcept = default;
UsageScanner::~UsageScanner() = default;

ResponseText UsageScanner::TakeText() noexcept {
  return text_ != nullptr ? text_->Take() : ResponseText();
}

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
  if (text_ != nullptr) [[unlikely]]
    text_->Settle();
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
          p = Fault(p, /*in_string=*/false);
          break;
        }
        ++p;
        break;
      case JsonState::kColon:
        p = SkipSpace(p, end);
        if (p == end) break;
        if (*p != ':') {
          p = Fault(p, /*in_string=*/false);
          break;
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
          slot_ = ElementOf(stack_[depth_ - 1]);
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
          if (in_object) {
            Commit();
            state_ = JsonState::kKey;
          } else {
            slot_ = ElementOf(container);
            state_ = JsonState::kValue;
          }
        } else if (c == (in_object ? '}' : ']')) {
          Commit();
          Pop();
        } else {
          p = Fault(p - 1, /*in_string=*/false);
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
      // The slots of the containers entered (those below kChoice only ever set when collecting
      // text).
      constexpr uint32_t kObjects = Bit(Slot::kRoot) | Bit(Slot::kUsage) | Bit(Slot::kChoice) |
                                    Bit(Slot::kMessage) | Bit(Slot::kToolCall) |
                                    Bit(Slot::kFunction);
      constexpr uint32_t kArrays = Bit(Slot::kChoices) | Bit(Slot::kToolCalls);
      const bool wanted = In(array ? kArrays : kObjects, slot_);
      if (wanted) return Push(slot_, p + 1);
      skip_depth_ = 1;
      skip_arrays_ = array ? 1 : 0;
      skip_in_string_ = false;
      state_ = JsonState::kSkip;
      return p + 1;
    }
    case '"':
      if (slot_ >= Slot::kFinishReason) {  // the decoded strings (see Slot)
        if (slot_ != Slot::kFinishReason) return StartTextString(p + 1);
        StartDecode(/*key=*/false);
      } else {
        escape_ = false;
        state_ = JsonState::kSkipString;
      }
      return p + 1;
    case 't':
    case 'f':
    case 'n':
      state_ = JsonState::kLiteral;
      return p + 1;
    default:
      if (c == '-' || (c >= '0' && c <= '9')) {
        number_ = 0;
        number_digits_ = 0;
        number_ok_ = true;
        state_ = JsonState::kNumber;
        return p;
      }
      return Fault(p, /*in_string=*/false);
  }
}

const char* UsageScanner::StartTextString(const char* next) noexcept {
  text_->StartString(slot_);
  StartDecode(/*key=*/false, /*text=*/true);
  return next;
}

const char* UsageScanner::EnterText(const char* next) noexcept {
  text_->Enter(stack_[depth_ - 1]);
  return next;
}

void UsageScanner::StartDecode(bool key, bool text) noexcept {
  decoding_key_ = key;
  decoding_text_ = text;
  escape_state_ = 0;
  high_surrogate_ = 0;
  str_full_ = text;  // the text's bytes go to text_, past str_'s checks (see Append)
  str_len_ = 0;
  state_ = JsonState::kDecode;
}

const char* UsageScanner::Number(const char* p, const char* const end) noexcept {
  for (; p < end; ++p) {
    const char c = *p;
    if (c >= '0' && c <= '9') {
      if (number_digits_ == 1 && number_ == 0) number_ok_ = false;  // a leading zero
      if (number_digits_ < 2) ++number_digits_;
      if (__builtin_mul_overflow(number_, 10u, &number_) ||
          __builtin_add_overflow(number_, static_cast<unsigned>(c - '0'), &number_)) {
        number_ok_ = false;
      }
    } else if (c == '-' || c == '+' || c == '.' || c == 'e' || c == 'E') {
      number_ok_ = false;  // a sign, fraction or exponent: not a token count
    } else {
      constexpr uint32_t kCounted = Bit(Slot::kPromptTokens) | Bit(Slot::kCompletionTokens) |
                                    Bit(Slot::kChoiceIndex) | Bit(Slot::kToolCallIndex);
      if (In(kCounted, slot_) && number_ok_ && number_digits_ > 0 &&
          number_ <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
        pending_ = slot_;
        pending_number_ = static_cast<int64_t>(number_);
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
      if (value < 0) return Fault(p, /*in_string=*/true);  // `e` taken as escaped
      const char c = static_cast<char>(value);
      escape_state_ = 0;
      FlushSurrogate();
      Append(&c, 1);
    } else {
      const int digit = HexDigitValue(*p);
      if (digit < 0) return Fault(p, /*in_string=*/true);  // an ordinary byte of the string
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
    switch (stack_[depth_ - 1]) {
      case Slot::kRoot:
        if (key == "usage") {
          slot_ = Slot::kUsage;
        } else if (key == "choices") {
          slot_ = Slot::kChoices;
        }
        break;
      case Slot::kUsage:
        if (key == "prompt_tokens") {
          slot_ = Slot::kPromptTokens;
        } else if (key == "completion_tokens") {
          slot_ = Slot::kCompletionTokens;
        }
        break;
      case Slot::kChoice:
        if (key == "finish_reason") {
          slot_ = Slot::kFinishReason;
        } else if (text_ != nullptr) [[unlikely]] {
          return FindTextSlot(Slot::kChoice, key);
        }
        break;
      default:  // the containers entered only when collecting text
        if (text_ != nullptr) return FindTextSlot(stack_[depth_ - 1], key);
        break;
    }
    return;
  }
  if (decoding_text_) [[unlikely]] {
    text_->EndString();
    state_ = JsonState::kAfterValue;
    return;
  }
  // Cut at the cap: drop a UTF-8 sequence the cut left incomplete.
  if (str_full_) str_len_ = static_cast<uint8_t>(str_len_ - IncompleteUtf8Tail(str_, str_len_));
  if (str_len_ > 0) pending_ = Slot::kFinishReason;
  state_ = JsonState::kAfterValue;
}

void UsageScanner::FindTextSlot(Slot container, std::string_view key) noexcept {
  slot_ = TextSlot(container, key);
}

UsageScanner::Slot UsageScanner::TextSlot(Slot container, std::string_view key) const noexcept {
  switch (container) {
    case Slot::kChoice:
      if (text_->ChoiceDropped()) break;
      if (key == "index") return Slot::kChoiceIndex;
      if (key == "message" || key == "delta") return Slot::kMessage;
      if (key == "text") return Slot::kText;
      break;
    case Slot::kMessage:
      if (key == "content") return Slot::kText;
      if (key == "reasoning_content") return Slot::kReasoningContent;
      if (key == "reasoning") return Slot::kReasoning;
      if (key == "tool_calls") return Slot::kToolCalls;
      break;
    case Slot::kToolCall:
      if (key == "index") return Slot::kToolCallIndex;
      if (key == "function") return Slot::kFunction;
      break;
    case Slot::kFunction:
      if (key == "name") return Slot::kToolName;
      if (key == "arguments") return Slot::kToolArguments;
      break;
    default:
      break;
  }
  return Slot::kOther;
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
        return SkipMismatch(p, end);
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
  if (text_ != nullptr) [[unlikely]]
    return EnterText(next);
  return next;
}

void UsageScanner::Pop() noexcept {
  --depth_;
  state_ = JsonState::kAfterValue;
  if (text_ != nullptr) [[unlikely]]
    text_->Leave(stack_[depth_]);
}

void UsageScanner::Append(const char* bytes, size_t n) noexcept {
  if (str_full_) {  // or collecting a string's text: StartDecode set str_full_ for it
    if (decoding_text_) text_->Append(bytes, n);
    return;
  }
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
    if (decoding_text_) {
      text_->AppendChar(utf8, n);
    } else {
      str_full_ = true;
    }
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
  switch (pending_) {
    case Slot::kPromptTokens:
      usage_.prompt_tokens = pending_number_;
      break;
    case Slot::kCompletionTokens:
      usage_.completion_tokens = pending_number_;
      break;
    case Slot::kFinishReason:
      usage_.finish_reason.assign(str_, str_len_);
      break;
    case Slot::kChoiceIndex:
      text_->ChoiceIndex(pending_number_);
      break;
    case Slot::kToolCallIndex:
      text_->ToolCallIndex(pending_number_);
      break;
    default:
      break;
  }
  pending_ = Slot::kOther;
}

const char* UsageScanner::Fault(const char* resume, bool in_string) noexcept {
  if (text_ == nullptr || (depth_ == kChoiceDepth && !(in_string && decoding_text_)) ||
      depth_ < kChoiceDepth) {
    Fail();
    return resume;
  }
  // Collecting text: the fault is inside a collected string of the choice, or inside a message
  // (depth_ > kChoiceDepth), which a scan without text skips whole, taking every byte but the
  // brackets and quotes as they come. The scan goes on as that skip would, from `resume`.
  pending_ = Slot::kOther;
  if (decoding_text_) text_->EndString();
  decoding_text_ = false;
  escape_ = false;
  if (depth_ == kChoiceDepth) {
    state_ = JsonState::kSkipString;
    return resume;
  }
  skip_depth_ = depth_ - kChoiceDepth;
  skip_arrays_ = LeaveMessage();
  skip_in_string_ = in_string;
  state_ = JsonState::kSkip;
  return resume;
}

uint64_t UsageScanner::LeaveMessage() noexcept {
  uint64_t arrays = 0;
  for (uint8_t d = kChoiceDepth; d < depth_; ++d) {
    if (IsArray(stack_[d])) arrays |= uint64_t{1} << (d - kChoiceDepth);
  }
  while (depth_ > kChoiceDepth) text_->Leave(stack_[--depth_]);
  return arrays;
}

const char* UsageScanner::SkipMismatch(const char* p, const char* const end) noexcept {
  // Skipping a value inside a message: a scan without text skips it as part of the message, at
  // `above` more levels, where past the 64th it no longer checks the brackets' kinds.
  const unsigned above = depth_ > kChoiceDepth ? depth_ - kChoiceDepth : 0;
  if (text_ == nullptr || above == 0 || skip_depth_ + above < 64) {
    Fail();
    return end;
  }
  skip_arrays_ = (skip_arrays_ << above) | LeaveMessage();
  skip_depth_ += above;
  return Skip(p, end);  // now that scan's skip, with the message's levels on top
}

void UsageScanner::Fail() noexcept {
  state_ = JsonState::kError;
  pending_ = Slot::kOther;
}

}  // namespace llmtap::proxy
