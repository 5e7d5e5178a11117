// Shared by the UsageScanner tests: scanning helpers and vLLM/OpenAI-shaped responses.
#pragma once

#include "proxy/usage_scanner.h"

#include <random>
#include <string>
#include <string_view>

#include <gtest/gtest.h>

#include "common/testing/alloc_counter.h"

namespace llmtap::proxy::usage_scanner_test_util {

using Mode = UsageScanner::Mode;

struct Result {
  std::optional<int64_t> prompt_tokens;
  std::optional<int64_t> completion_tokens;
  std::string finish_reason;
  bool operator==(const Result&) const = default;
};

inline std::ostream& operator<<(std::ostream& os, const Result& r) {
  auto opt = [](const std::optional<int64_t>& v) {
    return v ? std::to_string(*v) : std::string("none");
  };
  return os << "{prompt=" << opt(r.prompt_tokens) << " completion=" << opt(r.completion_tokens)
            << " finish=\"" << r.finish_reason << "\"}";
}

inline Result ToResult(const ResponseUsage& u) {
  return {u.prompt_tokens, u.completion_tokens, u.finish_reason};
}

inline Result Scan(Mode mode, std::string_view body) {
  UsageScanner scanner(mode);
  scanner.Feed(body);
  return ToResult(scanner.usage());
}

inline Result ScanPieces(Mode mode, std::string_view body, size_t piece) {
  UsageScanner scanner(mode);
  for (size_t i = 0; i < body.size(); i += piece) scanner.Feed(body.substr(i, piece));
  return ToResult(scanner.usage());
}

// Whole, byte by byte, and in two parts at every offset: all give the same result.
inline Result ScanEverySplit(Mode mode, std::string_view body) {
  const Result whole = Scan(mode, body);
  EXPECT_EQ(ScanPieces(mode, body, 1), whole) << "byte by byte";
  for (size_t cut = 0; cut <= body.size(); ++cut) {
    UsageScanner scanner(mode);
    scanner.Feed(body.substr(0, cut));
    scanner.Feed(body.substr(cut));
    const Result split = ToResult(scanner.usage());
    if (split != whole) {
      ADD_FAILURE() << "split at " << cut << ": " << split << " vs whole " << whole;
      break;
    }
  }
  return whole;
}

inline Result Expect(std::optional<int64_t> prompt, std::optional<int64_t> completion,
                     std::string finish) {
  return {prompt, completion, std::move(finish)};
}

// --- Responses shaped like real servers' ---

inline constexpr std::string_view kVllmChatHead =
    R"({"id":"chatcmpl-5d1c0b4e2a9f4b7e8c3d","object":"chat.completion.chunk","created":1718000000,)"
    R"("model":"meta-llama/Llama-3.1-8B-Instruct",)";

inline std::string SseEvent(std::string_view json) { return "data: " + std::string(json) + "\n\n"; }

// How vLLM ends a stream with include_usage: a chunk of no choices with the usage, then [DONE].
inline std::string VllmUsageEnd(std::string_view head, std::string_view usage) {
  return SseEvent(std::string(head) + R"("choices":[],"usage":)" + std::string(usage) + "}") +
         "data: [DONE]\n\n";
}

// vLLM chat with continuous_usage_stats: usage in every chunk, growing.
inline std::string VllmContinuousUsageStream() {
  std::string s;
  const char* tokens[] = {"Once", " upon", " a", " time", ","};
  for (int i = 0; i < 5; ++i) {
    s += SseEvent(std::string(kVllmChatHead) + R"("choices":[{"index":0,"delta":{"content":")" +
                  tokens[i] + R"("},"logprobs":null,"finish_reason":)" +
                  (i == 4 ? R"("length","stop_reason":null)" : "null") +
                  R"(}],"usage":{"prompt_tokens":31,"total_tokens":)" + std::to_string(32 + i) +
                  R"(,"completion_tokens":)" + std::to_string(i + 1) + "}}");
  }
  s += VllmUsageEnd(kVllmChatHead,
                    R"({"prompt_tokens":31,"total_tokens":36,"completion_tokens":5})");
  return s;
}

// OpenAI chat with include_usage: "usage":null in every chunk, then a usage chunk with details.
inline std::string OpenAiChatStream() {
  constexpr std::string_view kHead =
      R"({"id":"chatcmpl-AbCdEf0123456789","object":"chat.completion.chunk","created":1731000000,)"
      R"("model":"gpt-4o-mini-2024-07-18","service_tier":"default",)"
      R"("system_fingerprint":"fp_0ba0d124f1",)";
  std::string s;
  s += SseEvent(std::string(kHead) +
                R"("choices":[{"index":0,"delta":{"role":"assistant","content":"","refusal":null},)"
                R"("logprobs":null,"finish_reason":null}],"usage":null,"obfuscation":"x1"})");
  for (const char* token : {"Hi", " there", "!"}) {
    s += SseEvent(std::string(kHead) + R"("choices":[{"index":0,"delta":{"content":")" + token +
                  R"("},"logprobs":null,"finish_reason":null}],"usage":null,"obfuscation":"q"})");
  }
  s += SseEvent(std::string(kHead) +
                R"("choices":[{"index":0,"delta":{},"logprobs":null,"finish_reason":"stop"}],)"
                R"("usage":null})");
  s +=
      SseEvent(std::string(kHead) +
               R"("choices":[],"usage":{"prompt_tokens":9,"completion_tokens":3,"total_tokens":12,)"
               R"("prompt_tokens_details":{"cached_tokens":0,"audio_tokens":0},)"
               R"("completion_tokens_details":{"reasoning_tokens":0,"audio_tokens":0,)"
               R"("accepted_prediction_tokens":0,"rejected_prediction_tokens":0}}})");
  s += "data: [DONE]\n\n";
  return s;
}

inline constexpr std::string_view kVllmChatResponse =
    R"({"id":"chatcmpl-8f2c","object":"chat.completion","created":1718000000,)"
    R"("model":"meta-llama/Llama-3.1-8B-Instruct","choices":[{"index":0,"message":{"role":)"
    R"("assistant","reasoning_content":null,"content":"Hello! \"usage\": {\"prompt_tokens\": 5})"
    R"( How can I help?","tool_calls":[]},"logprobs":null,"finish_reason":"stop",)"
    R"("stop_reason":null}],"usage":{"prompt_tokens":12,"total_tokens":21,"completion_tokens":9,)"
    R"("prompt_tokens_details":null},"prompt_logprobs":null,"kv_transfer_params":null})";

// OpenAI returns pretty-printed JSON.
inline constexpr std::string_view kOpenAiChatResponse = R"({
  "id": "chatcmpl-B9MHDbslfkBeAs8l4bebGdFOJ6PeG",
  "object": "chat.completion",
  "created": 1741570283,
  "model": "gpt-4o-2024-08-06",
  "choices": [
    {
      "index": 0,
      "message": {
        "role": "assistant",
        "content": "The image shows a wooden boardwalk path.",
        "refusal": null,
        "annotations": []
      },
      "logprobs": null,
      "finish_reason": "stop"
    }
  ],
  "usage": {
    "prompt_tokens": 1117,
    "completion_tokens": 46,
    "total_tokens": 1163,
    "prompt_tokens_details": {
      "cached_tokens": 0,
      "audio_tokens": 0
    },
    "completion_tokens_details": {
      "reasoning_tokens": 0,
      "audio_tokens": 0,
      "accepted_prediction_tokens": 0,
      "rejected_prediction_tokens": 0
    }
  },
  "service_tier": "default",
  "system_fingerprint": "fp_fc9f1d7035"
}
)";

}  // namespace llmtap::proxy::usage_scanner_test_util
