// sim_sse_client: opens many concurrent streaming chat requests against `llmtap sim` (or any
// OpenAI-compatible server), keeps them all open while tokens flow, and checks that every one
// ends with `data: [DONE]`. With --server-pid it samples the server's resident memory before
// the streams start and while all of them are open, and prints the memory per stream.
//
//   sim_sse_client --port 8000 --streams 10000 --max-tokens 20 --server-pid 1234
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <string_view>
#include <thread>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>

namespace asio = boost::asio;
using tcp = asio::ip::tcp;

namespace {

std::atomic<int> g_open{0}, g_done{0}, g_failed{0};
std::atomic<long> g_events{0};

long RssKiB(int pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("VmRSS:", 0) == 0) return std::strtol(line.c_str() + 6, nullptr, 10);
  }
  return -1;
}

asio::awaitable<void> Stream(tcp::endpoint ep, std::string request) {
  boost::system::error_code ec;
  tcp::socket s(co_await asio::this_coro::executor);
  co_await s.async_connect(ep, asio::redirect_error(asio::use_awaitable, ec));
  if (ec) {
    ++g_failed;
    co_return;
  }
  co_await asio::async_write(s, asio::buffer(request),
                             asio::redirect_error(asio::use_awaitable, ec));
  if (ec) {
    ++g_failed;
    co_return;
  }
  ++g_open;
  char buf[4096];
  // Streaming matchers; neither pattern overlaps itself, so a mismatch restarts at 0 or 1.
  static constexpr std::string_view kData = "data: ", kDone = "data: [DONE]";
  size_t in_data = 0, in_done = 0;
  long events = 0;
  bool done = false;
  while (!done) {
    size_t n = co_await s.async_read_some(asio::buffer(buf),
                                          asio::redirect_error(asio::use_awaitable, ec));
    if (ec) break;
    for (size_t i = 0; i < n; ++i) {
      const char c = buf[i];
      in_data = c == kData[in_data] ? in_data + 1 : (c == 'd' ? 1 : 0);
      if (in_data == kData.size()) {
        ++events;
        in_data = 0;
      }
      in_done = c == kDone[in_done] ? in_done + 1 : (c == 'd' ? 1 : 0);
      if (in_done == kDone.size()) done = true;
    }
  }
  --g_open;
  g_events += events;
  if (done) {
    ++g_done;
  } else {
    ++g_failed;
  }
}

}  // namespace

int main(int argc, char** argv) {
  int port = 8000, streams = 1000, max_tokens = 20, pid = 0;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i];
    const int v = std::atoi(argv[i + 1]);
    if (k == "--port")
      port = v;
    else if (k == "--streams")
      streams = v;
    else if (k == "--max-tokens")
      max_tokens = v;
    else if (k == "--server-pid")
      pid = v;
  }
  const std::string body =
      "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"Tell me "
      "about rivers.\"}],\"max_tokens\":" +
      std::to_string(max_tokens) + ",\"stream\":true}";
  const std::string request =
      "POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
      "Content-Type: application/json\r\nConnection: close\r\n"
      "Content-Length: " +
      std::to_string(body.size()) + "\r\n\r\n" + body;
  const long rss_before = pid ? RssKiB(pid) : -1;
  asio::io_context ioc(1);
  const tcp::endpoint ep(asio::ip::make_address("127.0.0.1"), static_cast<unsigned short>(port));
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < streams; ++i) asio::co_spawn(ioc, Stream(ep, request), asio::detached);
  std::thread t([&] { ioc.run(); });
  int peak_open = 0;
  long rss_at_peak = -1;
  while (g_done + g_failed < streams) {
    std::this_thread::sleep_for(std::chrono::milliseconds(250));
    const int open = g_open.load();
    if (open >= peak_open) {
      peak_open = open;
      if (pid) rss_at_peak = std::max(rss_at_peak, RssKiB(pid));
    }
  }
  t.join();
  const double secs =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("streams %d: completed %d, failed %d, peak open at once %d, events %ld, %.1f s\n",
              streams, g_done.load(), g_failed.load(), peak_open, g_events.load(), secs);
  if (pid) {
    std::printf("server RSS: %ld KiB before, %ld KiB with %d streams open: %.1f KiB per stream\n",
                rss_before, rss_at_peak, peak_open,
                peak_open ? static_cast<double>(rss_at_peak - rss_before) / peak_open : 0.0);
  }
  return g_failed == 0 ? 0 : 1;
}
