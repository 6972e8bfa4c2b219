#include "compiler/compiler.h"

#include "compiler/constant_folding.h"
#include "compiler/cse.h"
#include "compiler/dce.h"
#include "compiler/lowering.h"
#include "compiler/pass_pipeline.h"

namespace torch_neuron::compiler {

absl::StatusOr<CompileResult> Compile(const ir::CanonicalGraph& graph,
                                      const CompileOptions& options) {
  CompileGraph g = CompileGraph::FromCanonical(graph);
  PassPipeline pipeline;
  if (options.cse) pipeline.AddPass<CommonSubexpressionElimination>();
  if (options.fold_constants) pipeline.AddPass<ConstantFolding>(options.max_fold_elements);
  pipeline.AddPass<DeadCodeElimination>();
  absl::StatusOr<bool> changed = pipeline.Run(g);
  if (!changed.ok()) return changed.status();
  absl::StatusOr<runtime::Program> program = LowerToProgram(g);
  if (!program.ok()) return program.status();
  CompileResult result;
  result.program = std::make_shared<const runtime::Program>(*std::move(program));
  result.optimized_text = g.ToText();
  return result;
}

}  // namespace torch_neuron::compiler
