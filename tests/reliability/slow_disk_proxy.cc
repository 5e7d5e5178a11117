// llmtap_slow_disk: `llmtap proxy` whose capture writer sits on a slow disk, through the
// capture core's Env seam (FaultEnv, src/capture/testing/fault_env.h) rather than from
// outside the process. Every write(2)/writev(2) of the writer sleeps --write-delay-us first,
// for the first --slow-for-s seconds, or (--slow-for-s 0, the default) until the process gets
// SIGUSR1: then the disk is fast again, so that "capture resumes" can be checked. A test that
// must see the slow disk at work ends it by the signal, when it has seen what it waits for, not
// at a time a loaded machine may reach first. With --stall (SIGUSR1 only), every write waits
// until the signal instead: a disk that does not answer, so that what piles up behind it
// depends on how many records come, not on how fast. Everything after the options is the
// proxy's own command line:
//
//   llmtap_slow_disk --write-delay-us 1000000 --slow-for-s 20 proxy --upstream ... --capture
//   llmtap_slow_disk --write-delay-us 500000 proxy ...   (fast again on `kill -USR1 PID`)
//   llmtap_slow_disk --stall proxy ...                   (writes wait for `kill -USR1 PID`)
//
// Used by tests/reliability/disk_latency.sh (case slow), soak.sh (SOAK_SLOW_WRITE_US) and
// disk_process.test.mjs. Built with the tests, never installed.
#include <pthread.h>
#include <signal.h>

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include <CLI/CLI.hpp>

#include "common/testing/fault_env.h"
#include "cli/commands.h"

namespace {

// The value of a leading "--name VALUE" pair, or nullopt.
std::optional<double> TakeNumber(int& i, int argc, char** argv, const char* name) {
  if (std::strcmp(argv[i], name) != 0) return std::nullopt;
  if (i + 1 >= argc) {
    std::fprintf(stderr, "llmtap_slow_disk: %s needs a value\n", name);
    std::exit(2);
  }
  char* end = nullptr;
  const double v = std::strtod(argv[i + 1], &end);
  if (*end != '\0' || v < 0) {
    std::fprintf(stderr, "llmtap_slow_disk: %s wants a number >= 0, got '%s'\n", name, argv[i + 1]);
    std::exit(2);
  }
  i += 2;
  return v;
}

}  // namespace

int main(int argc, char** argv) {
  double delay_us = 1000000, slow_for_s = 0;
  bool stall = false;
  int i = 1;
  while (i < argc) {
    if (auto v = TakeNumber(i, argc, argv, "--write-delay-us")) {
      delay_us = *v;
    } else if (auto w = TakeNumber(i, argc, argv, "--slow-for-s")) {
      slow_for_s = *w;
    } else if (std::strcmp(argv[i], "--stall") == 0) {
      stall = true;
      delay_us = 0;
      ++i;
    } else {
      break;
    }
  }
  if (stall && slow_for_s > 0) {
    std::fprintf(stderr, "llmtap_slow_disk: --stall ends on SIGUSR1 only, not with --slow-for-s\n");
    return 2;
  }
  // What is left is "proxy ...", parsed by the real command.
  std::vector<char*> rest{argv[0]};
  rest.insert(rest.end(), argv + i, argv + argc);

  // Never destroyed (held by a static, so LeakSanitizer sees it reachable): the detached SIGUSR1
  // thread below may still be inside Unstall, notifying the writer it releases, when the proxy
  // so released stops and main returns (ThreadSanitizer saw main's destructor race that notify
  // on a loaded machine).
  static llmtap::testing::FaultEnv* const kEnv = new llmtap::testing::FaultEnv;
  llmtap::testing::FaultEnv& env = *kEnv;
  env.SetWriteDelay(std::chrono::microseconds(static_cast<int64_t>(delay_us)));
  if (stall) env.Stall();
  if (slow_for_s == 0) {
    // SIGUSR1 is blocked in every thread (they inherit this mask) and taken by this one alone.
    sigset_t usr1;
    sigemptyset(&usr1);
    sigaddset(&usr1, SIGUSR1);
    pthread_sigmask(SIG_BLOCK, &usr1, nullptr);
    std::thread([&env, usr1] {
      int sig = 0;
      if (sigwait(&usr1, &sig) == 0) {
        env.SetWriteDelay(std::chrono::microseconds(0));
        env.Unstall();
      }
    }).detach();
  }
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  std::thread clear;
  if (slow_for_s > 0) {
    clear = std::thread([&] {
      std::unique_lock lock(mu);
      if (!cv.wait_for(lock, std::chrono::duration<double>(slow_for_s), [&] { return done; })) {
        env.SetWriteDelay(std::chrono::microseconds(0));
      }
    });
  }
  CLI::App app{"llmtap proxy with a slow capture disk (a test program; see the source)"};
  app.require_subcommand(1);
  llmtap::cli::AddProxyCommand(app, &env);
  const int rc = llmtap::cli::RunCli(app, static_cast<int>(rest.size()), rest.data());
  {
    std::lock_guard lock(mu);
    done = true;
  }
  cv.notify_all();
  if (clear.joinable()) clear.join();
  return rc;
}
