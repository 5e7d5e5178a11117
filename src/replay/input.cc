#include "replay/input.h"

#include <iterator>
#include <string>

#include "common/json_escape.h"

namespace llmtap::replay {
namespace {

using namespace std::string_view_literals;

bool Has(simdjson::dom::object o, std::string_view key) {
  return o.at_key(key).error() == simdjson::SUCCESS;
}

bool IsHashed(simdjson::dom::object row) {
  simdjson::dom::array ids;
  return row.at_key("hash_ids").get(ids) == simdjson::SUCCESS && Has(row, "input_length") &&
         !Has(row, "payload");
}

// The bytes of the request a payload or raw row carries.
std::string_view RequestBytes(std::string_view line, RowKind kind) {
  if (kind == RowKind::kRawPayload) return trace::TrimJsonWhitespace(line);
  std::optional<trace::Span> span = trace::FindTopLevelValue(line, "payload");
  if (!span) return {};
  return line.substr(span->begin, span->end - span->begin);
}

bool WantsStream(simdjson::dom::object request) {
  bool stream = false;
  return request.at_key("stream").get(stream) == simdjson::SUCCESS && stream;
}

// A hashed row's body; a session turn's own piece is marked in *r (TraceRequest::turn_begin).
void HashedBody(std::string_view prompt, std::string_view model,
                std::optional<uint64_t> output_length, const InputOptions& in, TraceRequest* r) {
  std::string& b = r->body;
  b = "{\"model\":\"";
  AppendJsonEscaped(&b, model);
  size_t begin, end;
  if (in.hashed_chat) {
    b.append("\",\"messages\":["sv);
    begin = b.size();
    b.append("{\"role\":\"user\",\"content\":\""sv);
    AppendJsonEscaped(&b, prompt);
    b.append("\"}"sv);
    end = b.size();
    b.push_back(']');
  } else {
    b.append("\",\"prompt\":\""sv);
    begin = b.size();
    AppendJsonEscaped(&b, prompt);
    end = b.size();
    b.push_back('"');
  }
  if (!r->session_id.empty()) {
    r->turn_begin = begin;
    r->turn_end = end;
  }
  if (output_length) b.append(",\"max_tokens\":"sv).append(std::to_string(*output_length));
  if (in.ignore_eos) b.append(",\"ignore_eos\":true"sv);
  if (in.stream) b.append(",\"stream\":true,\"stream_options\":{\"include_usage\":true}"sv);
  b.push_back('}');
}

}  // namespace

std::string_view RowKindName(RowKind kind) {
  switch (kind) {
    case RowKind::kMooncakePayload:
      return "mooncake_payload";
    case RowKind::kRawPayload:
      return "raw_payload";
    case RowKind::kHashed:
      return "hashed";
    case RowKind::kUnsupported:
      break;
  }
  return "unsupported";
}

RowKind DetectRowKind(simdjson::dom::object row) {
  const trace::TraceFormat format = trace::RowFormat(row);
  if (format == trace::TraceFormat::kMooncake && IsHashed(row)) return RowKind::kHashed;
  std::optional<simdjson::dom::object> request = trace::RowRequest(row, format);
  if (!request) return RowKind::kUnsupported;
  if (api::EndpointPath(trace::RowEndpoint(row, format)).empty()) return RowKind::kUnsupported;
  return format == trace::TraceFormat::kMooncake ? RowKind::kMooncakePayload : RowKind::kRawPayload;
}

bool CanStream(api::Endpoint endpoint) {
  return endpoint != api::Endpoint::kEmbeddings && endpoint != api::Endpoint::kRerank;
}

std::string RewriteBody(std::string_view body, std::string_view model, bool force_stream,
                        api::Endpoint endpoint) {
  std::string out(body);
  if (!model.empty()) {
    std::string quoted;
    AppendJsonString(&quoted, model);
    SetTopLevel(&out, "model", quoted);
  }
  if (force_stream && CanStream(endpoint)) {
    SetTopLevel(&out, "stream", "true");
    if (endpoint == api::Endpoint::kChat || endpoint == api::Endpoint::kCompletions) {
      SetTopLevel(&out, "stream_options", "{\"include_usage\":true}");
    }
  }
  return out;
}

std::string ApiCounts::Text() const {
  std::string out;
  for (size_t i = 0; i < std::size(by_api); ++i) {
    if (by_api[i] == 0) continue;
    if (!out.empty()) out += ", ";
    out += std::to_string(by_api[i]) + " ";
    out += api::EndpointName(static_cast<api::Endpoint>(i));
  }
  return out.empty() ? "none" : out;
}

TraceReader::TraceReader(const LoadOptions& options)
    : options_(options), hashed_model_(options.input.model) {}

bool TraceReader::Open(std::string* error) {
  Status status = reader_.Open(options_.input.path);
  if (!status.ok()) {
    *error = status.ToString();
    return false;
  }
  return true;
}

void TraceReader::Skip(uint64_t line, std::string_view reason) {
  ++counts_.skipped;
  if (skip_reasons_.size() < options_.max_listed_skips) {
    skip_reasons_.push_back("line " + std::to_string(line) + ": " + std::string(reason));
  }
}

bool TraceReader::Next(TraceRequest* r) {
  while (reader_.Next(&line_)) {
    const trace::ParsedRow& row = parser_.Parse(line_.bytes);
    if (row.status == trace::ParseStatus::kBlank) continue;
    const uint64_t row_index = next_index_++;
    if (row.status != trace::ParseStatus::kOk) {
      Skip(line_.number, line_.torn ? "torn last line" : "not a JSON object");
      continue;
    }
    kind_ = DetectRowKind(row.object);
    if (kind_ == RowKind::kUnsupported) {
      Skip(line_.number,
           "neither a request of an API replay sends (chat, completions, responses, messages, "
           "embeddings, rerank) nor a hashed row (hash_ids + input_length)");
      continue;
    }
    *r = TraceRequest();
    r->index = row_index;
    r->line = line_.number;
    r->timestamp_ms = trace::RowTimestamp(row.object);
    std::string_view session;
    if (row.object.at_key("session_id").get(session) == simdjson::SUCCESS) {
      r->session_id = session;
    }
    if (kind_ == RowKind::kHashed) {
      if (row.object.at_key("input_length").get(input_length_) != simdjson::SUCCESS) {
        Skip(line_.number, "input_length is not a non-negative integer");
        continue;
      }
      output_length_.reset();
      uint64_t v = 0;
      if (row.object.at_key("output_length").get(v) == simdjson::SUCCESS) output_length_ = v;
      hash_ids_.clear();
      bool ids_ok = true;
      simdjson::dom::array hash_ids;
      if (row.object.at_key("hash_ids").get(hash_ids) != simdjson::SUCCESS) ids_ok = false;
      for (simdjson::dom::element e : hash_ids) {
        if (e.get(v) != simdjson::SUCCESS) ids_ok = false;
        hash_ids_.push_back(v);
      }
      if (!ids_ok) {
        Skip(line_.number, "hash_ids holds something other than non-negative integers");
        continue;
      }
      if (options_.synthetic == nullptr) {
        error_ = "line " + std::to_string(line_.number) +
                 ": hashed rows need a tokenizer for their synthetic prompts";
        if (!options_.synthetic_error.empty()) error_ += ": " + options_.synthetic_error;
        return false;
      }
      if (hashed_model_.empty()) {
        hashed_model_ = options_.default_model ? options_.default_model() : "default";
        if (hashed_model_.empty()) hashed_model_ = "default";
      }
      r->endpoint = options_.input.hashed_chat ? api::Endpoint::kChat : api::Endpoint::kCompletions;
      r->stream = options_.input.stream;
      ++counts_.rows_hashed;
    } else {
      const trace::TraceFormat format =
          kind_ == RowKind::kRawPayload ? trace::TraceFormat::kRaw : trace::TraceFormat::kMooncake;
      simdjson::dom::object request = *trace::RowRequest(row.object, format);
      // Found for every row, not only this shard's, so that all shards skip the same rows and
      // so plan the same schedule.
      request_bytes_ = RequestBytes(line_.bytes, kind_);
      if (request_bytes_.empty()) {
        Skip(line_.number, "payload written with escaped key");
        continue;
      }
      r->endpoint = trace::RowEndpoint(row.object, format);
      r->stream = CanStream(r->endpoint) && (options_.input.stream || WantsStream(request));
      std::string_view previous;
      if (r->endpoint == api::Endpoint::kResponses &&
          request.at_key("previous_response_id").get(previous) == simdjson::SUCCESS) {
        r->previous_response_id = previous;
      }
      ++(kind_ == RowKind::kRawPayload ? counts_.rows_raw : counts_.rows_payload);
    }
    counts_.apis.Add(r->endpoint);
    ++counts_.rows;
    return true;
  }
  if (!reader_.status().ok()) error_ = reader_.status().ToString();
  return false;
}

void TraceReader::BuildBody(TraceRequest* r) {
  if (kind_ == RowKind::kHashed) {
    HashedBody(options_.synthetic->Prompt(hash_ids_, input_length_), hashed_model_, output_length_,
               options_.input, r);
  } else {
    r->body = RewriteBody(request_bytes_, options_.input.model, options_.input.stream, r->endpoint);
  }
}

bool LoadTrace(const LoadOptions& options, LoadedTrace* out, std::string* error) {
  TraceReader reader(options);
  if (!reader.Open(error)) return false;
  TraceRequest r;
  while (reader.Next(&r)) {
    if (!options.keep_body || options.keep_body(r.index)) reader.BuildBody(&r);
    out->requests.push_back(std::move(r));
  }
  if (!reader.error().empty()) {
    *error = reader.error();
    return false;
  }
  const InputCounts& c = reader.counts();
  out->rows_payload = c.rows_payload;
  out->rows_raw = c.rows_raw;
  out->rows_hashed = c.rows_hashed;
  out->apis = c.apis;
  out->skipped = c.skipped;
  out->skip_reasons = reader.skip_reasons();
  out->hashed_model = c.rows_hashed ? reader.hashed_model() : "";
  return true;
}

}  // namespace llmtap::replay
