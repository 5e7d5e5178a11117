// The sim's connection: one client connection of `llmtap sim`, from its first byte to its close.
// connection.cc holds the session (reading requests one after another, the idle watchdog, the
// timed generation and its writes); responses.cc holds the routes and the bytes of every
// response. SimShared is what all connections of one server share.
//
// Threads: a Connection lives on one event loop and is only touched by that loop's thread
// (the loop is its strand). SimShared may be used from any thread. Include from .cc files only
// (it brings Asio).
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http/verb.hpp>

#include "api/messages.h"
#include "api/responses.h"
#include "common/asio_types.h"
#include "net/response_head.h"
#include "net/watchdog.h"
#include "sim/concurrency_limiter.h"
#include "sim/engine.h"
#include "sim/options.h"
#include "sim/request.h"
#include "sim/response_store.h"

namespace llmtap::sim {

using namespace llmtap::asio_types;

// What every connection of one server shares.
struct SimShared {
  explicit SimShared(SimOptions o)
      : options(std::move(o)),
        limits{options.max_model_len, options.max_n},
        engine(options),
        limiter(options.max_concurrency) {}

  const SimOptions options;
  const RequestLimits limits;
  Engine engine;
  ConcurrencyLimiter limiter;
  ResponseStore responses;  // the Responses API's stored responses (previous_response_id)
};

// Runs one client connection to its end (the ConnectionHandler of the server's loops).
awaitable<void> RunConnection(SimShared* shared, Socket socket);

// The request head and body, parsed by Beast into strings the connection owns and reuses, so a
// request costs no allocation once the connection is warm. A fresh parser per request (Beast's
// parsers are single-use) carries the body and header limits.
struct RequestData {
  boost::beast::http::verb method = boost::beast::http::verb::unknown;
  std::string method_string;
  std::string target;
  std::string body;
  unsigned version = 11;
  bool expect_continue = false;  // "Expect: 100-continue" (curl sends it for bodies over 1 KiB)
};

// One client connection: reads requests one after another (HTTP/1.1 keep-alive) and answers
// each, on one event loop. A watchdog beside it closes the socket when a read waits for a
// request, or a write waits for the client, longer than the idle timeout; the time spent
// generating (waiting on token timers) never counts as idle.
class Connection : public std::enable_shared_from_this<Connection> {
 public:
  Connection(SimShared* shared, Socket socket);

  // Arms the idle watchdog; call once, before Run().
  void StartWatchdog();
  awaitable<void> Run();

 private:
  // --- the session (connection.cc) ---

  // After an error response to a request whose body was not read: stop sending, then read and
  // drop what the client still sends (bounded by the idle timeout and 1 MiB), so that closing
  // with unread data does not reset the connection before the client has read the response.
  awaitable<void> LingeringClose();
  // A read of the client (for a request) or a write to it begins or ends: only those count as
  // idle.
  void BeginIdle() { watchdog_.BeginFor(idle_); }
  void EndIdle() { watchdog_.End(); }
  // Parses a generation request and, when nothing has to wait, answers it at once. Returns true
  // when GenerateTimed() must run.
  bool Prepare(Endpoint ep);
  // Parses request_.body for `ep` into sim_request_: chat and completions by ParseRequest, the
  // Responses API by ParseResponses(), Anthropic's messages by ParseMessages(). False after
  // answering with an error.
  bool ParseGeneration(Endpoint ep);
  // POST /v1/responses: parses the request into responses_request_ and sim_request_ (its prompt:
  // instructions, the stored conversation of previous_response_id, the input). False when it
  // was answered with an error (400, or 404 for an unknown previous_response_id).
  bool ParseResponses();
  // POST /v1/messages: parses the request (api/messages.h) into messages_request_ and
  // sim_request_; false after answering 400 in Anthropic's shape.
  bool ParseMessages();
  // Writes out_ now and empties it; false when the client is gone.
  awaitable<bool> Flush();
  // The generation that waits: the concurrency queue, the token timers, streaming. Leaves the
  // last bytes (or the whole non-streaming response) in out_ for Run() to write.
  awaitable<bool> GenerateTimed();

  // --- routes and responses, built into out_ (responses.cc) ---

  // Routes the request in request_. Either builds the whole response in out_ and returns false,
  // or prepares a generation that must wait and returns true (GenerateTimed() then runs it).
  bool Handle();
  // POST /v1/embeddings and the rerank paths: answered at once (api/embeddings.h, rerank.h).
  void HandleEmbeddings();
  void HandleRerank();
  // Whether a parsed request may be served: answers 400 with `problem` when it did not parse,
  // and vLLM's 404 when it names a model the sim does not serve (false then).
  bool Admit(bool parsed, const api::RequestProblem& problem, const std::string& model);
  std::string ModelsBody() const;
  // The status line, Content-Type, `fields` (whole "Name: value\r\n" lines) and the head's end
  // (net::EndResponseHead: framing, Connection, blank line; it may turn keep_alive_ off).
  void AppendHead(int status, std::string_view content_type, std::string_view fields,
                  net::BodyFraming framing, uint64_t content_length);
  void Respond(int status, std::string_view content_type, std::string_view body,
               std::string_view fields = "");
  // An error in vLLM's shape: {"error":{"message","type","param","code":status}}, the type named
  // after the status ("BadRequestError", "NotFoundError", ...); an empty param is null. On
  // Anthropic's path (/v1/messages), in Anthropic's shape instead (api::AppendMessagesError).
  void RespondError(int status, std::string_view message, std::string_view param,
                    std::string_view extra = "");
  void RespondMethodNotAllowed(const char* allow);
  // The head of a streaming response.
  void AppendStreamHead();
  // `{"id":"...","object":"...","created":...,"model":"...","choices":[` for this response; for
  // Anthropic's messages the message id in prefix_ and the tool_use block's in tool_id_.
  void BuildPrefix(Endpoint ep, const SimRequest& r, const Plan& plan, bool chunk);
  std::string_view FinishReason(const Choice& choice) const;
  // `{"index":N` opening a choice.
  static void AppendChoiceIndex(uint32_t index, std::string* out);
  // A forced tool call (SimRequest::forced_tool): its arguments are the JSON text
  // {"input":"<generated text>"}, sent as a JSON string. Appends the string's inside for the
  // generated bytes [begin, end) of `text` (of `size` in all), opening and closing the
  // arguments object at the ends.
  void AppendToolArguments(std::string_view text, size_t begin, size_t end, size_t size,
                           std::string* out);
  // {["index":0,]"id":...,"type":"function","function":{"name":...,"arguments":" (left open;
  // stream deltas index their tool calls, a whole message does not) for choice `choice`.
  void AppendToolCallHead(const Plan& plan, uint32_t choice, bool delta, std::string* out);
  // Appends a chat choice's first stream event (the assistant role, or the tool call's head).
  void AppendRoleEvent(const Plan& plan, uint32_t choice);
  // Appends one SSE event carrying choice `choice`'s generated text [begin, end) to out_.
  void AppendDelta(const Plan& plan, uint32_t choice, size_t begin, size_t end, bool last);
  // Appends the stream's end: the usage event when asked for, [DONE], the last chunk.
  void AppendStreamEnd(const Plan& plan);
  // The report on the sim's own work in SimOptions::report's shape (report_shape.h), for a chat
  // or completions answer's usage-bearing object: llama.cpp's `,"timings":{..}` or vLLM's
  // `,"metrics":{..}`; nothing for ReportShape::kNone.
  void AppendReport(const Plan& plan, std::string* out) const;
  // llama.cpp's streams: what the response's last finish chunk carries (a completions stream:
  // usage and timings; a chat stream without include_usage: timings), after its choices.
  void AppendFinishChunkReport(const Plan& plan, std::string* out) const;
  // Whether usage rides on the finish chunk instead of a `choices: []` chunk (llama.cpp's
  // completions streams).
  bool UsageOnFinishChunk() const;
  // Appends the complete non-streaming response to out_.
  void AppendWholeResponse(const Plan& plan);
  // The Responses API (api/responses.h): the answer of plan_'s choice 0 (`content`: its text,
  // or a forced tool call's arguments); its stream's start, one delta, the end; the whole
  // response. Each answer ends by storing its conversation when the request asks to (`store`).
  api::ResponseAnswer ResponsesAnswer(const Plan& plan, std::string_view content) const;
  // The whole answer: its text, or a forced tool call's arguments (kept in arguments_).
  api::ResponseAnswer FinalResponsesAnswer(const Plan& plan);
  void AppendResponsesStart(const Plan& plan);
  void AppendResponsesDelta(const Plan& plan, size_t begin, size_t end);
  void AppendResponsesEnd(const Plan& plan);
  void AppendWholeResponsesResponse(const Plan& plan);
  void StoreResponse(const api::ResponseAnswer& answer);
  // A forced tool call's arguments {"input":"<generated text>"} for the generated bytes
  // [begin, end) of `text` (of `size` in all), opening and closing the object at the ends; in
  // scratch_.
  std::string_view ToolArgumentsPiece(std::string_view text, size_t begin, size_t end, size_t size);
  // Anthropic's messages (api/messages.h): what the answer's pieces name, its stop reason and
  // usage, and the stream's opening events (message_start, content_block_start, ping).
  api::MessageHead MessagesHead() const;
  api::StopReason MessagesStopReason(const Choice& choice) const;
  static api::MessagesUsage MessagesAnswerUsage(const Plan& plan);
  void AppendMessagesStart(const Plan& plan);

  SimShared* shared_;
  Engine& engine_;
  Endpoint endpoint_ = Endpoint::kChatCompletions;
  bool planned_ = false;   // Prepare() made plan_ and counted it running
  Clock::time_point due_;  // when the next step of plan_ is due
  Socket socket_;
  Timer timer_;  // token timing
  boost::beast::flat_buffer buffer_;
  RequestData request_;
  SimRequest sim_request_;  // reused, with plan_, by every request of this connection
  Plan plan_;
  const Clock::duration idle_;
  net::Watchdog watchdog_;  // idle timeout
  unsigned version_ = 11;
  bool keep_alive_ = true;
  bool chunked_ = true;
  std::string out_;      // bytes waiting to be written
  std::string event_;    // one SSE event being built
  std::string scratch_;  // a forced tool call's arguments before their escaping as a string
  std::string prefix_;   // the JSON prefix shared by this response's objects
  // The Responses API's request, its ids ("resp_", "msg_" or "fc_", "call_"), its creation time,
  // the next event's sequence number, and the stored response it continues.
  api::ResponsesRequest responses_request_;
  std::string response_id_, item_id_, call_id_;
  uint64_t created_at_ = 0;
  uint64_t sequence_ = 0;
  ResponseStore::Handle previous_;
  std::string arguments_;  // a forced tool call's whole arguments
  // Anthropic's messages: the parsed request (its buffers reused) and the tool_use block's id
  // (the message id is in prefix_).
  api::MessagesRequest messages_request_;
  std::string chat_body_;  // a Messages request as the chat request it renders as
  std::string tool_id_;
};

}  // namespace llmtap::sim
