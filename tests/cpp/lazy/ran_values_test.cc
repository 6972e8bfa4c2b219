#include "lazy/ran_values.h"

#include <gtest/gtest.h>

#include <memory>
#include <vector>

namespace torch_neuron::lazy {
namespace {

using ir::Arg;
using ir::Node;
using ir::NodePtr;
using ir::Value;

const ir::Shape kF32_4(c10::ScalarType::Float, {4});

Value Leaf() { return Value{Node::MakeDeviceData(kF32_4, nullptr), 0}; }

Value Neg(const Value& x) { return Value{Node::MakeOp("aten::neg", {x}, {Arg::Operand(0)}, {kF32_4}), 0}; }

// A payload whose destruction the test can see (a buffer, in real use).
struct Watched : ir::LeafData {
  explicit Watched(std::shared_ptr<int> alive) : alive(std::move(alive)) {}
  std::shared_ptr<int> alive;
};

TEST(RanValuesTest, AValueThatRanResolvesToItsLeafAndOthersToThemselves) {
  RanValues table;
  Value x = Leaf();
  Value ran = Neg(x), other = Neg(Leaf());
  NodePtr leaf = Node::MakeDeviceData(kF32_4, nullptr);
  EXPECT_FALSE(table.HasRun(*ran.node));
  table.Record(ran.node, {leaf});
  EXPECT_TRUE(table.HasRun(*ran.node));
  EXPECT_EQ(table.Resolve(ran).node, leaf);
  EXPECT_EQ(table.Resolve(other).node, other.node);
  EXPECT_EQ(table.Leaves(*ran.node), std::vector<NodePtr>{leaf});
  // A second record for the same node is ignored: a draw keeps its first result.
  table.Record(ran.node, {Node::MakeDeviceData(kF32_4, nullptr)});
  EXPECT_EQ(table.Resolve(ran).node, leaf);
}

TEST(RanValuesTest, CanonicalizeReadsThroughTheScopedResolver) {
  RanValues table;
  Value x = Leaf();
  Value ran = Neg(x);
  Value user = Neg(ran);
  NodePtr leaf = Node::MakeDeviceData(kF32_4, nullptr);
  {
    RanValues::ScopedResolver none(table);
    EXPECT_EQ(none.get(), nullptr);  // nothing recorded: no lock, no lookups
    EXPECT_EQ(ir::Canonicalize({user}, {}, none.get()).size(), 3);
  }
  table.Record(ran.node, {leaf});
  RanValues::ScopedResolver resolver(table);
  ir::CanonicalGraph g = ir::Canonicalize({user}, {}, resolver.get());
  ASSERT_EQ(g.size(), 2);
  EXPECT_EQ(g.nodes[0], leaf.get());
}

TEST(RanValuesTest, AnEntryDiesWithItsNodeAndReleasesItsLeaves) {
  RanValues table;
  auto alive = std::make_shared<int>(0);
  std::weak_ptr<int> watch = alive;
  Value ran = Neg(Leaf());
  table.Record(ran.node, {Node::MakeDeviceData(kF32_4, std::make_shared<Watched>(std::move(alive)))});
  EXPECT_EQ(table.size(), 1u);
  EXPECT_FALSE(watch.expired());  // the leaf lives while its node does
  const Node* address = ran.node.get();
  ran = {};
  // The next record sweeps the dead entry: its leaf (and buffer) go at once.
  Value next = Neg(Leaf());
  table.Record(next.node, {Node::MakeDeviceData(kF32_4, nullptr)});
  EXPECT_TRUE(watch.expired());
  EXPECT_EQ(table.size(), 1u);
  (void)address;
}

TEST(RanValuesTest, ANewNodeAtADeadNodesAddressIsNotResolved) {
  RanValues table;
  // A node lives in its control block's allocation (make_shared), which the
  // entry's weak pointer keeps: while the dead entry lives, no new node can
  // take the address.
  Value ran = Neg(Leaf());
  const Node* address = ran.node.get();
  table.Record(ran.node, {Node::MakeDeviceData(kF32_4, nullptr)});
  ran = {};
  std::vector<NodePtr> keep;
  for (int i = 0; i < 1000; ++i) {
    keep.push_back(Node::MakeDeviceData(kF32_4, nullptr));
    ASSERT_NE(keep.back().get(), address) << "a new node took a recorded node's address";
  }
  // The sweep frees it; a node made there later is not the one that ran.
#if defined(__SANITIZE_ADDRESS__)
  GTEST_SKIP() << "AddressSanitizer quarantines freed memory: no new node can be given the dead node's "
                  "address to check against (the half above ran)";
#endif
  table.Sweep();
  NodePtr reused;
  for (int i = 0; i < 1000 && reused == nullptr; ++i) {
    keep.push_back(Node::MakeDeviceData(kF32_4, nullptr));
    if (keep.back().get() == address) reused = keep.back();
  }
  ASSERT_NE(reused, nullptr) << "the allocator gave no node the dead node's address";
  EXPECT_FALSE(table.HasRun(*reused));
  EXPECT_EQ(table.Resolve(Value{reused, 0}).node, reused);
}

TEST(RanValuesTest, ALargeTableSweepsOnceItHasDoubled) {
  RanValues table;
  std::vector<Value> live;
  for (int i = 0; i < 300; ++i) {
    live.push_back(Neg(Leaf()));
    table.Record(live.back().node, {Node::MakeDeviceData(kF32_4, nullptr)});
  }
  live.clear();
  EXPECT_EQ(table.size(), 0u);
}

}  // namespace
}  // namespace torch_neuron::lazy
