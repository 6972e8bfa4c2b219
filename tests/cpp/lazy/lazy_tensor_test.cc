#include "lazy/lazy_tensor.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <thread>
#include <vector>

namespace torch_neuron::lazy {
namespace {

using ir::Arg;
using ir::Node;
using ir::Value;

const ir::Shape kRegistryShape(c10::ScalarType::Float, {4});

LazyTensorPtr MakePending(int device) {
  Value leaf{Node::MakeDeviceData(kRegistryShape, nullptr), 0};
  return LazyTensor::FromValue(
      Value{Node::MakeOp("aten::neg", {leaf}, {Arg::Operand(0)}, {kRegistryShape}), 0}, device);
}

// The device's pending tensors among `mine`, as PendingTensors lists them.
std::vector<LazyTensorPtr> Listed(const std::vector<LazyTensorPtr>& mine, int device) {
  std::vector<LazyTensorPtr> out;
  for (const LazyTensorPtr& t : PendingTensors(device)) {
    if (std::find(mine.begin(), mine.end(), t) != mine.end()) out.push_back(t);
  }
  return out;
}

// The registry lists live tensors in creation order and counts them exactly,
// through drops in any order and the sweeps of dropped slots they cause.
TEST(LiveRegistryTest, ListsLiveTensorsInCreationOrderThroughDrops) {
  const int64_t before = LiveTensorCount();
  std::vector<LazyTensorPtr> mine;
  for (int i = 0; i < 300; ++i) mine.push_back(MakePending(i % 3 == 0 ? 1 : 0));
  EXPECT_EQ(LiveTensorCount(), before + 300);
  // Drop two of every three, oldest and newest first, then some in the middle.
  std::vector<LazyTensorPtr> kept;
  for (size_t i = 0; i < mine.size(); ++i) {
    if (i % 3 == 1) kept.push_back(mine[i]);
  }
  for (size_t i = 0; i < mine.size() / 2; ++i) {
    mine[i] = nullptr;
    mine[mine.size() - 1 - i] = nullptr;
  }
  mine = kept;
  kept.clear();
  EXPECT_EQ(LiveTensorCount(), before + 100);
  std::vector<LazyTensorPtr> device0;
  for (const LazyTensorPtr& t : mine) {
    if (t->device() == 0) device0.push_back(t);
  }
  EXPECT_EQ(Listed(mine, 0), device0);
  for (const LazyTensorPtr& t : Listed(mine, 0)) EXPECT_EQ(t->device(), 0);
  mine.clear();
  device0.clear();
  EXPECT_EQ(LiveTensorCount(), before);
}

TEST(LiveRegistryTest, TensorsOfSeveralThreadsStayInIdOrder) {
  const int64_t before = LiveTensorCount();
  std::vector<LazyTensorPtr> a, b;
  std::thread ta([&] {
    for (int i = 0; i < 500; ++i) a.push_back(MakePending(0));
  });
  std::thread tb([&] {
    for (int i = 0; i < 500; ++i) {
      b.push_back(MakePending(0));
      if (i % 2 == 0) b.pop_back();
    }
  });
  ta.join();
  tb.join();
  EXPECT_EQ(LiveTensorCount(), before + 750);
  std::vector<LazyTensorPtr> mine = a;
  mine.insert(mine.end(), b.begin(), b.end());
  const std::vector<LazyTensorPtr> listed = Listed(mine, 0);
  ASSERT_EQ(listed.size(), 750u);
  EXPECT_TRUE(
      std::is_sorted(listed.begin(), listed.end(),
                     [](const LazyTensorPtr& x, const LazyTensorPtr& y) { return x->id() < y->id(); }));
}

}  // namespace
}  // namespace torch_neuron::lazy
