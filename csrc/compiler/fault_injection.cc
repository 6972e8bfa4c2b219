#include "compiler/fault_injection.h"

#include <c10/core/ScalarType.h>

namespace torch_neuron::compiler {

absl::StatusOr<bool> FaultInjection::Run(CompileGraph& graph) {
  return RewriteNodes(graph,
                      [&](const CompileNode& n, NodeBuilder& b) -> std::optional<std::vector<ValueRef>> {
                        if (n.kernel != nullptr || n.op != op_ || n.num_outputs() != 1) return std::nullopt;
                        const ir::Shape& shape = n.shape(0);
                        if (!c10::isFloatingType(shape.dtype())) return std::nullopt;
                        // The op itself, re-emitted with the same arguments, then + 1.
                        std::vector<NodeBuilder::Input> inputs;
                        for (const ir::Arg& arg : n.args) {
                          if (arg.kind == ir::Arg::Kind::kOperand) {
                            inputs.emplace_back(n.operands[arg.operands[0]]);
                          } else if (arg.kind == ir::Arg::Kind::kAttr) {
                            inputs.emplace_back(arg.attr);
                          } else {
                            return std::nullopt;  // operand lists: left alone
                          }
                        }
                        const ValueRef result = b.Op(op_, inputs, shape, n.source);
                        return std::vector<ValueRef>{
                            b.Op("aten::add.Scalar", {result, c10::IValue(1.0), b.One()}, shape, n.source)};
                      });
}

}  // namespace torch_neuron::compiler
