// Memory scheduling: the order a lowered graph's ops run in.
//
// A canonical graph lists its nodes in post-order from its roots, which is the
// order of the roots' hashes, not of the user's program: an optimizer's
// momentum product can be computed before the forward pass and held through
// the whole backward, and a weight gradient after every other gradient, which
// holds the activation it reads until then. The schedule reorders the ops,
// within the graph's dependences, so that fewer bytes are held at once.
//
// The model: an op's outputs are allocated when it runs, each its shape's bytes
// (a view run as a view allocates nothing and keeps its base alive), and a
// buffer dies after the last op that reads it or any view of it, unless the
// graph returns it; parameters and constants cost nothing. A buffer nobody
// reads dies at the op that made it. The peak is the most bytes alive at one
// op, its inputs and outputs together.
//
// Several orders are tried: the graph's own, and two greedy list schedules
// that run first any ready op that frees at least as much as it allocates,
// then either the op whose result the graph's order needs soonest, or the one
// that allocates least. The order with the lowest peak wins; a tie keeps the
// earlier candidate, so the graph's own order is never replaced by one the
// model says is no better. Random ops and collectives keep their relative
// order (the generator's draws and the peers' calls follow trace order).
//
// The result is a permutation of the graph's live nodes: its leaves
// (parameters, constants, folded values) first, in graph order, then its ops.
// The schedule depends only on the graph, so a graph always lowers to the same
// program.
#pragma once

#include <cstdint>
#include <vector>

#include "compiler/hlo_graph.h"

namespace torch_neuron::compiler {

// The order to lower `g`'s live nodes in. `as_view[i]`: node i runs as a view
// of its first operand (lowering's RunAsViews).
std::vector<int32_t> MemorySchedule(const CompileGraph& g, const std::vector<bool>& as_view);

// The model's peak bytes when `g`'s ops run in `order` (a permutation of its
// live nodes, as MemorySchedule returns); -1 if `order` is not one, or runs a
// node before an operand, or reorders random ops or collectives.
int64_t SchedulePeakBytes(const CompileGraph& g, const std::vector<bool>& as_view,
                          const std::vector<int32_t>& order);

}  // namespace torch_neuron::compiler
