// ServerLoops and Watchdog in-process: accepting on 127.0.0.1:0, handing connections to the
// loops in turn, a graceful stop (StopAccepting, Post, JoinWhenDone) and a deadline that
// closes a socket.
#include "net/server_loops.h"

#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>

#include <gtest/gtest.h>
#include <boost/asio/read.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/write.hpp>

#include "net/watchdog.h"

namespace llmtap::net {
namespace {

using namespace llmtap::asio_types;

// A Logger that keeps its lines.
class LinesLogger : public Logger {
 public:
  void Log(LogLevel, std::string_view message) override {
    std::lock_guard lock(mu_);
    lines_.emplace_back(message);
  }
  std::vector<std::string> lines() {
    std::lock_guard lock(mu_);
    return lines_;
  }

 private:
  std::mutex mu_;
  std::vector<std::string> lines_;
};

std::string ReadAll(uint16_t port, const std::string& send) {
  asio::io_context ioc;
  tcp::socket s(ioc);
  s.connect(tcp::endpoint(asio::ip::make_address("127.0.0.1"), port));
  asio::write(s, asio::buffer(send));
  std::string got;
  error_code ec;
  asio::read(s, asio::dynamic_buffer(got), ec);  // until the server closes
  return got;
}

TEST(ServerLoops, HandsConnectionsToTheLoopsInTurnAndStopsGracefully) {
  LinesLogger log;
  ServerLoops loops({.threads = 2, .logger = &log, .log_prefix = "test"});
  ListenStep step;
  error_code ec;
  ASSERT_TRUE(loops.Listen(tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0), &step, &ec))
      << ec.message();
  ASSERT_NE(loops.port(), 0);
  std::mutex mu;
  std::set<size_t> seen;
  std::atomic<int> open{0};
  loops.Start([&](Socket socket, size_t loop) -> awaitable<void> {
    {
      std::lock_guard lock(mu);
      seen.insert(loop);
    }
    EXPECT_TRUE(socket.get_executor() == loops.loop(loop).get_executor());
    ++open;
    struct Closed {
      std::atomic<int>& open;
      ~Closed() { --open; }
    } closed{open};
    char c;
    error_code ec;
    co_await socket.async_read_some(asio::buffer(&c, 1), asio::redirect_error(use_awaitable, ec));
    const std::string answer = "loop " + std::to_string(loop);
    co_await asio::async_write(socket, asio::buffer(answer),
                               asio::redirect_error(use_awaitable, ec));
    if (c == 'x') throw std::runtime_error("asked to fail");
  });
  EXPECT_EQ(ReadAll(loops.port(), "a"), "loop 0");
  EXPECT_EQ(ReadAll(loops.port(), "a"), "loop 1");
  EXPECT_EQ(ReadAll(loops.port(), "x"), "loop 0");
  EXPECT_EQ(seen.size(), 2u);

  // A connection still open at the stop: JoinWhenDone returns once it ended (here: once it got
  // its byte and answered).
  asio::io_context ioc;
  tcp::socket idle(ioc);
  idle.connect(tcp::endpoint(asio::ip::make_address("127.0.0.1"), loops.port()));
  // Until its coroutine runs (a guard against a hang only: 120 s). Stopping before it was
  // accepted would reset it in the backlog: the write below could throw.
  for (const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(120);
       open.load() == 0 && std::chrono::steady_clock::now() < end;) {
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  ASSERT_NE(open.load(), 0) << "the connection was not accepted";
  loops.StopAccepting();
  EXPECT_TRUE(loops.stopping());
  std::atomic<int> posted{0};
  loops.Post([&](size_t) { ++posted; });
  asio::write(idle, asio::buffer("b", 1));
  loops.JoinWhenDone();
  EXPECT_EQ(posted.load(), 2);
  EXPECT_EQ(open.load(), 0);
  loops.DestroyLoops();
  const std::vector<std::string> lines = log.lines();
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_EQ(lines[0], "test: connection failed: asked to fail");
}

TEST(ServerLoops, ReportsTheFailedStep) {
  ServerLoops first({});
  ListenStep step;
  error_code ec;
  ASSERT_TRUE(first.Listen(tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0), &step, &ec));
  ServerLoops second({});
  EXPECT_FALSE(
      second.Listen(tcp::endpoint(asio::ip::make_address("127.0.0.1"), first.port()), &step, &ec));
  EXPECT_EQ(step, ListenStep::kBind);
  EXPECT_EQ(ec, asio::error::address_in_use);
}

struct Owner {
  explicit Owner(asio::io_context& ioc) : watchdog(ioc.get_executor(), std::chrono::seconds(10)) {}
  Watchdog watchdog;
  int expired = 0;
};

TEST(Watchdog, AnEarlierDeadlineWakesItAndEndedWaitsNeverExpire) {
  asio::io_context ioc;
  auto owner = std::make_shared<Owner>(ioc);
  owner->watchdog.Start(owner, [o = owner.get()] { ++o->expired; });
  // Ended before its deadline: nothing.
  owner->watchdog.BeginFor(std::chrono::milliseconds(5));
  owner->watchdog.End();
  ioc.run_for(std::chrono::milliseconds(30));
  EXPECT_EQ(owner->expired, 0);
  // Far earlier than the 10 s period: the timer is moved and the wait expires once (run until
  // it did; 120 s is a guard against a hang only).
  const auto start = std::chrono::steady_clock::now();
  owner->watchdog.BeginFor(std::chrono::milliseconds(20));
  while (owner->expired == 0 &&
         std::chrono::steady_clock::now() - start < std::chrono::seconds(120)) {
    ioc.run_one_for(std::chrono::milliseconds(50));
  }
  EXPECT_EQ(owner->expired, 1);
  EXPECT_GE(std::chrono::steady_clock::now() - start, std::chrono::milliseconds(10));
  EXPECT_FALSE(owner->watchdog.waiting());
  // Stop releases the owner: once its cancelled timer's handler ran (until then; 120 s is a
  // guard against a hang only: a fixed 20 ms of run_for can run nothing at all when this thread
  // is paused past its end).
  owner->watchdog.Stop();
  for (const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(120);
       owner.use_count() > 1 && std::chrono::steady_clock::now() < end;) {
    ioc.run_one_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ(owner.use_count(), 1);
}

}  // namespace
}  // namespace llmtap::net
