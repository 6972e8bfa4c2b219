#include "lazy/concat_pieces.h"

#include <algorithm>

namespace torch_neuron::lazy {
namespace {

// `dim` wrapped into [0, rank), or nullopt.
std::optional<int64_t> WrapDim(int64_t dim, int64_t rank) {
  if (dim < 0) dim += rank;
  if (dim < 0 || dim >= rank) return std::nullopt;
  return dim;
}

const ir::OpName& CatOp() {
  static const ir::OpName* name = new ir::OpName("aten::cat");
  return *name;
}

}  // namespace

std::optional<ConcatPiece> FindConcatPiece(const ir::Value& input, int64_t dim, int64_t begin, int64_t end) {
  if (!input || begin < 0 || begin >= end) return std::nullopt;
  const ir::Node& cat = *input.node;
  // OpName is interned: one pointer comparison per traced read.
  if (cat.kind() != ir::NodeKind::kOp || &cat.op_name().str() != &CatOp().str()) return std::nullopt;
  const ir::Shape& result = cat.shape(input.index);
  const std::optional<int64_t> d = WrapDim(dim, result.dim());
  if (!d || end > result.sizes()[*d] || cat.args().size() != 2 || !cat.args()[1].attr.isInt() ||
      cat.args()[0].kind != ir::Arg::Kind::kOperandList) {
    return std::nullopt;
  }
  const std::optional<int64_t> cat_dim = WrapDim(cat.args()[1].attr.toInt(), result.dim());
  if (cat_dim != d) return std::nullopt;
  int64_t offset = 0;
  for (int32_t k : cat.args()[0].operands) {
    if (k < 0) return std::nullopt;
    const ir::Value& operand = cat.operands()[k];
    const ir::Shape& shape = operand.shape();
    // cat skips 1-D empty operands of any rank ("legacy" empty tensors).
    if (shape.dim() != result.dim()) {
      if (shape.numel() == 0) continue;
      return std::nullopt;
    }
    const int64_t size = shape.sizes()[*d];
    if (begin >= offset && end <= offset + size) {
      if (shape.dtype() != result.dtype()) return std::nullopt;  // cat promoted it
      // A piece that is itself a concatenation along the same dim: look inside.
      if (std::optional<ConcatPiece> inner = FindConcatPiece(operand, *d, begin - offset, end - offset)) {
        inner->offset += offset;
        return inner;
      }
      return ConcatPiece{operand, offset};
    }
    offset += size;
    if (offset >= end) break;
  }
  return std::nullopt;
}

std::optional<std::vector<ir::Value>> ConcatOperands(const ir::Value& input, int64_t dim, int64_t rank,
                                                     c10::ScalarType dtype) {
  const ir::Node& cat = *input.node;
  if (cat.kind() != ir::NodeKind::kOp || &cat.op_name().str() != &CatOp().str() || cat.args().size() != 2 ||
      !cat.args()[1].attr.isInt() || cat.args()[0].kind != ir::Arg::Kind::kOperandList) {
    return std::nullopt;
  }
  const ir::Shape& result = cat.shape(input.index);
  if (result.dim() != rank || result.dtype() != dtype ||
      WrapDim(cat.args()[1].attr.toInt(), rank) != WrapDim(dim, rank)) {
    return std::nullopt;
  }
  std::vector<ir::Value> operands;
  for (int32_t k : cat.args()[0].operands) {
    if (k < 0) return std::nullopt;
    const ir::Value& operand = cat.operands()[k];
    if (operand.shape().dim() != rank || operand.shape().dtype() != dtype) return std::nullopt;
    operands.push_back(operand);
  }
  return operands;
}

std::optional<PositionRange> SliceRange(const ir::Shape& input, int64_t dim, std::optional<int64_t> start,
                                        std::optional<int64_t> end, int64_t step) {
  const std::optional<int64_t> d = WrapDim(dim, input.dim());
  if (!d || step < 1) return std::nullopt;
  const int64_t size = input.sizes()[*d];
  // Python's slicing rules, as ATen's slice applies them: wrap once, clamp.
  auto clamp = [size](std::optional<int64_t> p, int64_t absent) {
    int64_t v = p.value_or(absent);
    if (v < 0) v += size;
    return std::clamp<int64_t>(v, 0, size);
  };
  const int64_t b = clamp(start, 0);
  const int64_t e = clamp(end, size);
  if (b >= e) return std::nullopt;
  return PositionRange{*d, b, e};
}

std::optional<PositionRange> SelectRange(const ir::Shape& input, int64_t dim, int64_t index) {
  const std::optional<int64_t> d = WrapDim(dim, input.dim());
  if (!d) return std::nullopt;
  const int64_t size = input.sizes()[*d];
  if (index < 0) index += size;
  if (index < 0 || index >= size) return std::nullopt;
  return PositionRange{*d, index, index + 1};
}

std::optional<PositionRange> NarrowRange(const ir::Shape& input, int64_t dim, int64_t start, int64_t length) {
  const std::optional<int64_t> d = WrapDim(dim, input.dim());
  if (!d) return std::nullopt;
  const int64_t size = input.sizes()[*d];
  if (start < 0) start += size;
  if (start < 0 || length < 1 || start + length > size) return std::nullopt;
  return PositionRange{*d, start, start + length};
}

}  // namespace torch_neuron::lazy
