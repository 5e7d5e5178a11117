// ResponseStore: conversations along previous_response_id chains, LRU eviction by count, a
// response evicted from the index still read through its successors, a long chain released
// without recursion, and concurrent use from several threads.
#include "sim/response_store.h"

#include <gtest/gtest.h>

#include <string>
#include <thread>
#include <vector>

namespace llmtap::sim {
namespace {

std::string Conversation(const ResponseStore::Handle& h) {
  std::string out;
  ResponseStore::AppendConversation(h, &out);
  return out;
}

TEST(ResponseStore, ChainsReadOldestTurnFirst) {
  ResponseStore store(8);
  EXPECT_EQ(store.Find("resp_a"), nullptr);
  store.Put("resp_a", nullptr, "A");
  store.Put("resp_b", store.Find("resp_a"), "B");
  store.Put("resp_c", store.Find("resp_b"), "C");
  EXPECT_EQ(Conversation(store.Find("resp_c")), "ABC");
  EXPECT_EQ(Conversation(store.Find("resp_b")), "AB");
  // A fork: two continuations of one response.
  store.Put("resp_d", store.Find("resp_a"), "D");
  EXPECT_EQ(Conversation(store.Find("resp_d")), "AD");
  EXPECT_EQ(store.size(), 4u);
}

TEST(ResponseStore, EvictsTheLeastRecentlyUsed) {
  ResponseStore store(3);
  store.Put("1", nullptr, "1");
  store.Put("2", nullptr, "2");
  store.Put("3", store.Find("2"), "3");  // refreshes 2: the order is now 3, 2, 1
  store.Put("4", nullptr, "4");          // evicts 1
  EXPECT_EQ(store.size(), 3u);
  EXPECT_EQ(store.Find("1"), nullptr);
  ASSERT_NE(store.Find("2"), nullptr);  // the order: 2, 4, 3
  store.Put("5", nullptr, "5");         // evicts 3
  EXPECT_EQ(store.Find("3"), nullptr);
  EXPECT_NE(store.Find("4"), nullptr);
  store.Put("6", store.Find("5"), "6");  // evicts 2
  EXPECT_EQ(store.Find("2"), nullptr);
  EXPECT_EQ(store.size(), 3u);
}

TEST(ResponseStore, AnEvictedResponseStaysReadableThroughItsSuccessor) {
  ResponseStore store(2);
  store.Put("a", nullptr, "a");
  store.Put("b", store.Find("a"), "b");
  store.Put("c", store.Find("b"), "c");  // evicts a
  EXPECT_EQ(store.Find("a"), nullptr);
  EXPECT_EQ(Conversation(store.Find("c")), "abc");
}

TEST(ResponseStore, ALongChainIsReleasedWithoutRecursion) {
  ResponseStore::Handle last;
  {
    ResponseStore store(1);
    for (int i = 0; i < 300'000; ++i) {
      store.Put("r", store.Find("r"), "x");
    }
    last = store.Find("r");
    EXPECT_EQ(Conversation(last).size(), 300'000u);
  }
  last.reset();  // a recursive release of 300,000 links would overflow the stack
}

TEST(ResponseStore, ThreadsShareOneStore) {
  ResponseStore store(100000);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&store, t] {
      std::string prev;
      for (int i = 0; i < 2000; ++i) {
        const std::string id = "t" + std::to_string(t) + "-" + std::to_string(i);
        store.Put(id, prev.empty() ? nullptr : store.Find(prev), "x");
        prev = id;
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(store.size(), 8000u);
  for (int t = 0; t < 4; ++t) {
    auto h = store.Find("t" + std::to_string(t) + "-1999");
    ASSERT_NE(h, nullptr);
    EXPECT_EQ(Conversation(h).size(), 2000u);
  }
}

}  // namespace
}  // namespace llmtap::sim
