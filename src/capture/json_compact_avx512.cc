// The AVX-512 kernel of JsonCompactor (x86-64 with AVX-512 BW/VL/VBMI/VBMI2, chosen at run
// time; see json_compact.cc for how it fits with the other paths).
//
// The vector code is compiled for AVX-512 function by function (LLMTAP_AVX512_TARGET), not with
// a file-wide -mavx512* flag or #pragma GCC target: inline functions and templates from headers
// (std::string, the shared helpers) are emitted in every file that uses them and the linker keeps
// one copy, which must not contain AVX-512 instructions on CPUs without them.
#include "capture/json_compact_internal.h"

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define LLMTAP_JSON_AVX512 1
#else
#define LLMTAP_JSON_AVX512 0
#endif

namespace llmtap::json_compact_internal {

#if LLMTAP_JSON_AVX512
namespace {

// Bytes that may directly follow a number or literal: whitespace, structural characters and
// '"'. Anything else would be part of the same token (e.g. "truex", "1x", "-").
constexpr std::array<bool, 256> MakeDelimiterTable() {
  std::array<bool, 256> t{};
  for (unsigned char c : {' ', '\t', '\n', '\r', '{', '}', '[', ']', ':', ',', '"'}) t[c] = true;
  return t;
}
constexpr std::array<bool, 256> kDelimiter = MakeDelimiterTable();

// The number or literal that starts at p[i] spans its whole token.
bool ValidScalarToken(const unsigned char* p, size_t n, size_t i) {
  const unsigned char c = p[i];
  if (c == 't' || c == 'f' || c == 'n') {
    const std::string_view word = c == 't' ? "true" : c == 'f' ? "false" : "null";
    if (n - i < word.size() || std::memcmp(p + i, word.data(), word.size()) != 0) return false;
    i += word.size();
  } else {
    if (p[i] == '-') ++i;
    if (i == n || !IsDigit(p[i])) return false;
    if (p[i++] != '0') {  // no leading zeros
      while (i < n && IsDigit(p[i])) ++i;
    }
    if (i < n && p[i] == '.') {
      if (++i == n || !IsDigit(p[i])) return false;
      while (i < n && IsDigit(p[i])) ++i;
    }
    if (i < n && (p[i] | 0x20) == 'e') {
      if (++i < n && (p[i] == '+' || p[i] == '-')) ++i;
      if (i == n || !IsDigit(p[i])) return false;
      while (i < n && IsDigit(p[i])) ++i;
    }
  }
  return i == n || kDelimiter[p[i]];
}

#define LLMTAP_AVX512_TARGET                                                     \
  __attribute__((                                                                \
      target("avx512f,avx512bw,avx512vl,avx512dq,avx512vbmi,avx512vbmi2,pclmul," \
             "bmi,bmi2,popcnt")))

bool CpuHasAvx512Kernel() {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
         __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
         __builtin_cpu_supports("avx512vbmi") && __builtin_cpu_supports("avx512vbmi2") &&
         __builtin_cpu_supports("pclmul") && __builtin_cpu_supports("bmi") &&
         __builtin_cpu_supports("bmi2") && __builtin_cpu_supports("popcnt");
}

// Function-local so that it is initialized before any use, even from other static
// initializers.
bool Avx512KernelUsable() {
  static const bool usable = CpuHasAvx512Kernel();
  return usable;
}

// Classes of ASCII bytes outside strings, looked up with one VPERMI2B (7-bit index; bytes
// >= 0x80 are masked apart).
enum : uint8_t {
  kClassWhitespace = 1,  // space \t \n \r
  kClassStructural = 2,  // { } [ ] : ,
};

struct alignas(64) ClassTable {
  uint8_t bytes[128];
};

constexpr ClassTable MakeClassTable() {
  ClassTable t{};
  for (unsigned char c : {' ', '\t', '\n', '\r'}) t.bytes[c] = kClassWhitespace;
  for (unsigned char c : {'{', '}', '[', ']', ':', ','}) t.bytes[c] = kClassStructural;
  return t;
}
constexpr ClassTable kClassTable = MakeClassTable();

// For VPERMI2B (7-bit index): entry c is c itself for the bytes that may follow a backslash,
// and c ^ 1 otherwise, so that "entry == byte" holds exactly for the escapable bytes (a byte
// >= 0x80 never equals the ASCII entry its low 7 bits select).
constexpr ClassTable MakeEscapableTable() {
  ClassTable t{};
  for (int c = 0; c < 128; ++c) t.bytes[c] = static_cast<uint8_t>(c ^ 1);
  for (unsigned char c : {'"', '\\', '/', 'b', 'f', 'n', 'r', 't', 'u'}) t.bytes[c] = c;
  return t;
}
constexpr ClassTable kEscapableTable = MakeEscapableTable();

// UTF-8 validation after Keiser & Lemire, "Validating UTF-8 In Less Than One Instruction Per
// Byte" (2021): three 16-entry nibble lookups over (previous byte, current byte) flag every
// two-byte error pattern; a continuation that must follow a 3/4-byte lead is checked apart.
enum : uint8_t {
  kTooShort = 1 << 0,      // lead or ASCII where a continuation is due
  kTooLong = 1 << 1,       // continuation after ASCII
  kOverlong3 = 1 << 2,     // E0 80..9F
  kTooLarge = 1 << 3,      // F4 90..BF, F5..FF
  kSurrogate = 1 << 4,     // ED A0..BF
  kOverlong2 = 1 << 5,     // C0, C1
  kTooLarge1000 = 1 << 6,  // F5..FF 80..8F
  kOverlong4 = 1 << 6,     // F0 80..8F
  kTwoConts = 1 << 7,      // continuation after continuation (fine only inside 3/4-byte chars)
  kCarry = kTooShort | kTooLong | kTwoConts,
};

// A 64-byte vector constant.
struct alignas(64) Vec64 {
  uint8_t bytes[64];
};

// A 16-entry table repeated in each 128-bit lane, for VPSHUFB.
constexpr Vec64 NibbleTable(const std::array<uint8_t, 16>& t) {
  Vec64 v{};
  for (int i = 0; i < 64; ++i) v.bytes[i] = t[i % 16];
  return v;
}

// Indexed by the high nibble of the previous byte.
constexpr Vec64 kUtf8Byte1High = NibbleTable({
    kTooLong, kTooLong, kTooLong, kTooLong, kTooLong, kTooLong, kTooLong, kTooLong,  // 0___
    kTwoConts, kTwoConts, kTwoConts, kTwoConts,                                      // 10__
    kTooShort | kOverlong2,                                                          // 1100
    kTooShort,                                                                       // 1101
    kTooShort | kOverlong3 | kSurrogate,                                             // 1110
    kTooShort | kTooLarge | kTooLarge1000 | kOverlong4,                              // 1111
});

// Indexed by the low nibble of the previous byte.
constexpr Vec64 kUtf8Byte1Low = NibbleTable({
    kCarry | kOverlong3 | kOverlong2 | kOverlong4,  // ____0000
    kCarry | kOverlong2,                            // ____0001
    kCarry,
    kCarry,
    kCarry | kTooLarge,  // ____0100
    kCarry | kTooLarge | kTooLarge1000,
    kCarry | kTooLarge | kTooLarge1000,
    kCarry | kTooLarge | kTooLarge1000,
    kCarry | kTooLarge | kTooLarge1000,
    kCarry | kTooLarge | kTooLarge1000,
    kCarry | kTooLarge | kTooLarge1000,
    kCarry | kTooLarge | kTooLarge1000,
    kCarry | kTooLarge | kTooLarge1000,
    kCarry | kTooLarge | kTooLarge1000 | kSurrogate,  // ____1101
    kCarry | kTooLarge | kTooLarge1000,
    kCarry | kTooLarge | kTooLarge1000,
});

// Indexed by the high nibble of the current byte.
constexpr Vec64 kUtf8Byte2High = NibbleTable({
    kTooShort, kTooShort, kTooShort, kTooShort, kTooShort, kTooShort, kTooShort, kTooShort,
    kTooLong | kOverlong2 | kTwoConts | kOverlong3 | kTooLarge1000 | kOverlong4,  // 1000
    kTooLong | kOverlong2 | kTwoConts | kOverlong3 | kTooLarge,                   // 1001
    kTooLong | kOverlong2 | kTwoConts | kSurrogate | kTooLarge,                   // 1010
    kTooLong | kOverlong2 | kTwoConts | kSurrogate | kTooLarge,                   // 1011
    kTooShort, kTooShort, kTooShort, kTooShort,                                   // 11__
});

// Index vectors for VPERMT2B that shift the stream (previous block : current block) right by
// 1, 2, 3 bytes: lane i takes byte 64 - k + i of the concatenation.
constexpr Vec64 MakeShiftIndex(int k) {
  Vec64 t{};
  for (int i = 0; i < 64; ++i) t.bytes[i] = static_cast<uint8_t>(64 - k + i);
  return t;
}
constexpr Vec64 kPrev1 = MakeShiftIndex(1);
constexpr Vec64 kPrev2 = MakeShiftIndex(2);
constexpr Vec64 kPrev3 = MakeShiftIndex(3);

// Largest value of each of the block's last three bytes that does not start a character the
// block cuts off.
constexpr Vec64 MakeIncompleteMax() {
  Vec64 t{};
  for (int i = 0; i < 64; ++i) t.bytes[i] = 0xFF;
  t.bytes[61] = 0xF0 - 1;  // 4-byte lead 3 bytes from the end
  t.bytes[62] = 0xE0 - 1;  // 3+-byte lead 2 bytes from the end
  t.bytes[63] = 0xC0 - 1;  // any lead at the end
  return t;
}
constexpr Vec64 kIncompleteMax = MakeIncompleteMax();

// Characters escaped by a backslash (odd-length runs of backslashes escape the next byte).
// `prev_escaped` carries across blocks. Same bit trick as simdjson's stage 1.
LLMTAP_AVX512_TARGET inline uint64_t FindEscaped(uint64_t backslash, uint64_t* prev_escaped) {
  backslash &= ~*prev_escaped;
  const uint64_t follows_escape = (backslash << 1) | *prev_escaped;
  constexpr uint64_t kEvenBits = 0x5555555555555555ULL;
  const uint64_t odd_sequence_starts = backslash & ~kEvenBits & ~follows_escape;
  uint64_t sequences_starting_on_even_bits;
  *prev_escaped =
      __builtin_add_overflow(odd_sequence_starts, backslash, &sequences_starting_on_even_bits) ? 1
                                                                                               : 0;
  const uint64_t invert_mask = sequences_starting_on_even_bits << 1;
  return (kEvenBits ^ invert_mask) & follows_escape;
}

// Bit i = XOR of bits 0..i (carry-less multiplication by all ones).
LLMTAP_AVX512_TARGET inline uint64_t PrefixXor(uint64_t bits) {
  const __m128i product =
      _mm_clmulepi64_si128(_mm_set_epi64x(0, static_cast<int64_t>(bits)), _mm_set1_epi8(-1), 0);
  return static_cast<uint64_t>(_mm_cvtsi128_si64(product));
}

// Nonzero bytes where `in` (64 bytes, preceded by `prev`) breaks UTF-8.
LLMTAP_AVX512_TARGET inline __m512i Utf8Errors(__m512i in, __m512i prev) {
  const __m512i low_nibble = _mm512_set1_epi8(0x0F);
  const __m512i prev1 = _mm512_permutex2var_epi8(prev, _mm512_load_si512(kPrev1.bytes), in);
  const __m512i prev2 = _mm512_permutex2var_epi8(prev, _mm512_load_si512(kPrev2.bytes), in);
  const __m512i prev3 = _mm512_permutex2var_epi8(prev, _mm512_load_si512(kPrev3.bytes), in);
  const __m512i t1 = _mm512_load_si512(kUtf8Byte1High.bytes);
  const __m512i t2 = _mm512_load_si512(kUtf8Byte1Low.bytes);
  const __m512i t3 = _mm512_load_si512(kUtf8Byte2High.bytes);
  const __m512i byte_1_high =
      _mm512_shuffle_epi8(t1, _mm512_and_si512(_mm512_srli_epi16(prev1, 4), low_nibble));
  const __m512i byte_1_low = _mm512_shuffle_epi8(t2, _mm512_and_si512(prev1, low_nibble));
  const __m512i byte_2_high =
      _mm512_shuffle_epi8(t3, _mm512_and_si512(_mm512_srli_epi16(in, 4), low_nibble));
  // 0x80: a AND b AND c.
  const __m512i special = _mm512_ternarylogic_epi32(byte_1_high, byte_1_low, byte_2_high, 0x80);
  // Bit 7 set where the byte must be the 2nd/3rd continuation of a 3- or 4-byte character.
  const __m512i third = _mm512_subs_epu8(prev2, _mm512_set1_epi8(static_cast<char>(0xE0 - 0x80)));
  const __m512i fourth = _mm512_subs_epu8(prev3, _mm512_set1_epi8(static_cast<char>(0xF0 - 0x80)));
  const __m512i must_be_continuation =
      _mm512_and_si512(_mm512_or_si512(third, fourth), _mm512_set1_epi8(static_cast<char>(0x80)));
  return _mm512_xor_si512(must_be_continuation, special);
}

// Grammar states of the event-driven state machine. Events are the bytes outside strings that
// are not whitespace and not closing quotes: brackets, colons, commas, opening quotes and the
// first byte of each number/literal token.
enum State : uint8_t {
  kStart,             // before the root: only '{' (other roots go to the reference)
  kObjectFirst,       // after '{': key or '}'
  kKey,               // after ',' in an object
  kColon,             // after a key
  kObjectValue,       // after ':'
  kArrayFirst,        // after '[': value or ']'
  kArrayValue,        // after ',' in an array
  kAfterObjectValue,  // ',' or '}'
  kAfterArrayValue,   // ',' or ']'
  kDone,              // root closed: nothing but whitespace may follow
  kPop,               // transition marker: close the container, state follows from the parent
  kError,             // transition marker
};

enum EventClass : uint8_t {
  kOpenObject,
  kOpenArray,
  kCloseObject,
  kCloseArray,
  kColonEvent,
  kComma,
  kQuote,
  kScalar,  // number or literal, or an invalid byte (the scalar check rejects it)
  kNumEventClasses,
};

constexpr std::array<uint8_t, 256> MakeEventClassTable() {
  std::array<uint8_t, 256> t{};
  for (auto& c : t) c = kScalar;
  t['{'] = kOpenObject;
  t['['] = kOpenArray;
  t['}'] = kCloseObject;
  t[']'] = kCloseArray;
  t[':'] = kColonEvent;
  t[','] = kComma;
  t['"'] = kQuote;
  return t;
}
constexpr std::array<uint8_t, 256> kEventClassOf = MakeEventClassTable();

using TransitionTable = std::array<std::array<uint8_t, kNumEventClasses>, kDone + 1>;
constexpr TransitionTable MakeTransitionTable() {
  TransitionTable t{};
  for (auto& row : t) {
    for (auto& next : row) next = kError;
  }
  for (State s : {kStart, kObjectValue, kArrayFirst, kArrayValue}) t[s][kOpenObject] = kObjectFirst;
  for (State s : {kObjectValue, kArrayFirst, kArrayValue}) t[s][kOpenArray] = kArrayFirst;
  for (State s : {kObjectFirst, kAfterObjectValue}) t[s][kCloseObject] = kPop;
  for (State s : {kArrayFirst, kAfterArrayValue}) t[s][kCloseArray] = kPop;
  t[kColon][kColonEvent] = kObjectValue;
  t[kAfterObjectValue][kComma] = kKey;
  t[kAfterArrayValue][kComma] = kArrayValue;
  t[kObjectFirst][kQuote] = kColon;
  t[kKey][kQuote] = kColon;
  for (EventClass c : {kQuote, kScalar}) {
    t[kObjectValue][c] = kAfterObjectValue;
    t[kArrayFirst][c] = kAfterArrayValue;
    t[kArrayValue][c] = kAfterArrayValue;
  }
  return t;
}
constexpr TransitionTable kTransition = MakeTransitionTable();

struct Grammar {
  uint8_t state = kStart;
  size_t depth = 0;
  uint64_t is_object[kMaxDepth / 64] = {};  // bit d: the container at depth d+1 is an object
};

// Runs the state machine over one block's events. Out of line: it is needed for a minority of
// blocks in string-heavy bodies, and keeping it apart leaves the block loop its registers.
// `scalar` and `digits` mark the block's number/literal bytes and its digits, so that the
// common plain integer (token ids, max_tokens) is checked without a byte loop.
__attribute__((noinline)) bool ConsumeEvents(Grammar* g, uint64_t events, uint64_t scalar,
                                             uint64_t digits, const unsigned char* p, size_t n,
                                             size_t pos) {
  uint8_t state = g->state;
  size_t depth = g->depth;
  do {
    const int bit = __builtin_ctzll(events);
    const size_t at = pos + static_cast<size_t>(bit);
    events &= events - 1;
    const uint8_t event = kEventClassOf[p[at]];
    uint8_t next = kTransition[state][event];
    if (next >= kPop) {
      if (next == kError) return false;
      --depth;
      next = depth == 0                                                     ? kDone
             : ((g->is_object[(depth - 1) >> 6] >> ((depth - 1) & 63)) & 1) ? kAfterObjectValue
                                                                            : kAfterArrayValue;
    } else if (event <= kOpenArray) {
      if (depth == kMaxDepth) return false;
      const uint64_t bit = uint64_t{1} << (depth & 63);
      if (event == kOpenObject) {
        g->is_object[depth >> 6] |= bit;
      } else {
        g->is_object[depth >> 6] &= ~bit;
      }
      ++depth;
    } else if (event == kScalar) {
      // Length of the token if it ends inside this block (64 - bit otherwise). A token that
      // fills the whole block leaves no zero bit: ctz(0) is undefined, so that case is 64.
      const uint64_t after = ~(scalar >> bit);
      const int len = after == 0 ? 64 : __builtin_ctzll(after);
      const uint64_t token = (len == 64 ? ~uint64_t{0} : (uint64_t{1} << len) - 1) << bit;
      const bool plain_integer =
          bit + len < 64 && (token & ~digits) == 0 && (len == 1 || p[at] != '0');
      if (!plain_integer && !ValidScalarToken(p, n, at)) return false;
    }
    state = next;
  } while (events != 0);
  g->state = state;
  g->depth = depth;
  return true;
}

// Returned by CheckUnicodeEscapes for an invalid escape.
constexpr size_t kBadEscape = SIZE_MAX - 1;

// Checks the \uXXXX escapes whose 'u' bits are set in `u`: four hex digits, and surrogates
// only as a high + low pair. `low_surrogate_at` is where a pair's second 'u' must be (it may be
// in the next block); returns its new value, or kBadEscape. (A return value rather than a
// pointer keeps the caller's state in registers.)
__attribute__((noinline)) size_t CheckUnicodeEscapes(uint64_t u, const unsigned char* p, size_t n,
                                                     size_t pos, size_t low_surrogate_at) {
  do {
    const size_t at = pos + static_cast<size_t>(__builtin_ctzll(u));  // the 'u'
    u &= u - 1;
    const int32_t unit = Hex4(p, n, at + 1);
    if (unit < 0) return kBadEscape;
    if (IsHighSurrogate(unit)) {
      if (n - at < 11 || p[at + 5] != '\\' || p[at + 6] != 'u' ||
          !IsLowSurrogate(Hex4(p, n, at + 7))) {
        return kBadEscape;
      }
      low_surrogate_at = at + 6;
    } else if (IsLowSurrogate(unit) && at != low_surrogate_at) {
      return kBadEscape;
    }
  } while (u != 0);
  return low_surrogate_at;
}

// State carried from one 64-byte block to the next.
struct ScanState {
  uint64_t prev_in_string = 0;  // all ones while inside a string
  uint64_t prev_escaped = 0;    // 1 if the next block's first byte is escaped
  uint64_t prev_scalar = 0;     // 1 if the previous block ended inside a number/literal
  uint64_t error = 0;           // nonzero once an error that needs no early exit was seen
  __m512i prev_block;
  __m512i prev_incomplete;  // nonzero if the previous block ends inside a UTF-8 character
  __m512i utf8_error;
  size_t low_surrogate_at = SIZE_MAX;
  unsigned char* w;
};

// Checks the escape sequences of one block: `escaped` marks bytes that follow a backslash
// inside a string.
LLMTAP_AVX512_TARGET __attribute__((always_inline)) inline bool CheckEscapes(
    ScanState& s, const unsigned char* p, size_t n, size_t pos, __m512i in, uint64_t escaped) {
  const __m512i entry = _mm512_permutex2var_epi8(_mm512_load_si512(kEscapableTable.bytes), in,
                                                 _mm512_load_si512(kEscapableTable.bytes + 64));
  const uint64_t escapable = _mm512_mask_cmpeq_epi8_mask(escaped, entry, in);
  s.error |= escaped & ~escapable;
  const uint64_t unicode = _mm512_mask_cmpeq_epi8_mask(escaped, in, _mm512_set1_epi8('u'));
  if (unicode != 0) {
    // \uXXXX whose digits are all in this block ('u' in bits 0..59): hex digits checked here.
    // Bodies serialized with ASCII escapes (Python's json.dumps default) are full of these.
    const uint64_t inner = unicode & (~uint64_t{0} >> 4);
    const __m512i lower = _mm512_or_si512(in, _mm512_set1_epi8(0x20));
    const uint64_t a_to_f =
        _mm512_cmplt_epu8_mask(_mm512_sub_epi8(lower, _mm512_set1_epi8('a')), _mm512_set1_epi8(6));
    const uint64_t hex =
        _mm512_cmplt_epu8_mask(_mm512_sub_epi8(in, _mm512_set1_epi8('0')), _mm512_set1_epi8(10)) |
        a_to_f;
    s.error |= ((inner << 1) | (inner << 2) | (inner << 3) | (inner << 4)) & ~hex;
    // Surrogates (D800..DFFF: 'd', then 8..f) need pairing, and the rest of the escapes
    // reach into the next block: both take the scalar check.
    const uint64_t eight_to_f = a_to_f | _mm512_cmpeq_epi8_mask(in, _mm512_set1_epi8('8')) |
                                _mm512_cmpeq_epi8_mask(in, _mm512_set1_epi8('9'));
    const uint64_t d = _mm512_cmpeq_epi8_mask(lower, _mm512_set1_epi8('d'));
    const uint64_t slow = (inner & (d >> 1) & (eight_to_f >> 2)) | (unicode & ~inner);
    if (slow != 0) {
      s.low_surrogate_at = CheckUnicodeEscapes(slow, p, n, pos, s.low_surrogate_at);
      if (s.low_surrogate_at == kBadEscape) return false;
    }
  }
  return true;
}

LLMTAP_AVX512_TARGET __attribute__((always_inline)) inline void CheckUtf8(ScanState& s, __m512i in,
                                                                          uint64_t non_ascii) {
  if (non_ascii == 0) {
    // An ASCII block cannot finish a character the previous block started.
    s.utf8_error = _mm512_or_si512(s.utf8_error, s.prev_incomplete);
    s.prev_incomplete = _mm512_setzero_si512();
  } else {
    s.utf8_error = _mm512_or_si512(s.utf8_error, Utf8Errors(in, s.prev_block));
    s.prev_incomplete = _mm512_subs_epu8(in, _mm512_load_si512(kIncompleteMax.bytes));
  }
  s.prev_block = in;
}

// Validates and compacts one block; false means invalid. `valid` masks the bytes of a final
// partial block (the rest of `in` is zero).
LLMTAP_AVX512_TARGET __attribute__((always_inline)) inline bool ScanBlock(ScanState& s, Grammar& g,
                                                                          const unsigned char* p,
                                                                          size_t n, size_t pos,
                                                                          __m512i in,
                                                                          uint64_t valid) {
  const uint64_t quote = _mm512_cmpeq_epi8_mask(in, _mm512_set1_epi8('"'));
  const uint64_t backslash = _mm512_cmpeq_epi8_mask(in, _mm512_set1_epi8('\\'));
  const uint64_t non_ascii = _mm512_movepi8_mask(in);
  const uint64_t control = _mm512_mask_cmplt_epu8_mask(valid, in, _mm512_set1_epi8(0x20));

  if (s.prev_in_string != 0 && quote == 0) {
    // The common case in chat bodies: the whole block is inside one string (message
    // content). Nothing to remove, no structure; only escapes, control characters and UTF-8.
    const uint64_t escaped = FindEscaped(backslash, &s.prev_escaped);
    s.error |= control;
    if (escaped != 0 && !CheckEscapes(s, p, n, pos, in, escaped)) return false;
    CheckUtf8(s, in, non_ascii);
    s.prev_scalar = 0;
    _mm512_storeu_si512(s.w, in);
    s.w += valid == ~uint64_t{0} ? 64 : _mm_popcnt_u64(valid);
    return true;
  }

  const uint64_t escaped = FindEscaped(backslash, &s.prev_escaped);
  const uint64_t real_quote = quote & ~escaped;
  // Opening quote and string contents; not the closing quote.
  const uint64_t in_string = PrefixXor(real_quote) ^ s.prev_in_string;
  s.prev_in_string = static_cast<uint64_t>(static_cast<int64_t>(in_string) >> 63);

  s.error |= control & in_string;
  const uint64_t escaped_in_string = escaped & in_string;
  if (escaped_in_string != 0 && !CheckEscapes(s, p, n, pos, in, escaped_in_string)) return false;
  CheckUtf8(s, in, non_ascii);

  // Classes of ASCII bytes outside strings (bytes >= 0x80 and padding read as class 0).
  const __m512i cls = _mm512_maskz_permutex2var_epi8(valid & ~non_ascii & ~in_string,
                                                     _mm512_load_si512(kClassTable.bytes), in,
                                                     _mm512_load_si512(kClassTable.bytes + 64));
  const uint64_t whitespace = _mm512_test_epi8_mask(cls, _mm512_set1_epi8(kClassWhitespace));
  const uint64_t structural = _mm512_test_epi8_mask(cls, _mm512_set1_epi8(kClassStructural));
  // Bytes of numbers and literals, and anything invalid outside strings (which the scalar
  // check then rejects): every such byte belongs to a run whose first byte is an event.
  const uint64_t scalar = valid & ~in_string & ~whitespace & ~structural & ~quote;
  const uint64_t scalar_start = scalar & ~((scalar << 1) | s.prev_scalar);
  s.prev_scalar = scalar >> 63;

  const uint64_t events = structural | (real_quote & in_string) | scalar_start;
  if (events != 0) {
    const uint64_t digits = _mm512_mask_cmplt_epu8_mask(
        scalar, _mm512_sub_epi8(in, _mm512_set1_epi8('0')), _mm512_set1_epi8(10));
    if (!ConsumeEvents(&g, events, scalar, digits, p, n, pos)) return false;
  }

  // Whitespace outside strings is the only thing removed.
  const uint64_t keep = valid & ~whitespace;
  if (keep == ~uint64_t{0}) {
    _mm512_storeu_si512(s.w, in);
    s.w += 64;
  } else {
    _mm512_storeu_si512(s.w, _mm512_maskz_compress_epi8(keep, in));
    s.w += _mm_popcnt_u64(keep);
  }
  return true;
}

// Validates and compacts; on false the output is garbage and the caller asks the reference
// why. `dst` must have room for n + kOutputSlack bytes.
LLMTAP_AVX512_TARGET bool CompactAvx512(const unsigned char* p, size_t n, unsigned char* dst,
                                        size_t* written) {
  ScanState s;
  s.prev_block = _mm512_setzero_si512();
  s.prev_incomplete = _mm512_setzero_si512();
  s.utf8_error = _mm512_setzero_si512();
  s.w = dst;
  Grammar g;
  size_t pos = 0;
  for (; n - pos >= 64; pos += 64) {
    if (!ScanBlock(s, g, p, n, pos, _mm512_loadu_si512(p + pos), ~uint64_t{0})) return false;
  }
  if (pos < n) {
    const uint64_t valid = (uint64_t{1} << (n - pos)) - 1;
    // Masked load: never touches bytes past the end; they read as 0.
    if (!ScanBlock(s, g, p, n, pos, _mm512_maskz_loadu_epi8(valid, p + pos), valid)) return false;
  }
  s.utf8_error = _mm512_or_si512(s.utf8_error, s.prev_incomplete);
  if (s.error != 0 || s.prev_in_string != 0 || g.state != kDone ||
      _mm512_test_epi8_mask(s.utf8_error, s.utf8_error) != 0) {
    return false;
  }
  *written = static_cast<size_t>(s.w - dst);
  return true;
}

}  // namespace

// Appends the compact form and returns true, or leaves *out as it was and returns false.
bool TryCompactAvx512(std::string_view body, std::string* out) {
  const size_t old = out->size();
  if (!GrowBy(out, body.size() + kOutputSlack)) return false;
  size_t written = 0;
  const bool ok = CompactAvx512(reinterpret_cast<const unsigned char*>(body.data()), body.size(),
                                reinterpret_cast<unsigned char*>(out->data() + old), &written);
  out->resize(ok ? old + written : old);
  return ok;
}

bool HasAvx512Kernel() { return Avx512KernelUsable(); }

// Testing hook: the kernel alone, without the reference fallback, so tests can hold it to the
// reference.
bool TryCompactAvx512ForTest(std::string_view body, std::string* out) {
  if (Avx512KernelUsable()) return TryCompactAvx512(body, out);
  return false;
}

#else  // !LLMTAP_JSON_AVX512

bool HasAvx512Kernel() { return false; }

bool TryCompactAvx512(std::string_view body, std::string* out) {
  (void)body;
  (void)out;
  return false;
}

bool TryCompactAvx512ForTest(std::string_view body, std::string* out) {
  return TryCompactAvx512(body, out);
}

#endif  // LLMTAP_JSON_AVX512

}  // namespace llmtap::json_compact_internal
