#include "replay/runner.h"

#include <signal.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/post.hpp>

#include "net/http_get.h"
#include "net/resolve.h"
#include "net/tls.h"
#include "replay/runner_internal.h"

namespace llmtap::replay {
namespace internal {
namespace {

std::atomic<int> g_signal{0};
extern "C" void OnSignal(int sig) { g_signal.store(sig, std::memory_order_relaxed); }

}  // namespace

void Runner::Progress(bool final) {
  const uint64_t sent = sent_.load(), ok = ok_.load(), failed = failed_.load();
  const uint64_t done = ok + failed;
  const double elapsed = std::max(0.0, Ms(Clock::now() - t0_) / 1000);
  // The total is known once the input ended; until then the bar shows how much of it was read
  // (when its size is known: not for standard input).
  const bool known = input_.finished();
  const uint64_t total = input_.planned();
  const uint64_t size = input_.file_size();
  double fraction = 0;
  if (known) {
    fraction = total ? static_cast<double>(done) / static_cast<double>(total) : 1;
  } else if (size > 0) {
    fraction = static_cast<double>(input_.stored_position()) / static_cast<double>(size);
  }
  const int width = 30;
  std::string bar(static_cast<size_t>(width * std::clamp(fraction, 0.0, 1.0)), '#');
  bar.resize(width, '.');
  char count[96];
  if (known) {
    std::snprintf(count, sizeof(count), "%llu/%llu done", static_cast<unsigned long long>(done),
                  static_cast<unsigned long long>(total));
  } else if (size > 0) {
    std::snprintf(count, sizeof(count), "%llu done, %.0f%% of the input read",
                  static_cast<unsigned long long>(done), 100 * fraction);
  } else {
    std::snprintf(count, sizeof(count), "%llu done, %llu rows read",
                  static_cast<unsigned long long>(done),
                  static_cast<unsigned long long>(input_.rows_read()));
  }
  char line[256];
  int n = std::snprintf(line, sizeof(line), "[%s] %s, %llu in flight, %llu errors, %.1f s",
                        bar.c_str(), count, static_cast<unsigned long long>(sent - done),
                        static_cast<unsigned long long>(failed), elapsed);
  n = std::clamp(n, 0, static_cast<int>(sizeof(line)) - 1);
  // Blanks over what a longer previous line (the input's share read) left.
  const int pad = std::max(0, progress_width_ - n);
  progress_width_ = n;
  std::fprintf(stderr, "\r%s%*s%s", line, pad, "", final ? "\n" : "");
  std::fflush(stderr);
}

void Runner::StartWorkers() {
  unsigned threads = options_.threads;
  if (threads == 0) threads = std::max(1u, std::thread::hardware_concurrency());
  for (unsigned i = 0; i < threads; ++i) {
    auto w = std::make_unique<Worker>();
    w->sweep = std::make_unique<Timer>(w->ioc.get_executor());
    asio::co_spawn(w->ioc, Sweep(*w), asio::detached);
    workers_.push_back(std::move(w));
  }
}

// Time 0: --start-at, or just after now; and the end of --duration.
void Runner::SetTimeZero() {
  const auto sys_now = std::chrono::system_clock::now();
  const Clock::time_point now = Clock::now();
  if (options_.start_at_unix_s) {
    const double wait_ms =
        *options_.start_at_unix_s * 1000 -
        std::chrono::duration<double, std::milli>(sys_now.time_since_epoch()).count();
    // Already past: the schedule stays anchored at --start-at (so shards stay aligned), and
    // the requests already due go out at once, their lateness counted as lag.
    if (wait_ms < -1000) {
      std::fprintf(stderr, "llmtap replay: --start-at is %.1f s in the past\n", -wait_ms / 1000);
    }
    t0_ = now + FromMs(wait_ms);
  } else {
    t0_ = now + std::chrono::milliseconds(20);  // the threads are up by then
  }
  out_->started_at_unix_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                                 (sys_now + (t0_ - now)).time_since_epoch())
                                 .count();
  if (options_.duration_s > 0) end_ = t0_ + FromMs(options_.duration_s * 1000);
}

// Until the run is done: hands results over, shows progress, calls the server-metrics hook once
// a second and turns Ctrl-C / SIGTERM into Cancel().
void Runner::Monitor() {
  const bool show = options_.progress || isatty(STDERR_FILENO);
  Clock::time_point next_progress = Clock::now(), next_hook = t0_ + std::chrono::seconds(1);
  for (;;) {
    {
      std::unique_lock lock(mu_);
      cv_.wait_for(lock, std::chrono::milliseconds(50));
      if (Done()) break;
    }
    if (g_signal.load() != 0 && !cancel_.load()) {
      out_->interrupted = true;
      std::fprintf(stderr, "\nllmtap replay: interrupted; cancelling the requests in flight\n");
      Cancel();
    }
    Deliver();
    if (options_.on_tick) options_.on_tick();
    const Clock::time_point t = Clock::now();
    if (show && t >= next_progress) {
      Progress(false);
      next_progress = t + std::chrono::milliseconds(500);
    }
    if (options_.server_metrics_hook && t >= next_hook) {
      options_.server_metrics_hook(RunPhase::kDuring, Ms(t - t0_) / 1000);
      next_hook += std::chrono::seconds(1);
    }
  }
  const Clock::time_point finished = Clock::now();
  if (show) Progress(true);
  out_->duration_s = std::max(0.0, Ms(finished - t0_) / 1000);
}

void Runner::StopWorkers() {
  // No row is taken from here on; the Lookahead drops its wake-ups (which name the workers)
  // before the workers go.
  input_.Cancel();
  for (auto& w : workers_) {
    asio::post(w->ioc, [wp = w.get()] {
      wp->stopping = true;
      wp->sweep->cancel();
      for (Pool& pool : wp->pools) pool.idle.clear();
      wp->work.reset();
    });
  }
  for (auto& w : workers_) w->thread.join();
}

// Planned but never sent (the run was interrupted): listed last, in plan order.
void Runner::DeliverUnsent() {
  for (DueRequest& due : input_.TakeQueued()) unsent_.emplace_back(due.slot, ResultOf(due));
  std::sort(unsent_.begin(), unsent_.end(),
            [](const auto& a, const auto& b) { return a.first < b.first; });
  std::vector<RequestResult> rest;
  rest.reserve(unsent_.size());
  for (auto& [slot, r] : unsent_) rest.push_back(std::move(r));
  if (!rest.empty() && options_.on_results) options_.on_results(rest);
}

void Runner::Run() {
  StartWorkers();
  struct sigaction sa {
  }, old_int{}, old_term{};
  sa.sa_handler = OnSignal;
  sigemptyset(&sa.sa_mask);
  g_signal.store(0);
  sigaction(SIGINT, &sa, &old_int);
  sigaction(SIGTERM, &sa, &old_term);

  if (options_.server_metrics_hook) options_.server_metrics_hook(RunPhase::kBefore, -1);
  SetTimeZero();
  if (closed_loop_) {
    const uint32_t lanes = std::max<uint32_t>(1, input_.concurrency());
    lanes_left_ = lanes;
    for (uint32_t i = 0; i < lanes; ++i) {
      Worker& w = *workers_[i % workers_.size()];
      auto timer = std::make_shared<Timer>(w.ioc.get_executor(), t0_);
      timer->async_wait(
          [this, &w, timer](error_code) { asio::co_spawn(w.ioc, Lane(w), asio::detached); });
    }
  } else {
    schedulers_left_ = static_cast<uint32_t>(workers_.size());
  }
  for (auto& w : workers_) {
    Worker* wp = w.get();
    wp->thread = std::thread([this, wp] { WorkerMain(*wp); });
  }

  Monitor();
  if (options_.server_metrics_hook) {
    options_.server_metrics_hook(RunPhase::kAfter, out_->duration_s);
  }
  if (options_.server_metrics_json) out_->server_metrics_json = options_.server_metrics_json();
  StopWorkers();
  sigaction(SIGINT, &old_int, nullptr);
  sigaction(SIGTERM, &old_term, nullptr);

  Deliver();
  if (!closed_loop_) DeliverUnsent();
}

}  // namespace internal

uint64_t RaiseFileLimit() {
  rlimit rl{};
  if (getrlimit(RLIMIT_NOFILE, &rl) != 0) return 0;
  if (rl.rlim_cur < rl.rlim_max) {
    rl.rlim_cur = rl.rlim_max;
    setrlimit(RLIMIT_NOFILE, &rl);
    getrlimit(RLIMIT_NOFILE, &rl);
  }
  return rl.rlim_cur;
}

namespace {

// A server the run sends to: its URL parsed, resolved and, for https://, its TLS context made.
std::unique_ptr<internal::Peer> MakePeer(const std::string& url, const std::string& flag,
                                         const std::string& headers,
                                         const net::TlsClientOptions& tls_options,
                                         std::shared_ptr<const net::TlsClientContext> tls,
                                         Target* target, std::string* error) {
  if (!ParseUrl(url, target, error)) {
    if (flag != "--url" && error->find("--url") != std::string::npos) {
      error->replace(error->find("--url"), 5, flag);
    }
    return nullptr;
  }
  auto peer = std::make_unique<internal::Peer>();
  if (target->tls) {
    peer->tls = tls ? std::move(tls) : net::TlsClientContext::Make(tls_options, error);
    if (!peer->tls) return nullptr;
  }
  if (std::string why; !net::ResolveReachable(target->host, target->port, &peer->endpoint, &why)) {
    *error = "cannot resolve " + target->host + ": " + why;
    return nullptr;
  }
  peer->tls_host = target->host;
  for (size_t e = 0; e < peer->head.size(); ++e) {
    const std::string_view path = api::EndpointPath(static_cast<api::Endpoint>(e));
    if (path.empty()) continue;  // no row is of kOther or kAny (input.cc)
    peer->head[e] = "POST " + target->base_path + std::string(path) +
                    " HTTP/1.1\r\nHost: " + target->host_header + "\r\nUser-Agent: llmtap-replay/" +
                    kVersion + "\r\nContent-Type: application/json\r\nAccept: */*\r\n" + headers +
                    "Content-Length: ";
  }
  return peer;
}

// The header's name, lower-cased ("Name: value" -> "name").
std::string HeaderName(std::string_view header) {
  std::string name(header.substr(0, header.find(':')));
  for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return name;
}

}  // namespace

bool RunPlan(Lookahead& input, const RunOptions& options, const tokenizer::Tokenizer* tok,
             RunOutcome* out, std::string* error) {
  *out = RunOutcome();
  auto fail = [&] {
    input.Cancel();
    return false;
  };
  std::string headers;
  for (const std::string& h : options.headers) {
    std::string line;
    if (!HeaderLine(h, &line, error)) return fail();
    headers += line;
  }
  if (!(options.request_timeout_s > 0)) {
    *error = "--request-timeout must be positive";
    return fail();
  }
  Target target;
  std::unique_ptr<internal::Peer> primary =
      MakePeer(options.url, "--url", headers, options.tls, options.tls_context, &target, error);
  if (!primary) return fail();
  // A certificate the run would refuse is said once, in words, before anything is sent.
  if (primary->tls) {
    const double probe_s = std::min(options.request_timeout_s, 10.0);
    *error = net::ProbeTls(options.url, *primary->tls,
                           std::chrono::milliseconds(std::lround(probe_s * 1000)));
    if (!error->empty()) return fail();
  }
  std::unique_ptr<internal::Peer> paired;
  if (!options.paired_url.empty()) {
    // --url's headers, those --paired-header names replaced by its own.
    std::vector<std::string> names;
    std::string own;
    for (const std::string& h : options.paired_headers) {
      std::string line;
      if (!HeaderLine(h, &line, error)) {
        *error = "--paired-header" + error->substr(error->find(' '));
        return fail();
      }
      own += line;
      names.push_back(HeaderName(h));
    }
    std::string paired_headers;
    for (const std::string& h : options.headers) {
      if (std::find(names.begin(), names.end(), HeaderName(h)) != names.end()) continue;
      std::string line;
      HeaderLine(h, &line, error);
      paired_headers += line;
    }
    paired_headers += own;
    // Not probed: a paired target that is down or refuses the handshake costs its side of each
    // pair (its error in the pair line), never the primary's run.
    Target paired_target;
    paired = MakePeer(options.paired_url, "--paired-url", paired_headers, options.paired_tls,
                      options.paired_tls_context, &paired_target, error);
    if (!paired) return fail();
  }
  RaiseFileLimit();
  internal::Runner runner(input, options, std::move(primary), std::move(paired), tok, out);
  runner.Run();
  return true;
}

}  // namespace llmtap::replay
