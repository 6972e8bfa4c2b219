// Lowering (tier 0): a CompileGraph after the passes becomes a runtime Program,
// one ATen call per live op node, over registers released after their last use.
#pragma once

#include "absl/status/statusor.h"
#include "compiler/hlo_graph.h"
#include "runtime/program.h"

namespace torch_neuron::compiler {

absl::StatusOr<runtime::Program> LowerToProgram(const CompileGraph& graph);

}  // namespace torch_neuron::compiler
