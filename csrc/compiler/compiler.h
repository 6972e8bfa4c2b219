// The compiler's entry point: a canonical graph in, an executable Program out.
// Tier 0: the pass pipeline (DCE, CSE, constant folding, each verified), then
// lowering to one ATen call per op over planned registers.
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "ir/graph.h"
#include "runtime/program.h"

namespace torch_neuron::compiler {

struct CompileOptions {
  bool cse = true;
  bool fold_constants = true;
  // Largest value (in elements) constant folding will compute at compile time.
  int64_t max_fold_elements = 4096;
};

struct CompileResult {
  std::shared_ptr<const runtime::Program> program;
  // The graph after the passes, as text (debug dumps).
  std::string optimized_text;
};

absl::StatusOr<CompileResult> Compile(const ir::CanonicalGraph& graph,
                                      const CompileOptions& options);

}  // namespace torch_neuron::compiler
