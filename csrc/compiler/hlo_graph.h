// CompileGraph: the compiler's own, mutable copy of a canonical IR graph, which
// the passes rewrite. Each node carries its own op, arguments and shapes (no
// pointer into the IR, whose owner may free it); operands are positions in
// `nodes`, always earlier than the user.
//
// Not thread-safe: one compile owns one graph.
#pragma once

#include <ATen/core/Tensor.h>

#include <memory>
#include <functional>
#include <optional>
#include <string>
#include <variant>
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
  // What the node computes, copied from its IR node (or made by a pass): the
  // compiler reads no IR node after CompileGraph::FromCanonical.
  ir::NodeKind kind = ir::NodeKind::kOp;
  std::string op;
  std::vector<ir::Arg> args;  // operand arguments index `operands`
  std::vector<ir::Shape> shapes;
  c10::Scalar scalar;  // a scalar or constant leaf's value
  std::string source;  // the user's line, for errors (never hashed)
  // The IR's local hash (kind, op, attributes, shapes; not the operands).
  ir::hash_t local_hash = 0;

  std::vector<ValueRef> operands;
  bool dead = false;
  // Set by constant folding: the node's (single) output, computed at compile time.
  std::optional<at::Tensor> folded;
  // Set by elementwise fusion: the node is a call of this generated kernel
  // (a neuron::fused_kernel or neuron::fused_row_kernel node, lowered to a
  // runtime::KernelCall).
  std::shared_ptr<const FusedKernel> kernel;

  static CompileNode FromIr(const ir::Node& node);

  const ir::Shape& shape(int index = 0) const { return shapes.at(index); }
  int num_outputs() const { return static_cast<int>(shapes.size()); }
  bool is_leaf() const { return kind != ir::NodeKind::kOp; }
  bool is_parameter() const {
    return kind == ir::NodeKind::kDeviceData || kind == ir::NodeKind::kScalar ||
           kind == ir::NodeKind::kGenerator;
  }
  bool is_constant() const { return folded.has_value() || kind == ir::NodeKind::kConstant; }
  // A Python scalar or a 0/1 constant (not a folded tensor).
  bool is_scalar_leaf() const {
    return !folded && (kind == ir::NodeKind::kScalar || kind == ir::NodeKind::kConstant);
  }
};

struct CompileGraph {
  std::vector<CompileNode> nodes;
  std::vector<ValueRef> outputs;
  // Positions of the parameters, in binding order (never removed by passes).
  std::vector<int32_t> parameters;
  static CompileGraph FromCanonical(const ir::CanonicalGraph& graph);

  // Number of nodes still alive.
  int64_t LiveNodeCount() const;

  // Text like ir::ToText, of the live nodes (pass golden tests).
  std::string ToText() const;

  // Node i is a random op (an operand is the generator): it must run exactly
  // once, in trace order.
  bool IsRandom(int32_t i) const;
};

// Appends nodes to a graph being rebuilt by RewriteNodes.
class NodeBuilder {
 public:
  // An argument of a new op: a value of the graph, or a constant attribute.
  using Input = std::variant<ValueRef, c10::IValue>;

  // Appends a call of `op` (one schema argument per input) with one output of
  // `shape`, traced from `source`.
  ValueRef Op(const std::string& op, const std::vector<Input>& inputs, const ir::Shape& shape,
              const std::string& source);
  // The constant 1 (an int64 leaf), made once per rebuild.
  ValueRef One();
  const ir::Shape& ShapeOf(ValueRef v) const;
  // The node (in the graph being rebuilt) that produces `v`.
  const CompileNode& NodeOf(ValueRef v) const;

 private:
  friend bool RewriteNodes(
      CompileGraph&,
      const std::function<std::optional<std::vector<ValueRef>>(const CompileNode&, NodeBuilder&)>&);
  NodeBuilder(CompileGraph& g, std::vector<CompileNode>& nodes) : g_(g), nodes_(nodes) {}
  CompileGraph& g_;
  std::vector<CompileNode>& nodes_;
  int32_t one_ = -1;
};

// Rebuilds `g` in order, offering every live op node to `expand` with its
// operands already renumbered. `expand` either returns nullopt (the node stays)
// or appends replacement nodes through the builder and returns one value per
// output of the node, which its readers then read. True if anything was
// replaced.
bool RewriteNodes(
    CompileGraph& g,
    const std::function<std::optional<std::vector<ValueRef>>(const CompileNode&, NodeBuilder&)>& expand);

}  // namespace torch_neuron::compiler
