// UsageScanner: reads the token counts and the finish reason that an OpenAI-compatible server
// reports in a chat or completions response body (one JSON document, or a text/event-stream of
// JSON chunks) while the proxy relays that body, without keeping it. The bytes go through a small
// state machine (a JSON tokenizer that follows only the few paths it needs, under an SSE line
// parser) and are forgotten, so memory is fixed at construction: Feed never allocates, never
// throws, accepts any bytes split anywhere (one byte at a time included), and gives the same
// result for every split. (The generated text, when it is kept, is read document by document:
// proxy/response_reader.h.)
//
// Threads: one scanner belongs to one response and is not safe to share. The proxy feeds it from
// the response's connection thread, in order, and reads usage() after the last chunk.
//
// What counts, per JSON document (the body, or the data of one SSE event):
// - usage.prompt_tokens, usage.completion_tokens and usage.prompt_tokens_details.cached_tokens
//   of the top-level object, when they are non-negative integers that fit int64 (floats,
//   negatives, strings, null and overflowing numbers are ignored, keeping what was seen before);
// - the server's own report (api/server_report.h), under the same rule: llama.cpp's top-level
//   "timings" (prompt_n, cache_n, predicted_n; prompt_ms and predicted_ms, non-negative numbers
//   of at most 31 characters; draft_n with draft_n_accepted: its speculative decoding), vLLM's
//   metrics.speculative_decoding and SGLang's sglext.spec_tokens_details (drafted and accepted
//   tokens, verify steps, k, the dense histogram of at most 33 counts). Speculative decoding
//   counts once its object (or timings) is complete and holds both token counts, replacing
//   what an earlier document said;
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
// SSE parsing (net/sse.h, shared with the replay) follows the WHATWG rules: lines end in "\n",
// "\r\n" or "\r"; a leading BOM is dropped; lines starting with ':' are comments; only the "data"
// field is read (one optional space after the colon; the lines of one event are joined with "\n");
// a blank line ends the event. The "[DONE]" sentinel is not JSON and yields nothing. An event cut
// off by the end of the stream still counts what was complete in it.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "api/server_report.h"
#include "net/bom.h"
#include "net/sse.h"

namespace llmtap::proxy {

struct ResponseUsage {
  std::optional<int64_t> prompt_tokens;      // usage.prompt_tokens, last seen
  std::optional<int64_t> completion_tokens;  // usage.completion_tokens, last seen
  // Last non-null, non-empty choices[*].finish_reason seen; "" if none. At most 64 bytes.
  std::string finish_reason;
  // usage.prompt_tokens_details.cached_tokens, the top-level "timings" (llama.cpp), and
  // speculative decoding (llama.cpp timings.draft_n / draft_n_accepted, vLLM
  // metrics.speculative_decoding, SGLang sglext.spec_tokens_details): last seen, member by member.
  api::ServerReport server;
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

  explicit UsageScanner(Mode mode);
  UsageScanner(UsageScanner&&) noexcept;
  UsageScanner& operator=(UsageScanner&&) noexcept;
  ~UsageScanner();

  // The next bytes of the (de-chunked) response body.
  void Feed(std::string_view bytes) noexcept;

  const ResponseUsage& usage() const { return usage_; }
  Mode mode() const { return mode_; }

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
  enum class Slot : uint8_t {
    kOther,
    kRoot,
    kUsage,
    kChoice,
    kPromptTokens,
    kCompletionTokens,
    kChoices,
    kFinishReason,  // the one string decoded (into str_)
    // The server's report: containers,
    kPromptDetails,  // usage.prompt_tokens_details
    kTimings,        // llama.cpp's top-level timings
    kMetrics,        // vLLM's top-level metrics
    kVllmSpec,       // metrics.speculative_decoding
    kSglext,         // SGLang's top-level sglext
    kSglangSpec,     // sglext.spec_tokens_details
    kHistogram,      // the spec object's dense histogram (an array of counts)
    // and values.
    kCachedTokens,
    kPromptN,
    kCacheN,
    kPromptMs,  // a duration in ms (a number with a fraction)
    kPredictedN,
    kPredictedMs,
    kDraftN,
    kDraftAccepted,
    kSpecDrafted,   // num_draft_tokens, spec_num_proposed_drafts
    kSpecAccepted,  // num_accepted_draft_tokens, spec_num_correct_drafts
    kSpecSteps,     // num_spec_steps, spec_verify_ct
    kSpecK,         // num_spec_tokens
    kHistogramEntry,
  };
  static constexpr uint64_t Bit(Slot slot) { return uint64_t{1} << static_cast<int>(slot); }
  static constexpr bool In(uint64_t bits, Slot slot) {
    return ((bits >> static_cast<int>(slot)) & 1) != 0;
  }
  static bool IsArray(Slot slot);
  static Slot ElementSlot(Slot array);  // what an element of `array` is
  static Slot KeySlot(Slot container, std::string_view key);  // kOther: a member nobody needs
  void FeedSse(const char* p, const char* end) noexcept;
  void ResetJson() noexcept;
  void ScanJson(const char* p, const char* end) noexcept;
  const char* StartValue(const char* p) noexcept;
  // After the opening quote of a key, or of a finish_reason value: decode it into str_.
  void StartDecode(bool key) noexcept;
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
  // The end of a timings or spec object's member: its speculative decoding, when whole.
  void CommitSpec(Slot container) noexcept;
  void Fail() noexcept;

  Mode mode_;
  ResponseUsage usage_;
  net::LeadingBom bom_;  // kJson: the leading BOM
  net::SseFramer sse_;   // kSse: the event-stream framing (it drops the BOM itself)

  JsonState state_ = JsonState::kValue;
  Slot slot_ = Slot::kRoot;
  uint8_t depth_ = 0;  // entries in stack_
  // The root object, then usage, choices, timings, metrics or sglext, then a choice,
  // prompt_tokens_details or a spec object, then its histogram.
  Slot stack_[4] = {};
  bool escape_ = false;  // kSkipString, or a string inside kSkip: the last byte was a backslash
  bool decoding_key_ = false;
  uint8_t escape_state_ = 0;     // kDecode: 0 plain, 1 after '\', 2-5 after that many hex digits
  uint32_t unit_ = 0;            // the \uXXXX being read
  uint32_t high_surrogate_ = 0;  // a \uD800-\uDBFF waiting for its low half
  bool str_full_ = false;        // str_ was cut at the cap
  uint8_t str_len_ = 0;
  char str_[kMaxFinishReasonBytes] = {};
  uint64_t number_ = 0;
  uint8_t number_digits_ = 0;    // saturates at 2; enough to spot a leading zero
  bool number_ok_ = true;        // still a non-negative integer that fits
  // A duration's characters (kPromptMs, kPredictedMs), read with from_chars at its end.
  static constexpr size_t kMaxNumberChars = 31;
  char number_text_[kMaxNumberChars] = {};
  uint8_t number_len_ = 0;       // kMaxNumberChars + 1: too long
  Slot pending_ = Slot::kOther;  // a value read but not yet committed (its member may not end)
  int64_t pending_number_ = 0;
  uint64_t skip_depth_ = 0;
  uint64_t skip_arrays_ = 0;  // bit i: skipped level i + 1 is an array (first 64 levels)
  bool skip_in_string_ = false;
  // The speculative decoding of the timings or spec object being read (committed by CommitSpec).
  api::SpecDecodeCounts spec_;
  bool histogram_ok_ = true;  // the histogram held only counts, at most kMaxHistogram of them
};

}  // namespace llmtap::proxy
