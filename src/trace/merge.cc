#include "trace/merge.h"

#include <memory>
#include <nlohmann/json.hpp>
#include <queue>

#include "capture/capture_file.h"
#include "capture/manifest.h"
#include "trace/trace_io.h"

namespace llmtap::trace {

namespace {

struct Cursor {
  size_t index = 0;
  std::string path;
  double epoch_ms = 0;
  LineReader reader;
  RowParser parser;
  Line line;
  double abs_ms = 0;  // of the current row
  double ts_ms = 0;
  bool has_row = false;
  TraceFormat format = TraceFormat::kUnknown;  // of the first valid row
  uint64_t rows = 0;
  std::optional<double> last_ts;
};

// Advances to the next usable row; rows that cannot be merged are reported and skipped.
void Advance(Cursor* c, FailureList* skipped) {
  c->has_row = false;
  while (c->reader.Next(&c->line)) {
    const ParsedRow& row = c->parser.Parse(c->line.bytes);
    if (row.status == ParseStatus::kBlank) continue;
    auto skip = [&](const std::string& why) {
      skipped->Add(c->line.number, Located(c->path, c->line.number, why));
    };
    if (row.status != ParseStatus::kOk) {
      skip(c->line.torn ? "torn last line, skipped: " + row.error : row.error);
      continue;
    }
    TraceFormat f = RowFormat(row.object);
    if (c->format == TraceFormat::kUnknown) {
      c->format = f;
      if (f == TraceFormat::kRaw) return;  // the caller refuses the input
    }
    if (f != c->format) {
      skip("a " + std::string(TraceFormatName(f)) + " row in a " +
           std::string(TraceFormatName(c->format)) + " file");
      continue;
    }
    std::optional<double> ts = RowTimestamp(row.object);
    if (!ts) {
      skip("no numeric 'timestamp'; a row without one cannot be placed in time");
      continue;
    }
    if (c->last_ts && *ts < *c->last_ts) {
      skip("timestamp decreases (inputs must be in time order, as captures are); skipped");
      continue;
    }
    c->last_ts = ts;
    c->ts_ms = *ts;
    c->abs_ms = c->epoch_ms + *ts;
    c->has_row = true;
    return;
  }
}

struct Later {
  // priority_queue keeps the largest on top: "a after b" puts the earliest first; ties go
  // to the lower input index (line order within an input is the cursor's own order).
  bool operator()(const Cursor* a, const Cursor* b) const {
    if (a->abs_ms != b->abs_ms) return a->abs_ms > b->abs_ms;
    return a->index > b->index;
  }
};

}  // namespace

MergeReport MergeTraces(const MergeOptions& options) {
  MergeReport r;
  r.out = options.out;
  r.skipped.limit = options.max_failures;
  if (options.inputs.empty()) {
    r.io = Status::InvalidArgument("no inputs to merge");
    return r;
  }
  if (options.out.empty()) {
    r.io = Status::InvalidArgument("an output file is required (-o OUT)");
    return r;
  }
  std::vector<std::unique_ptr<Cursor>> cursors;
  bool all_epochs = true;
  for (size_t i = 0; i < options.inputs.size(); ++i) {
    auto c = std::make_unique<Cursor>();
    c->index = i;
    c->path = options.inputs[i];
    MergeInputSummary summary;
    summary.path = c->path;
    Status ms;
    std::optional<ManifestView> m = ReadManifestFor(c->path, &ms);
    if (!ms.ok()) {
      r.io = ms;
      return r;
    }
    if (m && m->timestamp_zero_unix_ms) {
      summary.epoch_ms = *m->timestamp_zero_unix_ms;
    } else {
      all_epochs = false;
      if (!options.assume_aligned) {
        r.io = Status::InvalidArgument(
            c->path +
            (m ? ": its manifest has no timestamp_zero_unix_ms (no row recorded?)"
               : ": no manifest (" + ManifestPathFor(c->path) + ")") +
            "; merge places replicas on wall-clock time from each manifest. Pass "
            "--assume-aligned if the inputs' timestamp 0 are the same instant.");
        return r;
      }
    }
    if (m && !m->format.empty()) {
      std::optional<TraceFormat> f = ParseTraceFormat(m->format);
      if (f == TraceFormat::kRaw) {
        r.io = Status::InvalidArgument(c->path +
                                       " is raw_payload: its rows have no timestamps "
                                       "to merge on; convert it with `llmtap convert --to "
                                       "mooncake_payload` first");
        return r;
      }
    }
    r.io = c->reader.Open(c->path);
    if (!r.io.ok()) return r;
    r.inputs.push_back(summary);
    cursors.push_back(std::move(c));
  }
  // With --assume-aligned, mixing inputs with and without epochs would misplace rows.
  if (!all_epochs) {
    for (auto& c : cursors) c->epoch_ms = 0;
    if (std::any_of(r.inputs.begin(), r.inputs.end(), [](auto& s) { return s.epoch_ms; })) {
      r.warnings.push_back(
          "some inputs have a manifest epoch and some do not; with "
          "--assume-aligned every input is taken to start at the same "
          "instant and the epochs are ignored");
    }
  } else {
    for (size_t i = 0; i < cursors.size(); ++i) {
      cursors[i]->epoch_ms = static_cast<double>(*r.inputs[i].epoch_ms);
    }
  }
  r.io = CheckOutputPath(options.out, options.force);
  if (!r.io.ok()) return r;

  // First rows: they decide the format check and the output's timestamp 0.
  std::priority_queue<Cursor*, std::vector<Cursor*>, Later> heap;
  std::optional<double> base;
  for (auto& c : cursors) {
    Advance(c.get(), &r.skipped);
    TraceFormat f = c->format;
    if (f == TraceFormat::kUnknown) continue;  // no valid row
    if (r.format == TraceFormat::kUnknown) r.format = f;
    if (f != r.format) {
      r.io = Status::InvalidArgument("inputs in different formats: " + cursors[0]->path + " vs " +
                                     c->path + "; convert them to one format first");
      return r;
    }
    if (!c->has_row) continue;
    if (!base || c->abs_ms < *base) base = c->abs_ms;
    heap.push(c.get());
  }
  if (r.format == TraceFormat::kRaw) {
    r.io = Status::InvalidArgument(
        "the inputs are raw_payload: no timestamps to merge on; "
        "convert them with `llmtap convert --to mooncake_payload`");
    return r;
  }
  OutputFile out;
  r.io = out.Open(options.out, options.force);
  if (!r.io.ok()) return r;
  Progress progress("merge", options.progress);
  std::string buf;
  uint64_t total_size = 0;
  for (auto& c : cursors) total_size += c->reader.file_size();
  while (!heap.empty()) {
    Cursor* c = heap.top();
    heap.pop();
    buf.clear();
    if (!AppendWithTimestamp(TrimJsonWhitespace(c->line.bytes), c->abs_ms - *base, &buf)) {
      r.skipped.Add(c->line.number,
                    Located(c->path, c->line.number, "timestamp key written with escapes"));
    } else {
      out.WriteLine(buf);
      ++r.written;
      ++c->rows;
    }
    Advance(c, &r.skipped);
    if (c->has_row) heap.push(c);
    if ((r.written & 1023) == 0) {
      uint64_t done = 0;
      for (auto& k : cursors) done += k->reader.stored_position();
      progress.Update(done, total_size);
    }
  }
  progress.Finish();
  for (size_t i = 0; i < cursors.size(); ++i) {
    r.inputs[i].rows = cursors[i]->rows;
    if (!cursors[i]->reader.status().ok() && r.io.ok()) r.io = cursors[i]->reader.status();
  }
  Status closed = out.Close();
  if (r.io.ok()) r.io = closed;
  if (!r.io.ok()) return r;

  // A manifest for the merged file, so it can be merged again or described by stats.
  if (all_epochs && base) r.epoch_ms = static_cast<int64_t>(*base);
  nlohmann::ordered_json j;
  j["schema"] = "llmtap.capture.manifest/v1";
  j["capture_path"] = options.out;
  j["format"] = "mooncake_payload";
  if (r.epoch_ms) {
    j["timestamp_zero_unix_ms"] = *r.epoch_ms;
    j["timestamp_zero_utc"] = FormatUtcMillis(*r.epoch_ms * 1000000);
  } else {
    j["timestamp_zero_unix_ms"] = nullptr;
    j["timestamp_zero_utc"] = nullptr;
  }
  j["state"] = "stopped";
  j["merged_from"] = options.inputs;
  nlohmann::ordered_json counters = nlohmann::ordered_json::object();
  for (const std::string& in : options.inputs) {
    Status ms;
    if (auto m = ReadManifestFor(in, &ms)) {
      for (const auto& [k, v] : m->counters) {
        counters[k] = (counters.contains(k) ? counters[k].get<uint64_t>() : 0) + v;
      }
    }
  }
  j["counters"] = counters;  // sums over the inputs' manifests
  r.out_manifest = ManifestPathFor(options.out);
  OutputFile mf;
  r.io = mf.Open(r.out_manifest, options.force);
  if (r.io.ok()) {
    mf.WriteLine(j.dump(2, ' ', false, nlohmann::ordered_json::error_handler_t::replace));
    r.io = mf.Close();
  }
  return r;
}

std::string RenderMergeText(const MergeReport& r) {
  std::string out = RenderIssues("", r.skipped, "more skipped lines not shown", r.warnings);
  if (!r.io.ok()) return out + "error: " + r.io.ToString() + "\n";
  out += r.out + ": " + std::to_string(r.written) + " rows (" +
         std::string(TraceFormatName(r.format)) + ")";
  if (r.epoch_ms) out += ", timestamp 0 = " + FormatUtcMillis(*r.epoch_ms * 1000000);
  out += "\n";
  for (const MergeInputSummary& in : r.inputs) {
    out += "  " + std::to_string(in.rows) + " rows from " + in.path;
    if (in.epoch_ms) out += " (epoch " + FormatUtcMillis(*in.epoch_ms * 1000000) + ")";
    out += "\n";
  }
  if (!r.out_manifest.empty()) out += "  manifest: " + r.out_manifest + "\n";
  return out;
}

}  // namespace llmtap::trace
