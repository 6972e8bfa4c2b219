#include "cache/lru_cache.h"

#include <gtest/gtest.h>

#include <string>

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

}  // namespace
}  // namespace torch_neuron::cache
