#include "replay/input.h"

#include <string>

#include "common/json_escape.h"
#include "trace/line_reader.h"
#include "trace/record.h"

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

std::string HashedBody(std::string_view prompt, std::string_view model,
                       std::optional<uint64_t> output_length, const InputOptions& in) {
  std::string b = "{\"model\":\"";
  AppendJsonEscaped(&b, model);
  if (in.hashed_chat) {
    b.append("\",\"messages\":[{\"role\":\"user\",\"content\":\""sv);
    AppendJsonEscaped(&b, prompt);
    b.append("\"}]"sv);
  } else {
    b.append("\",\"prompt\":\""sv);
    AppendJsonEscaped(&b, prompt);
    b.push_back('"');
  }
  if (output_length) b.append(",\"max_tokens\":"sv).append(std::to_string(*output_length));
  if (in.ignore_eos) b.append(",\"ignore_eos\":true"sv);
  if (in.stream) b.append(",\"stream\":true,\"stream_options\":{\"include_usage\":true}"sv);
  b.push_back('}');
  return b;
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
  const trace::Endpoint ep = trace::RowEndpoint(row, format);
  if (ep != trace::Endpoint::kChat && ep != trace::Endpoint::kCompletions) {
    return RowKind::kUnsupported;
  }
  return format == trace::TraceFormat::kMooncake ? RowKind::kMooncakePayload : RowKind::kRawPayload;
}

void SetTopLevel(std::string* json, std::string_view key, std::string_view value) {
  if (std::optional<trace::Span> span = trace::FindTopLevelValue(*json, key)) {
    json->replace(span->begin, span->end - span->begin, value);
    return;
  }
  size_t close = json->find_last_of('}');
  if (close == std::string::npos) return;
  size_t last = json->find_last_not_of(" \t\r\n", close == 0 ? 0 : close - 1);
  const bool empty = last == std::string::npos || (*json)[last] == '{';
  std::string add = empty ? "\"" : ",\"";
  add.append(key).append("\":").append(value);
  json->insert(close, add);
}

std::string RewriteBody(std::string_view body, std::string_view model, bool force_stream) {
  std::string out(body);
  if (!model.empty()) {
    std::string quoted = "\"";
    AppendJsonEscaped(&quoted, model);
    quoted.push_back('"');
    SetTopLevel(&out, "model", quoted);
  }
  if (force_stream) {
    SetTopLevel(&out, "stream", "true");
    SetTopLevel(&out, "stream_options", "{\"include_usage\":true}");
  }
  return out;
}

bool LoadTrace(const LoadOptions& options, LoadedTrace* out, std::string* error) {
  trace::LineReader reader;
  Status status = reader.Open(options.input.path);
  if (!status.ok()) {
    *error = status.ToString();
    return false;
  }
  trace::RowParser parser;
  trace::Line line;
  uint64_t index = 0;
  std::vector<uint64_t> ids;
  bool have_model = !options.input.model.empty();
  std::string hashed_model = options.input.model;
  auto skip = [&](const trace::Line& l, std::string_view reason) {
    ++out->skipped;
    if (out->skip_reasons.size() < options.max_listed_skips) {
      out->skip_reasons.push_back("line " + std::to_string(l.number) + ": " + std::string(reason));
    }
  };
  while (reader.Next(&line)) {
    const trace::ParsedRow& row = parser.Parse(line.bytes);
    if (row.status == trace::ParseStatus::kBlank) continue;
    const uint64_t row_index = index++;
    if (row.status != trace::ParseStatus::kOk) {
      skip(line, line.torn ? "torn last line" : "not a JSON object");
      continue;
    }
    const RowKind kind = DetectRowKind(row.object);
    if (kind == RowKind::kUnsupported) {
      skip(line, "neither a chat/completions request nor a hashed row (hash_ids + input_length)");
      continue;
    }
    TraceRequest r;
    r.index = row_index;
    r.timestamp_ms = trace::RowTimestamp(row.object);
    const bool keep = !options.keep_body || options.keep_body(row_index);
    if (kind == RowKind::kHashed) {
      uint64_t input_length = 0;
      if (row.object.at_key("input_length").get(input_length) != simdjson::SUCCESS) {
        skip(line, "input_length is not a non-negative integer");
        continue;
      }
      std::optional<uint64_t> output_length;
      uint64_t v = 0;
      if (row.object.at_key("output_length").get(v) == simdjson::SUCCESS) output_length = v;
      ids.clear();
      bool ids_ok = true;
      simdjson::dom::array hash_ids;
      if (row.object.at_key("hash_ids").get(hash_ids) != simdjson::SUCCESS) ids_ok = false;
      for (simdjson::dom::element e : hash_ids) {
        if (e.get(v) != simdjson::SUCCESS) ids_ok = false;
        ids.push_back(v);
      }
      if (!ids_ok) {
        skip(line, "hash_ids holds something other than non-negative integers");
        continue;
      }
      if (options.synthetic == nullptr) {
        *error = "hashed rows need a tokenizer for their synthetic prompts";
        return false;
      }
      if (!have_model) {
        hashed_model = options.default_model ? options.default_model() : "default";
        have_model = true;
      }
      r.chat = options.input.hashed_chat;
      r.stream = options.input.stream;
      if (keep) {
        r.body = HashedBody(options.synthetic->Prompt(ids, input_length), hashed_model,
                            output_length, options.input);
      }
      ++out->rows_hashed;
    } else {
      const trace::TraceFormat format =
          kind == RowKind::kRawPayload ? trace::TraceFormat::kRaw : trace::TraceFormat::kMooncake;
      simdjson::dom::object request = *trace::RowRequest(row.object, format);
      r.chat = trace::RowEndpoint(row.object, format) == trace::Endpoint::kChat;
      r.stream = options.input.stream || WantsStream(request);
      if (keep) {
        std::string_view bytes = RequestBytes(line.bytes, kind);
        if (bytes.empty()) {
          skip(line, "payload written with escaped key");
          continue;
        }
        r.body = RewriteBody(bytes, options.input.model, options.input.stream);
      }
      ++(kind == RowKind::kRawPayload ? out->rows_raw : out->rows_payload);
    }
    ++(r.chat ? out->chat : out->completions);
    out->requests.push_back(std::move(r));
  }
  if (!reader.status().ok()) {
    *error = reader.status().ToString();
    return false;
  }
  out->hashed_model = out->rows_hashed ? hashed_model : "";
  return true;
}

}  // namespace llmtap::replay
