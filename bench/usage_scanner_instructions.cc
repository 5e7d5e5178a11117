// Instruction-count driver for the proxy's per-response reading (ResponseReader: the usage
// scanner with text=0, the API modules' documents with text=1), on bench/usage_scanner_bench.cc's
// own inputs (the bench source is included; its BENCHMARK_MAIN is suppressed).
//
//   usage_scanner_instructions CASE TEXT [N]
//     CASE: whole | event | bytes | json  (the bench's SseWhole, SsePerEvent, SseByteByByte,
//           Json4K), and llama_{plain,timings}_{whole,event,bytes} (a llama.cpp-shaped chat
//           stream without / with the finish chunk's "timings" and usage.prompt_tokens_details;
//           the server report is checked only in a tree with api/server_report.h).
//           chat256, responses256, messages256: the bench's BM_Reader{Chat,Responses,Messages}Sse
//           (each API's stream of the same answer, 256 bytes per Feed).
//     TEXT: 0 usage only (capture_responses off), 1 the text kept (at most 1 MiB).
//     N: responses (default 100).
//   One warm-up response (not collected), then N responses through the noinline Run* wrappers,
//   each of which constructs the outcome and the reader, feeds one response and finishes it; each
//   result is checked outside the wrapper. Run under
//     valgrind --tool=callgrind --toggle-collect='llmtap::proxy::Run*'
//       build/bench/usage_scanner_instructions CASE TEXT
//   and divide the collected Ir by N.
//
// Not built by default: cmake --build build --target usage_scanner_instructions.
#include <benchmark/benchmark.h>
#undef BENCHMARK_MAIN
#define BENCHMARK_MAIN() static_assert(true, "")

#include "usage_scanner_bench.cc"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#if __has_include("api/server_report.h")
#define DRIVER_SERVER_REPORT 1
#else
#define DRIVER_SERVER_REPORT 0
#endif

namespace llmtap::proxy {

struct Input {
  api::Endpoint endpoint = api::Endpoint::kChat;
  std::string_view content_type = "text/event-stream";
  std::string whole;
  std::vector<std::string> events;
};

// The three ways the bench feeds a response.
inline void FeedWhole(ResponseReader& r, const Input& in) { r.Feed(in.whole); }
inline void FeedEvents(ResponseReader& r, const Input& in) {
  for (const std::string& e : in.events) r.Feed(e);
}
inline void FeedBytes(ResponseReader& r, const Input& in) {
  const std::string_view s(in.whole);
  for (size_t i = 0; i < s.size(); ++i) r.Feed(s.substr(i, 1));
}

// The bench's ReadStream: one Feed per 256 bytes.
inline void Feed256(ResponseReader& r, const Input& in) {
  const std::string_view s(in.whole);
  for (size_t at = 0; at < s.size(); at += 256) r.Feed(s.substr(at, 256));
}

template <void (*kFeed)(ResponseReader&, const Input&)>
inline ResponseOutcome Read(const Input& in, size_t max_text) {
  ResponseOutcome o;
  ResponseReader reader(in.endpoint, in.content_type, "", max_text);
  kFeed(reader, in);
  reader.Finish(&o);
  return o;
}

// The collected wrappers (callgrind --toggle-collect='llmtap::proxy::Run*').
__attribute__((noinline)) ResponseOutcome RunWhole(const Input& in, size_t max_text) {
  return Read<FeedWhole>(in, max_text);
}
__attribute__((noinline)) ResponseOutcome RunPerEvent(const Input& in, size_t max_text) {
  return Read<FeedEvents>(in, max_text);
}
__attribute__((noinline)) ResponseOutcome RunBytes(const Input& in, size_t max_text) {
  return Read<FeedBytes>(in, max_text);
}
__attribute__((noinline)) ResponseOutcome Run256(const Input& in, size_t max_text) {
  return Read<Feed256>(in, max_text);
}
// Not collected: the warm-up.
__attribute__((noinline)) ResponseOutcome WarmUp(const Input& in, size_t max_text) {
  return Read<FeedWhole>(in, max_text);
}

// A llama.cpp-shaped chat stream (llama-server's member order: choices, created, id, model,
// system_fingerprint, object), the same 18 tokens as the bench's ChatEvents: a role chunk,
// content chunks, the finish chunk (with `timings`: cache_n ... draft_n_accepted), the choices:[]
// usage chunk (usage with prompt_tokens_details.cached_tokens), [DONE]. Without `server`: the
// same stream without the timings object and without prompt_tokens_details.
std::vector<std::string> LlamaEvents(bool server) {
  constexpr std::string_view kTail =
      R"("created":1718000000,"id":"chatcmpl-dajWYFmTNYdwtO8zFkPp5TaHvDYKWOvv",)"
      R"("model":"meta-llama/Llama-3.1-8B-Instruct","system_fingerprint":"b11669-Debian",)"
      R"("object":"chat.completion.chunk")";
  constexpr std::string_view kTimings =
      R"(,"timings":{"cache_n":400,"prompt_n":12,"prompt_ms":8.25,"prompt_per_token_ms":0.6875,)"
      R"("prompt_per_second":1454.5454545454545,"predicted_n":21,"predicted_ms":95.177,)"
      R"("predicted_per_token_ms":4.532238095238095,"predicted_per_second":220.64153314351157,)"
      R"("draft_n":16,"draft_n_accepted":11})";
  std::vector<std::string> events;
  auto chunk = [&](std::string_view delta, std::string_view finish, std::string_view extra) {
    events.push_back(R"(data: {"choices":[{"finish_reason":)" + std::string(finish) +
                     R"(,"index":0,"delta":)" + std::string(delta) + "}]," + std::string(kTail) +
                     std::string(extra) + "}\n\n");
  };
  chunk(R"({"role":"assistant","content":null})", "null", "");
  for (const char* token :
       {"The", " quarterly", " report", " shows", " revenue", " grew", " 12", "%", " year", " over",
        " year", ",", " driven", " by", " cloud", " services", " (\\\"+31%\\\")", "."}) {
    chunk(std::string(R"({"content":")") + token + "\"}", "null", "");
  }
  chunk("{}", R"("stop")", server ? kTimings : "");
  events.push_back(R"(data: {"choices":[],)" + std::string(kTail) +
                   R"(,"usage":{"completion_tokens":21,"prompt_tokens":412,"total_tokens":433)" +
                   (server ? R"(,"prompt_tokens_details":{"cached_tokens":400}})" : "}") + "}\n\n");
  events.push_back("data: [DONE]\n\n");
  return events;
}

}  // namespace llmtap::proxy

int main(int argc, char** argv) {
  using namespace llmtap::proxy;
  using llmtap::ResponseOutcome;
  if (argc < 3) {
    std::fprintf(stderr, "usage: %s CASE TEXT [N]\n", argv[0]);
    return 2;
  }
  const std::string which = argv[1];
  const bool text = std::atoi(argv[2]) != 0;
  const int n = argc > 3 ? std::atoi(argv[3]) : 100;
  const size_t max_text = text ? size_t{1} << 20 : 0;

  Input in;
  int64_t prompt = 412, completion = 21;
  std::string finish = "stop";
  std::string want_text(kChatText);
  [[maybe_unused]] bool server = false;
  [[maybe_unused]] bool check_server = true;  // off for the other APIs' streams
  ResponseOutcome (*run)(const Input&, size_t) = nullptr;
  if (which == "whole" || which == "event" || which == "bytes") {
    in.events = ChatEvents();
    in.whole = Join(in.events);
    run = which == "whole" ? RunWhole : which == "event" ? RunPerEvent : RunBytes;
  } else if (which == "chat256" || which == "responses256" || which == "messages256") {
    // The bench's BM_Reader*Sse: the same answer in each API's stream, 256 bytes per Feed.
    if (which == "chat256") {
      in.whole = Join(ChatEvents());
    } else if (which == "responses256") {
      in.endpoint = llmtap::api::Endpoint::kResponses;
      in.whole = ResponsesStream();
      finish = "completed";
    } else {
      in.endpoint = llmtap::api::Endpoint::kMessages;
      in.whole = MessagesStream();
      finish = "end_turn";
    }
    run = Run256;
    check_server = false;
  } else if (which == "json") {
    in.content_type = "application/json";
    in.whole = JsonResponse(&want_text);
    prompt = 1203;
    completion = 1024;
    finish = "length";
    run = RunWhole;
  } else if (which.starts_with("llama_")) {
    server = which.starts_with("llama_timings_");
    in.events = LlamaEvents(server);
    in.whole = Join(in.events);
    run = which.ends_with("_whole") ? RunWhole : which.ends_with("_event") ? RunPerEvent : RunBytes;
  } else {
    std::fprintf(stderr, "unknown case %s\n", which.c_str());
    return 2;
  }

  auto check = [&](const ResponseOutcome& o) {
    bool ok = o.prompt_tokens == prompt && o.completion_tokens == completion &&
              finish == o.finish_reason && (!text || o.response.text == want_text);
#if DRIVER_SERVER_REPORT
    if (!check_server) {
    } else if (server) {
      ok = ok && o.server.cached_tokens == 400 && o.server.timings.cache_n == 400 &&
           o.server.timings.prompt_n == 12 && o.server.timings.decode_n == 21 &&
           o.server.timings.prompt_us == 8250 && o.server.timings.decode_us == 95177 &&
           o.server.spec.engine == llmtap::api::SpecEngine::kLlamaCpp &&
           o.server.spec.num_draft_tokens == 16 && o.server.spec.num_accepted_draft_tokens == 11;
    } else {
      ok =
          ok && o.server.cached_tokens == -1 && !o.server.timings.known() && !o.server.spec.known();
    }
#endif
    return ok;
  };
  if (!check(WarmUp(in, max_text))) {
    std::fprintf(stderr, "%s text:%d: wrong result (warm-up)\n", which.c_str(), int(text));
    return 1;
  }
  for (int i = 0; i < n; ++i) {
    if (!check(run(in, max_text))) {
      std::fprintf(stderr, "%s text:%d: wrong result\n", which.c_str(), int(text));
      return 1;
    }
  }
  std::printf("%s text:%d: %d responses of %zu bytes ok\n", which.c_str(), int(text), n,
              in.whole.size());
  return 0;
}
