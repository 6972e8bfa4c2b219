// The compiler's entry point (DESIGN.md "Seams", 2): a CompileRequest in, NEFF
// bytes out. The request is read into a graph of its own, then the pass
// pipeline (CSE, constant folding, DCE, and at opt level 1 foreach expansion
// and elementwise fusion; each verified) runs; at tier 1 the target builds the
// fused kernels into one native object the NEFF carries; lowering writes one
// instruction per node (ATen calls, and typed kernel calls for the kernels)
// over planned registers into the NEFF's program. A kernel build failure falls
// back to tier 0 for the graph (CompileResult says why); tier 0 runs every
// graph tier 1 fuses.
//
// Pure: no global config, no environment, nothing registered or loaded. The
// runtime makes a program of the bytes with the NEFF reader (neff/), as it does
// for one read from the disk cache, Redis or the compile service.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "compiler/target.h"
#include "proto/compile_request.pb.h"

namespace torch_neuron::compiler {

struct CompileOptions {
  // 0: tier 0 only (one ATen call per op); 1: elementwise fusion into
  // generated kernels (TORCH_NEURON_OPT_LEVEL).
  int opt_level = 1;
  bool cse = true;
  bool fold_constants = true;
  // Largest value (in elements) constant folding will compute at compile time.
  int64_t max_fold_elements = 4096;
  // Test only: this op's lowering is made wrong on purpose (fault_injection.h).
  std::string fault_op;
};

struct CompileResult {
  // The executable (neff/neff_format.h), fingerprinted with the options and
  // the target compiled for.
  std::string neff;
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

// Compiles `request` (compile_request.h; its own options are what a process
// that has no others, the compile service, compiles it with) under `options`
// for `target`. A malformed request is INVALID_ARGUMENT or DATA_LOSS.
absl::StatusOr<CompileResult> Compile(const proto::CompileRequest& request, const CompileOptions& options,
                                      const Target& target);

}  // namespace torch_neuron::compiler
