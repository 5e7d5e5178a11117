// UsageScanner: reads the token counts and the finish reason that an OpenAI-compatible server
// reports in a response body (one JSON document, or a text/event-stream of JSON chunks) while
// the proxy relays that body, without keeping it; and, when asked, the generated text (below).
// The bytes go through a small state machine (a JSON tokenizer that follows only the few paths it
// needs, under an SSE line parser) and are forgotten, so memory is fixed at construction: Feed
// never allocates (unless it collects text), never throws, accepts any bytes split anywhere (one
// byte at a time included), and gives the same result for every split.
//
// Threads: one scanner belongs to one response and is not safe to share. The proxy feeds it from
// the response's connection thread, in order, and reads usage() after the last chunk.
//
// What counts, per JSON document (the body, or the data of one SSE event):
// - usage.prompt_tokens and usage.completion_tokens of the top-level object, when they are
//   non-negative integers that fit int64 (floats, negatives, strings, null and overflowing
//   numbers are ignored, keeping what was seen before);
// - finish_reason of any object element of the top-level "choices" array, when it is a
//   non-empty string (null and "" are ignored), decoded to UTF-8 and capped at 64 bytes (cut at a
//   character boundary).
// The last value seen wins: vLLM's continuous usage stats repeat usage in every chunk, and the
// include_usage chunk (with "choices":[]) comes last. Keys are compared after unescaping, so
// "us\u0061ge" is "usage". A value counts once the member holding it is complete (the next ','
// or '}' has arrived), so a document cut short mid-member contributes nothing for that member.
//
// Malformed input yields what was found before the fault: the rest of that document is ignored
// and, in SSE mode, the next event starts afresh. Values the scanner does not need (messages,
// deltas, logprobs, tool calls) are skipped by matching brackets outside strings: their bracket
// kinds are checked for the first 64 levels and only counted beyond, and their scalars are not
// validated. Nesting depth therefore costs no memory.
//
// Response text (capture_responses; only when constructed with max_text_bytes > 0, and only
// then does the scanner allocate): it also follows choices[*].index, choices[*].text and
// choices[*].message/delta.{content, reasoning_content, reasoning, tool_calls[*].{index,
// function.{name, arguments}}}, and appends choice 0's decoded strings (UTF-8; escapes and
// surrogate pairs decoded, a lone surrogate becomes U+FFFD) to a ResponseText as they pass:
// the deltas of a stream concatenate. A choice is choice 0 by its "index" member, or, without
// one, by its position in its choices array; text met before the index (an "index" written
// after the content) is held aside until the choice's index is known, then kept or dropped.
// Tool calls are keyed the same way by their own "index" (streamed fragments of one call
// concatenate). Where one message object has both reasoning_content and reasoning (vLLM sends
// both for compatibility), only the first that is a string counts. At most max_text_bytes
// decoded bytes of all these strings are kept: the first string that does not fit is cut at a
// UTF-8 character boundary, nothing after it is kept, and the text is marked truncated. Strings
// count from their first byte (text of a document cut short or malformed stays), and the text
// too is the same for every split of the bytes. The message and delta objects are then parsed
// rather than skipped; where one is malformed, the scan goes on as a scan without text would
// (skipping the rest of that object by its brackets), so collecting text never changes the
// usage and finish reason found.
//
// SSE parsing (net/sse.h, shared with the replay) follows the WHATWG rules: lines end in "\n",
// "\r\n" or "\r"; a leading BOM is dropped; lines starting with ':' are comments; only the "data"
// field is read (one optional space after the colon; the lines of one event are joined with "\n");
// a blank line ends the event. The "[DONE]" sentinel is not JSON and yields nothing. An event cut
// off by the end of the stream still counts what was complete in it.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "capture/outcome.h"
#include "net/bom.h"
#include "net/sse.h"

namespace llmtap::proxy {

struct ResponseUsage {
  std::optional<int64_t> prompt_tokens;      // usage.prompt_tokens, last seen
  std::optional<int64_t> completion_tokens;  // usage.completion_tokens, last seen
  // Last non-null, non-empty choices[*].finish_reason seen; "" if none. At most 64 bytes.
  std::string finish_reason;
};

class UsageScanner {
 public:
  enum class Mode { kNone, kJson, kSse };

  static constexpr size_t kMaxFinishReasonBytes = 64;

  // The mode for a Content-Type value: text/event-stream -> kSse; application/json and
  // application/*+json -> kJson; anything else (or "") -> kNone, in which Feed does nothing.
  // Case-insensitive; parameters such as "; charset=utf-8" are ignored. A body with a
  // Content-Encoding other than identity (gzip, br, ...) is kNone too: its bytes are not the
  // JSON, and what it reports stays unknown rather than misread.
  static Mode ModeFor(std::string_view content_type, std::string_view content_encoding = {});

  // max_text_bytes > 0 (and a mode other than kNone): also collect choice 0's text, at most
  // that many decoded bytes (see above and TakeText).
  explicit UsageScanner(Mode mode, size_t max_text_bytes = 0);
  UsageScanner(UsageScanner&&) noexcept;
  UsageScanner& operator=(UsageScanner&&) noexcept;
  ~UsageScanner();

  // The next bytes of the (de-chunked) response body.
  void Feed(std::string_view bytes) noexcept;

  const ResponseUsage& usage() const { return usage_; }
  Mode mode() const { return mode_; }
  // Whether this scanner collects text (it was asked to, the mode is not kNone, and the memory
  // for it could be had).
  bool collects_text() const { return text_ != nullptr; }
  // After the last Feed: the text collected (empty when collects_text() is false). A choice or
  // tool call the bytes left open is settled as if it had ended there. Call once.
  ResponseText TakeText() noexcept;

 private:
  enum class JsonState : uint8_t {
    kValue,        // a value is expected; slot_ says what it would be
    kObjectFirst,  // after '{': a key or '}'
    kKey,          // after ',' in an object: a key
    kColon,
    kArrayFirst,  // after '[': a value or ']'
    kAfterValue,  // ',' or the closer of the current container (or, at depth 0, the end)
    kSkipString,  // inside a string nobody needs
    kDecode,      // inside a key, or a finish_reason value, decoded into str_
    kNumber,
    kLiteral,  // true, false, null
    kSkip,     // inside an object or array nobody needs, matching brackets
    kError,    // malformed: ignore the rest of this document
  };
  // What the value about to start would be. The containers worth entering are the only ones
  // pushed on stack_; everything else is skipped whole.
  // (The order matters: IsArray's two are adjacent, and the decoded strings come last.)
  enum class Slot : uint8_t {
    kOther,
    kRoot,
    kUsage,
    kChoice,
    kPromptTokens,
    kCompletionTokens,
    kChoices,
    kToolCalls,  // this and the rest below kChoice: followed only when collecting text
    kChoiceIndex,
    kMessage,  // message or delta
    kToolCall,
    kToolCallIndex,
    kFunction,
    // The strings decoded: finish_reason into str_, the rest into text_.
    kFinishReason,
    kText,  // choices[*].text, message.content
    kReasoningContent,
    kReasoning,
    kToolName,
    kToolArguments,
  };
  class TextCollector;
  // stack_ depth inside a choice object: deeper containers are entered only to collect text.
  static constexpr uint8_t kChoiceDepth = 3;

  static bool IsArray(Slot container) {
    return static_cast<uint8_t>(static_cast<uint8_t>(container) -
                                static_cast<uint8_t>(Slot::kChoices)) < 2;
  }
  static constexpr uint32_t Bit(Slot slot) { return uint32_t{1} << static_cast<int>(slot); }
  static constexpr bool In(uint32_t bits, Slot slot) {
    return ((bits >> static_cast<int>(slot)) & 1) != 0;
  }
  // The slot of an element of an array container.
  static Slot ElementOf(Slot array) {
    return array == Slot::kChoices ? Slot::kChoice : Slot::kToolCall;
  }
  void FeedSse(const char* p, const char* end) noexcept;
  void ResetJson() noexcept;
  void ScanJson(const char* p, const char* end) noexcept;
  const char* StartValue(const char* p) noexcept;
  // After the opening quote of a key, or of a finish_reason value: decode it into str_; or of a
  // string whose text is collected (`text`): decode it into text_.
  void StartDecode(bool key, bool text = false) noexcept;
  // Collecting text, out of the scanning loop's way (reached by tail calls, so that their
  // callers need no stack frame for them): the opening quote of a collected string, the
  // container just entered (both return `next`), and a key in a container only text needs
  // (slot_ = TextSlot(...), the key's slot there or kOther).
  [[gnu::noinline]] const char* StartTextString(const char* next) noexcept;
  [[gnu::noinline]] const char* EnterText(const char* next) noexcept;
  [[gnu::noinline]] void FindTextSlot(Slot container, std::string_view key) noexcept;
  Slot TextSlot(Slot container, std::string_view key) const noexcept;
  const char* Decode(const char* p, const char* end) noexcept;
  const char* Skip(const char* p, const char* end) noexcept;
  const char* Number(const char* p, const char* end) noexcept;
  void EndDecodedString() noexcept;
  // Enters `container`; returns `next`.
  const char* Push(Slot container, const char* next) noexcept;
  void Pop() noexcept;
  void Append(const char* bytes, size_t n) noexcept;
  void AppendCodePoint(uint32_t cp) noexcept;
  void AppendUnit(uint32_t unit) noexcept;
  void FlushSurrogate() noexcept;
  void Commit() noexcept;
  // Malformed input at `resume` (the next byte to scan; `in_string`: inside a string, an escape
  // pair taken): Fail, unless collecting text put the scan where a scan without text would be
  // skipping (Fault goes on as that skip, from `resume`, and returns it). SkipMismatch: Skip met
  // a bracket of the wrong kind (p is past it); it fails, unless the skip is inside a message
  // and a scan without text would not check that bracket any more: then it goes on as that
  // scan's skip. Both are reached by tail calls, out of the hot loops' way.
  [[gnu::noinline]] const char* Fault(const char* resume, bool in_string) noexcept;
  [[gnu::noinline]] const char* SkipMismatch(const char* p, const char* end) noexcept;
  // Pops the containers inside the choice (telling text_), for a skip of them: returns their
  // kinds as skip_arrays_ bits (bit 0: the outermost, the message).
  uint64_t LeaveMessage() noexcept;
  void Fail() noexcept;

  Mode mode_;
  ResponseUsage usage_;
  net::LeadingBom bom_;  // kJson: the leading BOM
  net::SseFramer sse_;   // kSse: the event-stream framing (it drops the BOM itself)

  JsonState state_ = JsonState::kValue;
  Slot slot_ = Slot::kRoot;
  uint8_t depth_ = 0;  // entries in stack_
  // The root object, then usage or choices, then a choice; collecting text, then a message,
  // tool_calls, a tool call and its function.
  Slot stack_[7] = {};
  bool escape_ = false;  // kSkipString, or a string inside kSkip: the last byte was a backslash
  bool decoding_key_ = false;
  bool decoding_text_ = false;   // kDecode: the string goes to text_
  uint8_t escape_state_ = 0;     // kDecode: 0 plain, 1 after '\', 2-5 after that many hex digits
  uint32_t unit_ = 0;            // the \uXXXX being read
  uint32_t high_surrogate_ = 0;  // a \uD800-\uDBFF waiting for its low half
  bool str_full_ = false;        // str_ was cut at the cap
  uint8_t str_len_ = 0;
  char str_[kMaxFinishReasonBytes] = {};
  uint64_t number_ = 0;
  uint8_t number_digits_ = 0;    // saturates at 2; enough to spot a leading zero
  bool number_ok_ = true;        // still a non-negative integer that fits
  Slot pending_ = Slot::kOther;  // a value read but not yet committed (its member may not end)
  int64_t pending_number_ = 0;
  uint64_t skip_depth_ = 0;
  uint64_t skip_arrays_ = 0;  // bit i: skipped level i + 1 is an array (first 64 levels)
  bool skip_in_string_ = false;
  std::unique_ptr<TextCollector> text_;  // collecting text; nullptr otherwise
};

}  // namespace llmtap::proxy
