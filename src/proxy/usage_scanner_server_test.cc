// What a server reports of its own work (api/server_report.h), read by both readers the proxy has:
// the UsageScanner byte by byte and the API modules document by document
// (api::DocumentReader). Same samples, same report: the answers of llama.cpp's llama-server
// (b11669, captured from the real server), vLLM's metrics.speculative_decoding and SGLang's
// sglext.spec_tokens_details (their documented shapes).
#include <string>
#include <string_view>

#include <gtest/gtest.h>

#include "api/response_document.h"
#include "api/server_report.h"
#include "proxy/usage_scanner.h"
#include "proxy/usage_scanner_test_util.h"

namespace llmtap::proxy {
namespace {

using Mode = UsageScanner::Mode;
using usage_scanner_test_util::SseEvent;

std::string Members(const api::ServerReport& r) {
  std::string s;
  api::AppendServerReportMembers(r, &s);
  return s;
}

// The scanner's report, the same whole, byte by byte and cut in two at every offset.
std::string ScannerReport(Mode mode, std::string_view body) {
  UsageScanner whole(mode);
  whole.Feed(body);
  const std::string want = Members(whole.usage().server);
  UsageScanner bytes(mode);
  for (char c : body) bytes.Feed(std::string_view(&c, 1));
  EXPECT_EQ(Members(bytes.usage().server), want) << "byte by byte";
  for (size_t cut = 0; cut <= body.size(); ++cut) {
    UsageScanner split(mode);
    split.Feed(body.substr(0, cut));
    split.Feed(body.substr(cut));
    if (Members(split.usage().server) != want) {
      ADD_FAILURE() << "split at " << cut << ": " << Members(split.usage().server);
      break;
    }
  }
  return want;
}

// The API modules' report over the documents of `body` (one JSON body, or each event's data).
std::string DocumentReport(api::Endpoint endpoint, std::string_view body, bool sse) {
  api::DocumentReader reader;
  api::DocumentFacts facts;
  if (!sse) {
    EXPECT_TRUE(reader.Read(endpoint, body, &facts, nullptr));
    return Members(facts.server);
  }
  size_t at = 0;
  while ((at = body.find("data: ", at)) != std::string_view::npos) {
    at += 6;
    const size_t end = body.find("\n\n", at);
    const std::string_view data = body.substr(at, end - at);
    if (data != "[DONE]") reader.Read(endpoint, data, &facts, nullptr);
    at = end;
  }
  return Members(facts.server);
}

std::string BothReaders(api::Endpoint endpoint, std::string_view body, bool sse) {
  const std::string scanned = ScannerReport(sse ? Mode::kSse : Mode::kJson, body);
  EXPECT_EQ(DocumentReport(endpoint, body, sse), scanned) << "the two readers disagree";
  return scanned;
}

constexpr std::string_view kLlamaChat =
    R"({"choices":[{"finish_reason":"length","index":0,"message":{"role":"assistant","content":".ui_VARIABLE thrive Guild"}}],"created":1796676225,"model":"tiny-llama","system_fingerprint":"b11669-Debian","object":"chat.completion","usage":{"completion_tokens":4,"prompt_tokens":1523,"total_tokens":1527,"prompt_tokens_details":{"cached_tokens":1522}},"id":"chatcmpl-dajWYFmTNYdwtO8zFkPp5TaHvDYKWOvv","timings":{"cache_n":1522,"prompt_n":1,"prompt_ms":8.471,"prompt_per_token_ms":8.471,"prompt_per_second":118.05,"predicted_n":4,"predicted_ms":15.177,"predicted_per_token_ms":3.79425,"predicted_per_second":263.55}})";

TEST(ServerReport, LlamaCppChatBody) {
  EXPECT_EQ(BothReaders(api::Endpoint::kChat, kLlamaChat, false),
            R"(,"cached_tokens":1522,"server":{"prompt_n":1,"cache_n":1522,"prompt_ms":8.471,)"
            R"("decode_n":4,"decode_ms":15.177},"spec":null)");
}

// Streamed without include_usage: no usage, the timings on the finish chunk (with n-gram
// speculation on: its draft counts at the end of the timings).
TEST(ServerReport, LlamaCppStreamTimingsOnTheFinishChunk) {
  std::string s;
  s += SseEvent(R"({"choices":[{"finish_reason":null,"index":0,"delta":{"role":"assistant","content":null}}],"created":1796676225,"id":"chatcmpl-9ZC9","model":"tiny-llama","system_fingerprint":"b11669-Debian","object":"chat.completion.chunk"})");
  s += SseEvent(R"({"choices":[{"finish_reason":null,"index":0,"delta":{"content":".ui"}}],"created":1796676225,"id":"chatcmpl-9ZC9","model":"tiny-llama","object":"chat.completion.chunk"})");
  s += SseEvent(R"({"choices":[{"finish_reason":"length","index":0,"delta":{}}],"created":1796676225,"id":"chatcmpl-9ZC9","model":"tiny-llama","system_fingerprint":"b11669-Debian","object":"chat.completion.chunk","timings":{"cache_n":76,"prompt_n":1,"prompt_ms":2.671,"prompt_per_token_ms":2.671,"prompt_per_second":374.39,"predicted_n":64,"predicted_ms":202.736,"predicted_per_token_ms":3.1677,"predicted_per_second":315.68,"draft_n":52,"draft_n_accepted":39}})");
  s += "data: [DONE]\n\n";
  EXPECT_EQ(BothReaders(api::Endpoint::kChat, s, true),
            R"(,"cached_tokens":null,"server":{"prompt_n":1,"cache_n":76,"prompt_ms":2.671,)"
            R"("decode_n":64,"decode_ms":202.736},"spec":{"engine":"llamacpp",)"
            R"("num_draft_tokens":52,"num_accepted_draft_tokens":39,"num_spec_steps":null,)"
            R"("num_spec_tokens":null,"acceptance_histogram":null})");
  // The token counts then come from the timings.
  UsageScanner scanner(Mode::kSse);
  scanner.Feed(s);
  api::ServerReport r = scanner.usage().server;
  int64_t prompt = -1, completion = -1;
  EXPECT_TRUE(api::FillFromTimings(&prompt, &completion, &r));
  EXPECT_EQ(prompt, 77);
  EXPECT_EQ(completion, 64);
  EXPECT_EQ(r.cached_tokens, 76);
  // Usage, when sent, is kept.
  prompt = 9;
  completion = 8;
  EXPECT_FALSE(api::FillFromTimings(&prompt, &completion, &r));
  EXPECT_EQ(prompt, 9);
}

// Responses, streamed: the timings beside "response" in response.completed.
TEST(ServerReport, LlamaCppResponsesCompletedEvent) {
  const std::string s = SseEvent(
      R"({"type":"response.completed","response":{"id":"resp_ikPa","object":"response","status":"completed","model":"tiny-llama","output":[],"usage":{"input_tokens":11,"output_tokens":2,"total_tokens":13,"input_tokens_details":{"cached_tokens":10}}},"timings":{"cache_n":10,"prompt_n":1,"prompt_ms":2.5,"predicted_n":2,"predicted_ms":4.25}})");
  // The scanner does not read Responses usage (the proxy reads that API document by
  // document); both read the timings.
  EXPECT_EQ(DocumentReport(api::Endpoint::kResponses, s, true),
            R"(,"cached_tokens":10,"server":{"prompt_n":1,"cache_n":10,"prompt_ms":2.500,)"
            R"("decode_n":2,"decode_ms":4.250},"spec":null)");
}

TEST(ServerReport, MessagesCacheRead) {
  constexpr std::string_view kBody =
      R"({"id":"chatcmpl-ZwAl","type":"message","role":"assistant","content":[{"type":"text","text":".ui"}],"model":"tiny-llama","stop_reason":"max_tokens","stop_sequence":null,"usage":{"cache_read_input_tokens":1522,"input_tokens":1,"output_tokens":3}})";
  EXPECT_EQ(DocumentReport(api::Endpoint::kMessages, kBody, false),
            R"(,"cached_tokens":1522,"server":null,"spec":null)");
}

// vLLM --per-request-spec-decode-metrics: the dense histogram written sparse, as AIPerf does.
TEST(ServerReport, VllmSpeculativeDecoding) {
  constexpr std::string_view kBody =
      R"({"id":"chatcmpl-1","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"x"},"finish_reason":"stop"}],"usage":{"prompt_tokens":11742,"total_tokens":11777,"completion_tokens":35,"prompt_tokens_details":{"cached_tokens":9504}},"metrics":{"speculative_decoding":{"mean_acceptance_length":1.2325581395348837,"draft_acceptance_rate":0.07751937984496124,"acceptance_histogram":[39,1,0,3],"num_spec_steps":43,"num_accepted_draft_tokens":10,"num_draft_tokens":129,"num_spec_tokens":3}}})";
  EXPECT_EQ(BothReaders(api::Endpoint::kChat, kBody, false),
            R"(,"cached_tokens":9504,"server":null,"spec":{"engine":"vllm",)"
            R"("num_draft_tokens":129,"num_accepted_draft_tokens":10,"num_spec_steps":43,)"
            R"("num_spec_tokens":3,"acceptance_histogram":{"0":39,"1":1,"3":3}})");
}

TEST(ServerReport, SglangSpecTokensDetails) {
  constexpr std::string_view kBody =
      R"({"id":"x","choices":[{"index":0,"message":{"content":"y"},"finish_reason":"stop"}],"usage":{"prompt_tokens":5,"total_tokens":69,"completion_tokens":64,"prompt_tokens_details":null},"sglext":{"spec_tokens_details":{"spec_accept_rate":0.6825,"spec_accept_length":3.0476,"spec_num_correct_drafts":43,"spec_num_proposed_drafts":63,"spec_verify_ct":21,"spec_correct_drafts_histogram":[3,5,1,12],"spec_cap_lens_histogram":[]}}})";
  EXPECT_EQ(BothReaders(api::Endpoint::kChat, kBody, false),
            R"(,"cached_tokens":null,"server":null,"spec":{"engine":"sglang",)"
            R"("num_draft_tokens":63,"num_accepted_draft_tokens":43,"num_spec_steps":21,)"
            R"("num_spec_tokens":null,"acceptance_histogram":{"0":3,"1":5,"2":1,"3":12}})");
}

// What is not a count is not counted: a histogram holding anything else (or longer than 33) is
// left out, the counts kept; a spec object without both token counts reports nothing; durations
// must be non-negative numbers.
TEST(ServerReport, MalformedValuesAreUnknown) {
  EXPECT_EQ(
      BothReaders(api::Endpoint::kChat,
                  R"({"metrics":{"speculative_decoding":{"num_draft_tokens":4,"num_accepted_draft_tokens":2,"acceptance_histogram":[1,"x",2]}}})",
                  false),
      R"(,"cached_tokens":null,"server":null,"spec":{"engine":"vllm","num_draft_tokens":4,)"
      R"("num_accepted_draft_tokens":2,"num_spec_steps":null,"num_spec_tokens":null,)"
      R"("acceptance_histogram":null})");
  std::string long_histogram = "[";
  for (int i = 0; i < 34; ++i) long_histogram += i ? ",1" : "1";
  long_histogram += "]";
  EXPECT_NE(BothReaders(api::Endpoint::kChat,
                        R"({"metrics":{"speculative_decoding":{"num_draft_tokens":4,)"
                        R"("num_accepted_draft_tokens":2,"acceptance_histogram":)" +
                            long_histogram + "}}}",
                        false)
                .find(R"("num_draft_tokens":4,"num_accepted_draft_tokens":2,"num_spec_steps":null,"num_spec_tokens":null,"acceptance_histogram":null)"),
            std::string::npos);
  EXPECT_EQ(BothReaders(api::Endpoint::kChat, R"({"timings":{"draft_n":3},"usage":{"prompt_tokens_details":{"cached_tokens":-1}}})", false),
            R"(,"cached_tokens":null,"server":null,"spec":null)");
  EXPECT_EQ(BothReaders(api::Endpoint::kChat, R"({"timings":{"prompt_ms":-2.5,"predicted_ms":"7","prompt_n":1.5,"cache_n":3}})", false),
            R"(,"cached_tokens":null,"server":{"prompt_n":null,"cache_n":3,"prompt_ms":null,)"
            R"("decode_n":null,"decode_ms":null},"spec":null)");
  // Exponents are durations too.
  EXPECT_EQ(BothReaders(api::Endpoint::kChat, R"({"timings":{"prompt_ms":1.5e-3,"predicted_ms":2E1}})", false),
            R"(,"cached_tokens":null,"server":{"prompt_n":null,"cache_n":null,"prompt_ms":0.002,)"
            R"("decode_n":null,"decode_ms":20.000},"spec":null)");
}

// A document cut inside its spec object reports no speculative decoding (a value counts once
// the member holding it is complete), and the last complete one of a stream wins.
TEST(ServerReport, CutSpecObjectCountsNothing) {
  UsageScanner scanner(Mode::kJson);
  scanner.Feed(R"({"timings":{"draft_n":5,"draft_n_accepted":4)");
  EXPECT_FALSE(scanner.usage().server.spec.known());
  scanner.Feed("}");
  EXPECT_FALSE(scanner.usage().server.spec.known());
  scanner.Feed("}");
  EXPECT_TRUE(scanner.usage().server.spec.known());
  EXPECT_EQ(scanner.usage().server.spec.num_accepted_draft_tokens, 4);
}

}  // namespace
}  // namespace llmtap::proxy
