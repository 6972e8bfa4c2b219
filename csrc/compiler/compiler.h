// The compiler's entry point: a canonical graph in, an executable Program out.
// The pass pipeline (CSE, constant folding, DCE, and at opt level 1 foreach
// expansion and elementwise fusion; each verified), then, at tier 1, the fused kernels' C++ built into
// one shared object the program carries, then lowering to one call per node
// (ATen calls, and typed kernel calls for the kernels) over planned registers.
// A kernel build failure falls back to tier 0 for the graph (CompileResult
// says why); tier 0 runs every graph tier 1 fuses.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "ir/graph.h"
#include "runtime/program.h"

namespace torch_neuron::compiler {

class KernelObjectCache;

struct CompileOptions {
  // 0: tier 0 only (one ATen call per op); 1: elementwise fusion into
  // generated kernels (TORCH_NEURON_OPT_LEVEL).
  int opt_level = 1;
  bool cse = true;
  bool fold_constants = true;
  // Largest value (in elements) constant folding will compute at compile time.
  int64_t max_fold_elements = 4096;
  std::string cxx;  // the host toolchain's C++ compiler for tier 1 ("": c++)
  // Test only: this op's lowering is made wrong on purpose (fault_injection.h).
  std::string fault_op;
  // Where tier 1 finds kernels already built and keeps new ones (native_build.h);
  // nullptr: every kernel is built. Speeds compiles, never changes them, so it
  // is no part of the fingerprint.
  KernelObjectCache* kernel_objects = nullptr;
};

struct CompileResult {
  std::shared_ptr<const runtime::Program> program;
  // The graph after the passes, as text (debug dumps).
  std::string optimized_text;
  // The generated kernels' C++ sources, one after another (debug dumps).
  std::string kernel_sources;
  // Set when the kernels did not build and the graph was compiled at tier 0:
  // why (the kernel and the compiler's first error lines).
  std::string tier1_error;
};

// The names of the passes Compile runs with `options`, in order (part of the
// compiler fingerprint: a change of pipeline is a change of compiler).
std::vector<std::string> PassNames(const CompileOptions& options);

absl::StatusOr<CompileResult> Compile(const ir::CanonicalGraph& graph, const CompileOptions& options);

}  // namespace torch_neuron::compiler
