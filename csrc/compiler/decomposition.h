// Decomposition (tier 1): rewrites the composite ATen ops that fusion could
// otherwise only call (softmax, attention's safe softmax, log-softmax, their
// backward forms, layer norm) into the elementwise ops and row reductions they
// are made of, so that elementwise fusion builds each into one row kernel
// together with the ops around it. Only float32 ops over trailing dims decompose: those are exactly
// the ones fusion takes whole, so a decomposed op never runs as separate calls.
#pragma once

#include <string>

#include "compiler/pass_pipeline.h"

namespace torch_neuron::compiler {

class Decomposition : public Pass {
 public:
  std::string name() const override { return "decomposition"; }
  absl::StatusOr<bool> Run(CompileGraph& graph) override;
};

}  // namespace torch_neuron::compiler
