#include "common/ordered_batches.h"

#include <atomic>
#include <chrono>
#include <random>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

namespace llmtap {
namespace {

struct Batch {
  int first = 0;
  std::vector<int> values;  // first .. first + 9, squared by a worker
  std::thread::id worker;
};

// Batches 0..n-1 squared by `workers` threads that take a random time each; consumed in order.
std::vector<int> Squares(unsigned workers, int batches, int stop_after, int* read_count,
                         std::thread::id* inline_thread) {
  std::atomic<int> made{0};
  std::vector<int> out;
  {
    OrderedBatches<Batch> pool(workers, workers * 3, [&made] {
      ++made;
      auto rng = std::make_shared<std::mt19937>(made.load());
      return [rng](Batch* b) {
        std::this_thread::sleep_for(std::chrono::microseconds((*rng)() % 300));
        for (int& v : b->values) v *= v;
        b->worker = std::this_thread::get_id();
      };
    });
    int next = 0;
    int consumed = 0;
    pool.Run(
        [&](Batch* b) {
          if (next == batches) return false;
          b->first = next * 10;
          b->values.clear();
          for (int i = 0; i < 10; ++i) b->values.push_back(next * 10 + i);
          ++next;
          return true;
        },
        [&](Batch& b) {
          if (inline_thread != nullptr) *inline_thread = b.worker;
          out.insert(out.end(), b.values.begin(), b.values.end());
          return ++consumed != stop_after;
        });
    *read_count = next;
  }  // the workers joined: each made its Work first thing
  EXPECT_EQ(made.load(), workers == 0 ? 1 : static_cast<int>(workers)) << "one Work per thread";
  return out;
}

TEST(OrderedBatches, ResultsComeInReadOrderWhateverTheWorkersOrder) {
  for (unsigned workers : {0u, 1u, 2u, 5u}) {
    int read = 0;
    const std::vector<int> out = Squares(workers, 50, -1, &read, nullptr);
    ASSERT_EQ(out.size(), 500u) << workers;
    for (int i = 0; i < 500; ++i) ASSERT_EQ(out[static_cast<size_t>(i)], i * i) << workers;
    EXPECT_EQ(read, 50);
  }
}

TEST(OrderedBatches, WithoutWorkersEverythingRunsOnTheCallingThread) {
  int read = 0;
  std::thread::id worker;
  Squares(0, 3, -1, &read, &worker);
  EXPECT_EQ(worker, std::this_thread::get_id());
}

TEST(OrderedBatches, AConsumerThatStopsEndsTheReadsButTheBatchesInFlightStillCome) {
  for (unsigned workers : {0u, 3u}) {
    int read = 0;
    const std::vector<int> out = Squares(workers, 100, 4, &read, nullptr);
    // Stopped after the 4th: no batch is read after that, those in flight are consumed.
    const int window = workers == 0 ? 1 : static_cast<int>(workers) * 3;
    EXPECT_GE(read, 4);
    EXPECT_LE(read, 4 + window) << workers;
    ASSERT_EQ(out.size(), static_cast<size_t>(read) * 10);
    for (size_t i = 0; i < out.size(); ++i) ASSERT_EQ(out[i], static_cast<int>(i * i));
  }
}

}  // namespace
}  // namespace llmtap
