// The executable cache: finds the program of a canonical graph in memory (L1),
// on disk (L2, shared by processes), or compiles it, under the key's
// cross-process lock so one process compiles each graph. Also the recompile
// report (TORCH_NEURON_DEBUG) and graph dumps (TORCH_NEURON_DEBUG_DIR), which
// happen when a graph compiles. Thread-safe (the caches and the log are locked).
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "compiler/compiler.h"
#include "compiler/target.h"
#include "ir/graph.h"
#include "proto/neff.pb.h"
#include "runtime/program.h"

namespace torch_neuron::lazy {

// What graphs compile with: the options and the target.
struct CompileSettings {
  compiler::CompileOptions options;
  const compiler::Target* target = nullptr;  // lives as long as the process
};

// The settings in force (TORCH_NEURON_OPT_LEVEL; the host target of CXX,
// sharing kernel objects beside the disk cache), and their fingerprint.
CompileSettings CurrentCompileSettings();
const proto::CompilerFingerprint& CurrentFingerprint();

// The program computing `g`: L1, then L2, then a compile (stored in both).
// Only a miss in memory writes `g` out as a CompileRequest, the one form in
// which a graph reaches the compiler. `compiled` (optional) says whether this
// call compiled the graph.
absl::StatusOr<std::shared_ptr<const runtime::Program>> FindOrCompile(const ir::CanonicalGraph& g,
                                                                      bool* compiled = nullptr);
// The same under `settings` fixed by the caller (a background compile takes
// them when it is queued: it must not read the config while a test changes it).
absl::StatusOr<std::shared_ptr<const runtime::Program>> FindOrCompileWith(const ir::CanonicalGraph& g,
                                                                          const CompileSettings& settings,
                                                                          bool* compiled = nullptr);

// Tiered compilation (TORCH_NEURON_TIERED_COMPILE, at opt level 1): the
// tier-1 program of `g` from memory or a persistent level (disk, Redis) if one
// holds it; else a tier-0 program (milliseconds to compile, kept in memory
// only) while tier 1 compiles in the background from the graph's
// CompileRequest (which owns what it needs), once per key; later calls take tier 1 as soon as it is in
// memory. A background compile that fails leaves the tier-0 program in use for good, counted
// (compile.tiered.background_failed.count). Both tiers compute the same values
// within the tier-1 tolerance.
absl::StatusOr<std::shared_ptr<const runtime::Program>> FindOrCompileTiered(const ir::CanonicalGraph& g,
                                                                            bool* compiled = nullptr);
// The same under `settings` fixed by the caller (eager mode's group compiles).
absl::StatusOr<std::shared_ptr<const runtime::Program>> FindOrCompileTieredWith(
    const ir::CanonicalGraph& g, const CompileSettings& settings, bool* compiled = nullptr);

// Waits for the tier-1 compiles queued so far (tests, config overrides).
void WaitForBackgroundCompiles();
// Drops the tier-1 compiles no worker has started (at exit).
void DropQueuedBackgroundCompiles();

// The cache key of `g` under `settings` (graph hash and compiler fingerprint).
ir::hash_t ExecutableKey(const ir::CanonicalGraph& g, const CompileSettings& settings);

// The program of `g` if the in-memory cache holds it (with tiered
// compilation, its tier-0 stand-in while tier 1 compiles), else nullptr: no
// disk read, no compile, no waiting.
std::shared_ptr<const runtime::Program> FindInMemory(const ir::CanonicalGraph& g);

// Why the last graph compiled although an earlier one came from the same place.
std::string LastRecompileReason();

// Drops the in-memory programs (tests).
void ClearMemoryCache();

}  // namespace torch_neuron::lazy
