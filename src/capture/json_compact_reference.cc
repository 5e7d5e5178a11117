// The reference implementation of JsonCompactor's contract (CompactJsonReference, declared in
// json_compact.h): the oracle the fast paths are tested against, the judge of which
// CompactError a rejected body gets, and the fallback for valid bodies simdjson cannot represent
// (see json_compact.cc).
#include "capture/json_compact.h"
#include "capture/json_compact_internal.h"

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

namespace llmtap {
namespace json_compact_internal {
namespace {

// Deliberately written from the RFC 8259 grammar and RFC 3629 table, sharing no code with the
// fast paths (beyond the small helpers of json_compact_internal.h), so that it can serve as their
// oracle. Iterative with an explicit stack, so deep input cannot overflow the call stack.
//
// JSON that Python's json module reads (so Python servers, vLLM and FastAPI among them, serve
// it) but strict parsers refuse is kNonStandardJson, not kInvalidJson, when the body is
// otherwise a valid object: the literals NaN, Infinity and -Infinity where a value goes, and
// lone UTF-16 surrogate escapes ("\ud800" without a following "\udc00".."\udfff", which RFC
// 8259 section 8.2 allows in its grammar but leaves unpredictable). Neither is recorded: AIPerf
// (orjson) refuses a whole file on one such row ("no matched low surrogate in string"), as do
// simdjson and nlohmann. A later syntax error still makes the body kInvalidJson.
class ReferenceCompactor {
 public:
  ReferenceCompactor(std::string_view body, char* dst)
      : p_(reinterpret_cast<const unsigned char*>(body.data())), n_(body.size()), dst_(dst) {}

  CompactError Run() {
    SkipWhitespace();
    if (i_ == n_) return CompactError::kEmpty;
    const bool root_is_object = p_[i_] == '{';
    // in_object_[d] tells whether the container at depth d+1 is an object.
    size_t depth = 0;
    for (;;) {
      // A value is expected at i_ (after whitespace).
      SkipWhitespace();
      if (i_ == n_) return CompactError::kInvalidJson;
      const unsigned char c = p_[i_];
      if (c == '{' || c == '[') {
        if (depth == kMaxDepth) return CompactError::kTooDeep;
        in_object_[depth++] = c == '{';
        Emit(c);
        ++i_;
        SkipWhitespace();
        if (i_ < n_ && p_[i_] == (c == '{' ? '}' : ']')) {
          Emit(p_[i_++]);
          --depth;
        } else if (c == '{') {
          if (!ParseKeyAndColon()) return CompactError::kInvalidJson;
          continue;  // parse the member's value
        } else {
          continue;  // parse the first element
        }
      } else if (c == '"') {
        if (!ParseString()) return CompactError::kInvalidJson;
      } else if (c == 'N' || c == 'I' || (c == '-' && n_ - i_ > 1 && p_[i_ + 1] == 'I')) {
        if (!ParseLiteral(c == 'N' ? "NaN" : c == 'I' ? "Infinity" : "-Infinity")) {
          return CompactError::kInvalidJson;
        }
        non_standard_ = true;
      } else if (c == '-' || IsDigit(c)) {
        if (!ParseNumber()) return CompactError::kInvalidJson;
      } else if (c == 't') {
        if (!ParseLiteral("true")) return CompactError::kInvalidJson;
      } else if (c == 'f') {
        if (!ParseLiteral("false")) return CompactError::kInvalidJson;
      } else if (c == 'n') {
        if (!ParseLiteral("null")) return CompactError::kInvalidJson;
      } else {
        return CompactError::kInvalidJson;
      }
      // A value just ended: close containers until a separator asks for the next value.
      for (;;) {
        SkipWhitespace();
        if (depth == 0) {
          if (i_ != n_) return CompactError::kInvalidJson;  // trailing garbage
          if (!root_is_object) return CompactError::kNotAnObject;
          return non_standard_ ? CompactError::kNonStandardJson : CompactError::kOk;
        }
        if (i_ == n_) return CompactError::kInvalidJson;  // truncated
        const unsigned char s = p_[i_];
        const bool in_object = in_object_[depth - 1];
        if (s == ',') {
          Emit(s);
          ++i_;
          if (in_object && !ParseKeyAndColon()) return CompactError::kInvalidJson;
          break;
        }
        if (s != (in_object ? '}' : ']')) return CompactError::kInvalidJson;
        Emit(s);
        ++i_;
        --depth;
      }
    }
  }

  size_t written() const { return w_; }

 private:
  void Emit(unsigned char c) { dst_[w_++] = static_cast<char>(c); }

  void SkipWhitespace() {
    while (i_ < n_ && IsJsonWhitespace(p_[i_])) ++i_;
  }

  bool ParseKeyAndColon() {
    SkipWhitespace();
    if (i_ == n_ || p_[i_] != '"' || !ParseString()) return false;
    SkipWhitespace();
    if (i_ == n_ || p_[i_] != ':') return false;
    Emit(':');
    ++i_;
    return true;
  }

  // At the opening quote; copies the string through its closing quote.
  bool ParseString() {
    Emit(p_[i_++]);
    for (;;) {
      if (i_ == n_) return false;
      const unsigned char c = p_[i_];
      if (c == '"') {
        Emit(c);
        ++i_;
        return true;
      }
      if (c == '\\') {
        if (!ParseEscape()) return false;
      } else if (c < 0x20) {
        return false;  // control characters must be escaped
      } else if (c < 0x80) {
        Emit(c);
        ++i_;
      } else if (!ParseUtf8Sequence()) {
        return false;
      }
    }
  }

  // At a backslash inside a string.
  bool ParseEscape() {
    if (n_ - i_ < 2) return false;
    switch (p_[i_ + 1]) {
      case '"':
      case '\\':
      case '/':
      case 'b':
      case 'f':
      case 'n':
      case 'r':
      case 't':
        Copy(2);
        return true;
      case 'u': {
        const int32_t unit = Hex4(p_, n_, i_ + 2);
        if (unit < 0) return false;
        if (IsHighSurrogate(unit) && n_ - i_ >= 12 && p_[i_ + 6] == '\\' && p_[i_ + 7] == 'u' &&
            IsLowSurrogate(Hex4(p_, n_, i_ + 8))) {
          Copy(12);  // a pair
          return true;
        }
        // A surrogate without its other half: see the class comment.
        if (IsHighSurrogate(unit) || IsLowSurrogate(unit)) non_standard_ = true;
        Copy(6);
        return true;
      }
      default:
        return false;
    }
  }

  // At a byte >= 0x80: one well-formed UTF-8 sequence (RFC 3629 section 4).
  bool ParseUtf8Sequence() {
    const unsigned char b0 = p_[i_];
    size_t len;
    unsigned char lo = 0x80, hi = 0xBF;  // allowed range of the second byte
    if (b0 >= 0xC2 && b0 <= 0xDF) {
      len = 2;
    } else if (b0 >= 0xE0 && b0 <= 0xEF) {
      len = 3;
      if (b0 == 0xE0) lo = 0xA0;  // overlong
      if (b0 == 0xED) hi = 0x9F;  // UTF-16 surrogates
    } else if (b0 >= 0xF0 && b0 <= 0xF4) {
      len = 4;
      if (b0 == 0xF0) lo = 0x90;  // overlong
      if (b0 == 0xF4) hi = 0x8F;  // above U+10FFFF
    } else {
      return false;  // continuation byte, overlong C0/C1, or F5..FF
    }
    if (n_ - i_ < len) return false;
    if (p_[i_ + 1] < lo || p_[i_ + 1] > hi) return false;
    for (size_t k = 2; k < len; ++k) {
      if (p_[i_ + k] < 0x80 || p_[i_ + k] > 0xBF) return false;
    }
    Copy(len);
    return true;
  }

  // number = [ minus ] int [ frac ] [ exp ], copied as written (any magnitude).
  bool ParseNumber() {
    const size_t start = i_;
    if (p_[i_] == '-') ++i_;
    if (i_ == n_) return false;
    if (p_[i_] == '0') {
      ++i_;
    } else if (p_[i_] >= '1' && p_[i_] <= '9') {
      while (i_ < n_ && IsDigit(p_[i_])) ++i_;
    } else {
      return false;
    }
    if (i_ < n_ && p_[i_] == '.') {
      ++i_;
      if (i_ == n_ || !IsDigit(p_[i_])) return false;
      while (i_ < n_ && IsDigit(p_[i_])) ++i_;
    }
    if (i_ < n_ && (p_[i_] == 'e' || p_[i_] == 'E')) {
      ++i_;
      if (i_ < n_ && (p_[i_] == '+' || p_[i_] == '-')) ++i_;
      if (i_ == n_ || !IsDigit(p_[i_])) return false;
      while (i_ < n_ && IsDigit(p_[i_])) ++i_;
    }
    // What follows (e.g. the "1" of "01") is judged by the caller's grammar.
    const size_t len = i_ - start;
    i_ = start;
    Copy(len);
    return true;
  }

  bool ParseLiteral(std::string_view word) {
    if (n_ - i_ < word.size() || std::memcmp(p_ + i_, word.data(), word.size()) != 0) {
      return false;
    }
    Copy(word.size());
    return true;
  }

  void Copy(size_t len) {
    std::memcpy(dst_ + w_, p_ + i_, len);
    w_ += len;
    i_ += len;
  }

  const unsigned char* p_;
  size_t n_;
  size_t i_ = 0;
  char* dst_;
  size_t w_ = 0;
  bool non_standard_ = false;  // NaN, Infinity, -Infinity or a lone surrogate escape seen
  std::array<bool, kMaxDepth> in_object_;
};

}  // namespace
}  // namespace json_compact_internal

CompactError CompactJsonReference(std::string_view body, std::string* out) {
  const size_t old = out->size();
  if (!json_compact_internal::GrowBy(out, body.size())) return CompactError::kInvalidJson;
  json_compact_internal::ReferenceCompactor compactor(body, out->data() + old);
  const CompactError error = compactor.Run();
  out->resize(error == CompactError::kOk ? old + compactor.written() : old);
  return error;
}

}  // namespace llmtap
