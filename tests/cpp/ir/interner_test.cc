#include "ir/interner.h"

#include <gtest/gtest.h>

namespace torch_neuron::ir {
namespace {

const Shape kShape(c10::ScalarType::Float, {3});

NodePtr Neg(const Value& v) { return Node::MakeOp("aten::neg", {v}, {Arg::Operand(0)}, {kShape}); }

TEST(NodeInternerTest, SameOpOnTheSameOperandsIsOneNode) {
  NodeInterner interner;
  Value a{Node::MakeDeviceData(kShape, nullptr), 0};
  NodePtr first = interner.Intern(Neg(a));
  NodePtr second = interner.Intern(Neg(a));
  EXPECT_EQ(first.get(), second.get());
}

TEST(NodeInternerTest, SameOpOnOtherOperandsStaysDistinct) {
  NodeInterner interner;
  Value a{Node::MakeDeviceData(kShape, nullptr), 0};
  Value b{Node::MakeDeviceData(kShape, nullptr), 0};
  EXPECT_NE(interner.Intern(Neg(a)).get(), interner.Intern(Neg(b)).get());
}

TEST(NodeInternerTest, RandomOpsAreNeverMerged) {
  NodeInterner interner;
  Value a{Node::MakeDeviceData(kShape, nullptr), 0};
  Value gen{Node::MakeGenerator(nullptr), 0};
  auto draw = [&] {
    return Node::MakeOp("aten::bernoulli.p", {a, gen}, {Arg::Operand(0), Arg::Attr(0.5), Arg::Operand(1)},
                        {kShape});
  };
  EXPECT_NE(interner.Intern(draw()).get(), interner.Intern(draw()).get());
}

TEST(NodeInternerTest, EntriesDieWithTheirNodes) {
  NodeInterner interner;
  Value a{Node::MakeDeviceData(kShape, nullptr), 0};
  { NodePtr n = interner.Intern(Neg(a)); }
  interner.Purge();
  EXPECT_EQ(interner.size(), 0u);
}

}  // namespace
}  // namespace torch_neuron::ir
