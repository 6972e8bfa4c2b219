// The canonical form of the graph behind a set of root values, and its hash.
//
// Canonicalize walks the DAG below the roots in post-order (operands before
// users). `ordered` roots (random draws, in the order they were traced) are
// walked first, in their order, so draws run in trace order; the other roots are
// ordered by their structural hash (ties keep the given order), so the same
// computation gives the same graph however the user's program interleaved its
// ops. Values that already ran (random draws, eager mode's ops) are read
// through the caller's ValueResolver, which names the leaves standing for them.
// Parameters are numbered by first use. The graph
// hash is XXH3-128 over each node's local hash and its operands' canonical
// positions, then the outputs: it is identical across processes and changes with
// any op, attribute, shape, dtype or wiring.
#pragma once

#include "absl/types/span.h"

#include <cstdint>
#include <vector>

#include "ir/hash.h"
#include "ir/node.h"

namespace torch_neuron::ir {

// Maps a value to the value that stands for it from now on: the device-data
// leaf holding its result once it has run, else the value itself. The IR is
// immutable; which values ran is the lazy tensor layer's knowledge, kept there.
class ValueResolver {
 public:
  virtual ~ValueResolver() = default;
  // The leaf standing for output `index` of `node` (as the leaf's output 0),
  // or nullptr where the value stands for itself. Canonicalize asks once per
  // edge; no copy of a node pointer is made unless there is a substitute.
  virtual const NodePtr* Substitute(const Node& node, int index) const = 0;
};

struct CanonicalGraph {
  // Every node once, operands before users.
  std::vector<const Node*> nodes;
  // Node i's operands as (position in `nodes`, output index) are
  // operand_list[operand_begin[i] .. operand_begin[i + 1]) (operands(i)): one
  // array for the graph, not one per node (canonicalizing is on every sync's path).
  std::vector<std::pair<int32_t, int32_t>> operand_list;
  std::vector<int32_t> operand_begin = {0};
  // Positions in `nodes` of the parameter leaves, in first-use order.
  std::vector<int32_t> parameters;
  // The distinct outputs as (position in `nodes`, output index), canonical order.
  std::vector<std::pair<int32_t, int32_t>> outputs;
  // For each root given to Canonicalize (`roots`, then `ordered`), the index of
  // its entry in `outputs`.
  std::vector<int32_t> root_to_output;
  hash_t hash = 0;
  // A size-generic graph (a torch.compile region whose sizes Dynamo made
  // symbolic): its hash keeps every node's op, attributes, dtypes, ranks and
  // wiring but none of its sizes, and its roots keep the order given (a sort
  // by hashes that hold sizes would differ from one size to the next). Its
  // size arguments (SymInt) are parameters (lazy/tracer.cc), so one program
  // serves every size whose trace has this hash: the compiler makes no
  // decision from sizes for it (compiler.h).
  bool size_generic = false;
  // Holds the roots as resolved, and so every node above, plus each leaf a
  // resolver substituted: `nodes` stays valid while these live. A leaf held
  // here keeps its buffer from being donated: release them (`pinned.clear()`)
  // before launching a job that may donate its inputs' buffers, or hand them
  // to the job, which releases them before it decides (GraphExecutor::Launch).
  std::vector<NodePtr> pinned;

  int64_t size() const { return static_cast<int64_t>(nodes.size()); }
  absl::Span<const std::pair<int32_t, int32_t>> operands(size_t i) const {
    return absl::MakeConstSpan(operand_list.data() + operand_begin[i],
                               operand_list.data() + operand_begin[i + 1]);
  }
  // Appends the next node's operands (nodes in order, from node 0).
  void AddOperands(absl::Span<const std::pair<int32_t, int32_t>> ops) {
    operand_list.insert(operand_list.end(), ops.begin(), ops.end());
    operand_begin.push_back(static_cast<int32_t>(operand_list.size()));
  }
};

// `resolver` may be null (nothing has run). `size_generic`: see CanonicalGraph.
CanonicalGraph Canonicalize(const std::vector<Value>& roots, const std::vector<Value>& ordered = {},
                            const ValueResolver* resolver = nullptr, bool size_generic = false);

// The graph hash of `g` from its nodes' local hashes, its wiring and its
// outputs (what Canonicalize stores in g.hash; a graph rebuilt from a
// CompileRequest is checked against it). For a size-generic graph, the local
// hashes with every size left out (SizeGenericLocalHash).
hash_t GraphHash(const CanonicalGraph& g);

}  // namespace torch_neuron::ir
