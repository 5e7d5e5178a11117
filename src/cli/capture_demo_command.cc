// `llmtap capture-demo`: drives the capture core with synthetic OpenAI requests, so a new
// user can see what a capture and its manifest look like before the proxy is in place.
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <string>
#include <thread>

#include "capture/capture.h"
#include "capture/config.h"
#include "cli/commands.h"

namespace llmtap::cli {
namespace {

struct DemoFlags {
  std::string path;
  std::string format;
  int requests = 20;
  int interval_ms = 25;
};

std::string DemoBody(int i) {
  const std::string n = std::to_string(i);
  if (i % 2 == 0) {
    // Pretty-printed, as many SDKs send it.
    return "{\n  \"model\": \"demo\",\n  \"messages\": [\n    {\"role\": \"system\", \"content\": "
           "\"You are terse.\"},\n    {\"role\": \"user\", \"content\": \"Question " +
           n + ": what is 2+" + n + "?\"}\n  ],\n  \"max_tokens\": 32,\n  \"stream\": true\n}";
  }
  return "{\"model\": \"demo\", \"prompt\": \"Once upon a time, story " + n +
         "\", \"max_tokens\": 64}";
}

int RunDemo(const DemoFlags& flags) {
  // The demo always captures (it is what it is for); NIM_CAPTURE_ARGS still applies.
  ParsedCaptureConfig parsed = ParseCaptureConfig("1", [] {
    const char* args = std::getenv("NIM_CAPTURE_ARGS");
    return args ? std::optional<std::string_view>(args) : std::nullopt;
  }());
  for (const auto& d : parsed.diagnostics) Logger::Stderr()->Log(d.level, d.message);
  if (!parsed.enabled) return 2;
  if (!flags.path.empty()) parsed.config.path = flags.path;
  if (flags.format == "raw_payload") parsed.config.format = CaptureFormat::kRawPayload;
  if (flags.format == "mooncake_payload") parsed.config.format = CaptureFormat::kMooncakePayload;

  CaptureOptions options;
  options.config = parsed.config;
  Capture capture(options);
  Status started = capture.Start();
  const char* paths[] = {"/v1/chat/completions", "/v1/completions"};
  for (int i = 0; i < flags.requests; ++i) {
    capture.Offer(paths[i % 2], DemoBody(i));
    if (i % 7 == 3) capture.Offer("/v1/models", "");                       // not matched
    if (i % 9 == 4) capture.Offer("/v1/chat/completions", "{\"model\":");  // invalid body
    std::this_thread::sleep_for(std::chrono::milliseconds(flags.interval_ms));
  }
  capture.Stop();

  const CaptureCountersSnapshot c = capture.counters();
  std::printf(
      "offered %llu, matched %llu, recorded %llu (%llu bytes); not recorded: %llu too large, "
      "%llu sampled out, %llu invalid body, %llu non-standard JSON, %llu queue full, %llu write "
      "failed\n",
      (unsigned long long)c.offered, (unsigned long long)c.matched, (unsigned long long)c.recorded,
      (unsigned long long)c.bytes_written, (unsigned long long)c.skipped_too_large,
      (unsigned long long)c.sampled_out, (unsigned long long)c.invalid_body,
      (unsigned long long)c.non_standard_json, (unsigned long long)c.dropped_queue_full,
      (unsigned long long)c.write_failed_records);
  std::printf("capture:  %s\nmanifest: %s\n", capture.config().path.c_str(),
              capture.manifest_path().c_str());
  std::ifstream in(capture.config().path);
  std::string line;
  for (int i = 0; i < 3 && std::getline(in, line); ++i) std::printf("  %s\n", line.c_str());
  return started.ok() && c.recorded > 0 ? 0 : 1;
}

}  // namespace

void AddCaptureDemoCommand(CLI::App& app) {
  auto flags = std::make_shared<DemoFlags>();
  CLI::App* cmd = app.add_subcommand(
      "capture-demo",
      "Offer synthetic chat and completion requests to the capture core and write a capture "
      "plus its manifest. NIM_CAPTURE_ARGS applies (capture is on for the demo); flags "
      "override it.");
  cmd->add_option("--path", flags->path, "capture file (overrides NIM_CAPTURE_ARGS path)");
  cmd->add_option("--format", flags->format, "mooncake_payload or raw_payload")
      ->check(CLI::IsMember({"mooncake_payload", "raw_payload"}));
  cmd->add_option("--requests", flags->requests, "number of requests to offer")
      ->check(CLI::Range(1, 1000000))
      ->capture_default_str();
  cmd->add_option("--interval-ms", flags->interval_ms, "pause between requests")
      ->check(CLI::Range(0, 60000))
      ->capture_default_str();
  cmd->callback([flags] { ExitWith(RunDemo(*flags)); });
}

}  // namespace llmtap::cli
