// Where lazy/ asks for executables: it computes a graph's key under the
// compile settings in force, writes the graph out as a CompileRequest only on
// a miss in memory, and asks the process's executable source (cache/: the
// provider chain assembled from the cache sub-config, and tiered compilation
// around it). Cache policy (levels, bounds, locking, tiering) is cache/'s.
// Thread-safe.
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "cache/compile_settings.h"
#include "ir/graph.h"
#include "proto/neff.pb.h"
#include "runtime/program.h"

namespace torch_neuron::lazy {

// The settings of the compile sub-config in force (TORCH_NEURON_OPT_LEVEL,
// TORCH_NEURON_TIERED_COMPILE, CXX; kernel objects shared beside the disk
// cache), and their fingerprint.
cache::CompileSettings CurrentCompileSettings();
const proto::CompilerFingerprint& CurrentFingerprint();

// The program computing `g` under the settings in force, not tiered (a
// captured step keeps the program it records): memory, then the persistent
// levels, then a compile (stored in them). Only a miss in memory writes `g`
// out as a CompileRequest, the one form in which a graph reaches the compiler.
// `compiled` (optional) says whether this call compiled the graph.
absl::StatusOr<std::shared_ptr<const runtime::Program>> FindOrCompile(const ir::CanonicalGraph& g,
                                                                      bool* compiled = nullptr);

// The same with tiered compilation when the settings in force ask for it
// (cache/tiered_chain.h: a tier-0 stand-in while tier 1 compiles).
absl::StatusOr<std::shared_ptr<const runtime::Program>> FindOrCompileTiered(const ir::CanonicalGraph& g,
                                                                            bool* compiled = nullptr);

// The same under `settings` fixed by the caller (eager mode's group compiles
// take them when queued: they must not read the config while a test changes
// it), tiered when they are.
absl::StatusOr<std::shared_ptr<const runtime::Program>> FindOrCompileWith(
    const ir::CanonicalGraph& g, const cache::CompileSettings& settings, bool* compiled = nullptr);

// Waits for the tier-1 compiles queued so far (tests, config overrides).
void WaitForBackgroundCompiles();
// Drops the tier-1 compiles no worker has started (at exit).
void DropQueuedBackgroundCompiles();

// The cache key of `g` under `settings` (graph hash and compiler fingerprint).
ir::hash_t ExecutableKey(const ir::CanonicalGraph& g, const cache::CompileSettings& settings);

// The program of `g` if the in-memory cache holds it (with tiered
// compilation, its tier-0 stand-in while tier 1 compiles), else nullptr: no
// disk read, no compile, no waiting.
std::shared_ptr<const runtime::Program> FindInMemory(const ir::CanonicalGraph& g);

// Drops the in-memory programs (tests).
void ClearMemoryCache();

}  // namespace torch_neuron::lazy
