// `llmtap proxy`: the capture proxy in front of an OpenAI-compatible server (or the built-in
// simulator), until SIGINT/SIGTERM.
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "capture/capture.h"
#include "capture/config.h"
#include "cli/commands.h"
#include "cli/listen.h"
#include "proxy/capture_observer.h"
#include "proxy/server.h"
#include "sim/server.h"

namespace llmtap::cli {
namespace {

struct ProxyFlags {
  std::string listen = "127.0.0.1:8001";
  std::string upstream;  // empty: the built-in simulator
  proxy::ProxyOptions options;
  double connect_timeout_s = 5, read_timeout_s = 300, write_timeout_s = 60, idle_timeout_s = 60;
  double grace_s = 10;
  // Capture overrides; unset means "from NIM_CAPTURE_* or the default".
  std::optional<bool> capture;
  std::optional<std::string> capture_path, capture_format, endpoint_pattern;
  std::optional<double> sample_rate;
  std::optional<int64_t> max_request_bytes, max_queue_bytes;
};

std::chrono::milliseconds Ms(double seconds) {
  return std::chrono::milliseconds(static_cast<int64_t>(seconds * 1000.0 + 0.5));
}

// Capture settings: flags > NIM_CAPTURE_ENABLE / NIM_CAPTURE_ARGS > defaults. Flag values are
// validated by the same rules as NIM_CAPTURE_ARGS keys.
ParsedCaptureConfig ResolveCapture(const ProxyFlags& f) {
  auto env = [](const char* name) -> std::optional<std::string_view> {
    const char* v = std::getenv(name);
    return v ? std::optional<std::string_view>(v) : std::nullopt;
  };
  const bool forced_on = f.capture.has_value() && *f.capture;
  ParsedCaptureConfig parsed = ParseCaptureConfig(
      forced_on ? std::optional<std::string_view>("1") : env("NIM_CAPTURE_ENABLE"),
      env("NIM_CAPTURE_ARGS"));
  if (f.capture.has_value() && !*f.capture) {
    parsed.enabled = false;
    return parsed;
  }
  nlohmann::json overrides = nlohmann::json::object();
  if (f.capture_path) overrides["path"] = *f.capture_path;
  if (f.capture_format) overrides["format"] = *f.capture_format;
  if (f.endpoint_pattern) overrides["endpoint_pattern"] = *f.endpoint_pattern;
  if (f.sample_rate) overrides["sample_rate"] = *f.sample_rate;
  if (f.max_request_bytes) overrides["max_request_bytes"] = *f.max_request_bytes;
  if (f.max_queue_bytes) overrides["max_queue_bytes"] = *f.max_queue_bytes;
  if (overrides.empty()) return parsed;
  if (forced_on && !parsed.enabled) {
    // NIM_CAPTURE_ARGS was unusable, but --capture asks for capture: flags and defaults only.
    parsed.enabled = true;
    parsed.config = CaptureConfig();
  }
  ParsedCaptureConfig from_flags = ParseCaptureConfig("1", overrides.dump());
  for (ConfigDiagnostic& d : from_flags.diagnostics) {
    d.message = "command-line flag: " + d.message;
    parsed.diagnostics.push_back(std::move(d));
  }
  const CaptureConfig& c = from_flags.config;
  if (f.capture_path) parsed.config.path = c.path;
  if (f.capture_format) parsed.config.format = c.format;
  if (f.endpoint_pattern) parsed.config.endpoint_pattern = c.endpoint_pattern;
  if (f.sample_rate) parsed.config.sample_rate = c.sample_rate;
  if (f.max_request_bytes) parsed.config.max_request_bytes = c.max_request_bytes;
  if (f.max_queue_bytes) parsed.config.max_queue_bytes = c.max_queue_bytes;
  if (parsed.config.max_queue_bytes < parsed.config.max_request_bytes) {
    parsed.diagnostics.push_back({LogLevel::kWarning, "max_queue_bytes",
                                  "max_queue_bytes is below max_request_bytes; using "
                                  "max_request_bytes for it"});
    parsed.config.max_queue_bytes = parsed.config.max_request_bytes;
  }
  return parsed;
}

int RunProxy(ProxyFlags& flags) {
  proxy::ProxyOptions& o = flags.options;
  if (!SplitListen(flags.listen, &o.host, &o.port)) {
    std::fprintf(stderr, "llmtap proxy: --listen wants HOST:PORT, got '%s'\n",
                 flags.listen.c_str());
    return 2;
  }
  o.connect_timeout = Ms(flags.connect_timeout_s);
  o.read_timeout = Ms(flags.read_timeout_s);
  o.write_timeout = Ms(flags.write_timeout_s);
  o.idle_timeout = Ms(flags.idle_timeout_s);
  o.grace = Ms(flags.grace_s);

  // Block the stop signals in every thread; this one waits for them below.
  StopSignals stop_signals;

  Logger* log = Logger::Stderr();
  ParsedCaptureConfig parsed = ResolveCapture(flags);
  for (const ConfigDiagnostic& d : parsed.diagnostics) log->Log(d.level, d.message);
  CaptureOptions capture_options;
  capture_options.enabled = parsed.enabled;
  capture_options.config = parsed.config;
  Capture capture(capture_options);
  // A destination that cannot be written is a warning (logged by Start); serving goes on.
  capture.Start();

  std::unique_ptr<sim::SimServer> sim;
  std::string error;
  if (flags.upstream.empty()) {
    sim::SimOptions so;
    so.host = "127.0.0.1";
    so.port = 0;
    sim = std::make_unique<sim::SimServer>(so);
    if (!sim->Start(&error)) {
      std::fprintf(stderr, "llmtap proxy: cannot start the built-in simulator: %s\n",
                   error.c_str());
      return 1;
    }
    o.upstream = "http://127.0.0.1:" + std::to_string(sim->port());
    std::printf(
        "llmtap proxy: no --upstream given: the built-in simulator (llmtap sim, model %s) runs "
        "in-process on %s as the upstream\n",
        so.model.c_str(), o.upstream.c_str());
  } else {
    o.upstream = flags.upstream;
  }

  proxy::CaptureObserver capture_observer(&capture);
  proxy::ProxyServer server(o, {&capture_observer}, {&capture_observer});
  if (!server.Start(&error)) {
    std::fprintf(stderr, "llmtap proxy: %s\n", error.c_str());
    capture.Stop();
    return 1;
  }
  std::string capture_line = "off";
  if (capture.enabled()) {
    capture_line = "on, " + std::string(CaptureFormatName(capture.config().format)) + " to " +
                   capture.config().path;
  }
  std::printf("llmtap proxy: listening on %s, forwarding to %s; capture %s; metrics at %s\n",
              ListenUrl(o.host, server.port()).c_str(), o.upstream.c_str(), capture_line.c_str(),
              o.metrics_path.empty() ? "(off)" : o.metrics_path.c_str());
  std::fflush(stdout);

  const int sig = stop_signals.Wait();
  std::printf("llmtap proxy: %s: stopping (grace %.1f s)\n", sig == SIGTERM ? "SIGTERM" : "SIGINT",
              flags.grace_s);
  std::fflush(stdout);
  server.Stop();
  capture.Stop();  // drains the queue, fsyncs, writes the final manifest
  if (sim) sim->Stop();
  return 0;
}

}  // namespace

void AddProxyCommand(CLI::App& app) {
  auto flags = std::make_shared<ProxyFlags>();
  proxy::ProxyOptions& o = flags->options;
  CLI::App* cmd = app.add_subcommand(
      "proxy",
      "Run the capture proxy: forward every request to an OpenAI-compatible server (vLLM, "
      "SGLang, TensorRT-LLM, llama.cpp, NIM, ...), stream every response back unchanged, and "
      "record matching request bodies as JSONL for replay. Without --upstream the built-in "
      "simulator runs in-process as the upstream. Capture is configured by NIM_CAPTURE_ENABLE "
      "and NIM_CAPTURE_ARGS; the capture flags below override them (flag > environment > "
      "default). GET of --metrics-path is answered by the proxy (Prometheus text). SIGINT or "
      "SIGTERM: stop accepting, let requests in flight finish within --grace, write the "
      "remaining records and the manifest, exit 0.");
  cmd->add_option("--listen", flags->listen, "HOST:PORT to listen on; port 0 picks a free port")
      ->capture_default_str();
  cmd->add_option("--upstream", flags->upstream,
                  "the server to forward to, http://HOST:PORT (default: the built-in simulator "
                  "on a free loopback port)");
  cmd->add_option("--threads", o.threads, "event-loop threads (0 = one per core)")
      ->check(CLI::Range(0u, 256u))
      ->capture_default_str();
  cmd->add_option("--max-body-bytes", o.max_body_bytes,
                  "largest request body; larger ones are answered 413 and not forwarded")
      ->check(CLI::Range(uint64_t{1}, uint64_t{1} << 34))
      ->capture_default_str();
  cmd->add_option("--connect-timeout-s", flags->connect_timeout_s,
                  "deadline to open an upstream connection (then 504; refused: 502)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  cmd->add_option("--read-timeout-s", flags->read_timeout_s,
                  "deadline of each wait for upstream bytes: the response head (then 504), and "
                  "each later chunk (then the stream is cut)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  cmd->add_option("--write-timeout-s", flags->write_timeout_s,
                  "deadline of each write to a client or the upstream")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  cmd->add_option("--idle-timeout-s", flags->idle_timeout_s,
                  "close a keep-alive client connection (or drop a pooled upstream one) idle "
                  "this long")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  cmd->add_option("--grace", flags->grace_s,
                  "on SIGINT/SIGTERM, seconds requests in flight may take to finish")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  cmd->add_option("--metrics-path", o.metrics_path,
                  "GET of exactly this target is answered by the proxy with Prometheus metrics "
                  "and never forwarded (\"\" = no metrics endpoint)")
      ->capture_default_str();
  // Capture overrides.
  const char* kGroup = "Capture (flag > NIM_CAPTURE_ENABLE/NIM_CAPTURE_ARGS > default)";
  CLI::Option* capture_on =
      cmd->add_flag_callback(
             "--capture", [flags] { flags->capture = true; },
             "capture even if NIM_CAPTURE_ENABLE is not 1 (if NIM_CAPTURE_ARGS is unusable, only "
             "the flags and defaults apply)")
          ->group(kGroup);
  cmd->add_flag_callback(
         "--no-capture", [flags] { flags->capture = false; },
         "never capture, whatever NIM_CAPTURE_ENABLE says")
      ->group(kGroup)
      ->excludes(capture_on);
  cmd->add_option("--capture-path", flags->capture_path,
                  "capture file (NIM_CAPTURE_ARGS key path; default "
                  "/opt/nim/captures/requests.jsonl)")
      ->group(kGroup);
  cmd->add_option("--capture-format", flags->capture_format,
                  "mooncake_payload (default) or raw_payload (key format)")
      ->group(kGroup);
  cmd->add_option("--sample-rate", flags->sample_rate,
                  "share of matching requests recorded, in [0, 1] (key sample_rate; default 1)")
      ->group(kGroup);
  cmd->add_option("--endpoint-pattern", flags->endpoint_pattern,
                  "RE2 regex searched in the request path without query (key endpoint_pattern; "
                  "default ^/v1/(chat/completions|completions)$)")
      ->group(kGroup);
  cmd->add_option("--max-request-bytes", flags->max_request_bytes,
                  "larger bodies are forwarded but not recorded (key max_request_bytes; default "
                  "1048576)")
      ->group(kGroup);
  cmd->add_option("--max-queue-bytes", flags->max_queue_bytes,
                  "records waiting for the writer, in bytes, before new ones are dropped and "
                  "counted (key max_queue_bytes; default 1073741824)")
      ->group(kGroup);
  cmd->callback([flags] {
    const int rc = RunProxy(*flags);
    if (rc != 0) throw CLI::RuntimeError(rc);
  });
}

}  // namespace llmtap::cli
