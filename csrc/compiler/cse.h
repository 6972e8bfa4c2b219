// Common subexpression elimination: two live op nodes with the same local hash
// (op, arguments, shapes) and the same operands compute the same value; users of
// the second are pointed at the first. Parameters and random ops are never merged.
#pragma once

#include "compiler/pass_pipeline.h"

namespace torch_neuron::compiler {

class CommonSubexpressionElimination : public Pass {
 public:
  std::string name() const override { return "cse"; }
  absl::StatusOr<bool> Run(CompileGraph& graph) override;
};

}  // namespace torch_neuron::compiler
