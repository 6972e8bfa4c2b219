// The executable cache: finds the program of a canonical graph in memory (L1),
// on disk (L2, shared by processes), or compiles it, under the key's
// cross-process lock so one process compiles each graph. Also the recompile
// report (TORCH_NEURON_DEBUG) and graph dumps (TORCH_NEURON_DEBUG_DIR), which
// happen when a graph compiles. Thread-safe (the caches and the log are locked).
#pragma once

#include <memory>
#include <string>

#include "compiler/compiler.h"
#include "ir/graph.h"
#include "proto/neff.pb.h"
#include "runtime/program.h"

namespace torch_neuron::lazy {

// The compile options of the settings in force (TORCH_NEURON_OPT_LEVEL), and
// their compiler fingerprint.
compiler::CompileOptions CurrentCompileOptions();
const proto::CompilerFingerprint& CurrentFingerprint();

// The program computing `g`: L1, then L2, then a compile (stored in both).
// `compiled` (optional) says whether this call compiled the graph.
std::shared_ptr<const runtime::Program> FindOrCompile(const ir::CanonicalGraph& g,
                                                      bool* compiled = nullptr);

// Why the last graph compiled although an earlier one came from the same place.
std::string LastRecompileReason();

// Drops the in-memory programs (tests).
void ClearMemoryCache();

}  // namespace torch_neuron::lazy
