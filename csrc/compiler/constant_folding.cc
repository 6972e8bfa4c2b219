#include "compiler/constant_folding.h"

#include <ATen/core/LegacyTypeDispatch.h>
#include <ATen/ops/scalar_tensor.h>

#include "absl/strings/str_cat.h"
#include "ir/op_traits.h"
#include "ir/op_lookup.h"

namespace torch_neuron::compiler {
namespace {

// The value of a constant operand as an IValue for `type` (the schema argument).
c10::IValue ConstantValue(const CompileNode& n, const c10::TypePtr& type) {
  if (n.folded) return *n.folded;
  const c10::Scalar& s = n.scalar;
  if (type->kind() == c10::TypeKind::TensorType ||
      (type->cast<c10::OptionalType>() &&
       type->cast<c10::OptionalType>()->getElementType()->kind() == c10::TypeKind::TensorType)) {
    at::Tensor t = at::scalar_tensor(s, at::TensorOptions().dtype(n.shape().dtype()));
    t.unsafeGetTensorImpl()->set_wrapped_number(n.op == "wrapped");
    return t;
  }
  return s;
}

}  // namespace

absl::StatusOr<bool> ConstantFolding::Run(CompileGraph& g) {
  bool changed = false;
  at::AutoDispatchBelowADInplaceOrView below_autograd;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    CompileNode& n = g.nodes[i];
    if (n.dead || n.folded || n.kind != ir::NodeKind::kOp || n.num_outputs() != 1) {
      continue;
    }
    if (n.shape().numel() > max_elements_) continue;
    // A collective waits for its peers: it runs with the graph, never here.
    if (ir::IsCollectiveOp(n.op)) continue;
    bool all_constant = true;
    for (ValueRef v : n.operands) all_constant &= g.nodes[v.node].is_constant();
    if (!all_constant) continue;

    absl::StatusOr<c10::OperatorHandle> op = ir::FindOperator(n.op);
    if (!op.ok()) return op.status();
    const auto& schema_args = op->schema().arguments();
    torch::jit::Stack stack;
    bool foldable = true;
    for (size_t a = 0; a < n.args.size() && foldable; ++a) {
      const ir::Arg& arg = n.args[a];
      switch (arg.kind) {
        case ir::Arg::Kind::kAttr:
          stack.push_back(ir::HostAttr(arg.attr));
          break;
        case ir::Arg::Kind::kOperand:
          stack.push_back(ConstantValue(g.nodes[n.operands[arg.operands[0]].node], schema_args[a].type()));
          break;
        case ir::Arg::Kind::kOperandList:
          foldable = false;  // lists of constants are rare; leave them to run time
          break;
      }
    }
    if (!foldable) continue;
    try {
      op->callBoxed(stack);
    } catch (const c10::Error& e) {
      continue;  // leave it to run time, where the error is reported with context
    }
    if (stack.empty() || !stack[0].isTensor()) continue;
    at::Tensor result = stack[0].toTensor().contiguous();
    if (result.sizes() == c10::IntArrayRef(n.shape().sizes()) && result.scalar_type() != n.shape().dtype() &&
        result.is_floating_point() && c10::isFloatingType(n.shape().dtype())) {
      // A factory or promotion that took torch's default dtype, which differs
      // here (a compile service's process) from the tracing process's: the
      // node runs where it was traced, under that process's default.
      continue;
    }
    if (result.sizes() != c10::IntArrayRef(n.shape().sizes()) || result.scalar_type() != n.shape().dtype()) {
      return absl::InternalError(absl::StrCat("folding ", n.op, " gave ", c10::str(result.sizes()),
                                              ", traced ", n.shape().ToString()));
    }
    n.folded = result;
    n.operands.clear();
    changed = true;
  }
  return changed;
}

}  // namespace torch_neuron::compiler
