#include "runtime/kernel_team.h"

#include <gtest/gtest.h>

#include <ATen/Parallel.h>

#include <algorithm>
#include <atomic>
#include <set>
#include <stdexcept>
#include <thread>
#include <vector>

#include "absl/synchronization/notification.h"
#include "absl/time/time.h"

namespace torch_neuron::runtime {
namespace {

TEST(KernelTeamTest, RunsEveryPieceExactlyOnce) {
  KernelTeam team;
  for (int threads : {1, 2, 4}) {
    std::vector<std::atomic<int>> calls(37);
    team.Run(37, threads, [&](int64_t piece) { calls[piece].fetch_add(1); });
    for (size_t i = 0; i < calls.size(); ++i)
      EXPECT_EQ(calls[i].load(), 1) << "piece " << i << ", " << threads;
  }
}

TEST(KernelTeamTest, AThrowingPieceRethrowsOnTheCallerAndTheTeamLivesOn) {
  // A piece that throws on a worker thread would terminate the process; the
  // exception comes back to the caller instead, for every team size.
  KernelTeam team;
  for (int threads : {1, 2, 4}) {
    std::atomic<int> calls{0};
    EXPECT_THROW(team.Run(64, threads,
                          [&](int64_t piece) {
                            calls.fetch_add(1);
                            if (piece == 5) throw std::runtime_error("piece 5 failed");
                          }),
                 std::runtime_error)
        << threads << " threads";
    EXPECT_GE(calls.load(), 6);
    std::atomic<int> after{0};
    team.Run(16, threads, [&](int64_t) { after.fetch_add(1); });
    EXPECT_EQ(after.load(), 16);
  }
}

TEST(KernelTeamTest, OneThreadRunsOnTheCaller) {
  KernelTeam team;
  std::set<std::thread::id> seen;
  team.Run(8, 1, [&](int64_t) { seen.insert(std::this_thread::get_id()); });
  EXPECT_EQ(seen, std::set<std::thread::id>{std::this_thread::get_id()});
}

TEST(KernelTeamTest, PiecesRunConcurrently) {
  // The caller claims piece 0 and blocks in it until piece 1 has started:
  // only a worker can start piece 1.
  KernelTeam team;
  absl::Notification second_started;
  bool waited = false;
  std::thread::id second_thread;
  team.Run(2, 2, [&](int64_t piece) {
    if (piece == 1) {
      second_thread = std::this_thread::get_id();
      second_started.Notify();
    } else {
      waited = second_started.WaitForNotificationWithTimeout(absl::Seconds(30));
    }
  });
  EXPECT_TRUE(waited);
  EXPECT_NE(second_thread, std::this_thread::get_id());
}

TEST(KernelTeamTest, ConcurrentCallersAllFinish) {
  KernelTeam team;
  std::atomic<int64_t> sum{0};
  std::vector<std::thread> callers;
  for (int c = 0; c < 4; ++c) {
    callers.emplace_back([&] {
      for (int round = 0; round < 200; ++round) team.Run(16, 2, [&](int64_t piece) { sum.fetch_add(piece); });
    });
  }
  for (std::thread& t : callers) t.join();
  EXPECT_EQ(sum.load(), 4 * 200 * (15 * 16 / 2));
}

TEST(KernelTeamTest, ScopedThreadsRestoreAndZeroMeansEveryCore) {
  EXPECT_EQ(KernelThreads(), 1);
  {
    ScopedKernelThreads outer(3);
    EXPECT_EQ(KernelThreads(), 3);
    {
      ScopedKernelThreads inner(0);
      EXPECT_EQ(KernelThreads(), static_cast<int>(std::max(1u, std::thread::hardware_concurrency())));
    }
    EXPECT_EQ(KernelThreads(), 3);
  }
  EXPECT_EQ(KernelThreads(), 1);
}

// A library call large enough gets the kernel team's size as its OpenMP team
// for its run, and the thread's own team size afterwards; a small one, or one
// on a thread without a kernel team, changes nothing.
TEST(ScopedLibraryThreadsTest, OnlyALargeCallOnAThreadWithATeamGetsMoreOpenMpThreads) {
  std::thread([] {
    at::set_num_threads(1);
    ScopedKernelThreads team(2);
    {
      ScopedLibraryThreads small(kLibraryTeamElements - 1);
      EXPECT_EQ(at::get_num_threads(), 1);
    }
    {
      ScopedLibraryThreads large(kLibraryTeamElements);
      EXPECT_EQ(at::get_num_threads(), 2);
    }
    EXPECT_EQ(at::get_num_threads(), 1);
  }).join();
  std::thread([] {
    at::set_num_threads(1);
    ScopedLibraryThreads large(kLibraryTeamElements);  // no ScopedKernelThreads: a team of one
    EXPECT_EQ(at::get_num_threads(), 1);
  }).join();
}

}  // namespace
}  // namespace torch_neuron::runtime
