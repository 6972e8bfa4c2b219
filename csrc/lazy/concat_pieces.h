// Reading one piece of a pending concatenation reads the piece.
//
// generate() grows its token ids and position ids by one column per token
// (torch.cat of the ids so far and the new column) and feeds the model only
// the last column (ids[:, -1:]). Traced as written, every token's graph takes
// the ids so far as an input and returns them one column longer: a new shape,
// hence a new compile, every token. The tracer instead sends a slice, narrow
// or select that lies inside one operand of a pending aten::cat to that
// operand. The token's graph then reads the new column only and is the same
// graph at every length; the cat stays pending (its operands' values are kept
// when a graph computes them, ran_values.h) until something reads it whole.
// A cat of such a cat along the same dim takes its operands instead, so the
// ids stay one cat of the prompt and the tokens (those that ran, as their
// buffers), not a chain of cats that holds every token's graph and the
// buffers that graph read.
//
// Pure functions over IR values; thread-safe.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "ir/node.h"

namespace torch_neuron::lazy {

// The operand of a concatenation that holds a range of its result.
struct ConcatPiece {
  ir::Value piece;
  int64_t offset = 0;  // where the piece starts along the concatenated dim
};

// If `input` is the result of aten::cat along `dim` (negative dims allowed)
// and the positions [begin, end) along it (0 <= begin < end <= its size) lie
// inside one of its operands of the same dtype, that operand, searched
// through nested cats along the same dim. Nullopt otherwise.
std::optional<ConcatPiece> FindConcatPiece(const ir::Value& input, int64_t dim, int64_t begin, int64_t end);

// If `input` is the result of a cat along `dim` (wrapped against `rank`, the
// rank of both) whose operands all have `dtype` and `rank` (no promotion, no
// legacy empty operands), its operands: a cat of it along the same dim may
// take them in its place. Nullopt otherwise.
std::optional<std::vector<ir::Value>> ConcatOperands(const ir::Value& input, int64_t dim, int64_t rank,
                                                     c10::ScalarType dtype);

// The positions [begin, end) along `dim` (already wrapped) that a read of
// `input` touches, for the reads the tracer redirects: slice_copy.Tensor
// (start, end, step as the schema gives them, None as nullopt), select_copy.int
// (index) and narrow_copy (start, length). Nullopt for a read that is empty,
// out of range (the op's own check reports it) or of a step below 1.
struct PositionRange {
  int64_t dim = 0;
  int64_t begin = 0;
  int64_t end = 0;
};
std::optional<PositionRange> SliceRange(const ir::Shape& input, int64_t dim, std::optional<int64_t> start,
                                        std::optional<int64_t> end, int64_t step);
std::optional<PositionRange> SelectRange(const ir::Shape& input, int64_t dim, int64_t index);
std::optional<PositionRange> NarrowRange(const ir::Shape& input, int64_t dim, int64_t start, int64_t length);

}  // namespace torch_neuron::lazy
