#include "cache/disk_cache.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <thread>
#include <vector>

#include "base/metrics.h"

namespace torch_neuron::cache {
namespace {
namespace fs = std::filesystem;

const std::string kKey = "0123456789abcdef0123456789abcdef";
const std::string kOther = "fedcba9876543210fedcba9876543210";

class DiskCacheTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("tn_disk_cache_test_" + std::to_string(::getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    metrics::Reset();
  }
  void TearDown() override { fs::remove_all(dir_); }

  static absl::Status AcceptAll(std::string_view) { return absl::OkStatus(); }
  static absl::Status RequireHello(std::string_view bytes) {
    return bytes == "hello" ? absl::OkStatus() : absl::DataLossError("not hello");
  }

  fs::path dir_;
};

TEST_F(DiskCacheTest, StoresShardedAndLoadsBack) {
  DiskCache cache(dir_.string(), 0, false);
  ASSERT_TRUE(cache.Store(kKey, "hello").ok());
  EXPECT_EQ(cache.EntryPath(kKey), (dir_ / "v1/01/23" / (kKey + ".neff")).string());
  EXPECT_TRUE(fs::exists(cache.EntryPath(kKey)));
  EXPECT_EQ(cache.Load(kKey, RequireHello), std::optional<std::string>("hello"));
  EXPECT_EQ(cache.Load(kOther, AcceptAll), std::nullopt);
  EXPECT_EQ(metrics::CounterValue("cache.write.count"), 1);
}

TEST_F(DiskCacheTest, AnEntryFailingValidationIsQuarantinedAndCounted) {
  DiskCache cache(dir_.string(), 0, false);
  ASSERT_TRUE(cache.Store(kKey, "hellO").ok());
  EXPECT_EQ(cache.Load(kKey, RequireHello), std::nullopt);
  EXPECT_FALSE(fs::exists(cache.EntryPath(kKey)));
  EXPECT_EQ(std::distance(fs::directory_iterator(cache.QuarantineDir()), fs::directory_iterator()), 1);
  EXPECT_EQ(metrics::CounterValue("cache.corrupt.count"), 1);
  // Rebuilt by the next writer.
  ASSERT_TRUE(cache.Store(kKey, "hello").ok());
  EXPECT_EQ(cache.Load(kKey, RequireHello), std::optional<std::string>("hello"));
}

TEST_F(DiskCacheTest, ReadOnlyModeNeverWrites) {
  DiskCache cache(dir_.string(), 0, true);
  EXPECT_TRUE(cache.Store(kKey, "hello").ok());
  EXPECT_FALSE(fs::exists(dir_));
  EXPECT_EQ(cache.LockKey(kKey, 0.1).status().code(), absl::StatusCode::kUnavailable);
}

TEST_F(DiskCacheTest, TheKeyLockExcludesOthersUntilReleased) {
  DiskCache cache(dir_.string(), 0, false);
  auto first = cache.LockKey(kKey, 1.0);
  ASSERT_TRUE(first.ok()) << first.status();
  // A second holder (a separate open file description) waits and times out.
  auto second = cache.LockKey(kKey, 0.05);
  EXPECT_EQ(second.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_TRUE(cache.LockKey(kOther, 0.05).ok());  // other keys are independent
  first->reset();
  EXPECT_TRUE(cache.LockKey(kKey, 1.0).ok());
}

TEST_F(DiskCacheTest, AKilledHoldersLockIsFreedAtOnce) {
  DiskCache cache(dir_.string(), 0, false);
  int ready[2];
  ASSERT_EQ(::pipe(ready), 0);
  pid_t child = ::fork();
  if (child == 0) {
    auto lock = cache.LockKey(kKey, 1.0);
    char c = lock.ok() ? 'y' : 'n';
    (void)::write(ready[1], &c, 1);
    ::pause();  // holds the lock until killed
    ::_exit(0);
  }
  char c = 0;
  ASSERT_EQ(::read(ready[0], &c, 1), 1);
  ASSERT_EQ(c, 'y');
  EXPECT_EQ(cache.LockKey(kKey, 0.05).status().code(), absl::StatusCode::kUnavailable);
  ::kill(child, SIGKILL);
  ::waitpid(child, nullptr, 0);
  auto start = std::chrono::steady_clock::now();
  EXPECT_TRUE(cache.LockKey(kKey, 5.0).ok());
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(1));
}

TEST_F(DiskCacheTest, PruneEvictsLeastRecentlyUsedBeyondTheBoundAndOldTempFiles) {
  DiskCache cache(dir_.string(), 0, false);
  ASSERT_TRUE(cache.Store(kKey, std::string(100, 'a')).ok());
  ASSERT_TRUE(cache.Store(kOther, std::string(100, 'b')).ok());
  // kKey is older; using it makes kOther the least recently used.
  fs::last_write_time(cache.EntryPath(kKey), fs::file_time_type::clock::now() - std::chrono::hours(2));
  fs::last_write_time(cache.EntryPath(kOther), fs::file_time_type::clock::now() - std::chrono::hours(1));
  ASSERT_TRUE(cache.Load(kKey, AcceptAll).has_value());
  const std::string temp = cache.EntryPath(kKey) + ".tmp.123.456";
  std::ofstream(temp) << "partial";
  fs::last_write_time(temp, fs::file_time_type::clock::now() - std::chrono::hours(2));
  EXPECT_EQ(cache.List().size(), 2u);  // temp files are never entries
  ASSERT_TRUE(DiskCache(dir_.string(), 150, false).Prune().ok());
  EXPECT_TRUE(fs::exists(cache.EntryPath(kKey)));
  EXPECT_FALSE(fs::exists(cache.EntryPath(kOther)));
  EXPECT_FALSE(fs::exists(temp));
  EXPECT_EQ(metrics::CounterValue("cache.evict.count"), 1);
}

TEST_F(DiskCacheTest, ListAndPruneSeeOnlyEntriesInTheShardDirectories) {
  DiskCache cache(dir_.string(), 0, false);
  ASSERT_TRUE(cache.Store(kKey, "hello").ok());
  ASSERT_TRUE(cache.Store(kOther, std::string(300, 'b')).ok());
  fs::last_write_time(cache.EntryPath(kOther), fs::file_time_type::clock::now() - std::chrono::hours(3));
  {
    auto lock = cache.LockKey(kKey, 1.0);
    ASSERT_TRUE(lock.ok());
  }  // leaves <key>.lock beside the entry
  const fs::path v1 = dir_ / "v1";
  const std::string third = "00112233445566778899aabbccddeeff";
  fs::create_directories(v1 / "quarantine");
  std::ofstream(v1 / "quarantine" / (third + ".neff")) << "bad";  // moved aside: not an entry
  std::ofstream(v1 / (third + ".neff")) << "x";                   // not in a shard directory
  fs::create_directories(v1 / "00/11/deeper");
  std::ofstream(v1 / "00/11/deeper" / (third + ".neff")) << "x";  // below one
  fs::create_directories(v1 / "00/11" / (kKey + ".neff"));        // a directory, not a file
  std::ofstream(v1 / "01/23" / "0123.neff") << "x";               // not a key
  const std::string fresh_temp = cache.EntryPath(kKey) + ".tmp.7.8";
  std::ofstream(fresh_temp) << "being written";

  std::vector<DiskEntry> entries = cache.List();
  ASSERT_EQ(entries.size(), 2u);
  EXPECT_EQ(entries[0].key, kOther);  // oldest first
  EXPECT_EQ(entries[0].path, cache.EntryPath(kOther));
  EXPECT_EQ(entries[0].bytes, 300);
  EXPECT_EQ(entries[1].key, kKey);
  EXPECT_EQ(entries[1].bytes, 5);
  EXPECT_GT(entries[1].mtime_seconds, entries[0].mtime_seconds);

  // A temporary file younger than an hour may still be written: Prune keeps it.
  ASSERT_TRUE(DiskCache(dir_.string(), 100, false).Prune().ok());
  EXPECT_TRUE(fs::exists(fresh_temp));
  EXPECT_FALSE(fs::exists(cache.EntryPath(kOther)));
  EXPECT_TRUE(fs::exists(cache.EntryPath(kKey)));
  EXPECT_TRUE(fs::exists(v1 / "quarantine" / (third + ".neff")));
  EXPECT_EQ(metrics::CounterValue("cache.evict.count"), 1);
}

// Where LockKey's lock file for `key` lives.
fs::path LockPathOf(const DiskCache& cache, const std::string& key) {
  return fs::path(cache.EntryPath(key)).replace_extension(".lock");
}

TEST_F(DiskCacheTest, PruneRemovesTheLockFilesOfGoneEntriesUnlessHeld) {
  DiskCache cache(dir_.string(), 0, false);
  const std::string held_key = "00112233445566778899aabbccddeeff";
  ASSERT_TRUE(cache.Store(kKey, "hello").ok());
  { ASSERT_TRUE(cache.LockKey(kKey, 1.0).ok()); }    // its entry exists
  { ASSERT_TRUE(cache.LockKey(kOther, 1.0).ok()); }  // no entry: a compile that failed
  auto held = cache.LockKey(held_key, 1.0);          // a compile in progress
  ASSERT_TRUE(held.ok());
  ASSERT_TRUE(cache.Prune().ok());
  EXPECT_TRUE(fs::exists(LockPathOf(cache, kKey)));
  EXPECT_FALSE(fs::exists(LockPathOf(cache, kOther)));
  EXPECT_TRUE(fs::exists(LockPathOf(cache, held_key)));
  EXPECT_EQ(metrics::CounterValue("cache.lock_removed.count"), 1);
  // An evicted entry's lock goes with it.
  ASSERT_TRUE(DiskCache(dir_.string(), 1, false).Prune().ok());
  EXPECT_FALSE(fs::exists(cache.EntryPath(kKey)));
  EXPECT_FALSE(fs::exists(LockPathOf(cache, kKey)));
  EXPECT_TRUE(fs::exists(LockPathOf(cache, held_key)));
  EXPECT_EQ(metrics::CounterValue("cache.lock_removed.count"), 2);
}

TEST_F(DiskCacheTest, AWaiterWhoseLockFileWasRemovedDoesNotShareTheKey) {
  DiskCache cache(dir_.string(), 0, false);
  auto first = cache.LockKey(kKey, 1.0);
  ASSERT_TRUE(first.ok());
  std::atomic<bool> waiter_holds{false};
  std::thread waiter([&] {
    auto lock = cache.LockKey(kKey, 10.0);  // opens the current file and waits on it
    ASSERT_TRUE(lock.ok());
    waiter_holds = true;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  // What Prune does to a lock file nobody holds, while the waiter waits on it;
  // then a newcomer creates the file again and takes it.
  fs::remove(LockPathOf(cache, kKey));
  auto newcomer = cache.LockKey(kKey, 1.0);
  ASSERT_TRUE(newcomer.ok());
  first->reset();  // the waiter gets the old, removed file: not the key's lock
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  EXPECT_FALSE(waiter_holds);
  newcomer->reset();
  waiter.join();
  EXPECT_TRUE(waiter_holds);
}

// The key of entry i: 32 hex digits.
std::string KeyOf(int i) {
  char key[33];
  std::snprintf(key, sizeof(key), "%032x", i);
  return key;
}

TEST_F(DiskCacheTest, WritesScanTheDirectoryOnlyWhenTheBoundMayBeCrossed) {
  DiskCache cache(dir_.string(), 1000, false);
  for (int i = 0; i < 9; ++i) ASSERT_TRUE(cache.Store(KeyOf(i), std::string(100, 'a')).ok());
  EXPECT_EQ(metrics::CounterValue("cache.scan.count"), 1);  // the first write's
  EXPECT_EQ(metrics::CounterValue("cache.evict.count"), 0);
  // 1100 bytes: over the bound, so this write scans and evicts the oldest.
  fs::last_write_time(cache.EntryPath(KeyOf(0)), fs::file_time_type::clock::now() - std::chrono::hours(1));
  ASSERT_TRUE(cache.Store(KeyOf(9), std::string(200, 'b')).ok());
  EXPECT_EQ(metrics::CounterValue("cache.scan.count"), 2);
  EXPECT_EQ(metrics::CounterValue("cache.evict.count"), 1);
  EXPECT_FALSE(fs::exists(cache.EntryPath(KeyOf(0))));
  EXPECT_EQ(cache.List().size(), 9u);
}

TEST_F(DiskCacheTest, OtherWritersAreNoticedWithinAScanPeriod) {
  DiskCache cache(dir_.string(), 1 << 20, false);
  DiskCache other(dir_.string(), 1 << 20, false);
  ASSERT_TRUE(cache.Store(KeyOf(0), "x").ok());
  ASSERT_TRUE(other.Store(KeyOf(1), std::string(1 << 20, 'o')).ok());  // unseen by `cache`
  fs::last_write_time(other.EntryPath(KeyOf(1)), fs::file_time_type::clock::now() - std::chrono::hours(1));
  metrics::Reset();
  for (int i = 2; i < 2 + DiskCache::kStoresPerScan; ++i) ASSERT_TRUE(cache.Store(KeyOf(i), "x").ok());
  EXPECT_EQ(metrics::CounterValue("cache.scan.count"), 1);   // the last write's
  EXPECT_EQ(metrics::CounterValue("cache.evict.count"), 1);  // the other writer's, the oldest
  EXPECT_FALSE(fs::exists(other.EntryPath(KeyOf(1))));
}

TEST_F(DiskCacheTest, MalformedKeysAreRefused) {
  DiskCache cache(dir_.string(), 0, false);
  EXPECT_EQ(cache.Store("../../etc/passwd", "x").code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(cache.Load("ZZ", AcceptAll), std::nullopt);
}

}  // namespace
}  // namespace torch_neuron::cache
