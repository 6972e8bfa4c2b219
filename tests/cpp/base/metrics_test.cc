#include "base/metrics.h"

#include <gtest/gtest.h>

#include <thread>
#include <vector>

namespace torch_neuron::metrics {
namespace {

TEST(MetricsTest, CountersAccumulateAndReset) {
  Reset();
  Increment("test.a");
  Increment("test.a", 4);
  EXPECT_EQ(CounterValue("test.a"), 5);
  EXPECT_EQ(CounterValue("test.never_created"), 0);
  Reset();
  EXPECT_EQ(CounterValue("test.a"), 0);
}

TEST(MetricsTest, SnapshotHoldsOnlyNonZeroCounters) {
  Reset();
  GetCounter("test.zero");
  Increment("test.one");
  proto::MetricsSnapshot s = Snapshot();
  EXPECT_EQ(s.format_version(), 1u);
  EXPECT_EQ(s.counters().size(), 1);
  EXPECT_EQ(s.counters().at("test.one"), 1);
}

TEST(MetricsTest, ConcurrentIncrementsAreNotLost) {
  Reset();
  Counter* c = GetCounter("test.concurrent");
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([c] {
      for (int i = 0; i < 10000; ++i) c->Add(1);
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(c->Value(), 40000);
}

}  // namespace
}  // namespace torch_neuron::metrics
