#include "compiler/pass_pipeline.h"

#include "absl/strings/str_cat.h"
#include "base/profiler.h"

namespace torch_neuron::compiler {

absl::StatusOr<bool> PassPipeline::Run(CompileGraph& graph) const {
  absl::Status status = VerifyGraph(graph);
  if (!status.ok()) return absl::InternalError(absl::StrCat("input graph: ", status.message()));
  bool changed = false;
  for (const auto& pass : passes_) {
    profiler::Scope scope("compile", pass->name());
    absl::StatusOr<bool> result = pass->Run(graph);
    if (!result.ok()) {
      return absl::Status(result.status().code(),
                          absl::StrCat(pass->name(), ": ", result.status().message()));
    }
    if (*result) {
      changed = true;
      status = VerifyGraph(graph);
      if (!status.ok()) {
        return absl::InternalError(absl::StrCat("after ", pass->name(), ": ", status.message()));
      }
    }
  }
  return changed;
}

std::vector<std::string> PassPipeline::PassNames() const {
  std::vector<std::string> names;
  for (const auto& pass : passes_) names.push_back(pass->name());
  return names;
}

}  // namespace torch_neuron::compiler
