#include "compiler/elementwise_fusion.h"

#include <algorithm>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"

namespace torch_neuron::compiler {
namespace {

bool IsScalarLeaf(const CompileNode& n) {
  return !n.folded && (n.ir->kind() == ir::NodeKind::kScalar || n.ir->kind() == ir::NodeKind::kConstant);
}

// A member candidate: a single-output float32 op whose every argument is an
// operand, each a tensor of the op's own shape or a scalar leaf, that codegen
// can express.
bool Fusible(const CompileGraph& g, const CompileNode& n) {
  if (n.dead || n.folded || n.kernel || n.ir->kind() != ir::NodeKind::kOp || n.ir->num_outputs() != 1) {
    return false;
  }
  const ir::Shape& shape = n.ir->shape(0);
  if (shape.dtype() != c10::ScalarType::Float || shape.numel() == 0) return false;
  std::vector<bool> scalar;
  for (const ir::Arg& a : n.ir->args()) {
    if (a.kind != ir::Arg::Kind::kOperand) return false;
    const ValueRef v = n.operands[a.operands[0]];
    const CompileNode& src = g.nodes[v.node];
    if (IsScalarLeaf(src)) {
      scalar.push_back(true);
    } else {
      if (src.folded || src.ir->shape(v.index) != shape) return false;
      scalar.push_back(false);
    }
  }
  return CanGenerate(n.ir->op(), scalar);
}

struct Group {
  std::vector<int32_t> members;
  bool closed = false;  // read by a node outside it
};

}  // namespace

ir::NodePtr MakeFusedKernelNode(const FusedKernel& kernel, const std::string& library,
                                const std::vector<ir::Shape>& input_shapes,
                                const std::vector<ir::Shape>& output_shapes) {
  // Operands only for the node's arity: the compile graph holds the real ones.
  std::vector<ir::Value> operands;
  std::vector<int32_t> tensors, scalars;
  for (size_t i = 0; i < input_shapes.size(); ++i) {
    operands.push_back(ir::Value{ir::Node::MakeDeviceData(input_shapes[i], nullptr), 0});
    (static_cast<int32_t>(i) < kernel.num_inputs ? tensors : scalars).push_back(static_cast<int32_t>(i));
  }
  const std::vector<int64_t>& sizes = output_shapes[0].sizes();
  std::vector<ir::Arg> args = {
      ir::Arg::Attr(c10::IValue(library)),
      ir::Arg::Attr(c10::IValue(kernel.name)),
      ir::Arg::OperandList(tensors),
      ir::Arg::OperandList(scalars),
      ir::Arg::Attr(c10::IValue(sizes)),
      ir::Arg::Attr(c10::IValue(static_cast<int64_t>(kernel.outputs.size()))),
      // Filled in at run time by the executor when inputs are donated.
      ir::Arg::Attr(c10::IValue(std::vector<int64_t>{})),
  };
  return ir::Node::MakeOp("neuron::fused_kernel", std::move(operands), std::move(args), output_shapes);
}

absl::StatusOr<bool> ElementwiseFusion::Run(CompileGraph& g) {
  const int32_t size = static_cast<int32_t>(g.nodes.size());
  std::vector<int32_t> group_of(size, -1);
  std::vector<Group> groups;
  for (int32_t i = 0; i < size; ++i) {
    const CompileNode& n = g.nodes[i];
    if (n.dead) continue;
    int32_t chosen = -1;
    if (Fusible(g, n)) {
      // Every open group among the operands merges into the first: none has
      // been read from outside, so one kernel at this node can compute them all.
      for (const ValueRef& v : n.operands) {
        const int32_t candidate = group_of[v.node];
        if (candidate < 0 || groups[candidate].closed || candidate == chosen) continue;
        if (chosen < 0) {
          chosen = candidate;
          continue;
        }
        for (int32_t m : groups[candidate].members) group_of[m] = chosen;
        std::vector<int32_t>& members = groups[chosen].members;
        members.insert(members.end(), groups[candidate].members.begin(), groups[candidate].members.end());
        std::sort(members.begin(), members.end());  // program order, for codegen
        groups[candidate].members.clear();
        groups[candidate].closed = true;
      }
      if (chosen < 0) {
        chosen = static_cast<int32_t>(groups.size());
        groups.push_back(Group{});
      }
      groups[chosen].members.push_back(i);  // the latest node: order kept
      group_of[i] = chosen;
    }
    // A group read from outside takes no more members: the kernel runs at its
    // last member, so every outside reader must come after that.
    for (const ValueRef& v : n.operands) {
      if (group_of[v.node] >= 0 && group_of[v.node] != chosen) groups[group_of[v.node]].closed = true;
    }
  }
  for (const ValueRef& v : g.outputs) {
    if (group_of[v.node] >= 0) groups[group_of[v.node]].closed = true;
  }

  // Who reads each node from outside its group (graph outputs count).
  std::vector<bool> read_outside(size, false);
  for (int32_t i = 0; i < size; ++i) {
    if (g.nodes[i].dead) continue;
    for (const ValueRef& v : g.nodes[i].operands) {
      if (group_of[v.node] >= 0 && group_of[v.node] != group_of[i]) read_outside[v.node] = true;
    }
  }
  for (const ValueRef& v : g.outputs) read_outside[v.node] = true;

  bool changed = false;
  int kernel_index = 0;
  // Kernels with the same body share one function (an expanded foreach makes
  // one identical kernel per tensor): summary and arity -> name.
  absl::flat_hash_map<std::string, std::string> name_of_body;
  absl::flat_hash_map<int32_t, ValueRef> replacement;  // member -> kernel output
  for (Group& group : groups) {
    if (group.members.size() < 2) continue;  // one op: the ATen call is as good
    auto kernel = std::make_shared<FusedKernel>();
    absl::flat_hash_map<int32_t, int32_t> value_of_member;  // node -> kernel value
    std::vector<ValueRef> tensor_inputs, scalar_inputs;
    std::vector<ir::Shape> input_shapes, scalar_shapes;
    auto input_index = [&](std::vector<ValueRef>& list, std::vector<ir::Shape>& shapes, ValueRef v) {
      auto it = std::find(list.begin(), list.end(), v);
      if (it != list.end()) return static_cast<int32_t>(it - list.begin());
      list.push_back(v);
      shapes.push_back(g.nodes[v.node].ir->shape(v.index));
      return static_cast<int32_t>(list.size() - 1);
    };
    // Tensor inputs first (values 0..), so number them in a first sweep.
    for (int32_t m : group.members) {
      for (const ValueRef& v : g.nodes[m].operands) {
        if (group_of[v.node] != group_of[m] && !IsScalarLeaf(g.nodes[v.node])) {
          input_index(tensor_inputs, input_shapes, v);
        }
      }
    }
    kernel->num_inputs = static_cast<int32_t>(tensor_inputs.size());
    for (int32_t m : group.members) {
      const CompileNode& n = g.nodes[m];
      FusedOp op{n.ir->op(), {}};
      for (const ir::Arg& a : n.ir->args()) {
        const ValueRef v = n.operands[a.operands[0]];
        if (IsScalarLeaf(g.nodes[v.node])) {
          op.operands.push_back({true, input_index(scalar_inputs, scalar_shapes, v)});
        } else if (group_of[v.node] == group_of[m]) {
          op.operands.push_back({false, value_of_member.at(v.node)});
        } else {
          op.operands.push_back({false, input_index(tensor_inputs, input_shapes, v)});
        }
      }
      value_of_member[m] = kernel->num_inputs + static_cast<int32_t>(kernel->ops.size());
      kernel->ops.push_back(std::move(op));
    }
    kernel->num_scalars = static_cast<int32_t>(scalar_inputs.size());
    // Outputs: members read outside the group, in member order.
    absl::flat_hash_map<int32_t, int32_t> output_of_member;
    std::vector<ir::Shape> output_shapes;
    for (int32_t m : group.members) {
      if (!read_outside[m]) continue;
      output_of_member[m] = static_cast<int32_t>(kernel->outputs.size());
      kernel->outputs.push_back(value_of_member.at(m));
      output_shapes.push_back(g.nodes[m].ir->shape(0));
    }
    if (kernel->outputs.empty()) continue;  // nothing reads it: DCE's business
    const std::string body =
        absl::StrCat(kernel->num_inputs, ":", kernel->num_scalars, ":", KernelSummary(*kernel));
    auto [named, is_new] = name_of_body.try_emplace(body, absl::StrCat("tn_k", kernel_index));
    if (is_new) ++kernel_index;
    kernel->name = named->second;

    // The kernel takes the last member's place; the other members die.
    const int32_t at = group.members.back();
    std::vector<ir::Shape> all_inputs = input_shapes;
    all_inputs.insert(all_inputs.end(), scalar_shapes.begin(), scalar_shapes.end());
    ir::NodePtr node = MakeFusedKernelNode(*kernel, "", all_inputs, output_shapes);
    g.owned_ir.push_back(node);
    CompileNode fused;
    fused.ir = node.get();
    fused.operands = tensor_inputs;
    fused.operands.insert(fused.operands.end(), scalar_inputs.begin(), scalar_inputs.end());
    fused.kernel = kernel;
    for (int32_t m : group.members) g.nodes[m].dead = true;
    g.nodes[at] = std::move(fused);
    for (const auto& [member, output] : output_of_member) replacement[member] = ValueRef{at, output};
    changed = true;
  }
  // Readers of members read the kernels' outputs (one pass for all groups;
  // kernel operands too, which may be other kernels' members).
  auto rewire = [&](ValueRef& v) {
    auto it = replacement.find(v.node);
    if (it != replacement.end()) v = it->second;
  };
  for (CompileNode& n : g.nodes) {
    if (n.dead) continue;
    for (ValueRef& v : n.operands) rewire(v);
  }
  for (ValueRef& v : g.outputs) rewire(v);
  return changed;
}

}  // namespace torch_neuron::compiler
