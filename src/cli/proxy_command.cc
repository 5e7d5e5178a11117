// `llmtap proxy`: the capture proxy in front of an OpenAI-compatible server (or the built-in
// simulator), until SIGINT/SIGTERM.
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "capture/capture.h"
#include "capture/config.h"
#include "capture/file_names.h"
#include "cli/commands.h"
#include "cli/listen.h"
#include "cli/tls_flags.h"
#include "proxy/capture_observer.h"
#include "proxy/server.h"
#include "sim/server.h"
#include "sim/sim_tokenizer.h"
#include "tokenizer/tokenizer.h"

namespace llmtap::cli {
namespace {

struct ProxyFlags {
  std::string listen = "127.0.0.1:8001";
  std::string upstream;  // empty: the built-in simulator
  proxy::ProxyOptions options;
  std::string shadow_tokenizer;  // --shadow-tokenizer
  std::unique_ptr<tokenizer::Tokenizer> tokenizer;
  double connect_timeout_s = 5, read_timeout_s = 300, write_timeout_s = 60, idle_timeout_s = 60;
  double grace_s = 10;
  double tls_handshake_timeout_s = 10;
  double tls_cert_warn_days = 14;
  // Capture on/off override; unset means "from NIM_CAPTURE_ENABLE".
  std::optional<bool> capture;
  // NIM_CAPTURE_ARGS keys given as flags, as JSON values; they win key by key.
  nlohmann::json overrides = nlohmann::json::object();
  // The flag of each key, for usage errors ("sample_rate" -> "--sample-rate").
  std::map<std::string, std::string> flag_of_key;
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
  if (f.overrides.empty()) return parsed;
  if (forced_on && !parsed.enabled) {
    // NIM_CAPTURE_ARGS was unusable, but --capture asks for capture: flags and defaults only.
    parsed.enabled = true;
    parsed.config = CaptureConfig();
  }
  ApplyCaptureOverrides(f.overrides.dump(), &parsed);
  return parsed;
}

// A capture flag's bad value is a usage error (NIM_CAPTURE_ARGS only warns): false after saying
// which flag and what it accepts.
bool CheckCaptureFlags(const ProxyFlags& f) {
  for (const auto& [key, value] : f.overrides.items()) {
    if (const std::optional<std::string> refusal = CaptureKeyRefusal(key, value.dump())) {
      const auto flag = f.flag_of_key.find(key);
      std::fprintf(stderr, "llmtap proxy: %s is %s\n",
                   flag != f.flag_of_key.end() ? flag->second.c_str() : key.c_str(),
                   refusal->c_str());
      return false;
    }
  }
  return true;
}

int RunProxy(ProxyFlags& flags, Env* capture_env) {
  proxy::ProxyOptions& o = flags.options;
  if (!SplitListen("llmtap proxy", flags.listen, &o.host, &o.port)) return 2;
  if (!CheckCaptureFlags(flags)) return 2;
  if (const char* flag = o.upstream_tls.first_flag();
      flag != nullptr && !flags.upstream.starts_with("https://")) {
    std::fprintf(stderr,
                 "llmtap proxy: %s applies to an https:// --upstream (the upstream is %s)\n", flag,
                 flags.upstream.empty() ? "the built-in simulator" : flags.upstream.c_str());
    return 2;
  }
  WarnIfInsecure("llmtap proxy", o.upstream_tls, "the upstream");
  const bool shadowing = !o.shadow.urls.empty();
  if (const char* flag = o.shadow.tls.first_flag(); flag != nullptr) {
    if (!shadowing || std::none_of(o.shadow.urls.begin(), o.shadow.urls.end(),
                                   [](const auto& u) { return u.starts_with("https://"); })) {
      std::fprintf(stderr, "llmtap proxy: --shadow-%s applies to an https:// --shadow\n", flag + 2);
      return 2;
    }
  }
  if (!shadowing) {
    for (const auto& [flag, given] :
         {std::pair{"--shadow-header", !o.shadow.set_headers.empty()},
          std::pair{"--shadow-drop-header", !o.shadow.drop_headers.empty()},
          std::pair{"--shadow-pairs", !o.shadow.pairs_path.empty()},
          std::pair{"--shadow-tokenizer", !flags.shadow_tokenizer.empty()}}) {
      if (given) {
        std::fprintf(stderr, "llmtap proxy: %s needs --shadow URL\n", flag);
        return 2;
      }
    }
  }
  WarnIfInsecure("llmtap proxy", o.shadow.tls, "the shadow candidate", "--shadow-insecure");
  if (!flags.shadow_tokenizer.empty()) {
    std::string error;
    flags.tokenizer = sim::LoadTokenizerOrSim(flags.shadow_tokenizer, &error);
    if (flags.tokenizer == nullptr) {
      std::fprintf(stderr, "llmtap proxy: --shadow-tokenizer: %s\n", error.c_str());
      return 2;
    }
    o.shadow.tokenizer = flags.tokenizer.get();
  }
  o.connect_timeout = Ms(flags.connect_timeout_s);
  o.read_timeout = Ms(flags.read_timeout_s);
  o.write_timeout = Ms(flags.write_timeout_s);
  o.idle_timeout = Ms(flags.idle_timeout_s);
  o.grace = Ms(flags.grace_s);
  o.tls_handshake_timeout = Ms(flags.tls_handshake_timeout_s);
  o.tls_cert_warning_window =
      std::chrono::seconds(static_cast<int64_t>(flags.tls_cert_warn_days * 86400.0 + 0.5));
  if (!o.tls_key_file.empty() && o.tls_cert_file.empty()) {
    std::fprintf(stderr, "llmtap proxy: --tls-key needs --tls-cert\n");
    return 2;
  }

  // Block the stop signals in every thread; this one waits for them below.
  StopSignals stop_signals(/*with_hangup=*/true);

  Logger* log = Logger::Stderr();
  ParsedCaptureConfig parsed = ResolveCapture(flags);
  for (const ConfigDiagnostic& d : parsed.diagnostics) log->Log(d.level, d.message);
  if (shadowing && parsed.enabled) {
    if (!o.shadow.pairs_path.empty()) {
      std::fprintf(stderr,
                   "llmtap proxy: --shadow-pairs is for capture off; with capture on the pairs go "
                   "to <capture path>.shadow.ndjson, joined to the capture rows\n");
      return 2;
    }
    // Pairs join their capture rows through the rows' outcomes.
    if (!parsed.config.outcomes) {
      parsed.config.outcomes = true;
      log->Log(LogLevel::kInfo,
               "--shadow with capture on: the outcomes sidecar is on too (the shadow pairs join "
               "the capture rows through it)");
    }
  }
  CaptureOptions capture_options;
  capture_options.enabled = parsed.enabled;
  capture_options.config = parsed.config;
  capture_options.env = capture_env;
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
        "llmtap proxy: no --upstream given: the built-in simulator (llmtap sim, %s) runs "
        "in-process on %s as the upstream\n",
        sim::DescribeModels(so).c_str(), o.upstream.c_str());
  } else {
    o.upstream = flags.upstream;
  }

  if (shadowing && capture.enabled()) o.shadow.capture = &capture;
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
  std::string shadow_line;
  if (shadowing) {
    std::string urls;
    for (const std::string& u : o.shadow.urls) urls += (urls.empty() ? "" : " and ") + u;
    shadow_line = "; shadow to " + urls + " (pairs: " +
                  (capture.enabled()             ? ShadowPairsPathFor(capture.config().path)
                   : o.shadow.pairs_path.empty() ? std::string("none, metrics only")
                                                 : o.shadow.pairs_path) +
                  ")";
  }
  std::printf("llmtap proxy: listening on %s, forwarding to %s; capture %s%s; metrics at %s\n",
              ListenUrl(o.host, server.port(), o.tls_cert_file.empty() ? "http" : "https").c_str(),
              o.upstream.c_str(), capture_line.c_str(), shadow_line.c_str(),
              o.metrics_path.empty() ? "(off)" : o.metrics_path.c_str());
  std::fflush(stdout);

  int sig = stop_signals.Wait();
  for (; sig == SIGHUP; sig = stop_signals.Wait()) {
    // logrotate's convention: finish the capture file now (it is renamed with its first
    // record's time, as rotation does) and start a new one at the same path.
    std::printf("llmtap proxy: SIGHUP: %s\n", capture.enabled()
                                                  ? "finishing the capture file, starting a new one"
                                                  : "capture is off, nothing to reopen");
    std::fflush(stdout);
    capture.RequestRotation();
    // A renewed certificate (cert-manager, certbot) is picked up without dropping connections.
    std::string why;
    if (!o.tls_cert_file.empty()) server.ReloadTls(&why);  // logs either way
  }
  std::printf("llmtap proxy: %s: stopping (grace %.1f s)\n", sig == SIGTERM ? "SIGTERM" : "SIGINT",
              flags.grace_s);
  std::fflush(stdout);
  server.Stop();
  capture.Stop();  // drains the queue, fsyncs, writes the final manifest
  if (sim) sim->Stop();
  return 0;
}

}  // namespace

void AddProxyCommand(CLI::App& app, Env* capture_env) {
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
      "remaining records and the manifest, exit 0. SIGHUP: finish the capture file and start a "
      "new one (as rotation does), and load --tls-cert/--tls-key again (open connections keep "
      "the certificate they have; a file that does not load, or a certificate expired or not "
      "yet valid, keeps the current one).");
  AddListenOption(cmd, &flags->listen);
  cmd->add_option("--upstream", flags->upstream,
                  "the server to forward to, http://HOST:PORT or https://HOST[:PORT] (default: "
                  "the built-in simulator on a free loopback port)");
  AddTlsClientFlags(cmd, &o.upstream_tls, "the upstream");
  cmd->add_option("--tls-cert", o.tls_cert_file,
                  "serve HTTPS: the listener's certificate chain (PEM, leaf first); its key too "
                  "unless --tls-key is given. SIGHUP reloads it")
      ->check(CLI::ExistingFile);
  cmd->add_option("--tls-key", o.tls_key_file, "the private key of --tls-cert (PEM, not encrypted)")
      ->check(CLI::ExistingFile);
  cmd->add_option("--tls-cert-warn-days", flags->tls_cert_warn_days,
                  "with --tls-cert: warn (at start and on SIGHUP) when the certificate expires "
                  "within this many days. One outside its validity period is always warned about "
                  "at start, and refused by SIGHUP (the current one stays)")
      ->check(CLI::Range(0.0, 3650.0))
      ->capture_default_str();
  cmd->add_flag("--strict-key-permissions", o.strict_key_permissions,
                "refuse a --tls-key (or --tls-cert holding the key) that its group or other "
                "users can read or write, at start and on SIGHUP (default: a warning saying "
                "`chmod 600`)");
  cmd->add_option("--tls-handshake-timeout-s", flags->tls_handshake_timeout_s,
                  "with --tls-cert: deadline for a client's TLS handshake, from the accept")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  cmd->add_option("--threads", o.threads, "event-loop threads (0 = one per core)")
      ->check(CLI::Range(0u, 256u))
      ->capture_default_str();
  cmd->add_option("--max-body-bytes", o.max_body_bytes,
                  "largest request body; larger ones are answered 413 and not forwarded")
      ->check(CLI::Range(uint64_t{1}, uint64_t{1} << 34))
      ->capture_default_str();
  cmd->add_option("--connect-timeout-s", flags->connect_timeout_s,
                  "deadline to open an upstream connection, its TLS handshake included (then "
                  "504; refused: 502)")
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
  const char* kShadowGroup =
      "Shadow traffic (mirror to a candidate and compare, off the request path)";
  cmd->add_option("--shadow", o.shadow.urls,
                  "also send each matched request (POST, --shadow-endpoint-pattern, "
                  "--shadow-sample-rate), once its body has arrived, to this candidate server, "
                  "http://HOST:PORT or https://HOST[:PORT]; its response is read to the end, "
                  "compared with the primary's (status, TTFT, ITL, latency, tokens, finish "
                  "reason, output text) and discarded. The client's request and response never "
                  "wait for it. One pair line per mirrored request: with capture on in <capture "
                  "path>.shadow.ndjson, joined to the capture row by line and timestamp (turns "
                  "--outcomes on); with capture off in --shadow-pairs. Counters and paired-delta "
                  "histograms in the metrics (llmtap_shadow_*). Given twice (an A/A "
                  "comparison: the same candidate twice, or a copy of the primary and the "
                  "candidate), each chosen request goes to both, one pair line each "
                  "(\"shadow\":0 and 1), and the metrics carry shadow=\"0\"|\"1\"")
      ->group(kShadowGroup)
      ->allow_extra_args(false);
  AddTlsClientFlags(cmd, &o.shadow.tls, "the shadow candidate", "shadow-");
  for (const char* flag : {"--shadow-cacert", "--shadow-insecure", "--shadow-cert", "--shadow-key",
                           "--shadow-no-tls-session-reuse"}) {
    cmd->get_option(flag)->group(kShadowGroup);
  }
  cmd->add_option("--shadow-sample-rate", o.shadow.sample_rate,
                  "share of matching requests mirrored, in [0, 1] (independent of capture's "
                  "--sample-rate)")
      ->check(CLI::Range(0.0, 1.0))
      ->capture_default_str()
      ->group(kShadowGroup);
  cmd->add_option("--shadow-endpoint-pattern", o.shadow.endpoint_pattern,
                  "RE2 regex searched in the request path without query: POST requests matching "
                  "it may be mirrored")
      ->capture_default_str()
      ->group(kShadowGroup);
  cmd->add_option("--shadow-max-in-flight", o.shadow.max_in_flight,
                  "mirrors running at once; a matched request beyond it is not mirrored, only "
                  "counted (llmtap_shadow_dropped_total{reason=\"in_flight_limit\"}). Nothing "
                  "waits in a queue: a slow or stopped candidate costs dropped mirrors, never "
                  "primary latency")
      ->check(CLI::Range(1u, 1000000u))
      ->capture_default_str()
      ->group(kShadowGroup);
  cmd->add_option("--shadow-header", o.shadow.set_headers,
                  "'Name: value': the candidate gets this header field instead of the client's "
                  "field of that name (or in addition), e.g. 'Authorization: Bearer <candidate "
                  "key>'. Repeatable. Values are never logged")
      ->group(kShadowGroup);
  cmd->add_option("--shadow-drop-header", o.shadow.drop_headers,
                  "a request header field the candidate does not get (e.g. Authorization, "
                  "OpenAI-Organization). Repeatable")
      ->group(kShadowGroup);
  cmd->add_option("--shadow-pairs", o.shadow.pairs_path,
                  "with capture off: append the pair lines to this file (0600; default: none, "
                  "the metrics only). With capture on they go beside the capture file")
      ->group(kShadowGroup);
  cmd->add_option("--shadow-tokenizer", flags->shadow_tokenizer,
                  "also compare the two outputs by token: a pair's first_diff_token is the first "
                  "token where they differ, under this tokenizer ('builtin', a tokenizer.json, or "
                  "its directory: the model's; 'sim' for llmtap sim's own). Default: by "
                  "character only")
      ->group(kShadowGroup);
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
  // Each flag sets one NIM_CAPTURE_ARGS key, validated by the same rules.
  auto key_option = [&](const char* flag, const char* key, auto example, const char* help) {
    using T = decltype(example);
    flags->flag_of_key[key] = flag;
    cmd->add_option_function<T>(
           flag, [flags, key](const T& v) { flags->overrides[key] = v; }, help)
        ->group(kGroup);
  };
  key_option("--capture-path", "path", std::string(),
             "capture file (NIM_CAPTURE_ARGS key path; default /opt/nim/captures/requests.jsonl)");
  key_option("--capture-format", "format", std::string(),
             "mooncake_payload (default) or raw_payload (key format)");
  key_option("--sample-rate", "sample_rate", 0.0,
             "share of matching requests recorded, in [0, 1] (key sample_rate; default 1)");
  key_option("--endpoint-pattern", "endpoint_pattern", std::string(),
             "RE2 regex searched in the request path without query (key endpoint_pattern; "
             "default ^/v1/(chat/completions|completions)$)");
  key_option("--max-request-bytes", "max_request_bytes", int64_t{0},
             "larger bodies are forwarded but not recorded (key max_request_bytes; default "
             "1048576)");
  key_option("--max-queue-bytes", "max_queue_bytes", int64_t{0},
             "records waiting for the writer, in bytes, before new ones are dropped and counted "
             "(key max_queue_bytes; default 1073741824)");
  key_option("--rotate-bytes", "rotate_bytes", int64_t{0},
             "start a new capture file before this one grows past this many bytes; the finished "
             "file is renamed <name>.<UTC time of its first record>.jsonl with its own manifest "
             "(key rotate_bytes; default: never)");
  key_option("--rotate-seconds", "rotate_seconds", 0.0,
             "start a new capture file once this one spans this long from its first record (key "
             "rotate_seconds; default: never). SIGHUP also starts a new file");
  cmd->add_flag_callback(
         "--outcomes", [flags] { flags->overrides["outcomes"] = true; },
         "also write <capture path>.outcomes.ndjson: one line per recorded request when its "
         "response ends (the record's line number, status, TTFT and latency in ms, prompt and "
         "completion tokens from the response's usage, else from the server's timings "
         "(usage_source), finish_reason, what the server reported of its own work: "
         "cached_tokens, its timings (server) and its speculative decoding (spec), cancelled, "
         "error) (key outcomes; default off)")
      ->group(kGroup);
  cmd->add_flag_callback(
         "--capture-responses", [flags] { flags->overrides["capture_responses"] = true; },
         "also write each response's generated text in its outcomes line: choice 0's content, "
         "reasoning and tool calls, read as the response passes (implies --outcomes). Responses "
         "may hold sensitive data, as prompts may (key capture_responses; default off)")
      ->group(kGroup);
  key_option("--max-response-bytes", "max_response_bytes", int64_t{0},
             "with --capture-responses: decoded bytes of text kept per response; the rest is cut "
             "at a character boundary and counted (key max_response_bytes; default 1048576)");
  key_option("--session-headers", "session_headers", std::string(),
             "comma-separated request headers whose value names the conversation, e.g. "
             "x-session-id (case-insensitive); the first present one becomes the row's "
             "session_id, before --session-fields (key session_headers; default off). Values are "
             "cut to 256 bytes and never logged; mooncake_payload only");
  key_option("--session-fields", "session_fields", std::string(),
             "comma-separated body fields, dotted for nested ones, whose string or integer value "
             "names the conversation, e.g. user,prompt_cache_key,metadata.session_id; tried after "
             "--session-headers, in order (key session_fields; default off)");
  const char* kUploadGroup = "Fleet upload (credentials and endpoint from AWS_* variables)";
  auto upload_option = [&](const char* flag, const char* key, auto example, const char* help) {
    key_option(flag, key, example, help);
    cmd->get_option(flag)->group(kUploadGroup);
  };
  upload_option("--upload-url", "upload_url", std::string(),
                "s3://bucket/prefix/: every finished capture file (rotation, SIGHUP, stop) goes "
                "there under <prefix>/<replica>/ with its outcomes and manifest, which goes last; "
                "local copies are deleted once stored. Reads AWS_ACCESS_KEY_ID, "
                "AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN, AWS_REGION and AWS_ENDPOINT_URL_S3 "
                "(path-style, for Ceph RGW, MinIO...). Without --rotate-*, files rotate at 256 MiB "
                "or 60 s (key upload_url; default: no upload)");
  upload_option("--replica", "replica", std::string(),
                "this proxy's folder in the store: letters, digits, '.', '_', '-' (key replica; "
                "default: the host name, a pod's name in Kubernetes)");
  upload_option("--compress", "compress", std::string(),
                "none or zstd: compress finished files before upload, as "
                "requests.<time>.jsonl.zst (key compress; default none)");
  cmd->add_flag_callback(
         "--keep-local", [flags] { flags->overrides["keep_local"] = true; },
         "keep files on disk after the store confirmed them (key keep_local; default off)")
      ->group(kUploadGroup);
  upload_option("--max-local-bytes", "max_local_bytes", int64_t{0},
                "disk budget for finished files waiting to upload plus the open file: when the "
                "store is down that long, requests are not recorded (counted as "
                "skipped_upload_backlog) until it takes them (key max_local_bytes; default "
                "4294967296)");
  cmd->callback([flags, capture_env] { ExitWith(RunProxy(*flags, capture_env)); });
}

}  // namespace llmtap::cli
