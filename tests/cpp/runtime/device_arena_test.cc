#include "runtime/device_arena.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <thread>
#include <vector>

namespace torch_neuron::runtime {
namespace {

constexpr int64_t kMiB = 1 << 20;

TEST(DeviceArenaTest, RoundsToBlockSizeAndAligns) {
  DeviceArena arena(0, 0);
  void* p = *arena.Allocate(1);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % DeviceArena::kAlignment, 0u);
  EXPECT_EQ(arena.BlockSize(p), DeviceArena::kBlockRound);
  EXPECT_EQ(arena.Stats().allocated_bytes, 512);
  EXPECT_TRUE(arena.Free(p));
}

TEST(DeviceArenaTest, FreedBlockIsReusedNotReturnedToHost) {
  DeviceArena arena(0, 0);
  void* p = *arena.Allocate(4096);
  ASSERT_TRUE(arena.Free(p));
  ArenaStats s = arena.Stats();
  EXPECT_EQ(s.allocated_bytes, 0);
  EXPECT_EQ(s.reserved_bytes, 4096);
  EXPECT_EQ(s.cached_blocks, 1);
  void* q = *arena.Allocate(4000);
  EXPECT_EQ(p, q);
  s = arena.Stats();
  EXPECT_EQ(s.num_cache_hits, 1);
  EXPECT_EQ(s.num_host_allocs, 1);
  arena.Free(q);
}

TEST(DeviceArenaTest, CachedBlockUpToTwiceTheRequestIsReused) {
  DeviceArena arena(0, 0);
  void* a = *arena.Allocate(3 * kMiB);
  arena.Free(a);
  void* b = *arena.Allocate(2 * kMiB);
  EXPECT_EQ(a, b);
  EXPECT_EQ(arena.Stats().allocated_bytes, 3 * kMiB);
  arena.Free(b);
}

TEST(DeviceArenaTest, MuchLargerCachedBlockIsNotUsedForSmallRequest) {
  DeviceArena arena(0, 0);
  void* big = *arena.Allocate(1 * kMiB);
  arena.Free(big);
  void* small = *arena.Allocate(1024);
  EXPECT_NE(big, small);
  EXPECT_EQ(arena.Stats().num_cache_hits, 0);
  arena.Free(small);
}

TEST(DeviceArenaTest, PeaksTrackMaximumAndReset) {
  DeviceArena arena(0, 0);
  void* a = *arena.Allocate(2 * kMiB);
  void* b = *arena.Allocate(1 * kMiB);
  arena.Free(a);
  ArenaStats s = arena.Stats();
  EXPECT_EQ(s.allocated_bytes, 1 * kMiB);
  EXPECT_EQ(s.peak_allocated_bytes, 3 * kMiB);
  arena.ResetPeakStats();
  EXPECT_EQ(arena.Stats().peak_allocated_bytes, 1 * kMiB);
  arena.Free(b);
}

TEST(DeviceArenaTest, LimitBreachIsResourceExhaustedNamingSizes) {
  DeviceArena arena(3, 4 * kMiB);
  void* a = *arena.Allocate(3 * kMiB);
  absl::StatusOr<void*> b = arena.Allocate(2 * kMiB);
  ASSERT_FALSE(b.ok());
  EXPECT_EQ(b.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(b.status().message(),
            "neuron:3 out of memory: tried to allocate 2.00 MiB; 3.00 MiB already allocated by "
            "tensors, 3.00 MiB reserved in total, device limit 4.00 MiB "
            "(TORCH_NEURON_MEMORY_LIMIT_MB). Free tensors you no longer need or raise the limit.");
  EXPECT_EQ(arena.Stats().num_ooms, 1);
  // Still usable: a request that fits succeeds.
  absl::StatusOr<void*> c = arena.Allocate(1 * kMiB);
  ASSERT_TRUE(c.ok());
  arena.Free(a);
  arena.Free(*c);
}

TEST(DeviceArenaTest, CacheIsReleasedBeforeGivingUpOnLimit) {
  DeviceArena arena(0, 4 * kMiB);
  void* a = *arena.Allocate(3 * kMiB);
  arena.Free(a);  // cached: 3 MiB reserved, 0 allocated
  // Too small to reuse the 3 MiB block, too large to fit beside it: evicts it.
  absl::StatusOr<void*> b = arena.Allocate(kMiB + kMiB / 4);
  ASSERT_TRUE(b.ok()) << b.status();
  ArenaStats s = arena.Stats();
  EXPECT_EQ(s.reserved_bytes, kMiB + kMiB / 4);
  EXPECT_EQ(s.num_host_frees, 1);
  arena.Free(*b);
}

TEST(DeviceArenaTest, FreeOfUnknownPointerIsRefused) {
  DeviceArena arena(0, 0);
  int x = 0;
  EXPECT_FALSE(arena.Free(&x));
  EXPECT_FALSE(arena.Owns(&x));
}

TEST(DeviceArenaTest, EmptyCacheReturnsCachedBlocks) {
  DeviceArena arena(0, 0);
  arena.Free(*arena.Allocate(8192));
  arena.EmptyCache();
  ArenaStats s = arena.Stats();
  EXPECT_EQ(s.reserved_bytes, 0);
  EXPECT_EQ(s.cached_blocks, 0);
}

TEST(DeviceArenaTest, ConcurrentAllocateFreeKeepsStatsConsistent) {
  DeviceArena arena(0, 0);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&arena, t] {
      for (int i = 0; i < 2000; ++i) {
        void* p = *arena.Allocate(512 * (1 + (i + t) % 8));
        std::memset(p, t, 512);
        ASSERT_TRUE(arena.Free(p));
      }
    });
  }
  for (auto& th : threads) th.join();
  ArenaStats s = arena.Stats();
  EXPECT_EQ(s.allocated_bytes, 0);
  EXPECT_EQ(s.active_blocks, 0);
  EXPECT_EQ(s.num_allocs, 8000);
  EXPECT_EQ(s.num_frees, 8000);
}

TEST(FormatBytesTest, Units) {
  EXPECT_EQ(FormatBytes(100), "100 bytes");
  EXPECT_EQ(FormatBytes(1536), "1.50 KiB");
  EXPECT_EQ(FormatBytes(3 * kMiB), "3.00 MiB");
}

}  // namespace
}  // namespace torch_neuron::runtime
