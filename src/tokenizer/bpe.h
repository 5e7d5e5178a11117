// Byte-level BPE from a Hugging Face tokenizer.json (Llama-3, Qwen2/3, GPT-2 families).
//
// What a tokenizer.json may hold to load here (anything else is refused, naming the part):
//   normalizer     null, NFC, or a Sequence of those
//   pre_tokenizer  ByteLevel(use_regex=true, add_prefix_space=false)  [GPT-2], or
//                  Sequence[Split(known regex, Isolated), ByteLevel(use_regex=false,
//                  add_prefix_space=false)]  [Llama-3, Qwen2/3]; see pretokenizer.h
//   model          BPE without dropout, byte_fallback, continuing_subword_prefix or
//                  end_of_word_suffix; ignore_merges honoured (Llama-3 sets it)
//   added_tokens   matched in the text first, leftmost-longest, honouring single_word,
//                  lstrip, rstrip and normalized as Hugging Face's AddedVocabulary does
// post_processor and decoder are not consulted: Encode is `add_special_tokens=False`, and
// Decode is the byte-level inverse.
//
// Invalid UTF-8 (Encode accepts any bytes): an invalid sequence pre-tokenizes as the U+FFFD
// that a decoder would put in its place (same piece boundaries), but its raw bytes go through
// the byte-level map, so Decode(Encode(x)) == x for every x. Hugging Face cannot take such
// input (Rust strings are UTF-8); callers that want its ids decode to U+FFFD first.
//
// Threads: immutable after Load; Encode keeps a per-thread cache of word -> ids.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/chat.h"
#include "tokenizer/pretokenizer.h"
#include "tokenizer/tokenizer.h"

namespace llmtap::tokenizer {

class BpeTokenizer final : public Tokenizer {
 public:
  // Parses tokenizer.json's contents; `name` is used in messages. nullptr + *error on failure.
  // `padded`: at least kJsonPadding readable bytes follow `json` (the parser reads past the end
  // in blocks), which spares a copy of the file.
  static constexpr size_t kJsonPadding = 64;
  static std::unique_ptr<BpeTokenizer> FromJson(std::string_view json, std::string_view name,
                                                std::string* error, bool padded = false);

  void Encode(std::string_view text, std::vector<uint32_t>* ids) const override;
  std::string Decode(std::span<const uint32_t> ids) const override;
  bool EncodeRequest(std::string_view body_json, std::vector<uint32_t>* ids,
                     std::string* error) const override;
  std::string Describe() const override;

  // How chat requests are rendered: from the added tokens (FromJson), or the model's chat
  // template when Tokenizer::Load finds tokenizer_config.json beside tokenizer.json.
  const ChatStyle& chat_style() const { return chat_style_; }
  void set_chat_style(ChatStyle style) { chat_style_ = std::move(style); }
  std::optional<uint32_t> EndOfTurnId() const override;
  // tokenizer_config.json's eos_token (EndOfTurnId's fallback).
  void set_end_of_turn(std::string token) { end_of_turn_ = std::move(token); }
  // The BPE of one pre-tokenized piece (no added-token matching, no normalization).
  void EncodeWord(std::string_view word, std::vector<uint32_t>* ids) const;

 private:
  struct AddedToken {
    std::string content;
    uint32_t id;
    bool single_word, lstrip, rstrip;
  };
  // Leftmost-longest matcher over a set of added tokens (Hugging Face uses Aho-Corasick with
  // LeftmostLongest; the sets here are small and share few first bytes, so a first-byte filter
  // and a longest-first candidate list do the same at less cost).
  struct AddedMatcher {
    std::vector<AddedToken> tokens;            // longest first
    std::vector<uint16_t> by_first_byte[256];  // indexes into tokens
    int only_first_byte = -1;  // the first byte of every token when they share one (memchr)
    bool empty() const { return tokens.empty(); }
    void Build();
    // Finds the first match at or after `from` in text; returns false if none. [*start, *end)
    // includes stripped whitespace.
    bool Find(std::string_view text, size_t from, size_t* start, size_t* end, uint32_t* id) const;
    // Encodes `text` into `ids`: each match as its id, each stretch before, between and after
    // the matches (possibly empty) by encode_gap(stretch, ids). Defined in bpe.cc.
    template <class EncodeGap>
    void Encode(std::string_view text, std::vector<uint32_t>* ids, EncodeGap encode_gap) const;
  };
  // Open-addressing map (left id, right id) -> (rank, merged id), key and value side by side
  // (a lookup reads one cache line).
  struct MergeTable {
    struct Slot {
      uint64_t key;    // left << 32 | right; kFree: a free slot
      uint64_t value;  // rank << 32 | merged id
    };
    std::vector<Slot> slots;
    uint64_t mask = 0;
    void Reserve(size_t n);
    void Insert(uint32_t a, uint32_t b, uint32_t rank, uint32_t merged);
    bool Find(uint32_t a, uint32_t b, uint32_t* rank, uint32_t* merged) const;
  };
  // A byte range of bytes_.
  struct Span {
    uint32_t off = 0, len = 0;
  };
  // Open-addressing map raw bytes -> id over the model vocab, whose bytes are in bytes_.
  struct VocabTable {
    struct Slot {
      uint32_t tag;  // the hash's high half
      uint32_t id;
      Span bytes;  // len kFree: a free slot
    };
    std::vector<Slot> slots;
    uint64_t mask = 0;
    void Reserve(size_t n);
    // Adds `key` (stored at `bytes`) unless it is there already (the first id stays).
    void Insert(std::string_view key, Span bytes, uint32_t id, const std::string& arena);
    bool Find(std::string_view key, const std::string& arena, uint32_t* id) const;
  };

  BpeTokenizer();
  // A segment between added tokens (per-thread cache of long ones), and the same uncached.
  void EncodeSegment(std::string_view segment, std::vector<uint32_t>* ids) const;
  void EncodeUncachedSegment(std::string_view segment, std::vector<uint32_t>* ids) const;
  void EncodeNormalized(std::string_view text, std::vector<uint32_t>* ids) const;
  // EncodeWord of a piece followed by more of its text: `readable` bytes from word.data().
  void EncodePiece(std::string_view word, size_t readable, std::vector<uint32_t>* ids) const;
  void MergeWord(std::string_view word, std::vector<uint32_t>* ids) const;

  std::string name_;
  uint64_t serial_;  // distinguishes instances in the per-thread caches
  bool nfc_ = false;
  bool ignore_merges_ = false;
  SplitPattern pattern_ = SplitPattern::kGpt2;
  ChatStyle chat_style_;
  PromptSpecials prompt_specials_;  // from tokenizer.json's post_processor
  std::string end_of_turn_;
  uint32_t byte_ids_[256];
  std::string bytes_;           // the raw bytes of the model vocab's tokens and the added tokens
  VocabTable vocab_;            // raw bytes -> id (model vocab)
  std::vector<Span> id_bytes_;  // id -> raw bytes (model + added)
  MergeTable merges_;
  AddedMatcher added_raw_;         // normalized=false: matched on the raw text
  AddedMatcher added_normalized_;  // normalized=true: matched after normalization
};

}  // namespace llmtap::tokenizer
