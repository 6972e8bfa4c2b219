// Test-only fault injection: a pass that makes one op's lowering deliberately
// wrong (its floating-point result plus one), so tests can show that a broken
// lowering is caught (the shape registry's replay reports it as a mismatch).
// Enabled only by CompileOptions::fault_op (TORCH_NEURON_TEST_FAULT_OP); the pass
// is in the pipeline's names, hence in the compiler fingerprint, so a faulty
// executable is never cached under a healthy key.
#pragma once

#include <string>

#include "compiler/pass_pipeline.h"

namespace torch_neuron::compiler {

class FaultInjection : public Pass {
 public:
  explicit FaultInjection(std::string op) : op_(std::move(op)) {}
  std::string name() const override { return "fault_injection(" + op_ + ")"; }
  absl::StatusOr<bool> Run(CompileGraph& graph) override;

 private:
  std::string op_;  // "aten::mul.Tensor"
};

}  // namespace torch_neuron::compiler
