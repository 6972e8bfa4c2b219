// Constant folding: an op node whose operands are all constants (0/1 scalars or
// folded values), with no operands at all, is evaluated at compile time when its
// single output is small, and becomes a constant of the program.
#pragma once

#include <cstdint>

#include "compiler/pass_pipeline.h"

namespace torch_neuron::compiler {

class ConstantFolding : public Pass {
 public:
  explicit ConstantFolding(int64_t max_elements) : max_elements_(max_elements) {}
  std::string name() const override { return "constant-folding"; }
  absl::StatusOr<bool> Run(CompileGraph& graph) override;

 private:
  int64_t max_elements_;
};

}  // namespace torch_neuron::compiler
