#include "replay/synthetic.h"

#include <string>

namespace llmtap::replay {
namespace {

// Common English words, each with a leading space: one token in byte-level BPE vocabularies
// (Llama-3, Qwen, GPT-2) and in the builtin approximation. Make() keeps those that are.
constexpr std::string_view kWords[] = {
    " the",    " of",     " and",   " to",    " in",    " is",    " that",   " for",    " it",
    " as",     " was",    " with",  " be",    " by",    " on",    " not",    " he",     " this",
    " are",    " or",     " his",   " from",  " at",    " which", " but",    " have",   " an",
    " had",    " they",   " you",   " were",  " their", " one",   " all",    " we",     " can",
    " her",    " has",    " there", " been",  " if",    " more",  " when",   " will",   " would",
    " who",    " so",     " no",    " she",   " other", " its",   " may",    " these",  " what",
    " them",   " than",   " some",  " him",   " time",  " into",  " only",   " do",     " out",
    " any",    " then",   " about", " my",    " two",   " up",    " also",   " made",   " over",
    " such",   " our",    " new",   " could", " like",  " first", " very",   " must",   " where",
    " after",  " your",   " most",  " did",   " many",  " much",  " well",   " before", " water",
    " world",  " house",  " light", " small", " great", " year",  " work",   " place",  " point",
    " right",  " hand",   " part",  " child", " eye",   " woman", " day",    " week",   " case",
    " life",   " group",  " fact",  " night", " home",  " room",  " money",  " story",  " game",
    " line",   " end",    " city",  " word",  " name",  " team",  " idea",   " body",   " car",
    " book",   " door",   " table", " tree",  " river", " road",  " stone",  " music",  " paper",
    " food",   " field",  " power", " heart", " mind",  " voice", " color",  " plan",   " state",
    " form",   " head",   " side",  " level", " order", " model", " data",   " value",  " test",
    " code",   " file",   " list",  " page",  " image", " price", " cost",   " sound",  " wind",
    " rain",   " snow",   " fire",  " earth", " sky",   " sea",   " ship",   " train",  " bird",
    " fish",   " horse",  " dog",   " cat",   " green", " blue",  " red",    " white",  " black",
    " old",    " young",  " long",  " short", " high",  " low",   " good",   " bad",    " large",
    " early",  " late",   " real",  " free",  " full",  " open",  " clear",  " hard",   " easy",
    " strong", " simple", " final", " local", " major", " human", " social", " go",     " see",
    " know",   " take",   " get",   " come",  " think", " look",  " want",   " give",   " use",
    " find",   " tell",   " ask",   " seem",  " feel",  " try",   " leave",  " call",   " keep",
    " let",    " begin",  " show",  " hear",  " play",  " run",   " move",   " live",   " hold",
    " bring",  " write",  " sit",   " stand", " lose",  " pay",   " meet",
};

// splitmix64: a fast, well-mixed sequence from a 64-bit seed.
uint64_t Next(uint64_t* state) {
  uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

}  // namespace

std::unique_ptr<SyntheticPrompts> SyntheticPrompts::Make(const tokenizer::Tokenizer& tok,
                                                         uint32_t block_size, std::string* error) {
  if (block_size == 0) {
    *error = "block size must be positive";
    return nullptr;
  }
  std::vector<std::string_view> words;
  std::vector<uint32_t> ids;
  for (std::string_view w : kWords) {
    ids.clear();
    tok.Encode(w, &ids);
    if (ids.size() == 1) words.push_back(w);
  }
  if (words.size() < 16) {
    *error = "the tokenizer splits too many common words into several tokens (" +
             std::to_string(words.size()) + " single-token words) to build synthetic prompts";
    return nullptr;
  }
  return std::unique_ptr<SyntheticPrompts>(new SyntheticPrompts(block_size, std::move(words)));
}

void SyntheticPrompts::AppendBlock(uint64_t hash_id, uint64_t tokens, std::string* out) const {
  uint64_t state = hash_id ^ 0x6c6c6d7461702d62ull;  // "llmtap-b"
  for (uint64_t i = 0; i < tokens; ++i) out->append(words_[Next(&state) % words_.size()]);
}

std::string SyntheticPrompts::Prompt(std::span<const uint64_t> hash_ids,
                                     uint64_t input_length) const {
  std::string out;
  if (hash_ids.empty()) {
    AppendBlock(0, input_length, &out);
    return out;
  }
  out.reserve(static_cast<size_t>(input_length) * 7);
  const uint64_t full = uint64_t{block_size_} * (hash_ids.size() - 1);
  for (size_t i = 0; i + 1 < hash_ids.size(); ++i) AppendBlock(hash_ids[i], block_size_, &out);
  AppendBlock(hash_ids.back(), input_length > full ? input_length - full : 1, &out);
  return out;
}

}  // namespace llmtap::replay
