#include "trace/convert.h"

#include <unistd.h>

#include <cmath>
#include <random>

#include "trace/trace_io.h"

namespace llmtap::trace {

std::optional<std::string_view> PayloadBytes(std::string_view line, simdjson::dom::object row) {
  simdjson::dom::object payload;
  if (row.at_key("payload").get(payload) != simdjson::SUCCESS) return std::nullopt;
  line = TrimJsonWhitespace(line);
  // The captured layout {"timestamp":N,"payload":{...}} with no other key: the payload runs
  // to the final '}' -- no need to scan its bytes.
  static constexpr std::string_view kTs = "{\"timestamp\":";
  static constexpr std::string_view kPayload = ",\"payload\":";
  if (row.size() == 2 && line.starts_with(kTs) && line.ends_with("}")) {
    size_t i = kTs.size();
    while (i < line.size() && line[i] != ',') ++i;  // a number has no ','
    if (line.substr(i, kPayload.size()) == kPayload) {
      size_t begin = i + kPayload.size();
      return line.substr(begin, line.size() - 1 - begin);
    }
  }
  std::optional<Span> span = FindTopLevelValue(line, "payload");
  if (!span) return std::nullopt;
  return line.substr(span->begin, span->end - span->begin);
}

ConvertReport ConvertTrace(const ConvertOptions& options) {
  ConvertReport r;
  r.path = options.path;
  r.to = options.to;
  r.skipped.limit = options.max_failures;
  if (options.to == TraceFormat::kUnknown) {
    r.io = Status::InvalidArgument("--to must be raw_payload or mooncake_payload");
    return r;
  }
  if (options.rate < 0 || !std::isfinite(options.rate)) {
    r.io = Status::InvalidArgument("--rate must be a number >= 0 (requests per second)");
    return r;
  }
  r.out = !options.out.empty()
              ? options.out
              : DerivedPath(options.path, "",
                            options.to == TraceFormat::kRaw ? "raw_payload" : "mooncake_payload");
  FormatResolver resolver;
  resolver.InitFor(options.path, options.format, /*warnings=*/nullptr, "");
  if (resolver.format() == options.to) {
    r.io = Status::InvalidArgument(options.path + " is already " +
                                   std::string(TraceFormatName(options.to)) + " (by its " +
                                   resolver.source() + "); nothing to convert");
    return r;
  }
  r.io = CheckOutputPath(r.out, options.force);
  if (!r.io.ok()) return r;
  RowScanner scanner("convert", options.progress, {.lines = &r.lines, .blank = &r.blank});
  r.io = scanner.Open(options.path);
  if (!r.io.ok()) return r;
  OutputFile out;
  r.io = out.Open(r.out, options.force);
  if (!r.io.ok()) return r;

  std::mt19937_64 rng(options.seed);
  std::exponential_distribution<double> gap(options.rate > 0 ? options.rate : 1.0);
  double t_s = 0;  // seconds
  uint64_t index = 0;
  uint64_t sessions_dropped = 0;
  Line line;
  std::string buf;
  while (scanner.Next(&line)) {
    const ParsedRow& row = scanner.row();
    if (row.status != ParseStatus::kOk) {
      r.skipped.Add(line.number, line.torn ? "torn last line, skipped: " + row.error : row.error);
      continue;
    }
    TraceFormat from = resolver.Resolve(row.object);
    if (from == options.to) {
      r.io = Status::InvalidArgument(options.path + " is already " +
                                     std::string(TraceFormatName(options.to)) + " (by its " +
                                     resolver.source() + "); nothing to convert");
      break;
    }
    if (RowFormat(row.object) != from) {
      r.skipped.Add(line.number, "a " + std::string(TraceFormatName(RowFormat(row.object))) +
                                     " row in a " + std::string(TraceFormatName(from)) + " file");
      continue;
    }
    if (options.to == TraceFormat::kRaw) {
      std::optional<std::string_view> payload = PayloadBytes(line.bytes, row.object);
      if (!payload) {
        r.skipped.Add(line.number,
                      "no 'payload' object (input_length / text_input / messages rows carry no "
                      "request to replay verbatim)");
        continue;
      }
      if (const Endpoint e = RowEndpoint(row.object, from); e != Endpoint::kChat) {
        // Written, it would make AIPerf refuse the whole file.
        r.skipped.Add(line.number,
                      "a " + std::string(e == Endpoint::kCompletions ? "completions" : "non-chat") +
                          " request: AIPerf's raw_payload loader takes chat requests only (each "
                          "row needs 'messages'); keep it in mooncake_payload, which replays it "
                          "verbatim too (`llmtap split` separates the types)");
        continue;
      }
      out.WriteLine(*payload);
      std::string_view session_id;
      if (row.object.at_key("session_id").get(session_id) == simdjson::SUCCESS &&
          !session_id.empty()) {
        ++sessions_dropped;
      }
    } else {
      double ts_ms = 0;
      if (options.rate > 0) {
        if (options.arrival == Arrival::kConstant) {
          t_s = static_cast<double>(index) / options.rate;
        } else if (index > 0) {
          t_s += gap(rng);
        }
        ts_ms = std::round(t_s * 1000.0);
      }
      ++index;
      buf.assign("{\"timestamp\":");
      AppendNumber(ts_ms, &buf);
      buf.append(",\"payload\":");
      buf.append(TrimJsonWhitespace(line.bytes));
      buf.push_back('}');
      out.WriteLine(buf);
      r.last_timestamp_ms = ts_ms;
    }
    ++r.written;
  }
  if (Status read = scanner.Finish(); r.io.ok() && !read.ok()) r.io = read;
  if (sessions_dropped > 0) {
    r.warnings.push_back(std::to_string(sessions_dropped) +
                         " rows carried a session_id, which a raw_payload row (the request body "
                         "alone) cannot hold: the output replays them as unrelated requests");
  }
  Status closed = out.Close();
  if (r.io.ok()) {
    r.io = closed;
  } else if (r.written == 0) {
    ::unlink(r.out.c_str());  // ours (created just now); nothing useful in it
  }
  r.from = resolver.format();
  return r;
}

std::string RenderConvertText(const ConvertReport& r) {
  std::string out = RenderIssues(r.path, r.skipped, "more skipped lines not shown", r.warnings);
  if (!r.io.ok()) return out + "error: " + r.io.ToString() + "\n";
  out += r.path + " (" + std::string(TraceFormatName(r.from)) + ") -> " + r.out + " (" +
         std::string(r.to == TraceFormat::kRaw ? "raw_payload" : "mooncake_payload") +
         "): " + std::to_string(r.written) + " rows";
  if (r.skipped.total) out += ", " + std::to_string(r.skipped.total) + " lines skipped";
  if (r.to == TraceFormat::kMooncake) {
    std::string t;
    AppendNumber(r.last_timestamp_ms, &t);
    out += ", last timestamp " + t + " ms";
  }
  return out + "\n";
}

}  // namespace llmtap::trace
