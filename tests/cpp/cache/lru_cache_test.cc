#include "cache/lru_cache.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <future>
#include <memory>
#include <string>
#include <thread>

namespace torch_neuron::cache {
namespace {

TEST(LruCacheTest, EvictsTheLeastRecentlyUsedEntry) {
  LruCache<int, std::string> cache(2);
  cache.Put(1, std::make_shared<std::string>("one"));
  cache.Put(2, std::make_shared<std::string>("two"));
  ASSERT_NE(cache.Get(1), nullptr);  // 1 is now the most recent
  cache.Put(3, std::make_shared<std::string>("three"));
  EXPECT_EQ(cache.Get(2), nullptr);
  EXPECT_EQ(*cache.Get(1), "one");
  EXPECT_EQ(*cache.Get(3), "three");
  EXPECT_EQ(cache.size(), 2u);
}

TEST(LruCacheTest, AnEvictedValueStaysAliveForItsHolder) {
  LruCache<int, std::string> cache(1);
  cache.Put(1, std::make_shared<std::string>("held"));
  std::shared_ptr<const std::string> held = cache.Get(1);
  cache.Put(2, std::make_shared<std::string>("other"));
  EXPECT_EQ(cache.Get(1), nullptr);
  EXPECT_EQ(*held, "held");
}

TEST(LruCacheTest, PutReplacesAndClearEmpties) {
  LruCache<int, std::string> cache(4);
  cache.Put(1, std::make_shared<std::string>("a"));
  cache.Put(1, std::make_shared<std::string>("b"));
  EXPECT_EQ(*cache.Get(1), "b");
  EXPECT_EQ(cache.size(), 1u);
  cache.Clear();
  EXPECT_EQ(cache.size(), 0u);
}

// A value whose destructor checks, from another thread, whether the cache's
// lock is free: a dropped value must be destroyed after the cache lets go of it.
struct LockProbe {
  LruCache<int, LockProbe>* cache = nullptr;
  std::atomic<int>* free_at_destruction = nullptr;  // counts destructions that saw it free
  std::atomic<int>* checks_done = nullptr;
  ~LockProbe() {
    if (cache == nullptr) return;
    auto reached = std::make_shared<std::promise<void>>();
    std::future<void> got_lock = reached->get_future();
    std::atomic<int>* done = checks_done;
    std::thread([c = cache, reached, done] {
      (void)c->size();  // blocks while the destroying thread holds the lock
      reached->set_value();
      done->fetch_add(1);
    }).detach();
    if (got_lock.wait_for(std::chrono::seconds(5)) == std::future_status::ready)
      free_at_destruction->fetch_add(1);
  }
};

TEST(LruCacheTest, DroppedValuesAreDestroyedOutsideTheLock) {
  LruCache<int, LockProbe> cache(1);
  std::atomic<int> free_count{0}, done{0};
  auto probe = [&] {
    auto p = std::make_shared<LockProbe>();
    p->cache = &cache;
    p->free_at_destruction = &free_count;
    p->checks_done = &done;
    return p;
  };
  cache.Put(1, probe());
  cache.Put(2, probe());  // evicts 1
  cache.Put(2, probe());  // replaces 2
  cache.Clear();          // drops the last
  while (done.load() < 3) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  EXPECT_EQ(free_count.load(), 3);
}

}  // namespace
}  // namespace torch_neuron::cache
