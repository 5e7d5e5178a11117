// The worker threads of AnonymizeTrace (anonymize.h): each line of a batch parsed, its request
// body found (payload, raw body or an AIPerf row's messages), tokenized and hashed into keyed
// block ids; the session id hashed. Only counts and keyed ids leave a worker, no prompt bytes.
// OrderedBatches (common/ordered_batches.h) runs them for anonymize.cc.
#include <charconv>
#include <memory>
#include <string_view>
#include <utility>

#include "anonymize/anonymize_internal.h"
#include "api/prompt.h"
#include "trace/convert.h"
#include "trace/line_reader.h"

namespace llmtap::anonymize::anonymize_internal {
namespace {

using trace::ParseStatus;
using trace::TraceFormat;

std::optional<uint64_t> UnsignedAt(simdjson::dom::object obj, std::string_view key) {
  simdjson::dom::element e;
  uint64_t u;
  if (obj.at_key(key).get(e) != simdjson::SUCCESS || e.get(u) != simdjson::SUCCESS) {
    return std::nullopt;
  }
  return u;
}

// Tokenizes and hashes batches; one per worker thread.
class Worker {
 public:
  Worker(const AnonymizeOptions& options, std::optional<TraceFormat> fixed_format)
      : options_(options),
        fixed_format_(fixed_format),
        hasher_(*options.key),
        session_hasher_(*options.session_key) {}

  void Process(Batch* batch) {
    batch->ids.clear();
    batch->prefix.clear();
    batch->rows.resize(batch->input.lines.size());
    for (size_t i = 0; i < batch->input.lines.size(); ++i) {
      const trace::LineBatch::Ref& ref = batch->input.lines[i];
      RowResult& r = batch->rows[i];
      r = RowResult{};
      r.line = ref.number;
      ProcessLine(batch->input.Text(ref), ref.torn, &r, batch);
    }
  }

 private:
  void Skip(RowResult* r, std::string kind, std::string reason) {
    r->skip_kind = std::move(kind);
    r->skip_reason = std::move(reason);
  }

  void ProcessLine(std::string_view line, bool torn, RowResult* r, Batch* batch) {
    const trace::ParsedRow& row = parser_.Parse(line);
    // An integer beyond 64 bits: AIPerf reads it as a double and loads the row, and so does
    // the parser (a number too large even for a double stays refused, by both).
    r->big_integers = row.big_integers;
    line = row.text;
    if (row.status != ParseStatus::kOk) {
      Skip(r, torn ? "torn last line" : "not a JSON object",
           torn ? "torn last line (the capture was cut mid-write), skipped: " + row.error
                : row.error);
      return;
    }
    r->row_format = trace::RowFormat(row.object);
    TraceFormat format = fixed_format_ ? *fixed_format_ : r->row_format;
    std::string_view body;
    simdjson::dom::object request = row.object;
    if (format == TraceFormat::kRaw) {
      body = trace::TrimJsonWhitespace(line);
    } else {
      r->timestamp = trace::RowTimestamp(row.object);
      HashSessionId(row.object, r);
      if (std::optional<std::string_view> payload = trace::PayloadBytes(line, row.object)) {
        body = *payload;
        request = row.object["payload"].get_object().value_unsafe();
      } else if (!BodyFromAiperfRow(row.object, r)) {
        return;
      } else {
        body = synthesized_;
      }
    }
    if (!r->session.empty())
      r->completions = request.at_key("messages").error() != simdjson::SUCCESS;
    if (auto v = UnsignedAt(request, "max_completion_tokens")) {
      r->requested_output = v;
    } else if (auto v2 = UnsignedAt(request, "max_tokens")) {
      r->requested_output = v2;
    } else if (auto v4 = UnsignedAt(request, "max_output_tokens")) {
      r->requested_output = v4;
    } else if (auto v3 = UnsignedAt(row.object, "output_length")) {
      r->requested_output = v3;
    }
    // A Responses or Messages request renders as the chat request its server templates.
    const api::Endpoint endpoint = trace::RowEndpoint(row.object, format);
    if (endpoint == api::Endpoint::kEmbeddings || endpoint == api::Endpoint::kRerank) {
      Skip(r, "not generation",
           std::string(api::EndpointName(endpoint)) +
               " requests generate no tokens (AIPerf's synthetic rows are generation requests)");
      return;
    }
    if (api::ChatBodyFor(endpoint, body, &chat_body_)) body = chat_body_;
    tokens_.clear();
    error_.clear();
    if (!options_.tokenizer->EncodeRequest(body, &tokens_, &error_)) {
      Skip(r, "no prompt", "no prompt to tokenize: " + error_);
      return;
    }
    if (tokens_.empty()) {
      Skip(r, "empty prompt", "the prompt has no tokens");
      return;
    }
    r->input_length = tokens_.size();
    r->ids_begin = batch->ids.size();
    hasher_.Hash(tokens_, options_.block_size, &batch->ids);
    r->ids_end = batch->ids.size();
    if (!r->session.empty()) {
      r->prefix_begin = batch->prefix.size();
      batch->prefix.resize(r->prefix_begin + tokens_.size());
      PrefixHashes(tokens_, batch->prefix.data() + r->prefix_begin);
    }
  }

  void HashSessionId(simdjson::dom::object row, RowResult* r) {
    simdjson::dom::element e;
    if (row.at_key("session_id").get(e) != simdjson::SUCCESS || e.is_null()) return;
    std::string_view id;
    if (e.get(id) != simdjson::SUCCESS) {
      r->session_dropped = true;
    } else if (!id.empty()) {  // an empty id names no session (as capture treats it)
      r->session = session_hasher_.SessionId(id);
    }
  }

  // AIPerf mooncake rows that carry their prompt without a payload: `messages` (sent as a
  // chat request) or `text_input` (a completions prompt). Rebuilds a request body from them.
  bool BodyFromAiperfRow(simdjson::dom::object row, RowResult* r) {
    simdjson::dom::element e;
    synthesized_.clear();
    if (row.at_key("messages").get(e) == simdjson::SUCCESS && !e.is_null()) {
      synthesized_ = "{\"messages\":" + simdjson::to_string(e);
      if (row.at_key("tools").get(e) == simdjson::SUCCESS && !e.is_null()) {
        synthesized_ += ",\"tools\":" + simdjson::to_string(e);
      }
      synthesized_ += "}";
      return true;
    }
    if (row.at_key("text_input").get(e) == simdjson::SUCCESS && e.is_string()) {
      synthesized_ = "{\"prompt\":" + simdjson::to_string(e) + "}";
      return true;
    }
    if (row.at_key("input_length").get(e) == simdjson::SUCCESS) {
      Skip(r, "already synthetic",
           "an input_length row has no prompt to tokenize (already a synthetic trace)");
    } else {
      Skip(r, "no prompt", "mooncake row without 'payload', 'messages' or 'text_input'");
    }
    return false;
  }

  const AnonymizeOptions& options_;
  std::optional<TraceFormat> fixed_format_;
  trace::RowParser parser_;
  BlockHasher hasher_;
  BlockHasher session_hasher_;
  std::vector<uint32_t> tokens_;
  std::string error_;
  std::string synthesized_;
  std::string chat_body_;  // a Responses or Messages request as chat
};

}  // namespace

OrderedBatches<Batch>::Work MakeWorker(const AnonymizeOptions& options,
                                       std::optional<TraceFormat> fixed_format) {
  auto worker = std::make_shared<Worker>(options, fixed_format);
  return [worker](Batch* batch) { worker->Process(batch); };
}

}  // namespace llmtap::anonymize::anonymize_internal
