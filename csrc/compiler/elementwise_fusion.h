// ElementwiseFusion (tier 1): groups float32 elementwise ops, with the row
// reductions they feed or follow, into generated kernels. A group shares one
// domain (a shape); its members are element ops over the domain, reductions
// over its trailing dims and ops on their per-row results. Operands broadcast
// as a value per row ([R, 1]), per row position ([C], a bias) or a single value
// make a row kernel too. A group becomes one neuron::fused_kernel (flat) or
// neuron::fused_row_kernel node holding a FusedKernel; every member whose value
// is read outside the group (or is a graph output) is one of the kernel's
// outputs, the others never reach memory.
//
// Safety: a node joins (and merges) the open groups of its operands. The first
// read from outside anchors a group: its kernel runs at its last member at that
// moment, before every outside reader. An anchored group still takes a node
// whose other operands all exist before the anchor (it is computed there too).
// Values of other groups count as existing at their own anchors, so two kernels
// never feed each other. Library calls (matmul, convolution, reductions over
// leading dims) stay ATen calls; random ops and in-place ops are never members.
#pragma once

#include "compiler/pass_pipeline.h"

namespace torch_neuron::compiler {

class ElementwiseFusion : public Pass {
 public:
  std::string name() const override { return "elementwise-fusion"; }
  absl::StatusOr<bool> Run(CompileGraph& graph) override;
};

// The ops of fused-kernel nodes in the compiler's graphs (and their text).
inline constexpr const char* kFusedKernelOp = "neuron::fused_kernel";
inline constexpr const char* kFusedRowKernelOp = "neuron::fused_row_kernel";

// The node calling a fused kernel, holding `kernel`'s call fields as its
// arguments (library first: the shared object's name, "" until it is built),
// for graph text and hashing; lowering makes the program's typed call from the
// node's FusedKernel. Its operands (and `kernel`) are the caller's to set.
CompileNode MakeFusedKernelNode(const FusedKernel& kernel, const std::string& library,
                                const std::vector<ir::Shape>& input_shapes,
                                const std::vector<ir::Shape>& output_shapes);

}  // namespace torch_neuron::compiler
