#include "lazy/concat_pieces.h"

#include <gtest/gtest.h>

#include <vector>

namespace torch_neuron::lazy {
namespace {

using ir::Arg;
using ir::Node;
using ir::Value;

ir::Shape I64(std::vector<int64_t> sizes) { return ir::Shape(c10::ScalarType::Long, std::move(sizes)); }

Value Leaf(const ir::Shape& shape) { return Value{Node::MakeDeviceData(shape, nullptr), 0}; }

// aten::cat(pieces, dim) as the tracer emits it.
Value Cat(const std::vector<Value>& pieces, int64_t dim, const ir::Shape& result) {
  std::vector<int32_t> indices;
  for (size_t i = 0; i < pieces.size(); ++i) indices.push_back(static_cast<int32_t>(i));
  return Value{Node::MakeOp("aten::cat", pieces, {Arg::OperandList(indices), Arg::Attr(dim)}, {result}), 0};
}

TEST(ConcatPiecesTest, ARangeInsideOneOperandIsThatOperandAndItsOffset) {
  Value ids = Leaf(I64({1, 5})), next = Leaf(I64({1, 1}));
  Value cat = Cat({ids, next}, -1, I64({1, 6}));
  std::optional<ConcatPiece> last = FindConcatPiece(cat, 1, 5, 6);
  ASSERT_TRUE(last.has_value());
  EXPECT_EQ(last->piece, next);
  EXPECT_EQ(last->offset, 5);
  std::optional<ConcatPiece> first = FindConcatPiece(cat, -1, 1, 4);
  ASSERT_TRUE(first.has_value());
  EXPECT_EQ(first->piece, ids);
  EXPECT_EQ(first->offset, 0);
}

TEST(ConcatPiecesTest, ARangeAcrossTwoOperandsOrAlongAnotherDimHasNoPiece) {
  Value cat = Cat({Leaf(I64({1, 5})), Leaf(I64({1, 1}))}, 1, I64({1, 6}));
  EXPECT_FALSE(FindConcatPiece(cat, 1, 4, 6).has_value());
  EXPECT_FALSE(FindConcatPiece(cat, 0, 0, 1).has_value());
  EXPECT_FALSE(FindConcatPiece(cat, 1, 3, 3).has_value());  // empty
  EXPECT_FALSE(FindConcatPiece(cat, 1, 5, 7).has_value());  // past the end
  // Not a cat at all.
  EXPECT_FALSE(FindConcatPiece(Leaf(I64({1, 6})), 1, 5, 6).has_value());
}

TEST(ConcatPiecesTest, NestedConcatenationsAlongTheSameDimAreSearchedThrough) {
  // generate()'s ids after three tokens: cat(cat(cat(prompt, t1), t2), t3).
  Value prompt = Leaf(I64({1, 5})), t1 = Leaf(I64({1, 1})), t2 = Leaf(I64({1, 1})), t3 = Leaf(I64({1, 1}));
  Value ids = Cat({Cat({Cat({prompt, t1}, 1, I64({1, 6})), t2}, 1, I64({1, 7})), t3}, 1, I64({1, 8}));
  std::optional<ConcatPiece> piece = FindConcatPiece(ids, 1, 6, 7);
  ASSERT_TRUE(piece.has_value());
  EXPECT_EQ(piece->piece, t2);
  EXPECT_EQ(piece->offset, 6);
  piece = FindConcatPiece(ids, 1, 2, 4);
  ASSERT_TRUE(piece.has_value());
  EXPECT_EQ(piece->piece, prompt);
  EXPECT_EQ(piece->offset, 0);
}

TEST(ConcatPiecesTest, APromotedOperandAndLegacyEmptyOperands) {
  // cat promotes an int32 piece to int64: reading it alone would change the dtype.
  Value narrow = Leaf(ir::Shape(c10::ScalarType::Int, {1, 1}));
  Value cat = Cat({Leaf(I64({1, 5})), narrow}, 1, I64({1, 6}));
  EXPECT_FALSE(FindConcatPiece(cat, 1, 5, 6).has_value());
  // A 1-D empty operand takes no room, whatever the rank.
  Value next = Leaf(I64({1, 1}));
  Value with_empty = Cat({Leaf(I64({1, 5})), Leaf(I64({0})), next}, 1, I64({1, 6}));
  std::optional<ConcatPiece> piece = FindConcatPiece(with_empty, 1, 5, 6);
  ASSERT_TRUE(piece.has_value());
  EXPECT_EQ(piece->piece, next);
}

TEST(ConcatPiecesTest, ACatAlongTheSameDimOfTheSameDtypeGivesItsOperands) {
  Value ids = Leaf(I64({1, 5})), next = Leaf(I64({1, 1}));
  Value cat = Cat({ids, next}, 1, I64({1, 6}));
  std::optional<std::vector<Value>> operands = ConcatOperands(cat, -1, 2, c10::ScalarType::Long);
  ASSERT_TRUE(operands.has_value());
  EXPECT_EQ(*operands, (std::vector<Value>{ids, next}));
  EXPECT_FALSE(ConcatOperands(cat, 0, 2, c10::ScalarType::Long).has_value());   // another dim
  EXPECT_FALSE(ConcatOperands(cat, 1, 2, c10::ScalarType::Float).has_value());  // the outer cat promotes
  EXPECT_FALSE(ConcatOperands(ids, 1, 2, c10::ScalarType::Long).has_value());   // not a cat
  // An operand of another dtype (promoted by the inner cat) or a legacy empty one.
  Value promoted = Cat({ids, Leaf(ir::Shape(c10::ScalarType::Int, {1, 1}))}, 1, I64({1, 6}));
  EXPECT_FALSE(ConcatOperands(promoted, 1, 2, c10::ScalarType::Long).has_value());
  Value with_empty = Cat({ids, Leaf(I64({0})), next}, 1, I64({1, 6}));
  EXPECT_FALSE(ConcatOperands(with_empty, 1, 2, c10::ScalarType::Long).has_value());
}

TEST(ConcatPiecesTest, RangesFollowPythonSlicingAndTheOpsOwnBounds) {
  const ir::Shape ids = I64({1, 8});
  auto expect = [](std::optional<PositionRange> r, int64_t dim, int64_t begin, int64_t end) {
    ASSERT_TRUE(r.has_value());
    EXPECT_EQ(r->dim, dim);
    EXPECT_EQ(r->begin, begin);
    EXPECT_EQ(r->end, end);
  };
  expect(SliceRange(ids, 1, -1, std::nullopt, 1), 1, 7, 8);  // ids[:, -1:]
  expect(SliceRange(ids, -1, std::nullopt, 3, 1), 1, 0, 3);  // ids[..., :3]
  expect(SliceRange(ids, 1, 6, INT64_MAX, 1), 1, 6, 8);      // clamped end
  expect(SliceRange(ids, 1, -100, 2, 2), 1, 0, 2);           // clamped start
  EXPECT_FALSE(SliceRange(ids, 1, 9, 12, 1).has_value());    // empty
  EXPECT_FALSE(SliceRange(ids, 2, 0, 1, 1).has_value());     // no dim 2
  expect(SelectRange(ids, 1, -1), 1, 7, 8);
  EXPECT_FALSE(SelectRange(ids, 1, 8).has_value());  // out of range: the op reports it
  expect(NarrowRange(ids, 1, -2, 2), 1, 6, 8);
  EXPECT_FALSE(NarrowRange(ids, 1, 7, 2).has_value());
}

}  // namespace
}  // namespace torch_neuron::lazy
