#include "lazy/data_leaves.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <vector>

#include "lazy/lazy_tensor.h"

namespace torch_neuron::lazy {
namespace {

const ir::Shape kLeafShape(c10::ScalarType::Float, {4});

runtime::DeviceDataPtr Buffer() {
  return std::make_shared<runtime::DeviceData>(0, c10::ScalarType::Float, std::vector<int64_t>{4});
}

TEST(DataLeavesTest, OneLiveLeafPerBufferHoldingItsBuffer) {
  DataLeaves table;
  runtime::DeviceDataPtr a = Buffer(), b = Buffer();
  ir::NodePtr leaf = table.LeafFor(a, kLeafShape);
  EXPECT_EQ(table.LeafFor(a, kLeafShape), leaf);  // every tensor of `a` reads this leaf
  EXPECT_NE(table.LeafFor(b, kLeafShape), leaf);
  EXPECT_EQ(leaf->kind(), ir::NodeKind::kDeviceData);
  EXPECT_EQ(LeafBuffer(*leaf)->get(), a.get());
  EXPECT_EQ(table.size(), 1u);  // b's leaf was not kept by anyone

  // The leaf owns the buffer: dropping the caller's reference keeps it alive.
  std::weak_ptr<runtime::DeviceData> watched = a;
  a.reset();
  EXPECT_FALSE(watched.expired());
  leaf.reset();
  EXPECT_TRUE(watched.expired());
  EXPECT_EQ(table.size(), 0u);
}

TEST(DataLeavesTest, ABufferWhoseLeafDiedGetsANewOne) {
  DataLeaves table;
  runtime::DeviceDataPtr a = Buffer();
  std::weak_ptr<const ir::Node> first = table.LeafFor(a, kLeafShape);
  EXPECT_TRUE(first.expired());
  ir::NodePtr second = table.LeafFor(a, kLeafShape);
  ASSERT_NE(second, nullptr);
  EXPECT_EQ(LeafBuffer(*second)->get(), a.get());
  EXPECT_EQ(table.LeafFor(a, kLeafShape), second);
}

// Stale entries (buffers and leaves that died) are swept as the table grows:
// its size stays within twice its live entries (or the minimum sweep size).
TEST(DataLeavesTest, StaleEntriesAreSwept) {
  DataLeaves table;
  std::vector<ir::NodePtr> kept;
  size_t most = 0;
  for (int i = 0; i < 20000; ++i) {
    ir::NodePtr leaf = table.LeafFor(Buffer(), kLeafShape);
    if (i % 10 == 0) kept.push_back(leaf);
    most = std::max(most, table.entries());
  }
  EXPECT_LE(most, 2 * kept.size() + 1024);
  EXPECT_GT(most, kept.size());  // stale entries wait for a sweep
  EXPECT_EQ(table.size(), kept.size());
  for (const ir::NodePtr& leaf : kept) EXPECT_EQ(table.LeafFor(*LeafBuffer(*leaf), kLeafShape), leaf);
}

}  // namespace
}  // namespace torch_neuron::lazy
