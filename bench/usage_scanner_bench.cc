// ResponseReader throughput on what the proxy feeds it: a 22-event chat SSE stream as vLLM sends
// it with include_usage (role chunk, content chunks, finish chunk, usage chunk, [DONE]), fed
// whole, one event per Feed (as small upstream reads arrive), and byte by byte (the worst case);
// and a 4 KB non-streamed chat.completion. Every iteration checks the result against the known
// answer.
// The same answer as a Responses API stream and as an Anthropic Messages stream (the api
// modules' writers, which the sim serves: the events vLLM and Anthropic send), read by the
// ResponseReader (each event parsed by its API's module), next to the chat stream read by the same
// ResponseReader, in the same run (issue #34).
// Goal: well over 500 MB/s on the whole stream and on per-event chunks. Each runs with text=0
// (usage only, as with capture_responses off: chat's usage scanner) and text=1 (the response
// text kept, at most 1 MiB, and checked too: chat's documents read by its API module).
#include <benchmark/benchmark.h>

#include <string>
#include <string_view>
#include <vector>

#include "api/messages.h"
#include "api/responses.h"
#include "proxy/response_reader.h"
#include "proxy/usage_scanner.h"

namespace llmtap::proxy {
namespace {

constexpr std::string_view kHead =
    R"({"id":"chatcmpl-5d1c0b4e2a9f4b7e8c3d1a2b3c4d5e6f","object":"chat.completion.chunk",)"
    R"("created":1718000000,"model":"meta-llama/Llama-3.1-8B-Instruct",)";

std::vector<std::string> ChatEvents() {
  std::vector<std::string> events;
  auto chunk = [&](std::string_view delta, std::string_view finish) {
    events.push_back("data: " + std::string(kHead) + R"("choices":[{"index":0,"delta":)" +
                     std::string(delta) + R"(,"logprobs":null,"finish_reason":)" +
                     std::string(finish) + "}]}\n\n");
  };
  chunk(R"({"role":"assistant","content":""})", "null");
  for (const char* token :
       {"The", " quarterly", " report", " shows", " revenue", " grew", " 12", "%", " year", " over",
        " year", ",", " driven", " by", " cloud", " services", " (\\\"+31%\\\")", "."}) {
    chunk(std::string(R"({"content":")") + token + "\"}", "null");
  }
  chunk(R"({"content":""})", R"("stop","stop_reason":null)");
  events.push_back("data: " + std::string(kHead) +
                   R"("choices":[],"usage":{"prompt_tokens":412,"total_tokens":433,)"
                   R"("completion_tokens":21}})"
                   "\n\n");
  events.push_back("data: [DONE]\n\n");
  return events;
}

// The response text of ChatEvents().
constexpr std::string_view kChatText =
    "The quarterly report shows revenue grew 12% year over year, driven by cloud services "
    "(\"+31%\").";

std::string Join(const std::vector<std::string>& events) {
  std::string all;
  for (const std::string& e : events) all += e;
  return all;
}

// A non-streamed chat.completion of about 4 KB: mostly the message content, with escapes.
std::string JsonResponse(std::string* text = nullptr) {
  std::string content;
  const char* const kParagraphs[] = {
      "Revenue grew 12% year over year to $4.2B, driven by cloud services (+31%).\\n",
      "- Operating margin: 18.5% (up 1.2 pts)\\n- One-off items: a \\\"$120M\\\" charge.\\n",
      "Die Umsätze stiegen um 12 %, getragen von Cloud-Diensten.\\n\\n",
  };
  for (size_t i = 0; content.size() < 3700; ++i) content += kParagraphs[i % 3];
  if (text != nullptr) {  // the content decoded: its only escapes are \n and \"
    text->clear();
    for (size_t i = 0; i < content.size(); ++i) {
      if (content[i] == '\\') {
        ++i;
        text->push_back(content[i] == 'n' ? '\n' : content[i]);
      } else {
        text->push_back(content[i]);
      }
    }
  }
  return R"({"id":"chatcmpl-8f2c4e6a","object":"chat.completion","created":1718000000,)"
         R"("model":"meta-llama/Llama-3.1-8B-Instruct","choices":[{"index":0,"message":)"
         R"({"role":"assistant","reasoning_content":null,"content":")" +
         content +
         R"(","tool_calls":[]},"logprobs":null,"finish_reason":"length","stop_reason":null}],)"
         R"("usage":{"prompt_tokens":1203,"total_tokens":2227,"completion_tokens":1024,)"
         R"("prompt_tokens_details":null},"prompt_logprobs":null})";
}

// The benchmark's argument: 0, usage only; 1, also the response text (at most 1 MiB).
size_t MaxTextBytes(const benchmark::State& state) { return state.range(0) != 0 ? 1 << 20 : 0; }

// A chat answer read as the proxy reads it, by the ResponseReader (text=0: the usage scanner;
// text=1: document by document, the text kept), `feed` giving it the bytes; each result checked.
template <class Feed>
void ReadChat(benchmark::State& state, std::string_view content_type, Feed feed, int64_t prompt,
              int64_t completion, std::string_view finish, std::string_view text) {
  for (auto _ : state) {
    ResponseReader reader(api::Endpoint::kChat, content_type, "", MaxTextBytes(state));
    feed(reader);
    ResponseOutcome o;
    reader.Finish(&o);
    if (o.prompt_tokens != prompt || o.completion_tokens != completion ||
        finish != o.finish_reason || (state.range(0) != 0 && o.response.text != text)) {
      state.SkipWithError("wrong result");
    }
    benchmark::DoNotOptimize(&o);
  }
}

void BM_SseWhole(benchmark::State& state) {
  const std::string stream = Join(ChatEvents());
  ReadChat(
      state, "text/event-stream", [&](ResponseReader& r) { r.Feed(stream); }, 412, 21, "stop",
      kChatText);
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * stream.size()));
  state.SetLabel(std::to_string(stream.size()) + "B");
}

void BM_SsePerEvent(benchmark::State& state) {
  const std::vector<std::string> events = ChatEvents();
  const size_t bytes = Join(events).size();
  ReadChat(
      state, "text/event-stream",
      [&](ResponseReader& r) {
        for (const std::string& e : events) r.Feed(e);
      },
      412, 21, "stop", kChatText);
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * bytes));
  state.SetLabel(std::to_string(events.size()) + " events, " + std::to_string(bytes) + "B");
}

void BM_SseByteByByte(benchmark::State& state) {
  const std::string stream = Join(ChatEvents());
  ReadChat(
      state, "text/event-stream",
      [&](ResponseReader& r) {
        for (size_t i = 0; i < stream.size(); ++i) r.Feed(std::string_view(stream).substr(i, 1));
      },
      412, 21, "stop", kChatText);
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * stream.size()));
}

void BM_Json4K(benchmark::State& state) {
  std::string text;
  const std::string body = JsonResponse(&text);
  ReadChat(
      state, "application/json", [&](ResponseReader& r) { r.Feed(body); }, 1203, 1024, "length",
      text);
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * body.size()));
  state.SetLabel(std::to_string(body.size()) + "B");
}

// The tokens of ChatEvents() as the other APIs stream them.
const char* const kTokens[] = {"The",       " quarterly",  " report", " shows", " revenue",
                               " grew",     " 12",         "%",       " year",  " over",
                               " year",     ",",           " driven", " by",    " cloud",
                               " services", " (\"+31%\")", "."};

std::string ResponsesStream() {
  api::ResponsesRequest request;
  api::RequestProblem problem;
  api::ParseResponsesRequest(
      R"({"model":"meta-llama/Llama-3.1-8B-Instruct","input":"x","stream":true})", 4096, &request,
      &problem);
  api::ResponseAnswer a;
  a.id = "resp_5d1c0b4e2a9f4b7e8c3d1a2b3c4d5e6f";
  a.item_id = "msg_5d1c0b4e2a9f4b7e8c3d1a2b3c4d5e6f";
  a.created_at = 1718000000;
  a.model = "meta-llama/Llama-3.1-8B-Instruct";
  a.content = kChatText;
  a.input_tokens = 412;
  a.output_tokens = 21;
  uint64_t seq = 0;
  std::string sse;
  api::AppendStreamStart(request, a, &seq, &sse);
  for (const char* token : kTokens) api::AppendStreamDelta(a, token, &seq, &sse);
  api::AppendStreamEnd(request, a, &seq, &sse);
  return sse;
}

std::string MessagesStream() {
  const api::MessageHead head{.id = "msg_01XFDUDYJgAACzvnptvVoYEL",
                              .model = "meta-llama/Llama-3.1-8B-Instruct",
                              .tool_name = "",
                              .tool_id = ""};
  api::MessagesUsage usage{.input_tokens = 412, .output_tokens = 0};
  std::string sse;
  api::AppendMessageStreamStart(head, usage, &sse);
  size_t at = 0;
  for (const char* token : kTokens) {
    const size_t end = at + std::string_view(token).size();
    api::AppendMessageStreamDelta(head, kChatText, at, end, &sse);
    at = end;
  }
  usage.output_tokens = 21;
  api::AppendMessageStreamEnd(api::StopReason::kEndTurn, usage, &sse);
  return sse;
}

// A stream of `endpoint` read by the ResponseReader, one Feed per 256 bytes (as upstream reads
// arrive), checked: 412 prompt and 21 completion tokens, `finish`, and with text, kChatText.
void ReadStream(benchmark::State& state, api::Endpoint endpoint, const std::string& stream,
                std::string_view finish) {
  for (auto _ : state) {
    ResponseReader reader(endpoint, "text/event-stream", "", MaxTextBytes(state));
    for (size_t at = 0; at < stream.size(); at += 256) {
      reader.Feed(std::string_view(stream).substr(at, 256));
    }
    ResponseOutcome o;
    reader.Finish(&o);
    if (o.prompt_tokens != 412 || o.completion_tokens != 21 || finish != o.finish_reason ||
        (state.range(0) != 0 && o.response.text != kChatText)) {
      state.SkipWithError("wrong result");
    }
    benchmark::DoNotOptimize(&o);
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * stream.size()));
  state.SetLabel(std::to_string(stream.size()) + "B");
}

void BM_ReaderChatSse(benchmark::State& state) {
  ReadStream(state, api::Endpoint::kChat, Join(ChatEvents()), "stop");
}
void BM_ReaderResponsesSse(benchmark::State& state) {
  ReadStream(state, api::Endpoint::kResponses, ResponsesStream(), "completed");
}
void BM_ReaderMessagesSse(benchmark::State& state) {
  ReadStream(state, api::Endpoint::kMessages, MessagesStream(), "end_turn");
}

BENCHMARK(BM_SseWhole)->ArgName("text")->Arg(0)->Arg(1);
BENCHMARK(BM_SsePerEvent)->ArgName("text")->Arg(0)->Arg(1);
BENCHMARK(BM_SseByteByByte)->ArgName("text")->Arg(0)->Arg(1);
BENCHMARK(BM_Json4K)->ArgName("text")->Arg(0)->Arg(1);
BENCHMARK(BM_ReaderChatSse)->ArgName("text")->Arg(0)->Arg(1);
BENCHMARK(BM_ReaderResponsesSse)->ArgName("text")->Arg(0)->Arg(1);
BENCHMARK(BM_ReaderMessagesSse)->ArgName("text")->Arg(0)->Arg(1);

}  // namespace
}  // namespace llmtap::proxy

BENCHMARK_MAIN();
