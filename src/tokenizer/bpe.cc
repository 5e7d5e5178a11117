#include "tokenizer/bpe.h"

#include <simdjson.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <bit>
#include <cstring>
#include <functional>
#include <limits>
#include <set>
#include <tuple>
#include <unordered_map>

#include "tokenizer/unicode.h"

namespace llmtap::tokenizer {
namespace {

// GPT-2's bytes_to_unicode: the printable bytes stand for themselves, the others for
// U+0100 + n in byte order. Its inverse, code point -> byte (-1: not in the alphabet), over
// every code point of one or two UTF-8 bytes with a lead byte up to 0xC5 (the alphabet ends
// at U+0143).
constexpr std::array<int16_t, 0x180> MakeByteLevelDecodeTable() {
  std::array<int16_t, 0x180> table{};
  for (auto& t : table) t = -1;
  int n = 0;
  for (int b = 0; b < 256; ++b) {
    bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
    table[printable ? b : 256 + n++] = static_cast<int16_t>(b);
  }
  return table;
}
constexpr std::array<int16_t, 0x180> kByteLevelDecode = MakeByteLevelDecodeTable();

// Appends the raw bytes that a vocab or merge string in the byte-level alphabet stands for to
// *out; false when it holds a character outside the alphabet (or invalid UTF-8), *out then
// holding a partial result.
bool AppendByteLevelBytes(std::string_view s, std::string* out) {
  const size_t start = out->size();
  out->resize(start + s.size());  // at most one byte per character
  char* w = out->data() + start;
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  const size_t n = s.size();
  for (size_t i = 0; i < n;) {
    uint32_t cp = p[i];
    if (cp < 0x80) {
      ++i;
    } else if (cp >= 0xC2 && cp <= 0xC5 && i + 1 < n && (p[i + 1] & 0xC0) == 0x80) {
      cp = ((cp & 0x1F) << 6) | (p[i + 1] & 0x3F);
      i += 2;
    } else {
      return false;
    }
    const int16_t b = kByteLevelDecode[cp];
    if (b < 0) return false;
    *w++ = static_cast<char>(b);
  }
  out->resize(static_cast<size_t>(w - out->data()));
  return true;
}

uint64_t HashPair(uint64_t key) {
  key ^= key >> 29;
  key *= 0xBF58476D1CE4E5B9ull;
  key ^= key >> 32;
  return key;
}

uint64_t Load64(const char* p) {
  uint64_t w;
  std::memcpy(&w, p, 8);
  return w;
}

// The first min(8, size) bytes of `s`, zero-padded, read with at most three loads (a byte-wise
// copy into a word is slow to read back).
uint64_t Head(std::string_view s) {
  const char* p = s.data();
  const size_t n = s.size();
  if (n >= 8) return Load64(p);
  if (n >= 4) {  // two 4-byte loads, overlapping when n < 8
    uint32_t lo, hi;
    std::memcpy(&lo, p, 4);
    std::memcpy(&hi, p + n - 4, 4);
    return lo | (uint64_t{hi} << (8 * (n - 4)));
  }
  if (n == 0) return 0;
  auto byte = [&](size_t k) { return uint64_t{static_cast<unsigned char>(p[k])} << (8 * k); };
  return byte(0) | byte(n / 2) | byte(n - 1);
}

// A 64-bit hash of the bytes, 8 at a time (the last 8 overlapping the ones before when the size
// is not a multiple of 8); past 32 bytes, four independent lanes of 8 (long segments).
uint64_t HashBytes(std::string_view s) {
  constexpr uint64_t kMul = 0xBF58476D1CE4E5B9ull;
  uint64_t h = 0x9E3779B97F4A7C15ull ^ s.size();
  if (s.size() <= 8) {
    h = (h ^ Head(s)) * kMul;
  } else {
    const char* p = s.data();
    size_t n = s.size();
    if (n > 32) {
      uint64_t lane[4] = {h, h ^ 1, h ^ 2, h ^ 3};
      for (; n > 32; p += 32, n -= 32) {
        for (int k = 0; k < 4; ++k) {
          lane[k] = (lane[k] ^ Load64(p + 8 * k)) * kMul;
          lane[k] ^= lane[k] >> 29;
        }
      }
      for (uint64_t l : lane) {
        h = (h ^ l) * kMul;
        h ^= h >> 29;
      }
    }
    for (; n > 8; p += 8, n -= 8) {
      h = (h ^ Load64(p)) * kMul;
      h ^= h >> 29;
    }
    h = (h ^ Load64(p + n - 8)) * kMul;
  }
  return HashPair(h ^ (h >> 31));
}

// An id cache key's hash and head (its first 8 bytes, zero-padded).
struct KeyHash {
  uint64_t hash, head;
};

static_assert(std::endian::native == std::endian::little, "a loaded word's low byte comes first");

// `w` with its low `n` bytes kept (n <= 8) and the others cleared: the first n of the 8 loaded
// into it, as Head reads them.
uint64_t KeepBytes(uint64_t w, size_t n) { return n == 0 ? 0 : w & (~uint64_t{0} >> (64 - 8 * n)); }

// An id cache key's hash: up to 16 bytes, its two halves (zero-padded) mixed in turn; longer,
// HashBytes. `readable` (>= the key's size) is how many bytes can be read from key.data(): with
// 16, a short key is read in two loads, masked, instead of in size-dependent steps (words lie
// inside their text, and their sizes vary too much for branches on them to be predicted).
inline KeyHash HashKey(std::string_view key, size_t readable) {
  constexpr uint64_t kMul = 0xBF58476D1CE4E5B9ull;
  const size_t n = key.size();
  if (n > 16) return {HashBytes(key), Load64(key.data())};
  uint64_t lo, hi;
  if (readable >= 16) {
    lo = KeepBytes(Load64(key.data()), std::min<size_t>(n, 8));
    hi = KeepBytes(Load64(key.data() + 8), n > 8 ? n - 8 : 0);
  } else {
    lo = Head(key);
    hi = n > 8 ? Head(key.substr(8)) : 0;
  }
  uint64_t h = ((0x9E3779B97F4A7C15ull ^ n) ^ lo) * kMul;
  h ^= h >> 29;
  h = (h ^ hi) * kMul;
  return {HashPair(h ^ (h >> 31)), lo};
}

// A per-thread cache of text -> ids for one tokenizer at a time, bounded (cleared when full).
// Two per thread: words (they repeat a lot in real text; Hugging Face keeps a similar cache), and
// long segments between added tokens (a chat template's markers cut every message into its own
// segment, and multi-turn requests send every earlier message again with each turn).
struct IdCache {
  const size_t max_entries, max_bytes;  // entries; bytes of keys and ids together
  uint64_t owner = 0;
  size_t bytes = 0, entries = 0;
  // Open addressing, linear probing, at most half full. A key's first 8 bytes are in its entry
  // (the rest in the keys arena), and a single id too (more in the ids arena): a short word of
  // one token is found reading its entry only.
  struct Entry {
    uint64_t hash;
    uint64_t head;     // the key's first 8 bytes, zero-padded
    uint32_t key_len;  // kEmpty: a free slot
    uint32_t key_off;  // the key's bytes after the first 8, in `keys`
    uint32_t ids_len;
    uint32_t ids;  // the id when ids_len is 1, else the ids' offset in `store`
  };
  static constexpr uint32_t kEmpty = std::numeric_limits<uint32_t>::max();
  static constexpr Entry kFreeEntry{0, 0, kEmpty, 0, 0, 0};
  std::vector<Entry> table;
  std::string keys;
  std::vector<uint32_t> store;

  IdCache(size_t entries, size_t total_bytes) : max_entries(entries), max_bytes(total_bytes) {}
  // Appends `key`'s ids to *ids and returns true when cached for tokenizer `who`. `kh` is
  // HashKey(key) (the full key is compared on a match).
  bool Get(uint64_t who, std::string_view key, KeyHash kh, std::vector<uint32_t>* ids) {
    if (owner != who) {
      owner = who;
      Clear();
    }
    if (entries == 0) return false;
    const size_t mask = table.size() - 1;
    for (size_t i = kh.hash & mask;; i = (i + 1) & mask) {
      const Entry& e = table[i];
      if (e.key_len == kEmpty) return false;
      if (e.hash == kh.hash && e.key_len == key.size() && e.head == kh.head &&
          (key.size() <= 8 ||
           std::memcmp(keys.data() + e.key_off, key.data() + 8, key.size() - 8) == 0)) {
        if (e.ids_len == 1) {
          ids->push_back(e.ids);
        } else {
          ids->insert(ids->end(), store.begin() + e.ids, store.begin() + e.ids + e.ids_len);
        }
        return true;
      }
    }
  }
  // Keeps ids[from, end) as `key`'s (after a Get that missed), `kh` being HashKey(key).
  void Put(std::string_view key, KeyHash kh, const std::vector<uint32_t>& ids, size_t from) {
    const size_t n = ids.size() - from;
    if (entries >= max_entries || bytes + key.size() + 4 * n > max_bytes) Clear();
    if ((entries + 1) * 2 > table.size()) Grow();
    const size_t mask = table.size() - 1;
    size_t i = kh.hash & mask;
    while (table[i].key_len != kEmpty) i = (i + 1) & mask;
    Entry e{kh.hash,
            kh.head,
            static_cast<uint32_t>(key.size()),
            static_cast<uint32_t>(keys.size()),
            static_cast<uint32_t>(n),
            0};
    if (key.size() > 8) keys.append(key.substr(8));
    if (n == 1) {
      e.ids = ids[from];
    } else {
      e.ids = static_cast<uint32_t>(store.size());
      store.insert(store.end(), ids.begin() + static_cast<ptrdiff_t>(from), ids.end());
    }
    table[i] = e;
    bytes += key.size() + 4 * n;
    ++entries;
  }
  void Grow() {
    std::vector<Entry> old(std::max<size_t>(1024, table.size() * 2), kFreeEntry);
    old.swap(table);
    const size_t mask = table.size() - 1;
    for (const Entry& e : old) {
      if (e.key_len == kEmpty) continue;
      size_t i = e.hash & mask;
      while (table[i].key_len != kEmpty) i = (i + 1) & mask;
      table[i] = e;
    }
  }
  void Clear() {
    std::fill(table.begin(), table.end(), kFreeEntry);
    keys.clear();
    store.clear();
    bytes = 0;
    entries = 0;
  }
};
constexpr size_t kMaxCachedWordBytes = 128;
constexpr size_t kMinCachedSegmentBytes = 256;

std::atomic<uint64_t> next_serial{1};

// The special tokens of tokenizer.json's `post_processor` around a single sequence, as Hugging
// Face applies them with add_special_tokens=True: TemplateProcessing's `single` template (the
// ids of its SpecialToken items before and after Sequence A), a Sequence of processors (each
// in turn), Roberta/Bert processing (cls, then sep). ByteLevel and the rest add none. False
// with *why for a template that names a special token it does not define.
bool PromptSpecialsOf(simdjson::dom::element post, PromptSpecials* out, std::string* why) {
  std::string_view type;
  if (post.is_null() || post["type"].get(type)) return true;
  if (type == "Sequence") {
    simdjson::dom::array processors;
    if (post["processors"].get(processors)) return true;
    for (simdjson::dom::element p : processors) {
      if (!PromptSpecialsOf(p, out, why)) return false;
    }
    return true;
  }
  if (type == "RobertaProcessing" || type == "BertProcessing") {
    uint64_t cls, sep;
    if (post["cls"].at(1).get(cls) || post["sep"].at(1).get(sep)) return true;
    out->prefix.push_back(static_cast<uint32_t>(cls));
    out->suffix.push_back(static_cast<uint32_t>(sep));
    return true;
  }
  if (type != "TemplateProcessing") return true;
  simdjson::dom::array single;
  if (post["single"].get(single)) return true;
  bool after = false;
  for (simdjson::dom::element item : single) {
    std::string_view name;
    if (item["Sequence"].error() == simdjson::SUCCESS) {
      after = true;
      continue;
    }
    if (item["SpecialToken"]["id"].get(name)) continue;
    simdjson::dom::array ids;
    if (post["special_tokens"][name]["ids"].get(ids)) {
      *why = "post_processor names the special token " + std::string(name) +
             " without defining its ids";
      return false;
    }
    for (simdjson::dom::element id : ids) {
      uint64_t v;
      if (id.get(v) || v > 0xFFFFFFFFu) continue;
      (after ? out->suffix : out->prefix).push_back(static_cast<uint32_t>(v));
    }
  }
  return true;
}

// The chat style a tokenizer.json implies when no chat template comes with it: the family
// from its role markers; Llama-3.1+ from <|eom_id|> (new in 3.1); Qwen3 from <think>; Qwen2.5
// (tool and fill-in-the-middle tokens, no <think>) with its template's default system prompt.
ChatStyle StyleFromAddedTokens(const std::set<std::string, std::less<>>& markers) {
  ChatStyle style;
  style.source = "tokenizer.json's added tokens";
  if (markers.contains("<|start_header_id|>")) {
    style.family = ChatFamily::kLlama3;
    style.dated_system = markers.contains("<|eom_id|>");
  } else if (markers.contains("<|im_start|>")) {
    style.family = ChatFamily::kChatMl;
    style.thinking = markers.contains("<think>");
    if (!style.thinking && markers.contains("<tool_call>") && markers.contains("<|fim_prefix|>")) {
      style.default_system = "You are Qwen, created by Alibaba Cloud. You are a helpful assistant.";
    }
  } else {
    style.source.clear();
  }
  return style;
}

bool IsWordChar(uint32_t cp) {
  return cp == '_' || (ClassOf(cp) & (kClassLetter | kClassNumber)) != 0;
}

// The code point ending just before `pos` (kInvalidCodePoint when none decodes there).
uint32_t PrevCodePoint(std::string_view s, size_t pos, size_t* len) {
  for (size_t k = 1; k <= 4 && k <= pos; ++k) {
    auto b = static_cast<unsigned char>(s[pos - k]);
    if ((b & 0xC0) == 0x80) continue;
    DecodedChar c = DecodeUtf8(s, pos - k);
    if (c.len == k) {
      *len = k;
      return c.cp;
    }
    break;
  }
  *len = 1;
  return kInvalidCodePoint;
}

bool IsSpaceCp(uint32_t cp) { return cp != kInvalidCodePoint && (ClassOf(cp) & kClassSpace); }

// The merge and vocab tables: a power of two at least 1.5 times the entries (at most two
// thirds full).
size_t TableCapacity(size_t n) {
  size_t cap = 16;
  while (cap < n + n / 2) cap <<= 1;
  return cap;
}
constexpr uint64_t kFreeKey = std::numeric_limits<uint64_t>::max();
constexpr uint32_t kFreeLen = std::numeric_limits<uint32_t>::max();

}  // namespace

void BpeTokenizer::MergeTable::Reserve(size_t n) {
  const size_t cap = TableCapacity(n);
  slots.assign(cap, Slot{kFreeKey, 0});
  mask = cap - 1;
}

void BpeTokenizer::MergeTable::Insert(uint32_t a, uint32_t b, uint32_t rank, uint32_t merged) {
  uint64_t key = (uint64_t{a} << 32) | b;
  for (uint64_t i = HashPair(key) & mask;; i = (i + 1) & mask) {
    Slot& s = slots[i];
    if (s.key == key || s.key == kFreeKey) {
      s.key = key;
      s.value = (uint64_t{rank} << 32) | merged;
      return;
    }
  }
}

bool BpeTokenizer::MergeTable::Find(uint32_t a, uint32_t b, uint32_t* rank,
                                    uint32_t* merged) const {
  uint64_t key = (uint64_t{a} << 32) | b;
  for (uint64_t i = HashPair(key) & mask;; i = (i + 1) & mask) {
    const Slot& s = slots[i];
    if (s.key == key) {
      *rank = static_cast<uint32_t>(s.value >> 32);
      *merged = static_cast<uint32_t>(s.value);
      return true;
    }
    if (s.key == kFreeKey) return false;
  }
}

void BpeTokenizer::VocabTable::Reserve(size_t n) {
  const size_t cap = TableCapacity(n);
  slots.assign(cap, Slot{0, 0, Span{0, kFreeLen}});
  mask = cap - 1;
}

void BpeTokenizer::VocabTable::Insert(std::string_view key, Span bytes, uint32_t id,
                                      const std::string& arena) {
  const uint64_t h = HashBytes(key);
  const auto tag = static_cast<uint32_t>(h >> 32);
  for (uint64_t i = h & mask;; i = (i + 1) & mask) {
    Slot& s = slots[i];
    if (s.bytes.len == kFreeLen) {
      s = Slot{tag, id, bytes};
      return;
    }
    if (s.tag == tag && s.bytes.len == key.size() &&
        std::memcmp(arena.data() + s.bytes.off, key.data(), key.size()) == 0) {
      return;
    }
  }
}

bool BpeTokenizer::VocabTable::Find(std::string_view key, const std::string& arena,
                                    uint32_t* id) const {
  const uint64_t h = HashBytes(key);
  const auto tag = static_cast<uint32_t>(h >> 32);
  for (uint64_t i = h & mask;; i = (i + 1) & mask) {
    const Slot& s = slots[i];
    if (s.bytes.len == kFreeLen) return false;
    if (s.tag == tag && s.bytes.len == key.size() &&
        std::memcmp(arena.data() + s.bytes.off, key.data(), key.size()) == 0) {
      *id = s.id;
      return true;
    }
  }
}

void BpeTokenizer::AddedMatcher::Build() {
  std::stable_sort(tokens.begin(), tokens.end(), [](const AddedToken& a, const AddedToken& b) {
    return a.content.size() > b.content.size();
  });
  for (auto& list : by_first_byte) list.clear();
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (tokens[i].content.empty()) continue;
    by_first_byte[static_cast<unsigned char>(tokens[i].content[0])].push_back(
        static_cast<uint16_t>(i));
  }
  only_first_byte = -1;
  for (int b = 0; b < 256; ++b) {
    if (by_first_byte[b].empty()) continue;
    if (only_first_byte != -1) {
      only_first_byte = -1;
      break;
    }
    only_first_byte = b;
  }
}

bool BpeTokenizer::AddedMatcher::Find(std::string_view text, size_t from, size_t* start,
                                      size_t* end, uint32_t* id) const {
  for (size_t i = from; i < text.size(); ++i) {
    if (only_first_byte >= 0) {  // skip to the next occurrence of that byte
      const void* next = std::memchr(text.data() + i, only_first_byte, text.size() - i);
      if (next == nullptr) return false;
      i = static_cast<size_t>(static_cast<const char*>(next) - text.data());
    }
    const auto& candidates = by_first_byte[static_cast<unsigned char>(text[i])];
    for (uint16_t c : candidates) {
      const AddedToken& t = tokens[c];
      if (text.compare(i, t.content.size(), t.content) != 0) continue;
      size_t s = i, e = i + t.content.size();
      size_t len;
      if (t.single_word) {
        bool left_ok = s == 0 || !IsWordChar(PrevCodePoint(text, s, &len));
        bool right_ok = e == text.size() || !IsWordChar(DecodeUtf8(text, e).cp);
        if (!left_ok || !right_ok) continue;
      }
      // lstrip/rstrip: the token swallows the whitespace next to it (not past `from`, the end
      // of the previous match).
      while (t.lstrip && s > from && IsSpaceCp(PrevCodePoint(text, s, &len))) s -= len;
      while (t.rstrip && e < text.size()) {
        DecodedChar c = DecodeUtf8(text, e);
        if (!IsSpaceCp(c.cp)) break;
        e += c.len;
      }
      *start = s;
      *end = e;
      *id = t.id;
      return true;
    }
  }
  return false;
}

BpeTokenizer::BpeTokenizer() : serial_(next_serial.fetch_add(1)) {}

static_assert(BpeTokenizer::kJsonPadding >= simdjson::SIMDJSON_PADDING);

std::unique_ptr<BpeTokenizer> BpeTokenizer::FromJson(std::string_view json, std::string_view name,
                                                     std::string* error, bool padded) {
  auto fail = [&](std::string why) {
    *error = std::string(name) + ": " + why;
    return nullptr;
  };
  simdjson::dom::parser parser;
  simdjson::dom::element root;
  if (auto err = parser.parse(json.data(), json.size(), /*realloc_if_needed=*/!padded).get(root)) {
    return fail(std::string("not valid JSON: ") + simdjson::error_message(err));
  }
  simdjson::dom::object model;
  if (root["model"].get(model)) return fail("no \"model\" object (not a tokenizer.json?)");
  std::string_view model_type = "BPE";  // older files omit the type of a BPE model
  std::ignore = model["type"].get(model_type);
  if (model_type != "BPE") {
    return fail("unsupported model type \"" + std::string(model_type) +
                "\" (supported: byte-level BPE as in Llama-3, Qwen2/3 and GPT-2)");
  }
  auto tok = std::unique_ptr<BpeTokenizer>(new BpeTokenizer());
  tok->name_ = std::string(name);

  // Normalizer: none or NFC (Qwen2/3); anything else would change the ids silently.
  std::function<bool(simdjson::dom::element, std::string*)> check_normalizer =
      [&](simdjson::dom::element n, std::string* why) {
        if (n.is_null()) return true;
        std::string_view type;
        if (n["type"].get(type)) {
          *why = "normalizer without a type";
          return false;
        }
        if (type == "NFC") {
          tok->nfc_ = true;
          return true;
        }
        if (type == "Sequence") {
          simdjson::dom::array list;
          if (n["normalizers"].get(list)) return false;
          for (auto item : list) {
            if (!check_normalizer(item, why)) return false;
          }
          return true;
        }
        *why = "unsupported normalizer \"" + std::string(type) + "\" (supported: NFC)";
        return false;
      };
  simdjson::dom::element normalizer;
  if (!root["normalizer"].get(normalizer)) {
    std::string why;
    if (!check_normalizer(normalizer, &why)) return fail(why);
  }

  // Pre-tokenizer.
  simdjson::dom::element pre;
  if (root["pre_tokenizer"].get(pre) || pre.is_null()) {
    return fail("no pre_tokenizer (byte-level BPE needs ByteLevel)");
  }
  auto byte_level_ok = [&](simdjson::dom::element e, bool want_regex, std::string* why) {
    bool add_prefix_space = false, use_regex = true;
    std::ignore = e["add_prefix_space"].get(add_prefix_space);
    std::ignore = e["use_regex"].get(use_regex);
    if (add_prefix_space) {
      *why = "ByteLevel pre-tokenizer with add_prefix_space=true is not supported";
      return false;
    }
    if (use_regex != want_regex) {
      *why = "unsupported ByteLevel pre-tokenizer layout (use_regex)";
      return false;
    }
    return true;
  };
  {
    std::string_view type;
    std::ignore = pre["type"].get(type);
    std::string why;
    if (type == "ByteLevel") {
      if (!byte_level_ok(pre, true, &why)) return fail(why);
      tok->pattern_ = SplitPattern::kGpt2;
    } else if (type == "Sequence") {
      simdjson::dom::array list;
      if (pre["pretokenizers"].get(list) || list.size() != 2) {
        return fail("unsupported pre_tokenizer Sequence (expected Split then ByteLevel)");
      }
      simdjson::dom::element split = list.at(0), byte_level = list.at(1);
      std::string_view t0, t1, regex, behavior = "Isolated";
      std::ignore = split["type"].get(t0);
      std::ignore = byte_level["type"].get(t1);
      if (t0 != "Split" || t1 != "ByteLevel") {
        return fail("unsupported pre_tokenizer Sequence [" + std::string(t0) + ", " +
                    std::string(t1) + "] (supported: [Split, ByteLevel])");
      }
      bool invert = false;
      std::ignore = split["invert"].get(invert);
      std::ignore = split["behavior"].get(behavior);
      if (split["pattern"]["Regex"].get(regex)) return fail("Split pre-tokenizer without a Regex");
      auto pattern = RecognizeSplitRegex(regex);
      if (!pattern) return fail("unsupported Split regex " + std::string(regex));
      if (invert || behavior != "Isolated") {
        return fail("unsupported Split behavior " + std::string(behavior));
      }
      if (!byte_level_ok(byte_level, false, &why)) return fail(why);
      tok->pattern_ = *pattern;
    } else if (type == "Metaspace") {
      return fail("SentencePiece-style BPE (Metaspace pre-tokenizer) is not supported");
    } else {
      return fail("unsupported pre_tokenizer \"" + std::string(type) + "\"");
    }
  }

  // Model options that byte-level BPE of these families never uses.
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    std::string_view v;
    if (!model[key].get(v) && !v.empty()) return fail(std::string("BPE with ") + key);
  }
  bool flag = false;
  if (!model["byte_fallback"].get(flag) && flag) {
    return fail("BPE with byte_fallback (SentencePiece style) is not supported");
  }
  double dropout = 0;
  if (!model["dropout"].get(dropout) && dropout > 0) return fail("BPE with dropout");
  std::ignore = model["ignore_merges"].get(tok->ignore_merges_);

  // Vocab. Its tokens' raw bytes go to one arena (bytes_), their spans to id_bytes_; tokens
  // outside the byte-level alphabet (unreachable by BPE; they decode as written) keep their text
  // and are found by it in `unreachable` (merges name tokens by their text).
  simdjson::dom::object vocab;
  if (model["vocab"].get(vocab)) return fail("BPE model without a vocab");
  if (json.size() >= std::numeric_limits<uint32_t>::max() / 2) return fail("larger than 2 GB");
  std::unordered_map<std::string, uint32_t> unreachable;
  std::string& bytes = tok->bytes_;
  tok->vocab_.Reserve(vocab.size());
  tok->id_bytes_.reserve(vocab.size());
  for (auto field : vocab) {
    uint64_t id;
    if (field.value.get(id) || id >= (1u << 31)) return fail("vocab id is not a small integer");
    if (id >= tok->id_bytes_.size()) tok->id_bytes_.resize(id + 1);
    const auto off = static_cast<uint32_t>(bytes.size());
    if (AppendByteLevelBytes(field.key, &bytes)) {
      const Span span{off, static_cast<uint32_t>(bytes.size() - off)};
      tok->vocab_.Insert(std::string_view(bytes).substr(off), span, static_cast<uint32_t>(id),
                         bytes);
      tok->id_bytes_[id] = span;
    } else {
      bytes.resize(off);
      bytes.append(field.key);
      tok->id_bytes_[id] = Span{off, static_cast<uint32_t>(field.key.size())};
      unreachable.emplace(std::string(field.key), static_cast<uint32_t>(id));
    }
  }
  for (int b = 0; b < 256; ++b) {
    const char c = static_cast<char>(b);
    if (!tok->vocab_.Find(std::string_view(&c, 1), bytes, &tok->byte_ids_[b])) {
      return fail("vocab lacks the byte-level token for byte " + std::to_string(b) +
                  " (not a byte-level BPE?)");
    }
  }

  // Merges: "a b" strings (older files) or ["a", "b"] pairs.
  simdjson::dom::array merges;
  if (model["merges"].get(merges)) return fail("BPE model without merges");
  tok->merges_.Reserve(merges.size());
  // A token's id by its text: by its raw bytes when the text is in the byte-level alphabet.
  std::string raw;
  auto find = [&](std::string_view text, uint32_t* id) {
    raw.clear();
    if (AppendByteLevelBytes(text, &raw)) return tok->vocab_.Find(raw, bytes, id);
    auto it = unreachable.find(std::string(text));
    if (it == unreachable.end()) return false;
    *id = it->second;
    return true;
  };
  std::string ab;  // raw(a) + raw(b), which is raw(a + b): the alphabet maps char by char
  uint32_t rank = 0;
  for (auto m : merges) {
    std::string_view a, b, s;
    if (!m.get(s)) {
      size_t sp = s.find(' ');
      if (sp == std::string_view::npos) return fail("merge without a space: " + std::string(s));
      a = s.substr(0, sp);
      b = s.substr(sp + 1);
    } else {
      simdjson::dom::array pair;
      if (m.get(pair) || pair.size() != 2 || pair.at(0).get(a) || pair.at(1).get(b)) {
        return fail("merge is neither \"a b\" nor [a, b]");
      }
    }
    uint32_t ia, ib, im;
    bool found;
    ab.clear();
    const bool a_in_alphabet = AppendByteLevelBytes(a, &ab);
    const size_t na = ab.size();
    if (a_in_alphabet && AppendByteLevelBytes(b, &ab)) {
      const std::string_view raw_ab = ab;
      found = tok->vocab_.Find(raw_ab.substr(0, na), bytes, &ia) &&
              tok->vocab_.Find(raw_ab.substr(na), bytes, &ib) &&
              tok->vocab_.Find(raw_ab, bytes, &im);
    } else {
      found = find(a, &ia) && find(b, &ib) && find(std::string(a) + std::string(b), &im);
    }
    if (!found) {
      return fail("merge of tokens missing from the vocab: " + std::string(a) + " " +
                  std::string(b));
    }
    tok->merges_.Insert(ia, ib, rank++, im);
  }

  // Added tokens.
  std::set<std::string, std::less<>> markers;
  simdjson::dom::array added;
  if (!root["added_tokens"].get(added)) {
    for (auto a : added) {
      AddedToken t;
      uint64_t id;
      std::string_view content;
      bool special = false, normalized;
      if (a["id"].get(id) || a["content"].get(content) || id >= (1u << 31)) {
        return fail("added token without id or content");
      }
      std::ignore = a["special"].get(special);
      if (a["normalized"].get(normalized)) normalized = !special;  // Hugging Face's default
      t.single_word = t.lstrip = t.rstrip = false;
      std::ignore = a["single_word"].get(t.single_word);
      std::ignore = a["lstrip"].get(t.lstrip);
      std::ignore = a["rstrip"].get(t.rstrip);
      t.id = static_cast<uint32_t>(id);
      t.content = std::string(content);
      if (id >= tok->id_bytes_.size()) tok->id_bytes_.resize(id + 1);
      tok->id_bytes_[id] =
          Span{static_cast<uint32_t>(bytes.size()), static_cast<uint32_t>(content.size())};
      bytes.append(content);
      if (normalized && tok->nfc_) {  // matched against normalized text: normalize it too
        std::string n;
        AppendNfc(t.content, &n);
        t.content = std::move(n);
      }
      markers.insert(std::string(content));
      (normalized ? tok->added_normalized_ : tok->added_raw_).tokens.push_back(std::move(t));
    }
  }
  if (tok->added_raw_.tokens.size() > 65535 || tok->added_normalized_.tokens.size() > 65535) {
    return fail("too many added tokens");
  }
  tok->added_raw_.Build();
  tok->added_normalized_.Build();
  tok->chat_style_ = StyleFromAddedTokens(markers);
  simdjson::dom::element post;
  if (!root["post_processor"].get(post)) {
    std::string why;
    if (!PromptSpecialsOf(post, &tok->prompt_specials_, &why)) return fail(why);
  }
  return tok;
}

template <class EncodeGap>
void BpeTokenizer::AddedMatcher::Encode(std::string_view text, std::vector<uint32_t>* ids,
                                        EncodeGap encode_gap) const {
  size_t pos = 0, start, end;
  uint32_t id;
  while (!empty() && Find(text, pos, &start, &end, &id)) {
    encode_gap(text.substr(pos, start - pos), ids);
    ids->push_back(id);
    pos = end;
  }
  encode_gap(text.substr(pos), ids);
}

void BpeTokenizer::Encode(std::string_view text, std::vector<uint32_t>* ids) const {
  added_raw_.Encode(text, ids, [this](std::string_view segment, std::vector<uint32_t>* out) {
    EncodeSegment(segment, out);
  });
}

void BpeTokenizer::EncodeSegment(std::string_view segment, std::vector<uint32_t>* ids) const {
  if (segment.empty()) return;
  if (segment.size() >= kMinCachedSegmentBytes) {
    thread_local IdCache cache(1 << 16, size_t{64} << 20);
    const KeyHash kh = HashKey(segment, segment.size());
    if (cache.Get(serial_, segment, kh, ids)) return;
    const size_t before = ids->size();
    EncodeUncachedSegment(segment, ids);
    cache.Put(segment, kh, *ids, before);
    return;
  }
  EncodeUncachedSegment(segment, ids);
}

void BpeTokenizer::EncodeUncachedSegment(std::string_view segment,
                                         std::vector<uint32_t>* ids) const {
  std::string normalized;
  if (nfc_ && !TriviallyNfc(segment)) {
    AppendNfc(segment, &normalized);
    segment = normalized;
  }
  added_normalized_.Encode(segment, ids, [this](std::string_view text, std::vector<uint32_t>* out) {
    EncodeNormalized(text, out);
  });
}

inline void BpeTokenizer::EncodePiece(std::string_view word, size_t readable,
                                      std::vector<uint32_t>* ids) const {
  if (word.size() == 1) {
    ids->push_back(byte_ids_[static_cast<unsigned char>(word[0])]);
    return;
  }
  if (ignore_merges_) {
    uint32_t id;
    if (vocab_.Find(word, bytes_, &id)) {
      ids->push_back(id);
      return;
    }
  }
  if (word.size() > kMaxCachedWordBytes) {
    MergeWord(word, ids);
    return;
  }
  thread_local IdCache cache(1 << 16, size_t{16} << 20);
  const KeyHash kh = HashKey(word, readable);
  if (cache.Get(serial_, word, kh, ids)) return;
  const size_t before = ids->size();
  MergeWord(word, ids);
  cache.Put(word, kh, *ids, before);
}

void BpeTokenizer::EncodeNormalized(std::string_view text, std::vector<uint32_t>* ids) const {
  if (text.empty()) return;
  thread_local std::vector<uint32_t> ends;
  ends.clear();
  PreTokenize(pattern_, text, &ends);
  uint32_t begin = 0;
  for (uint32_t end : ends) {
    EncodePiece(text.substr(begin, end - begin), text.size() - begin, ids);
    begin = end;
  }
}

void BpeTokenizer::EncodeWord(std::string_view word, std::vector<uint32_t>* ids) const {
  EncodePiece(word, word.size(), ids);
}

void BpeTokenizer::MergeWord(std::string_view word, std::vector<uint32_t>* ids) const {
  constexpr uint32_t kNone = std::numeric_limits<uint32_t>::max();
  size_t n = word.size();
  thread_local std::vector<uint32_t> sym, rank, merged;
  sym.resize(n);
  for (size_t k = 0; k < n; ++k) sym[k] = byte_ids_[static_cast<unsigned char>(word[k])];
  if (n <= 64) {
    // Short words: keep the rank of every adjacent pair; merge the lowest (leftmost on ties,
    // which is Hugging Face's order) and refresh only its two neighbours.
    rank.resize(n);
    merged.resize(n);
    auto refresh = [&](size_t k) {
      if (!merges_.Find(sym[k], sym[k + 1], &rank[k], &merged[k])) rank[k] = kNone;
    };
    for (size_t k = 0; k + 1 < n; ++k) refresh(k);
    size_t m = n;
    while (m > 1) {
      size_t best = 0;
      for (size_t k = 1; k + 1 < m; ++k) {
        if (rank[k] < rank[best]) best = k;
      }
      if (rank[best] == kNone) break;
      sym[best] = merged[best];
      for (size_t k = best + 1; k + 1 < m; ++k) {
        sym[k] = sym[k + 1];
        rank[k] = rank[k + 1];
        merged[k] = merged[k + 1];
      }
      --m;
      if (best > 0) refresh(best - 1);
      if (best + 1 < m) refresh(best);
    }
    ids->insert(ids->end(), sym.begin(), sym.begin() + m);
    return;
  }
  // Long words (whitespace runs, CJK runs): a linked list of symbols and a min-heap of
  // (rank, position) pairs, as Hugging Face's Word::merge_all does.
  thread_local std::vector<int32_t> prev, next;
  struct Candidate {
    uint64_t key;  // rank << 32 | position
    uint32_t merged;
    bool operator<(const Candidate& o) const { return key > o.key; }  // min-heap
  };
  thread_local std::vector<Candidate> heap;
  prev.resize(n);
  next.resize(n);
  heap.clear();
  for (size_t k = 0; k < n; ++k) {
    prev[k] = static_cast<int32_t>(k) - 1;
    next[k] = k + 1 < n ? static_cast<int32_t>(k + 1) : -1;
  }
  auto push = [&](int32_t k) {
    uint32_t r, mg;
    if (merges_.Find(sym[k], sym[next[k]], &r, &mg)) {
      heap.push_back({(uint64_t{r} << 32) | static_cast<uint32_t>(k), mg});
      std::push_heap(heap.begin(), heap.end());
    }
  };
  for (size_t k = 0; k + 1 < n; ++k) push(static_cast<int32_t>(k));
  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end());
    Candidate c = heap.back();
    heap.pop_back();
    auto k = static_cast<int32_t>(c.key & 0xFFFFFFFF);
    auto r = static_cast<uint32_t>(c.key >> 32);
    if (sym[k] == kNone || next[k] < 0) continue;
    uint32_t cur_rank, mg;
    // Stale entry: the pair at k changed since it was queued (ranks identify pairs).
    if (!merges_.Find(sym[k], sym[next[k]], &cur_rank, &mg) || cur_rank != r) continue;
    int32_t right = next[k];
    sym[k] = mg;
    sym[right] = kNone;
    next[k] = next[right];
    if (next[k] >= 0) prev[next[k]] = k;
    if (prev[k] >= 0) push(prev[k]);
    if (next[k] >= 0) push(k);
  }
  for (int32_t k = 0; k >= 0; k = next[k]) ids->push_back(sym[k]);
}

std::string BpeTokenizer::Decode(std::span<const uint32_t> ids) const {
  std::string out;
  for (uint32_t id : ids) {
    if (id < id_bytes_.size()) out.append(bytes_, id_bytes_[id].off, id_bytes_[id].len);
  }
  return out;
}

bool BpeTokenizer::EncodeRequest(std::string_view body_json, std::vector<uint32_t>* ids,
                                 std::string* error) const {
  return EncodeRequestBody(*this, chat_style_, prompt_specials_, body_json, ids, error);
}

std::optional<uint32_t> BpeTokenizer::EndOfTurnId() const {
  // A chat family's end-of-turn marker is what its chat answers end on (a Llama-3 base
  // model's eos_token is <|end_of_text|>, but its chat turns end on <|eot_id|>); eos_token
  // otherwise.
  std::string_view token = end_of_turn_;
  if (chat_style_.family == ChatFamily::kLlama3) token = "<|eot_id|>";
  if (chat_style_.family == ChatFamily::kChatMl) token = "<|im_end|>";
  if (token.empty()) return std::nullopt;
  std::vector<uint32_t> ids;
  Encode(token, &ids);
  if (ids.size() != 1) return std::nullopt;
  return ids[0];
}

std::string BpeTokenizer::Describe() const {
  return name_ + ": byte-level BPE, " + std::to_string(id_bytes_.size()) +
         " ids (chat: " + chat_style_.Describe() + ")";
}

}  // namespace llmtap::tokenizer
