#include "fidelity/pairs.h"

#include <nlohmann/json.hpp>

namespace llmtap::fidelity {
namespace {

using json = nlohmann::ordered_json;

template <class T>
json Opt(const std::optional<T>& v) {
  return v ? json(*v) : json(nullptr);
}

}  // namespace

void AppendPairLine(const PairKey& key, std::string_view captured_side,
                    const report::RequestResult& r, std::string* out) {
  json head = json::object();
  head["request"] = r.index;
  head["line"] = key.line;
  head["timestamp"] = Opt(key.timestamp_ms);
  head["path"] = key.path;
  head["api"] = r.endpoint;
  head["stream"] = r.stream;
  head["model"] = key.model != nullptr ? Opt(*key.model) : json(nullptr);
  head["temperature"] = Opt(key.temperature);
  head["turn"] = key.turn >= 0 ? json(key.turn) : json(nullptr);
  head["lag_ms"] = r.sent_ms ? json(r.lag_ms) : json(nullptr);
  head["causal_shift_ms"] = Opt(r.causal_shift_ms);
  json replayed = {
      {"status", r.status},
      {"ttft_ms", Opt(r.ttft_ms)},
      {"itl_ms", Opt(r.itl_ms)},
      {"latency_ms", r.sent_ms ? json(r.latency_ms) : json(nullptr)},
      {"prompt_tokens", Opt(r.input_tokens)},
      {"completion_tokens", Opt(r.output_tokens)},
      {"finish_reason", r.finish_reason.empty() ? json(nullptr) : json(r.finish_reason)},
      {"error", r.error.empty() ? json(nullptr) : json(r.error)},
      {"cached_tokens", Opt(r.cached_tokens)},
      {"server", r.server},
      {"spec", r.spec}};
  std::string text = head.dump();
  text.pop_back();  // '}'
  out->append(text);
  out->append(",\"primary\":");
  out->append(captured_side.empty() ? std::string_view("null") : captured_side);
  out->append(",\"candidate\":");
  out->append(replayed.dump());
  out->append(",\"output\":null}");
}

}  // namespace llmtap::fidelity
