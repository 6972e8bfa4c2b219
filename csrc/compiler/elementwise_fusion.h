// ElementwiseFusion (tier 1): groups float32 elementwise ops of one shape into
// generated kernels. A group becomes one neuron::fused_kernel node holding a
// FusedKernel; every member whose value is read outside the group (or is a
// graph output) is one of the kernel's outputs, the others never reach memory.
//
// Safety: a node joins (and merges) the groups of its operands only while no
// node outside them has read a member. The kernel runs where the last member
// was: every input of a member exists there, and every outside reader comes
// after it. Two groups cannot feed each other (the first read closes a group).
// Library calls (matmul, convolution, reductions) stay ATen calls; random ops
// and in-place ops are never members.
#pragma once

#include "compiler/pass_pipeline.h"

namespace torch_neuron::compiler {

class ElementwiseFusion : public Pass {
 public:
  std::string name() const override { return "elementwise-fusion"; }
  absl::StatusOr<bool> Run(CompileGraph& graph) override;
};

// The synthetic IR node of a fused kernel call, with `library` (the shared
// object's name, "" until it is built) as its first argument.
ir::NodePtr MakeFusedKernelNode(const FusedKernel& kernel, const std::string& library,
                                const std::vector<ir::Shape>& input_shapes,
                                const std::vector<ir::Shape>& output_shapes);

}  // namespace torch_neuron::compiler
