// Lowering: a CompileGraph after the passes becomes the NEFF's program
// (proto/neff.proto), one instruction per live op node (an ATen call, or a
// typed call of a generated kernel), over registers released after their last
// use, with its signature and source map. The runtime's Program is made of it
// by the NEFF reader alone.
#pragma once

#include <string>

#include "absl/status/status.h"
#include "compiler/hlo_graph.h"
#include "proto/neff.pb.h"

namespace torch_neuron::compiler {

// With `views_in_place` (tier 1), a copying view op whose readers all take any
// strides runs as the view (see lowering.cc); without it (tier 0) every view
// result is a contiguous copy, as an op run on its own (eager mode, a graph
// boundary) gives its readers: BLAS and reductions then see the same layouts,
// and so sum in the same order, however the ops were cut into graphs. That
// keeps opt level 0 bit-identical between lazy and eager mode.
// `library` names the native object holding the graph's fused kernels (tier 1;
// required when the graph has kernel nodes). Sets the payload's program,
// signature and source map; UNIMPLEMENTED for a constant with no NEFF form.
absl::Status LowerToProgram(const CompileGraph& graph, bool views_in_place, const std::string& library,
                            proto::NeffPayload* payload);

// The NEFF signature of a graph: parameter kinds and specs, outputs and the
// inputs each output could donate into (same byte size).
proto::Signature SignatureOf(const CompileGraph& graph);

}  // namespace torch_neuron::compiler
