// The requests of a replay as they end (RunOutputs, summary.h): each one's requests.jsonl line
// (ToReportResult), the statistics it goes into, and the run's files at the end (requests.jsonl,
// summary.json, report.html), in a local directory or under an s3:// prefix. Called by Replay
// (replay.cc).
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>

#include "fidelity/pairs.h"
#include "replay/summary.h"
#include "report/html_report.h"
#include "report/run_dir.h"

namespace llmtap::replay {
namespace {

using nlohmann::json;

double Round3(double v) { return std::round(v * 1000.0) / 1000.0; }
std::optional<double> Round3(const std::optional<double>& v) {
  return v ? std::optional<double>(Round3(*v)) : std::nullopt;
}
std::optional<int64_t> Int(const std::optional<uint64_t>& v) {
  return v ? std::optional<int64_t>(static_cast<int64_t>(*v)) : std::nullopt;
}

// DIR/requests.jsonl: for a local DIR written as .tmp first and renamed at the end; an s3://
// object appears only when complete anyway.
std::string LinesTarget(const std::string& dir) {
  const std::string lines = (std::filesystem::path(dir) / report::kRequestsFile).string();
  return store::IsS3Url(dir) ? lines : lines + ".tmp";
}

}  // namespace

report::RequestResult ToReportResult(const RequestResult& r, uint32_t shard, bool causal_sessions) {
  report::RequestResult o;
  o.index = static_cast<int64_t>(r.index);
  o.shard = static_cast<int>(shard);
  o.endpoint = std::string(api::EndpointName(r.endpoint));
  o.stream = r.stream;
  o.scheduled_ms = Round3(r.scheduled_ms);
  o.warmup = r.warmup;
  o.held_ms = Round3(r.held_ms);
  o.session_turn = causal_sessions && r.session_turn;
  if (!r.sent) return o;
  if (o.session_turn) {
    o.causal_shift_ms = Round3(r.causal_shift_ms);
    o.captured_latency = r.captured_latency;
  }
  o.sent_ms = Round3(r.sent_ms);
  o.lag_ms = Round3(r.lag_ms());
  o.done_ms = Round3(r.done_ms);
  o.latency_ms = Round3(r.latency_ms());
  o.status = r.status;
  o.error = std::string(ErrorKindName(r.error));
  o.ttft_ms = Round3(r.ttft_ms);
  o.ttst_ms = Round3(r.ttst_ms);
  o.itl_ms = Round3(r.itl_ms);
  o.max_chunk_gap_ms = Round3(r.max_chunk_gap_ms);
  o.chunks = r.chunks;
  o.input_tokens = Int(r.input_tokens);
  o.output_tokens = Int(r.output_tokens);
  o.finish_reason = r.finish_reason;
  o.tokens_from = r.tokens_from_usage ? "usage" : r.tokens_from_timings ? "timings" : "counted";
  // The server's report as the outcome lines write it (one format for both).
  std::string members;
  api::AppendServerReportMembers(r.server, &members);
  members[0] = '{';
  members.push_back('}');
  json server = json::parse(members);
  if (server["cached_tokens"].is_number()) o.cached_tokens = server["cached_tokens"].get<int64_t>();
  o.server = std::move(server["server"]);
  o.spec = std::move(server["spec"]);
  o.chunk_gaps_ms.reserve(r.gaps_ms.size());
  for (float g : r.gaps_ms) o.chunk_gaps_ms.push_back(Round3(g));
  return o;
}

std::string RunOutputs::FidelityPairsPath() const {
  return (std::filesystem::path(dir_) / fidelity::kPairsFile).string();
}

bool RunOutputs::CloseFidelityPairs(std::string* error) {
  if (fidelity_ == nullptr && fidelity_status_.ok()) return true;
  if (fidelity_status_.ok() && !fidelity_buffer_.empty()) {
    fidelity_status_ = fidelity_->Write(fidelity_buffer_);
  }
  if (fidelity_status_.ok()) fidelity_status_ = fidelity_->Close();
  fidelity_.reset();
  fidelity_buffer_.clear();
  if (!fidelity_status_.ok()) {
    *error = fidelity_status_.ToString();
    return false;
  }
  return true;
}

RunOutputs::~RunOutputs() {
  if (lines_ != nullptr && !store::IsS3Url(dir_)) {
    lines_.reset();
    std::remove(LinesTarget(dir_).c_str());
  }
  // An s3:// sink dropped before Finish aborts its upload: no partial requests.jsonl.
}

bool RunOutputs::Open(const std::string& dir, std::string* error, std::string* warning) {
  dir_ = dir;
  warning->clear();
  const bool in_store = store::IsS3Url(dir);
  if (!dir.empty()) {
    std::error_code ec;
    if (!in_store) std::filesystem::create_directories(dir, ec);
    if (ec) {
      *error = dir + ": " + ec.message();
      return false;
    }
    Status s = store::OpenSink(LinesTarget(dir), &lines_, store::SinkOptions{.force = true});
    if (!s.ok()) {
      *error = s.ToString();
      return false;
    }
    lines_buffer_.reserve(kLinesBufferBytes);
  }
  // The values' files: where the user points temporary files, else beside the outputs (a
  // container's writable volume), else /tmp.
  const char* tmpdir = std::getenv("TMPDIR");
  const std::vector<std::string> dirs = {tmpdir != nullptr ? tmpdir : "", in_store ? "" : dir,
                                         "/tmp"};
  bool files = summary_.Open(dirs, warning);
  files = shift_.Open(dirs, warning) && files;
  if (!files) {
    *warning += " (set TMPDIR to a writable directory)";
  }
  return true;
}

nlohmann::json RunOutputs::Chains(ResponsesChain mode) const {
  nlohmann::json sent_as_captured = nlohmann::json::object();
  uint64_t rows = 0;
  auto links = [&](ChainLink link) { return chain_links_[static_cast<size_t>(link)]; };
  for (int i = 0; i < kChainLinkCount; ++i) {
    const ChainLink link = static_cast<ChainLink>(i);
    rows += chain_links_[i];
    if (link != ChainLink::kNone && link != ChainLink::kLinked && link != ChainLink::kRemapped &&
        !Inlined(link)) {
      sent_as_captured[std::string(ChainLinkName(link))] = chain_links_[i];
    }
  }
  if (rows == 0) return nullptr;
  const uint64_t captured = links(ChainLink::kInlinedCaptured);
  const uint64_t replayed = links(ChainLink::kInlinedReplayed);
  return {{"mode", mode == ResponsesChain::kInline ? "inline" : "remap"},
          {"rows", rows},
          {"remapped", links(ChainLink::kRemapped)},
          {"inlined", captured + replayed},
          {"inlined_output", {{"captured", captured}, {"replayed", replayed}}},
          {"sent_with_captured_id", sent_as_captured},
          {"previous_response_id_refused", previous_id_refused_}};
}

void RunOutputs::Add(const RequestResult& r) {
  const report::RequestResult line = ToReportResult(r, shard_, causal_sessions_);
  summary_.Add(line);
  ++requests_;
  if (r.sent && !r.ok()) ++failed_;
  if (r.sent && r.chain != ChainLink::kNone) ++chain_links_[static_cast<size_t>(r.chain)];
  if (r.previous_id_refused) ++previous_id_refused_;
  if (r.session_turn && r.sent && !r.warmup) {
    ++turns_;
    if (!r.captured_latency) ++without_latency_;
    // The shift as requests.jsonl has it (to the microsecond), so that report::SummarizeSessions
    // over the file, as `llmtap report merge` computes it, counts the same turns as moved.
    const double shift = Round3(r.causal_shift_ms);
    if (shift > 0) {
      ++moved_;
      shift_.Add(shift);
    }
  }
  if (!r.captured_side.empty() && r.sent && !r.warmup && !dir_.empty() && fidelity_status_.ok()) {
    if (fidelity_ == nullptr) {
      fidelity_status_ =
          store::OpenSink(FidelityPairsPath(), &fidelity_, store::SinkOptions{.force = true});
    }
    if (fidelity_status_.ok()) {
      fidelity::AppendPairLine({.line = r.line,
                                .timestamp_ms = r.timestamp_ms,
                                .path = api::EndpointPath(r.endpoint),
                                .model = &r.model,
                                .temperature = r.temperature,
                                .turn = r.turn},
                               r.captured_side, line, &fidelity_buffer_);
      fidelity_buffer_.push_back('\n');
      ++fidelity_pairs_;
      if (fidelity_buffer_.size() >= kLinesBufferBytes) {
        fidelity_status_ = fidelity_->Write(fidelity_buffer_);
        fidelity_buffer_.clear();
      }
    }
  }
  if (lines_ != nullptr && lines_status_.ok()) {
    lines_buffer_ += report::RequestResultToJson(line).dump();
    lines_buffer_.push_back('\n');
    if (lines_buffer_.size() >= kLinesBufferBytes) {
      lines_status_ = lines_->Write(lines_buffer_);
      lines_buffer_.clear();
    }
  }
}

bool RunOutputs::Finish(const json& summary, bool* html_skipped, std::string* error) {
  *html_skipped = false;
  if (dir_.empty()) return true;
  const std::filesystem::path dir(dir_);
  const std::string lines = (dir / report::kRequestsFile).string();
  if (lines_status_.ok() && !lines_buffer_.empty()) lines_status_ = lines_->Write(lines_buffer_);
  if (lines_status_.ok()) lines_status_ = lines_->Close();
  lines_.reset();
  if (!lines_status_.ok()) {
    *error = lines_status_.ToString();
    return false;
  }
  std::error_code ec;
  if (!store::IsS3Url(dir_)) std::filesystem::rename(LinesTarget(dir_), lines, ec);
  if (ec) {
    *error = lines + ": " + ec.message();
    return false;
  }
  if (!report::WriteFileAtomically((dir / report::kSummaryFile).string(), summary.dump(2) + "\n",
                                   error)) {
    return false;
  }
  const std::string html = (dir / report::kReportFile).string();
  if (requests_ > kHtmlMaxRequests) {
    // An older run's report would be taken for this one's.
    if (!store::IsS3Url(dir_)) std::filesystem::remove(html, ec);
    *html_skipped = true;
    return true;
  }
  std::vector<report::RequestResult> requests;
  if (!report::ReadRequestsJsonl(lines, &requests, error)) return false;
  return report::WriteFileAtomically(html, report::RenderHtmlReport(summary, requests), error);
}

bool RunOutputs::Sessions(const std::string& schedule, json* out, std::string* error) {
  *out = nullptr;
  if (turns_ == 0) return true;
  report::Stats shift;
  if (!shift_.Compute(&shift, error)) return false;
  *out = report::SessionsJson(schedule, turns_, moved_,
                              schedule == "causal" ? json(without_latency_) : json(nullptr), shift);
  return true;
}

}  // namespace llmtap::replay
