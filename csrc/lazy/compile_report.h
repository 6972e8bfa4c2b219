// How compiles look to the user: the tier-1 fallback warning, the recompile
// report (TORCH_NEURON_DEBUG: why a place compiled a new graph) and graph dumps
// (TORCH_NEURON_DEBUG_DIR). An observer of the chain's local compiler.
// Thread-safe (the log is locked).
#pragma once

#include <string>

#include "cache/compile_provider.h"

namespace torch_neuron::lazy {

// Called on the compiling thread after each compile here.
void ObserveCompile(const cache::CompileEvent& event);

// Why the last graph compiled although an earlier one came from the same place.
std::string LastRecompileReason();

}  // namespace torch_neuron::lazy
