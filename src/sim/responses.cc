// The sim's routes and the bytes of every response: the HTTP heads, the OpenAI-shaped JSON
// bodies and SSE events, each built into the connection's output buffer (Connection, declared
// in connection.h; connection.cc does the I/O). Runs on the connection's loop thread.
#include <ctime>
#include <string>
#include <string_view>

#include <boost/beast/http/verb.hpp>

#include "api/embeddings.h"
#include "api/messages.h"
#include "api/prompt.h"
#include "api/rerank.h"
#include "api/responses.h"
#include "api/tool_input.h"
#include "common/hex.h"
#include "common/json_escape.h"
#include "sim/connection.h"
#include "sim/report_shape.h"
#include "sim/retrieval.h"
#include "sim/text.h"

namespace llmtap::sim {

using namespace std::string_view_literals;
namespace http = boost::beast::http;

namespace {
std::string_view StatusLine(int status) {
  switch (status) {
    case 200:
      return "HTTP/1.1 200 OK\r\n";
    case 400:
      return "HTTP/1.1 400 Bad Request\r\n";
    case 404:
      return "HTTP/1.1 404 Not Found\r\n";
    case 405:
      return "HTTP/1.1 405 Method Not Allowed\r\n";
    case 413:
      return "HTTP/1.1 413 Payload Too Large\r\n";
    default:
      return "HTTP/1.1 500 Internal Server Error\r\n";
  }
}

// An error body's "type", as vLLM names them: the status's name, then "Error".
std::string_view ErrorType(int status) {
  switch (status) {
    case 400:
      return "BadRequestError";
    case 404:
      return "NotFoundError";
    case 405:
      return "MethodNotAllowedError";
    case 413:
      return "RequestEntityTooLargeError";
    default:
      return "InternalServerError";
  }
}

// Frames `payload` as one HTTP/1.1 chunk (or raw, for HTTP/1.0 clients).
void AppendChunk(std::string* out, std::string_view payload, bool chunked) {
  if (chunked) {
    AppendHexMinimal(out, payload.size());
    out->append("\r\n"sv);
  }
  out->append(payload);
  if (chunked) out->append("\r\n"sv);
}

void AppendUsage(std::string* out, const Plan& plan) {
  out->append("\"usage\":{\"prompt_tokens\":"sv);
  AppendUint(out, plan.prompt_tokens);
  out->append(",\"total_tokens\":"sv);
  AppendUint(out, plan.prompt_tokens + plan.completion_tokens());
  out->append(",\"completion_tokens\":"sv);
  AppendUint(out, plan.completion_tokens());
  out->append(",\"prompt_tokens_details\":{\"cached_tokens\":"sv);
  AppendUint(out, plan.cached_tokens);
  out->append("}}"sv);
}

}  // namespace

bool Connection::Handle() {
  out_.clear();
  std::string_view target = request_.target;
  if (size_t q = target.find('?'); q != std::string_view::npos) target = target.substr(0, q);
  const http::verb method = request_.method;
  if (target == "/v1/chat/completions" || target == "/v1/completions") {
    if (method != http::verb::post) {
      RespondMethodNotAllowed("POST");
      return false;
    }
    return Prepare(target == "/v1/completions" ? Endpoint::kCompletions
                                               : Endpoint::kChatCompletions);
  }
  if (target == api::kResponsesPath || target == api::kMessagesPath) {
    if (method != http::verb::post) {
      RespondMethodNotAllowed("POST");
      return false;
    }
    return Prepare(target == api::kResponsesPath ? Endpoint::kResponses : Endpoint::kMessages);
  }
  if (target == api::kEmbeddingsPath || api::IsRerankPath(target)) {
    if (method != http::verb::post) {
      RespondMethodNotAllowed("POST");
    } else if (target == api::kEmbeddingsPath) {
      HandleEmbeddings();
    } else {
      HandleRerank();
    }
    return false;
  }
  if (target == "/v1/models" || target == "/health" || target == "/v1/metrics" ||
      target == "/metrics") {
    if (method != http::verb::get) {
      RespondMethodNotAllowed("GET");
    } else if (target == "/health") {
      Respond(200, "", "");
    } else if (target == "/v1/models") {
      Respond(200, "application/json", ModelsBody());
    } else {
      Respond(200, "text/plain; version=0.0.4; charset=utf-8", engine_.MetricsText());
    }
    return false;
  }
  std::string message = "Not found: ";
  message.append(request_.method_string);
  message.push_back(' ');
  message.append(target.substr(0, 200));
  RespondError(404, message, "");
  return false;
}

bool Connection::Admit(bool parsed, const api::RequestProblem& problem, const std::string& model) {
  if (!parsed) {
    RespondError(400, problem.message, problem.param);
    return false;
  }
  if (!shared_->options.Serves(model)) {
    // vLLM's answer, word for word, to a model it does not serve.
    RespondError(404, "The model `" + model + "` does not exist.", "model");
    return false;
  }
  return true;
}

void Connection::HandleEmbeddings() {
  api::EmbeddingsRequest r;
  api::RequestProblem problem;
  if (!Admit(api::ParseEmbeddingsRequest(request_.body, &r, &problem), problem, r.model)) return;
  const SimOptions& o = shared_->options;
  std::vector<std::vector<float>> vectors(r.inputs.size());
  uint64_t tokens = 0;
  for (size_t i = 0; i < r.inputs.size(); ++i) {
    TextEmbedding(r.inputs[i], r.dimensions.value_or(kDefaultEmbeddingDimensions), o.seed,
                  &vectors[i]);
    tokens += r.input_tokens[i] ? r.input_tokens[i] : CountApproxTokens(r.inputs[i]);
  }
  std::string& body = event_;
  body.clear();
  api::AppendEmbeddingsResponse(r, o.ResponseModel(r.model), vectors, tokens, &body);
  Respond(200, "application/json", body);
}

void Connection::HandleRerank() {
  api::RerankRequest r;
  api::RequestProblem problem;
  if (!Admit(api::ParseRerankRequest(request_.body, &r, &problem), problem, r.model)) return;
  const SimOptions& o = shared_->options;
  std::vector<double> scores(r.documents.size());
  uint64_t tokens = 0;
  for (size_t i = 0; i < r.documents.size(); ++i) {
    scores[i] = Relevance(r.query, r.documents[i], o.seed);
    // vLLM counts each query-document pair as the model sees it.
    tokens += CountApproxTokens(r.query) + CountApproxTokens(r.documents[i]);
  }
  std::string id = "rerank-";
  AppendHex(&id, HashBytes(request_.body, o.seed), 16);
  std::string& body = event_;
  body.clear();
  api::AppendRerankResponse(r, id, o.ResponseModel(r.model), scores, tokens, &body);
  Respond(200, "application/json", body);
}

std::string Connection::ModelsBody() const {
  const SimOptions& o = shared_->options;
  const uint64_t now = static_cast<uint64_t>(std::time(nullptr));
  std::string b = "{\"object\":\"list\",\"data\":[";
  // One entry per served name, each with the model as its root, as vLLM lists them.
  auto entry = [&](std::string_view name) {
    if (b.back() == '}') b.push_back(',');
    b.append("{\"id\":\""sv);
    AppendJsonEscaped(&b, name);
    b.append("\",\"object\":\"model\",\"created\":"sv);
    AppendUint(&b, now);
    b.append(",\"owned_by\":\"llmtap\",\"root\":\""sv);
    AppendJsonEscaped(&b, o.model);
    b.append("\",\"parent\":null,\"max_model_len\":"sv);
    AppendUint(&b, o.max_model_len);
    b.push_back('}');
  };
  if (o.served_model_names.empty()) entry(o.model);
  for (const std::string& name : o.served_model_names) entry(name);
  b.append("]}"sv);
  return b;
}

void Connection::AppendHead(int status, std::string_view content_type, std::string_view fields,
                            net::BodyFraming framing, uint64_t content_length) {
  out_.append(StatusLine(status));
  if (!content_type.empty()) out_.append("Content-Type: "sv).append(content_type).append("\r\n"sv);
  out_.append(fields);
  keep_alive_ = net::EndResponseHead(version_, keep_alive_, framing, content_length, &out_);
}

void Connection::Respond(int status, std::string_view content_type, std::string_view body,
                         std::string_view fields) {
  AppendHead(status, content_type, fields, net::BodyFraming::kContentLength, body.size());
  out_.append(body);
}

void Connection::RespondError(int status, std::string_view message, std::string_view param,
                              std::string_view extra) {
  engine_.metrics().http_errors_4xx.fetch_add(1, std::memory_order_relaxed);
  std::string& body = event_;
  std::string_view path = request_.target;
  if (size_t q = path.find('?'); q != std::string_view::npos) path = path.substr(0, q);
  if (path == api::kMessagesPath) {
    body.clear();
    api::AppendMessagesError(status, message, &body);
    Respond(status, "application/json", body, extra);
    return;
  }
  body.assign("{\"error\":{\"message\":\""sv);
  AppendJsonEscaped(&body, message);
  body.append("\",\"type\":\""sv);
  body.append(ErrorType(status));
  body.append("\",\"param\":"sv);
  if (param.empty()) {
    body.append("null"sv);  // as vLLM writes an error without one
  } else {
    AppendJsonString(&body, param);
  }
  body.append(",\"code\":"sv);
  AppendUint(&body, static_cast<uint64_t>(status));
  body.append("}}"sv);
  Respond(status, "application/json", body, extra);
}

void Connection::RespondMethodNotAllowed(const char* allow) {
  const std::string extra = std::string("Allow: ") + allow + "\r\n";
  RespondError(405, std::string("Method not allowed; use ") + allow + ".", "", extra);
}

void Connection::AppendStreamHead() {
  AppendHead(200, "text/event-stream; charset=utf-8",
             "Cache-Control: no-cache\r\nX-Accel-Buffering: no\r\n",
             chunked_ ? net::BodyFraming::kChunked : net::BodyFraming::kUntilClose, 0);
}

void Connection::BuildPrefix(Endpoint ep, const SimRequest& r, const Plan& plan, bool chunk) {
  if (ep == Endpoint::kResponses) {
    // The ids, from the plan's id as chat's are; each kind of id hashed apart.
    response_id_.assign("resp_"sv);
    AppendHex(&response_id_, plan.id, 16);
    AppendHex(&response_id_, Mix64(plan.id), 16);
    item_id_.assign(r.forced_tool.empty() ? "msg_"sv : "fc_"sv);
    AppendHex(&item_id_, Mix64(plan.id ^ 0x6974656dull), 16);
    AppendHex(&item_id_, Mix64(plan.id ^ 0x6974656d00000000ull), 16);
    call_id_.assign("call_"sv);
    AppendHex(&call_id_, Mix64(plan.id ^ 0x746f6f6cull), 16);
    created_at_ = static_cast<uint64_t>(std::time(nullptr));
    sequence_ = 0;
    return;
  }
  if (ep == Endpoint::kMessages) {
    // The message id in prefix_, the tool_use block's in tool_id_.
    prefix_.assign("msg_"sv);
    AppendHex(&prefix_, plan.id, 16);
    AppendHex(&prefix_, Mix64(plan.id), 16);
    tool_id_.assign("toolu_"sv);
    AppendHex(&tool_id_, Mix64(plan.id ^ 0x746f6f6cull), 16);
    AppendHex(&tool_id_, Mix64(plan.id ^ 0x75736500ull), 8);
    return;
  }
  prefix_.assign("{\"id\":\""sv);
  prefix_.append(ep == Endpoint::kChatCompletions ? "chatcmpl-" : "cmpl-");
  AppendHex(&prefix_, plan.id, 16);
  AppendHex(&prefix_, Mix64(plan.id), 16);
  prefix_.append("\",\"object\":\""sv);
  if (ep == Endpoint::kChatCompletions) {
    prefix_.append(chunk ? "chat.completion.chunk" : "chat.completion");
  } else {
    prefix_.append("text_completion"sv);
  }
  prefix_.append("\",\"created\":"sv);
  AppendUint(&prefix_, static_cast<uint64_t>(std::time(nullptr)));
  prefix_.append(",\"model\":\""sv);
  AppendJsonEscaped(&prefix_, shared_->options.ResponseModel(r.model));
  prefix_.append("\",\"choices\":["sv);
}

std::string_view Connection::FinishReason(const Choice& choice) const {
  if (!sim_request_.forced_tool.empty()) return "\"tool_calls\""sv;
  return choice.length_capped ? "\"length\""sv : "\"stop\""sv;
}

void Connection::AppendChoiceIndex(uint32_t index, std::string* out) {
  out->append("{\"index\":"sv);
  AppendUint(out, index);
}

std::string_view Connection::ToolArgumentsPiece(std::string_view text, size_t begin, size_t end,
                                                size_t size) {
  scratch_.clear();
  api::AppendToolInputPiece(text.substr(0, size), begin, end, &scratch_);
  return scratch_;
}

void Connection::AppendToolArguments(std::string_view text, size_t begin, size_t end, size_t size,
                                     std::string* out) {
  AppendJsonEscaped(out, ToolArgumentsPiece(text, begin, end, size));
}

void Connection::AppendToolCallHead(const Plan& plan, uint32_t choice, bool delta,
                                    std::string* out) {
  out->append(delta ? "{\"index\":0,\"id\":\"call_"sv : "{\"id\":\"call_"sv);
  AppendHex(out, Mix64(plan.id ^ 0x746f6f6cull ^ (uint64_t{choice} << 40)), 16);
  out->append("\",\"type\":\"function\",\"function\":{\"name\":\""sv);
  AppendJsonEscaped(out, sim_request_.forced_tool);
  out->append("\",\"arguments\":\""sv);
}

void Connection::AppendRoleEvent(const Plan& plan, uint32_t choice) {
  event_.assign("data: "sv);
  event_.append(prefix_);
  AppendChoiceIndex(choice, &event_);
  if (sim_request_.forced_tool.empty()) {
    event_.append(
        ",\"delta\":{\"role\":\"assistant\",\"content\":\"\"},\"logprobs\":"
        "null,\"finish_reason\":null}]}\n\n");
  } else {
    event_.append(",\"delta\":{\"role\":\"assistant\",\"content\":null,\"tool_calls\":["sv);
    AppendToolCallHead(plan, choice, /*delta=*/true, &event_);
    event_.append("\"}}]},\"logprobs\":null,\"finish_reason\":null}]}\n\n"sv);
  }
  AppendChunk(&out_, event_, chunked_);
}

void Connection::AppendDelta(const Plan& plan, uint32_t choice, size_t begin, size_t end,
                             bool last) {
  if (endpoint_ == Endpoint::kResponses) {
    AppendResponsesDelta(plan, begin, end);
    return;
  }
  const Choice& c = plan.choices[choice];
  if (endpoint_ == Endpoint::kMessages) {
    event_.clear();
    api::AppendMessageStreamDelta(MessagesHead(), c.gen.text, begin, end, &event_);
    AppendChunk(&out_, event_, chunked_);
    return;
  }
  event_.assign("data: "sv);
  event_.append(prefix_);
  AppendChoiceIndex(choice, &event_);
  std::string_view text(c.gen.text.data() + begin, end - begin);
  if (endpoint_ == Endpoint::kChatCompletions && !sim_request_.forced_tool.empty()) {
    event_.append(",\"delta\":{\"tool_calls\":[{\"index\":0,\"function\":{\"arguments\":\""sv);
    AppendToolArguments(c.gen.text, begin, end, c.gen.text.size(), &event_);
    event_.append("\"}}]},\"logprobs\":null,\"finish_reason\":"sv);
  } else if (endpoint_ == Endpoint::kChatCompletions) {
    event_.append(",\"delta\":{\"content\":\""sv);
    AppendJsonEscaped(&event_, text);
    event_.append("\"},\"logprobs\":null,\"finish_reason\":"sv);
  } else {
    event_.append(",\"text\":\""sv);
    AppendJsonEscaped(&event_, text);
    event_.append("\",\"logprobs\":null,\"finish_reason\":"sv);
  }
  event_.append(last ? FinishReason(c) : "null"sv);
  event_.append(",\"stop_reason\":null}]"sv);
  if (last && choice == plan.last_to_finish()) AppendFinishChunkReport(plan, &event_);
  event_.append("}\n\n"sv);
  AppendChunk(&out_, event_, chunked_);
}

void Connection::AppendReport(const Plan& plan, std::string* out) const {
  switch (shared_->options.report) {
    case ReportShape::kLlamaCpp:
      AppendLlamaCppTimings(plan, out);
      break;
    case ReportShape::kVllm:
      AppendVllmSpecMetrics(plan, shared_->options.spec.num_spec_tokens, out);
      break;
    case ReportShape::kNone:
      break;
  }
}

bool Connection::UsageOnFinishChunk() const {
  return shared_->options.report == ReportShape::kLlamaCpp && endpoint_ == Endpoint::kCompletions;
}

void Connection::AppendFinishChunkReport(const Plan& plan, std::string* out) const {
  if (shared_->options.report != ReportShape::kLlamaCpp) return;
  // llama-server: a completions stream's finish chunk carries usage and timings, with or without
  // include_usage; a chat stream's, the timings unless an include_usage chunk follows.
  if (UsageOnFinishChunk()) {
    out->push_back(',');
    AppendUsage(out, plan);
  } else if (sim_request_.include_usage) {
    return;
  }
  AppendLlamaCppTimings(plan, out);
}

void Connection::AppendStreamEnd(const Plan& plan) {
  if (endpoint_ == Endpoint::kResponses) {
    AppendResponsesEnd(plan);
    if (chunked_) out_.append("0\r\n\r\n"sv);
    return;
  }
  if (endpoint_ == Endpoint::kMessages) {
    event_.clear();
    api::AppendMessageStreamEnd(MessagesStopReason(plan.choices[0]), MessagesAnswerUsage(plan),
                                &event_);
    AppendChunk(&out_, event_, chunked_);
    if (chunked_) out_.append("0\r\n\r\n"sv);
    return;
  }
  if (sim_request_.include_usage && !UsageOnFinishChunk()) {
    event_.assign("data: "sv);
    event_.append(prefix_);
    event_.append("],"sv);
    AppendUsage(&event_, plan);
    AppendReport(plan, &event_);
    event_.append("}\n\n"sv);
    AppendChunk(&out_, event_, chunked_);
  }
  AppendChunk(&out_, "data: [DONE]\n\n", chunked_);
  if (chunked_) out_.append("0\r\n\r\n"sv);
}

void Connection::AppendWholeResponse(const Plan& plan) {
  if (endpoint_ == Endpoint::kResponses) {
    AppendWholeResponsesResponse(plan);
    return;
  }
  std::string& b = event_;  // the body
  if (endpoint_ == Endpoint::kMessages) {
    b.clear();
    const Choice& c = plan.choices[0];
    api::AppendMessageResponse(MessagesHead(), c.gen.text, MessagesStopReason(c),
                               MessagesAnswerUsage(plan), &b);
    Respond(200, "application/json", b);
    return;
  }
  b.assign(prefix_);
  for (uint32_t i = 0; i < plan.choices.size(); ++i) {
    const Choice& c = plan.choices[i];
    if (i > 0) b.push_back(',');
    AppendChoiceIndex(i, &b);
    if (endpoint_ == Endpoint::kChatCompletions && !sim_request_.forced_tool.empty()) {
      b.append(",\"message\":{\"role\":\"assistant\",\"content\":null,\"tool_calls\":["sv);
      AppendToolCallHead(plan, i, /*delta=*/false, &b);
      AppendToolArguments(c.gen.text, 0, c.gen.text.size(), c.gen.text.size(), &b);
      b.append("\"}}]},\"logprobs\":null,\"finish_reason\":"sv);
    } else if (endpoint_ == Endpoint::kChatCompletions) {
      b.append(",\"message\":{\"role\":\"assistant\",\"content\":\""sv);
      AppendJsonEscaped(&b, c.gen.text);
      b.append("\"},\"logprobs\":null,\"finish_reason\":"sv);
    } else {
      b.append(",\"text\":\""sv);
      AppendJsonEscaped(&b, c.gen.text);
      b.append("\",\"logprobs\":null,\"finish_reason\":"sv);
    }
    b.append(FinishReason(c));
    b.append(",\"stop_reason\":null}"sv);
  }
  b.append("],"sv);
  AppendUsage(&b, plan);
  AppendReport(plan, &b);
  b.append("}"sv);
  Respond(200, "application/json", b);
}

bool Connection::ParseResponses() {
  api::RequestProblem problem;
  const api::ResponsesRequest& r = responses_request_;
  if (!Admit(api::ParseResponsesRequest(request_.body, shared_->limits.max_model_len,
                                        &responses_request_, &problem),
             problem, r.model)) {
    return false;
  }
  previous_.reset();
  std::string& history = event_;
  history.clear();
  if (!r.previous_response_id.empty()) {
    previous_ = shared_->responses.Find(r.previous_response_id);
    if (previous_ == nullptr) {
      RespondError(404, "Response with id '" + r.previous_response_id + "' not found.",
                   "previous_response_id");
      return false;
    }
    ResponseStore::AppendConversation(previous_, &history);
  }
  SimRequest& s = sim_request_;
  s.endpoint = Endpoint::kResponses;
  s.model = r.model;
  s.prompt_text.clear();
  api::RenderResponsesPrompt(r, history, &s.prompt_text);
  s.stream = r.stream;
  s.include_usage = false;
  s.max_tokens = r.max_output_tokens;
  s.length_cap.reset();
  s.n = 1;
  s.forced_tool = r.forced_tool;
  s.seed.reset();
  return true;
}

api::ResponseAnswer Connection::ResponsesAnswer(const Plan& plan, std::string_view content) const {
  api::ResponseAnswer a;
  a.id = response_id_;
  a.item_id = item_id_;
  a.call_id = call_id_;
  a.created_at = created_at_;
  a.model = shared_->options.ResponseModel(sim_request_.model);
  a.function_name = sim_request_.forced_tool;
  a.content = content;
  a.incomplete = plan.choices[0].length_capped;
  a.input_tokens = plan.prompt_tokens;
  a.output_tokens = plan.completion_tokens();
  a.cached_tokens = plan.cached_tokens;
  return a;
}

void Connection::AppendResponsesStart(const Plan& plan) {
  event_.clear();
  api::AppendStreamStart(responses_request_, ResponsesAnswer(plan, ""sv), &sequence_, &event_);
  AppendChunk(&out_, event_, chunked_);
}

void Connection::AppendResponsesDelta(const Plan& plan, size_t begin, size_t end) {
  const std::string& text = plan.choices[0].gen.text;
  std::string_view delta(text.data() + begin, end - begin);
  if (!sim_request_.forced_tool.empty()) delta = ToolArgumentsPiece(text, begin, end, text.size());
  event_.clear();
  api::AppendStreamDelta(ResponsesAnswer(plan, ""sv), delta, &sequence_, &event_);
  AppendChunk(&out_, event_, chunked_);
}

api::ResponseAnswer Connection::FinalResponsesAnswer(const Plan& plan) {
  const std::string& text = plan.choices[0].gen.text;
  std::string_view content = text;
  if (!sim_request_.forced_tool.empty()) {
    arguments_.assign(ToolArgumentsPiece(text, 0, text.size(), text.size()));
    content = arguments_;
  }
  return ResponsesAnswer(plan, content);
}

void Connection::AppendResponsesEnd(const Plan& plan) {
  const api::ResponseAnswer answer = FinalResponsesAnswer(plan);
  // llama-server sends its timings beside the response in response.completed.
  scratch_.clear();
  if (shared_->options.report == ReportShape::kLlamaCpp) AppendLlamaCppTimings(plan, &scratch_);
  event_.clear();
  api::AppendStreamEnd(responses_request_, answer, &sequence_, &event_, scratch_);
  AppendChunk(&out_, event_, chunked_);
  StoreResponse(answer);
}

void Connection::AppendWholeResponsesResponse(const Plan& plan) {
  const api::ResponseAnswer answer = FinalResponsesAnswer(plan);
  std::string& b = event_;
  b.clear();
  api::AppendResponseObject(responses_request_, answer, &b);
  Respond(200, "application/json", b);
  StoreResponse(answer);
}

void Connection::StoreResponse(const api::ResponseAnswer& answer) {
  if (!responses_request_.store) return;
  std::string turns = responses_request_.input_text;
  api::AppendAnswerTurn(answer, &turns);
  shared_->responses.Put(answer.id, std::move(previous_), std::move(turns));
}

bool Connection::ParseMessages() {
  api::MessagesRequest& m = messages_request_;
  api::RequestProblem problem;
  if (!api::ParseMessagesRequest(request_.body, shared_->limits.max_model_len, &m, &problem)) {
    RespondError(400, problem.message, problem.param);
    return false;
  }
  SimRequest& s = sim_request_;
  s.endpoint = Endpoint::kMessages;
  s.model.swap(m.model);
  s.prompt_text.swap(m.prompt_text);  // both buffers stay warm for the next request
  // The prompt the model sees is the chat request's a server turns this one into (vLLM serves
  // Messages so): one conversation renders alike through either API (tool_use blocks as the
  // assistant's tool_calls, tool_result blocks as tool turns).
  if (api::MessagesChatBody(request_.body, &chat_body_)) {
    RenderChatMessages(chat_body_, &s.prompt_text);
  }
  s.stream = m.stream;
  s.include_usage = false;
  s.max_tokens.reset();
  s.length_cap = m.max_tokens;
  s.n = 1;
  s.forced_tool.swap(m.forced_tool);
  s.seed.reset();
  return true;
}

api::MessageHead Connection::MessagesHead() const {
  return {.id = prefix_,
          .model = shared_->options.ResponseModel(sim_request_.model),
          .tool_name = sim_request_.forced_tool,
          .tool_id = tool_id_};
}

api::StopReason Connection::MessagesStopReason(const Choice& choice) const {
  if (!sim_request_.forced_tool.empty()) return api::StopReason::kToolUse;
  return choice.length_capped ? api::StopReason::kMaxTokens : api::StopReason::kEndTurn;
}

api::MessagesUsage Connection::MessagesAnswerUsage(const Plan& plan) {
  // Anthropic counts the tokens read from its cache apart: input + cache_read = the prompt.
  return {.input_tokens = plan.prompt_tokens - plan.cached_tokens,
          .output_tokens = plan.completion_tokens(),
          .cache_read_input_tokens = plan.cached_tokens,
          .cache_creation_input_tokens = 0};
}

void Connection::AppendMessagesStart(const Plan& plan) {
  event_.clear();
  api::AppendMessageStreamStart(MessagesHead(), MessagesAnswerUsage(plan), &event_);
  AppendChunk(&out_, event_, chunked_);
}

}  // namespace llmtap::sim
