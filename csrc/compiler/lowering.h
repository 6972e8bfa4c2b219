// Lowering: a CompileGraph after the passes becomes a runtime Program, one
// instruction per live op node (an ATen call, or a typed call of a generated
// kernel), over registers released after their last use.
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "compiler/hlo_graph.h"
#include "runtime/program.h"

namespace torch_neuron::compiler {

// With `views_in_place` (tier 1), a copying view op whose readers all take any
// strides runs as the view (see lowering.cc); without it (tier 0) every view
// result is a contiguous copy, as an op run on its own (eager mode, a graph
// boundary) gives its readers: BLAS and reductions then see the same layouts,
// and so sum in the same order, however the ops were cut into graphs. That
// keeps opt level 0 bit-identical between lazy and eager mode.
// `library` names the shared object holding the graph's fused kernels (tier 1;
// required when the graph has kernel nodes).
absl::StatusOr<runtime::Program> LowerToProgram(const CompileGraph& graph, bool views_in_place,
                                                const std::string& library = "");

}  // namespace torch_neuron::compiler
