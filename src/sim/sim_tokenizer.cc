#include "sim/sim_tokenizer.h"

#include <limits>
#include <string>

#include "sim/request.h"
#include "sim/text.h"

namespace llmtap::sim {
namespace {

class SimTokenizer final : public tokenizer::Tokenizer {
 public:
  void Encode(std::string_view text, std::vector<uint32_t>* ids) const override {
    thread_local std::vector<uint64_t> hashes;
    hashes.clear();
    ApproxTokenize(text, &hashes, nullptr);
    ids->reserve(ids->size() + hashes.size());
    for (uint64_t h : hashes) ids->push_back(TokenId(h));
  }

  std::string Decode(std::span<const uint32_t>) const override { return {}; }

  bool EncodeRequest(std::string_view body_json, std::vector<uint32_t>* ids,
                     std::string* error) const override {
    // A body without `messages` is a completions request (whose `prompt` is then required).
    RequestLimits limits;
    limits.max_model_len = std::numeric_limits<uint32_t>::max();
    limits.max_n = std::numeric_limits<uint32_t>::max();
    thread_local SimRequest request;
    RequestError e;
    if (!ParseRequest(Endpoint::kChatCompletions, body_json, limits, &request, &e)) {
      const bool no_messages = e.param == "messages" && e.message.starts_with("Missing");
      if (!no_messages || !ParseRequest(Endpoint::kCompletions, body_json, limits, &request, &e)) {
        *error = e.message;
        return false;
      }
    }
    Encode(request.prompt_text, ids);
    return true;
  }

  std::string Describe() const override {
    return "sim: llmtap sim's approximate tokens (ids are hashes; they match only the "
           "simulator's own)";
  }
};

}  // namespace

std::unique_ptr<tokenizer::Tokenizer> MakeSimTokenizer() {
  return std::make_unique<SimTokenizer>();
}

std::unique_ptr<tokenizer::Tokenizer> LoadTokenizerOrSim(std::string_view spec, std::string* error) {
  if (spec == "sim") return MakeSimTokenizer();
  return tokenizer::Tokenizer::Load(spec, error);
}

}  // namespace llmtap::sim
