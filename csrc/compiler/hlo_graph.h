// CompileGraph: the compiler's own, mutable copy of a canonical IR graph, which
// the passes rewrite. Nodes keep a pointer to their IR node for op, arguments
// and shapes; operands are positions in `nodes`, always earlier than the user.
//
// Not thread-safe: one compile owns one graph.
#pragma once

#include <ATen/core/Tensor.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "compiler/kernel_codegen.h"
#include "ir/graph.h"

namespace torch_neuron::compiler {

struct ValueRef {
  int32_t node = -1;
  int32_t index = 0;
  bool operator==(const ValueRef& o) const { return node == o.node && index == o.index; }
};

struct CompileNode {
  const ir::Node* ir = nullptr;
  std::vector<ValueRef> operands;
  bool dead = false;
  // Set by constant folding: the node's (single) output, computed at compile time.
  std::optional<at::Tensor> folded;
  // Set by elementwise fusion: the node is a call of this generated kernel
  // (neuron::fused_kernel), its IR a synthetic node owned by the graph.
  std::shared_ptr<const FusedKernel> kernel;

  bool is_constant() const {
    return folded.has_value() || ir->kind() == ir::NodeKind::kConstant;
  }
};

struct CompileGraph {
  std::vector<CompileNode> nodes;
  std::vector<ValueRef> outputs;
  // Positions of the parameters, in binding order (never removed by passes).
  std::vector<int32_t> parameters;
  // IR nodes made by passes (fused kernels), kept alive with the graph.
  std::vector<ir::NodePtr> owned_ir;

  static CompileGraph FromCanonical(const ir::CanonicalGraph& graph);

  // Number of nodes still alive.
  int64_t LiveNodeCount() const;

  // Text like ir::ToText, of the live nodes (pass golden tests).
  std::string ToText() const;
};

// Random ops (with a Generator argument) must run exactly once, in trace order.
bool IsRandomOp(const ir::Node& node);

}  // namespace torch_neuron::compiler
