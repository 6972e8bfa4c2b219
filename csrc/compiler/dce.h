// Dead code elimination: removes nodes no output depends on. Parameters stay
// (they are bound by position) and so do random ops, whose draws advance the
// device generator even when their result is unused.
#pragma once

#include "compiler/pass_pipeline.h"

namespace torch_neuron::compiler {

class DeadCodeElimination : public Pass {
 public:
  std::string name() const override { return "dce"; }
  absl::StatusOr<bool> Run(CompileGraph& graph) override;
};

}  // namespace torch_neuron::compiler
