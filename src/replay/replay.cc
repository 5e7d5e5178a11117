#include "replay/replay.h"

#include <cstdio>
#include <memory>
#include <string>

#include "replay/input.h"
#include "replay/runner.h"
#include "replay/schedule.h"
#include "replay/summary.h"
#include "replay/synthetic.h"
#include "report/server_metrics.h"
#include "tokenizer/tokenizer.h"

namespace llmtap::replay {
namespace {

int Fail(const std::string& message) {
  std::fflush(stdout);
  std::fprintf(stderr, "llmtap replay: %s\n", message.c_str());
  return 2;
}

}  // namespace

int Replay(const ReplayOptions& o) {
  std::string error;
  std::unique_ptr<tokenizer::Tokenizer> tok = tokenizer::Tokenizer::Load(o.tokenizer, &error);
  if (!tok) return Fail("--tokenizer " + o.tokenizer + ": " + error);
  std::string synthetic_error;
  std::unique_ptr<SyntheticPrompts> synthetic =
      SyntheticPrompts::Make(*tok, o.input.block_size, &synthetic_error);
  Target target;
  if (!ParseUrl(o.run.url, &target, &error)) return Fail(error);

  LoadOptions load;
  load.input = o.input;
  const uint32_t shard = o.schedule.shard_index, shards = o.schedule.shard_count;
  if (shards > 1) load.keep_body = [=](uint64_t index) { return index % shards == shard; };
  load.synthetic = synthetic.get();
  load.default_model = [&] {
    std::optional<std::string> model = FetchFirstModel(target, o.run.headers, 5.0);
    std::fprintf(stderr, "llmtap replay: hashed rows use model \"%s\" (%s)\n",
                 model.value_or("default").c_str(),
                 model ? "the server's first /v1/models entry" : "/v1/models did not answer");
    return model.value_or("default");
  };
  LoadedTrace trace;
  if (!LoadTrace(load, &trace, &error)) return Fail(o.input.path + ": " + error);
  if (trace.rows_hashed > 0 && !synthetic) return Fail(synthetic_error);
  for (const std::string& reason : trace.skip_reasons) {
    std::fprintf(stderr, "%s:%s (skipped)\n", o.input.path.c_str(), reason.c_str() + 5);
  }

  Plan plan;
  if (!BuildPlan(trace.requests, o.schedule, o.run.duration_s, &plan, &error)) return Fail(error);
  std::printf(
      "llmtap replay: %s: %zu rows (%llu mooncake_payload, %llu raw_payload, %llu hashed; %llu "
      "chat, %llu completions), %llu skipped\n",
      o.input.path.c_str(), trace.requests.size(),
      static_cast<unsigned long long>(trace.rows_payload),
      static_cast<unsigned long long>(trace.rows_raw),
      static_cast<unsigned long long>(trace.rows_hashed),
      static_cast<unsigned long long>(trace.chat),
      static_cast<unsigned long long>(trace.completions),
      static_cast<unsigned long long>(trace.skipped));
  std::printf("plan: %s; %zu requests%s -> %s\n", plan.mode.c_str(), plan.items.size(),
              shards > 1 ? (" (shard " + std::to_string(shard) + "/" + std::to_string(shards) +
                            " of " + std::to_string(plan.planned_total) + ")")
                               .c_str()
                         : "",
              o.run.url.c_str());
  std::fflush(stdout);
  if (plan.items.empty()) return Fail("nothing to send (the window, shard or limits leave no row)");

  // The sampler scrapes on its own thread, never on an event loop.
  RunOptions run = o.run;
  std::unique_ptr<report::ServerMetricsSampler> sampler;
  if (o.server_metrics != "off") {
    sampler = std::make_unique<report::ServerMetricsSampler>(
        report::ServerMetricsSampler::Options{
            .url = o.server_metrics, .target_url = o.run.url, .headers = o.run.headers});
    run.server_metrics_hook = [&](RunPhase phase, double) {
      if (phase == RunPhase::kBefore) {
        std::string why;
        if (sampler->Start(&why)) {
          sampler->StartBackground();
          std::printf("server metrics: %s, every second\n", sampler->url().c_str());
        } else {
          std::printf("server metrics: none (%s)\n", why.c_str());
        }
        std::fflush(stdout);
      } else if (phase == RunPhase::kAfter) {
        sampler->Finish();
      }
    };
    run.server_metrics_json = [&] { return sampler->ToJson().dump(); };
  }
  RunOutcome outcome;
  if (!RunPlan(plan, trace.requests, run, tok.get(), &outcome, &error)) return Fail(error);

  const std::vector<report::RequestResult> requests =
      ToReportResults(outcome.results, shard, !plan.closed_loop);
  RunFacts facts;
  facts.command = o.command;
  facts.url = o.run.url;
  facts.trace = o.input.path;
  facts.shard_index = shard;
  facts.shard_count = shards;
  facts.started_at_unix_ms = outcome.started_at_unix_ms;
  facts.max_concurrency = o.run.max_concurrency;
  facts.server_metrics_json = outcome.server_metrics_json;
  const nlohmann::json summary = BuildSummary(requests, facts, o.goodput);
  std::fputs(RenderConsole(summary).c_str(), stdout);
  if (!o.out_dir.empty()) {
    if (!WriteOutputs(o.out_dir, requests, summary, &error)) return Fail(error);
    std::printf("wrote %s/summary.json, requests.jsonl and report.html\n", o.out_dir.c_str());
  }
  std::fflush(stdout);
  uint64_t failed = 0;
  for (const RequestResult& r : outcome.results) failed += r.sent && !r.ok();
  const bool all_ok = failed == 0 && !outcome.interrupted && trace.skipped == 0;
  return all_ok ? 0 : 1;
}

}  // namespace llmtap::replay
