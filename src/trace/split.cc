#include "trace/split.h"

#include <unistd.h>

#include <array>
#include <memory>
#include <unordered_map>

#include "capture/file_names.h"
#include "trace/outcomes.h"
#include "trace/trace_io.h"

namespace llmtap::trace {

std::string AiperfCommand(const std::string& model, Endpoint endpoint, TraceFormat format,
                          const std::string& file, std::optional<double> first_timestamp_ms) {
  std::string command = "aiperf profile --model " +
                        (model.empty() ? std::string("<model>") : model) + " --endpoint-type " +
                        std::string(api::AiperfEndpointType(endpoint)) +
                        (api::IsGeneration(endpoint) ? " --streaming" : "") +
                        " --url localhost:8000 --custom-dataset-type " +
                        std::string(TraceFormatName(format)) + " --input-file " + file;
  if (first_timestamp_ms) {
    command += " --fixed-schedule";
    if (*first_timestamp_ms != 0) command += " --fixed-schedule-auto-offset";
  }
  return command;
}

namespace {

std::string_view RequestModel(simdjson::dom::object row, TraceFormat format) {
  std::string_view model;
  if (auto request = RowRequest(row, format)) {
    if (request->at_key("model").get(model) == simdjson::SUCCESS) return model;
  }
  return {};
}

struct Sink {
  SplitOutput out;
  OutputFile file;
  OutputFile outcomes;                  // open with `file` when the input has a sidecar
  std::optional<double> base;           // first timestamp, for rebase
  std::optional<double> first_written;  // the output's first timestamp (after a rebase)
};

// One output per API, in this order; "other" last (rows of any other shape or path).
constexpr Endpoint kSinkEndpoints[] = {
    Endpoint::kChat,       Endpoint::kCompletions, Endpoint::kResponses, Endpoint::kMessages,
    Endpoint::kEmbeddings, Endpoint::kRerank,      Endpoint::kOther};
constexpr size_t kSinks = std::size(kSinkEndpoints);

size_t SinkIndex(Endpoint e) {
  for (size_t i = 0; i + 1 < kSinks; ++i) {
    if (kSinkEndpoints[i] == e) return i;
  }
  return kSinks - 1;
}

}  // namespace

SplitReport SplitTrace(const SplitOptions& options) {
  SplitReport r;
  r.path = options.path;
  r.skipped.limit = options.max_failures;
  FormatResolver resolver;
  resolver.InitFor(options.path, options.format, &r.warnings, " (format taken from the rows)");

  OutcomeTable table;
  bool have_outcomes = false;
  r.io = table.LoadFor(options.path, options.outcomes_path, options.no_outcomes,
                       {.keep_text = true}, &have_outcomes, &r.warnings);
  if (!r.io.ok()) return r;
  if (have_outcomes) {
    r.outcomes_path = table.path();
    r.outcomes_in = table.size();
  }
  OutcomeJoin join(&table, options.path);
  const ApiRecord apis = ApiRecord::For(options.path);

  std::array<Sink, kSinks> sinks;
  for (size_t i = 0; i < kSinks; ++i) {
    sinks[i].out.endpoint = kSinkEndpoints[i];
    sinks[i].out.path = DerivedPath(options.path, options.out_dir, EndpointName(kSinkEndpoints[i]));
    // Refuse before reading anything, so a refused run leaves no partial outputs.
    r.io = CheckOutputPath(sinks[i].out.path, options.force);
    if (!r.io.ok()) return r;
    if (have_outcomes) {
      sinks[i].out.outcomes_path = OutcomesPathFor(sinks[i].out.path);
      r.io = CheckOutputPath(sinks[i].out.outcomes_path, options.force);
      if (!r.io.ok()) return r;
    }
  }

  RowScanner scanner("split", options.progress,
                     {.lines = &r.lines, .blank = &r.blank, .torn_tail = &r.torn_tail});
  r.io = scanner.Open(options.path);
  if (!r.io.ok()) return r;
  Line line;
  std::string scratch, outcome_line;
  bool rebase_warned = false;
  // Where a session's rows go: the endpoint type of its first chat or completions row.
  SessionEndpoints sessions;
  while (!join.refused() && scanner.Next(&line)) {
    const ParsedRow& row = scanner.row();
    if (row.status != ParseStatus::kOk) {
      r.skipped.Add(line.number, line.torn
                                     ? "torn last line (no trailing newline), skipped: " + row.error
                                     : row.error);
      continue;
    }
    TraceFormat format = resolver.Resolve(row.object);
    if (RowFormat(row.object) != format) {
      r.skipped.Add(line.number, "a " + std::string(TraceFormatName(RowFormat(row.object))) +
                                     " row in a " + std::string(TraceFormatName(format)) +
                                     " file (pass --format to choose)");
      continue;
    }
    std::optional<double> ts = RowTimestamp(row.object);
    const Outcome* outcome = have_outcomes ? join.Join(line.number, ts) : nullptr;
    Endpoint endpoint = apis.Resolve(RowEndpoint(row.object, format), line.number);
    Sink& sink = sinks[SinkIndex(endpoint)];
    std::string_view session_id;
    if (SessionEndpoints::IsChatOrCompletions(endpoint) &&
        row.object.at_key("session_id").get(session_id) == simdjson::SUCCESS &&
        !session_id.empty()) {
      auto [session, first] = sessions.Add(session_id, endpoint, line.number);
      if (first) {
        ++sink.out.sessions;
      } else if (SessionEndpoints::Breaks(session->endpoint, endpoint)) {
        // The id is never printed (it may name a user): the first row's line finds it.
        r.skipped.Add(line.number,
                      "a " + std::string(EndpointName(endpoint)) +
                          " row in a session whose first row (line " +
                          std::to_string(session->first_line) + ") is " +
                          std::string(EndpointName(session->endpoint)) +
                          ": not routed (AIPerf replays a session in one run of one endpoint "
                          "type, so a session cannot mix chat and completions)");
        ++r.mixed_session_rows;
        if (!session->mixed) ++r.mixed_sessions;
        session->mixed = true;
        continue;
      }
    }
    if (!sink.file.is_open()) {
      r.io = sink.file.Open(sink.out.path, options.force);
      if (r.io.ok() && have_outcomes) {
        r.io = sink.outcomes.Open(sink.out.outcomes_path, options.force);
      }
      if (!r.io.ok()) return r;
    }
    std::string_view model = RequestModel(row.object, format);
    if (sink.out.rows == 0) {
      sink.out.model = std::string(model);
    } else if (!sink.out.several_models && model != sink.out.model) {
      sink.out.several_models = true;
    }
    std::string_view bytes = TrimJsonWhitespace(line.bytes);
    std::optional<double> new_ts = ts;
    if (options.rebase && format == TraceFormat::kMooncake) {
      if (ts) {
        if (!sink.base) sink.base = *ts;
        new_ts = *ts - *sink.base;
        scratch.clear();
        if (AppendWithTimestamp(bytes, *new_ts, &scratch)) bytes = scratch;
      }
    } else if (options.rebase && !rebase_warned) {
      r.warnings.push_back("raw_payload rows carry no timestamps; --rebase has nothing to do");
      rebase_warned = true;
    }
    if (sink.out.rows == 0 && format == TraceFormat::kMooncake) sink.first_written = new_ts;
    if (format == TraceFormat::kRaw && endpoint != Endpoint::kChat &&
        endpoint != Endpoint::kMessages && endpoint != Endpoint::kOther) {
      // AIPerf's raw_payload loader takes requests with `messages` only; as a mooncake_payload
      // row without a timestamp the request replays verbatim, unscheduled, as it would have
      // from raw_payload, and names its API when its body alone would not.
      scratch.assign("{\"payload\":");
      scratch.append(bytes);
      if (endpoint != Endpoint::kCompletions) {
        scratch.append(",\"endpoint_type\":\"");
        scratch.append(api::AiperfEndpointType(endpoint));
        scratch.push_back('"');
      }
      scratch.push_back('}');
      bytes = scratch;
      sink.out.format = TraceFormat::kMooncake;
    }
    sink.file.WriteLine(bytes);
    ++sink.out.rows;
    ++r.routed;
    if (apis.Guesses(line.number)) r.chat_or_messages.Note(row.object, format, line.number);
    outcome_line.clear();
    if (outcome && AppendOutcomeRenumbered(table.Text(*outcome), sink.out.rows,
                                           format == TraceFormat::kMooncake ? new_ts : std::nullopt,
                                           &outcome_line)) {
      sink.outcomes.WriteLine(outcome_line);
      ++sink.out.outcomes;
    }
  }
  if (Status read = scanner.Finish(); !read.ok()) r.io = read;
  if (have_outcomes && r.io.ok()) r.io = join.Finish(r.lines);
  for (Sink& sink : sinks) {
    if (!sink.file.is_open()) continue;
    Status s = sink.file.Close();
    if (!s.ok() && r.io.ok()) r.io = s;
    if (sink.outcomes.is_open()) {
      s = sink.outcomes.Close();
      if (!s.ok() && r.io.ok()) r.io = s;
      r.outcomes_written += sink.out.outcomes;
    }
    if (join.refused()) {
      // Ours, created just now; outputs paired with another file's outcomes would mislead.
      ::unlink(sink.out.path.c_str());
      ::unlink(sink.out.outcomes_path.c_str());
      continue;
    }
    if (sink.out.format == TraceFormat::kUnknown) sink.out.format = resolver.format();
    if (sink.out.endpoint != Endpoint::kOther) {
      sink.out.aiperf_command =
          AiperfCommand(sink.out.several_models ? "" : sink.out.model, sink.out.endpoint,
                        sink.out.format, sink.out.path, sink.first_written);
    }
    r.outputs.push_back(sink.out);
  }
  r.format = resolver.format();
  r.format_source = resolver.source();
  r.outcomes_mismatched = join.mismatched();
  r.outcomes_unrouted = r.outcomes_in - r.outcomes_written - r.outcomes_mismatched;
  if (have_outcomes && !join.refused() && join.mismatched()) {
    r.warnings.push_back(join.MismatchSummary());
  }
  if (r.mixed_sessions) {
    r.warnings.push_back(std::to_string(r.mixed_sessions) +
                         " sessions mix chat and completions rows: each went to the file of its "
                         "first such row; " +
                         std::to_string(r.mixed_session_rows) +
                         " rows of the other type were not routed (listed by line)");
  }
  if (std::string w = r.chat_or_messages.Warning("routed to the chat file", apis.Note());
      !w.empty()) {
    r.warnings.push_back(std::move(w));
  }
  if (r.torn_tail && r.skipped.total == 0) {
    r.warnings.push_back("the last line had no trailing newline (it was valid and is routed)");
  }
  return r;
}

std::string RenderSplitText(const SplitReport& r) {
  std::string out = RenderIssues(r.path, r.skipped, "more skipped lines not shown", r.warnings);
  if (!r.io.ok()) {
    out += "error: " + r.io.ToString() + "\n";
    return out;
  }
  out += r.path + ": " + std::to_string(r.routed) + " rows (" +
         std::string(TraceFormatName(r.format)) + ", format from " + r.format_source + ")";
  if (r.skipped.total) out += ", " + std::to_string(r.skipped.total) + " lines skipped";
  out += "\n";
  for (const SplitOutput& o : r.outputs) {
    out += "  " + std::string(EndpointName(o.endpoint)) + ": " + std::to_string(o.rows) +
           " rows -> " + o.path;
    if (o.format != r.format) {
      out += " (" + std::string(TraceFormatName(o.format)) +
             ": AIPerf's raw_payload loader takes requests with 'messages' only)";
    }
    out += "\n";
    if (o.sessions) out += "    " + std::to_string(o.sessions) + " sessions\n";
    if (!o.outcomes_path.empty()) {
      out += "    " + std::to_string(o.outcomes) + " outcomes -> " + o.outcomes_path + "\n";
    }
    if (!o.aiperf_command.empty()) {
      if (o.several_models) out += "    (several models in this file; set --model)\n";
      out += "    " + o.aiperf_command + "\n";
    } else {
      out +=
          "    (neither chat nor completion requests, for example embeddings: AIPerf's chat "
          "and completions endpoints cannot replay them)\n";
    }
  }
  if (r.outputs.empty()) out += "  no rows to write\n";
  if (!r.outcomes_path.empty()) {
    out += "  outcomes: " + std::to_string(r.outcomes_written) + " of " +
           std::to_string(r.outcomes_in) + " carried from " + r.outcomes_path;
    if (r.outcomes_mismatched || r.outcomes_unrouted) {
      out += " (dropped: " + std::to_string(r.outcomes_mismatched) +
             " timestamp differs from the row's, " + std::to_string(r.outcomes_unrouted) +
             " row not routed or absent)";
    }
    out += "\n";
  }
  return out;
}

}  // namespace llmtap::trace
