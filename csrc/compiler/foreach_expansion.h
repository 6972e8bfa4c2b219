// ForeachExpansion (tier 1): splits a multi-tensor `aten::_foreach_*` call into
// one per-tensor ATen call per list element, so that elementwise fusion sees
// each tensor's chain on its own. PyTorch's default optimizers on a non-CPU
// device take the foreach path; expanded, an AdamW step becomes one fused
// kernel per parameter (one pass over memory) instead of ten list ops, each a
// pass over every tensor.
//
// Only the foreach ops whose per-tensor form is known (ForeachForms) expand;
// the rest stay single calls. Expanded calls that fusion leaves alone run as
// the per-tensor ATen ops, which compute the same values as the list op.
#pragma once

#include <string>
#include <vector>

#include "compiler/pass_pipeline.h"

namespace torch_neuron::compiler {

class ForeachExpansion : public Pass {
 public:
  std::string name() const override { return "foreach-expansion"; }
  absl::StatusOr<bool> Run(CompileGraph& graph) override;
};

// The foreach ops the pass expands, the per-tensor op of each and where its
// arguments come from, as "aten::_foreach_mul.Scalar -> aten::mul.Scalar L0 A1"
// lines: L<j> element i of list argument j, A<j> argument j itself, 1 the
// constant 1.
std::vector<std::string> ForeachForms();

}  // namespace torch_neuron::compiler
